//! The name pieces both original layouts share: renames by table, a residual block's inner names, and
//! list indices. A leaf below mod.rs and the two layouts, which all use it.

/// Inside a residual block; the original stores the block as an `nn.Sequential`
/// (RMS norm, SiLU, conv, RMS norm, SiLU, dropout, conv) next to its 1×1×1 `shortcut`.
const RESIDUAL_RENAMES: [(&str, &str); 5] = [
    ("residual.0.", "norm1."),
    ("residual.2.", "conv1."),
    ("residual.3.", "norm2."),
    ("residual.6.", "conv2."),
    ("shortcut.", "conv_shortcut."),
];

pub(super) fn rename(key: &str, table: &[(&str, &str)], forward: bool) -> Option<String> {
    table.iter().find_map(|&(original, diffusers)| {
        let (from, to) = if forward { (original, diffusers) } else { (diffusers, original) };
        key.strip_prefix(from).map(|rest| format!("{to}{rest}"))
    })
}

pub(super) fn residual_block(rest: &str, forward: bool) -> String {
    rename(rest, &RESIDUAL_RENAMES, forward).unwrap_or_else(|| rest.to_string())
}

/// Splits `"12.rest"` into `(12, "rest")`.
pub(super) fn indexed(key: &str) -> Option<(usize, &str)> {
    let (index, rest) = key.split_once('.')?;
    Some((index.parse().ok()?, rest))
}
