//! Weight-name translation between the original Wan / ComfyUI checkpoint names and diffusers'
//! `AutoencoderKLWan` names. Modules are built from diffusers names; original files are renamed once
//! at load time with [`original_to_diffusers`].

/// Which naming scheme a checkpoint uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// `Wan2.1_VAE.pth` / ComfyUI: `encoder.conv1`, `encoder.downsamples.N.residual.K`, `decoder.upsamples.N`, `conv1`/`conv2`.
    Original,
    /// diffusers `AutoencoderKLWan`: `encoder.conv_in`, `down_blocks.N.norm1`, `decoder.up_blocks.I.resnets.J`, `quant_conv`.
    Diffusers,
}

/// Decides the scheme from a key only one of them has.
pub fn detect_naming<'a>(mut keys: impl Iterator<Item = &'a str>) -> Option<Naming> {
    keys.find_map(|key| match key {
        "encoder.conv1.weight" => Some(Naming::Original),
        "encoder.conv_in.weight" => Some(Naming::Diffusers),
        _ => None,
    })
}

/// How the flat original `decoder.upsamples.N` list splits into diffusers' `up_blocks.I`: each level
/// has `num_res_blocks + 1` residual blocks followed by one upsampler (none on the last level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecoderLayout {
    pub layers_per_level: usize,
}

impl DecoderLayout {
    pub fn from_num_res_blocks(num_res_blocks: usize) -> Self {
        Self { layers_per_level: num_res_blocks + 2 }
    }

    /// In original naming, the first upsampler sits right after the first level's residual blocks.
    pub fn from_original_keys<'a>(keys: impl Iterator<Item = &'a str>) -> Option<Self> {
        let first_upsampler = keys
            .filter_map(|k| k.strip_prefix("decoder.upsamples."))
            .filter_map(|rest| {
                let (index, tail) = rest.split_once('.')?;
                (tail.starts_with("resample.")).then(|| index.parse::<usize>().ok()).flatten()
            })
            .min()?;
        Some(Self { layers_per_level: first_upsampler + 1 })
    }

    /// In diffusers naming, level 0 lists its residual blocks explicitly.
    pub fn from_diffusers_keys<'a>(keys: impl Iterator<Item = &'a str>) -> Option<Self> {
        let resnets = keys
            .filter_map(|k| k.strip_prefix("decoder.up_blocks.0.resnets."))
            .filter_map(|rest| rest.split_once('.')?.0.parse::<usize>().ok())
            .max()?;
        Some(Self { layers_per_level: resnets + 2 })
    }
}

/// Inside a residual block; the original stores the block as an `nn.Sequential`.
const RESIDUAL_RENAMES: [(&str, &str); 5] = [
    ("residual.0.", "norm1."),
    ("residual.2.", "conv1."),
    ("residual.3.", "norm2."),
    ("residual.6.", "conv2."),
    ("shortcut.", "conv_shortcut."),
];

/// Directly under `encoder.` / `decoder.`.
const CODER_RENAMES: [(&str, &str); 4] = [
    ("conv1.", "conv_in."),
    ("head.0.", "norm_out."),
    ("head.2.", "conv_out."),
    ("middle.1.", "mid_block.attentions.0."),
];

const TOP_RENAMES: [(&str, &str); 2] = [("conv1.", "quant_conv."), ("conv2.", "post_quant_conv.")];

fn rename(key: &str, table: &[(&str, &str)], forward: bool) -> Option<String> {
    table.iter().find_map(|&(original, diffusers)| {
        let (from, to) = if forward { (original, diffusers) } else { (diffusers, original) };
        key.strip_prefix(from).map(|rest| format!("{to}{rest}"))
    })
}

fn residual_block(rest: &str, forward: bool) -> String {
    rename(rest, &RESIDUAL_RENAMES, forward).unwrap_or_else(|| rest.to_string())
}

/// Splits `"12.rest"` into `(12, "rest")`.
fn indexed(key: &str) -> Option<(usize, &str)> {
    let (index, rest) = key.split_once('.')?;
    Some((index.parse().ok()?, rest))
}

/// Original name to diffusers name. Keys that belong to neither scheme pass through unchanged, so
/// they show up later as unexpected keys with their own name.
pub fn original_to_diffusers(key: &str, layout: DecoderLayout) -> String {
    let Some((coder, rest)) = key.split_once('.').filter(|(c, _)| *c == "encoder" || *c == "decoder") else {
        return rename(key, &TOP_RENAMES, true).unwrap_or_else(|| key.to_string());
    };
    let mapped = if let Some((n, tail)) = rest.strip_prefix("downsamples.").and_then(indexed) {
        format!("down_blocks.{n}.{}", residual_block(tail, true))
    } else if let Some((n, tail)) = rest.strip_prefix("upsamples.").and_then(indexed) {
        let (level, position) = (n / layout.layers_per_level, n % layout.layers_per_level);
        if position + 1 == layout.layers_per_level {
            format!("up_blocks.{level}.upsamplers.0.{tail}")
        } else {
            format!("up_blocks.{level}.resnets.{position}.{}", residual_block(tail, true))
        }
    } else if let Some((n @ (0 | 2), tail)) = rest.strip_prefix("middle.").and_then(indexed) {
        format!("mid_block.resnets.{}.{}", n / 2, residual_block(tail, true))
    } else {
        rename(rest, &CODER_RENAMES, true).unwrap_or_else(|| rest.to_string())
    };
    format!("{coder}.{mapped}")
}

/// Diffusers name to original name; the inverse of [`original_to_diffusers`].
pub fn diffusers_to_original(key: &str, layout: DecoderLayout) -> String {
    let Some((coder, rest)) = key.split_once('.').filter(|(c, _)| *c == "encoder" || *c == "decoder") else {
        return rename(key, &TOP_RENAMES, false).unwrap_or_else(|| key.to_string());
    };
    let mapped = if let Some((n, tail)) = rest.strip_prefix("down_blocks.").and_then(indexed) {
        format!("downsamples.{n}.{}", residual_block(tail, false))
    } else if let Some((level, tail)) = rest.strip_prefix("up_blocks.").and_then(indexed) {
        let base = level * layout.layers_per_level;
        if let Some((j, tail)) = tail.strip_prefix("resnets.").and_then(indexed) {
            format!("upsamples.{}.{}", base + j, residual_block(tail, false))
        } else if let Some(tail) = tail.strip_prefix("upsamplers.0.") {
            format!("upsamples.{}.{tail}", base + layout.layers_per_level - 1)
        } else {
            rest.to_string()
        }
    } else if let Some((n, tail)) = rest.strip_prefix("mid_block.resnets.").and_then(indexed) {
        format!("middle.{}.{}", n * 2, residual_block(tail, false))
    } else {
        rename(rest, &CODER_RENAMES, false).unwrap_or_else(|| rest.to_string())
    };
    format!("{coder}.{mapped}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: DecoderLayout = DecoderLayout { layers_per_level: 4 };

    #[test]
    fn maps_each_kind_of_key() {
        let cases = [
            ("conv1.weight", "quant_conv.weight"),
            ("conv2.bias", "post_quant_conv.bias"),
            ("encoder.conv1.weight", "encoder.conv_in.weight"),
            ("encoder.head.0.gamma", "encoder.norm_out.gamma"),
            ("decoder.head.2.bias", "decoder.conv_out.bias"),
            ("encoder.downsamples.3.residual.6.weight", "encoder.down_blocks.3.conv2.weight"),
            ("encoder.downsamples.3.shortcut.bias", "encoder.down_blocks.3.conv_shortcut.bias"),
            ("encoder.downsamples.5.time_conv.weight", "encoder.down_blocks.5.time_conv.weight"),
            ("encoder.middle.1.to_qkv.weight", "encoder.mid_block.attentions.0.to_qkv.weight"),
            ("decoder.middle.2.residual.3.gamma", "decoder.mid_block.resnets.1.norm2.gamma"),
            ("decoder.upsamples.10.residual.0.gamma", "decoder.up_blocks.2.resnets.2.norm1.gamma"),
            ("decoder.upsamples.7.resample.1.weight", "decoder.up_blocks.1.upsamplers.0.resample.1.weight"),
            ("decoder.upsamples.14.residual.2.bias", "decoder.up_blocks.3.resnets.2.conv1.bias"),
        ];
        for (original, diffusers) in cases {
            assert_eq!(original_to_diffusers(original, LAYOUT), diffusers, "{original}");
            assert_eq!(diffusers_to_original(diffusers, LAYOUT), original, "{diffusers}");
        }
    }

    #[test]
    fn unknown_keys_pass_through() {
        for key in ["something.else", "encoder.patch.weight", "decoder.up_blocks.0.weird"] {
            assert_eq!(original_to_diffusers(key, LAYOUT), key);
        }
    }

    #[test]
    fn layout_is_read_from_either_scheme() {
        let original = ["decoder.upsamples.2.residual.0.gamma", "decoder.upsamples.3.resample.1.weight", "decoder.upsamples.7.time_conv.bias"];
        assert_eq!(DecoderLayout::from_original_keys(original.iter().copied()), Some(LAYOUT));
        let diffusers = ["decoder.up_blocks.0.resnets.2.norm1.gamma", "decoder.up_blocks.0.resnets.0.conv1.weight"];
        assert_eq!(DecoderLayout::from_diffusers_keys(diffusers.iter().copied()), Some(LAYOUT));
        assert_eq!(detect_naming(original.iter().copied().chain(["encoder.conv1.weight"])), Some(Naming::Original));
    }
}
