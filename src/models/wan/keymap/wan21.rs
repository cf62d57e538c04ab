//! Wan 2.1 original levels: `encoder.downsamples.N` is one flat list of residual blocks and resamplers, like
//! diffusers' `down_blocks.N`; `decoder.upsamples.N` is flat too and splits into diffusers' `up_blocks.I`.
use super::names::{indexed, residual_block};

/// How the flat original `decoder.upsamples.N` list splits into diffusers' `up_blocks.I`: each level
/// has `num_res_blocks + 1` residual blocks followed by one upsampler (none on the last level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecoderLayout {
    pub layers_per_level: usize,
}

impl DecoderLayout {
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

/// `rest` is a key below `encoder.` / `decoder.`; `None` when it is not part of a level.
pub(super) fn levels_to_diffusers(rest: &str, layout: DecoderLayout) -> Option<String> {
    if let Some((n, tail)) = rest.strip_prefix("downsamples.").and_then(indexed) {
        return Some(format!("down_blocks.{n}.{}", residual_block(tail, true)));
    }
    let (n, tail) = rest.strip_prefix("upsamples.").and_then(indexed)?;
    let (level, position) = (n / layout.layers_per_level, n % layout.layers_per_level);
    Some(if position + 1 == layout.layers_per_level {
        format!("up_blocks.{level}.upsamplers.0.{tail}")
    } else {
        format!("up_blocks.{level}.resnets.{position}.{}", residual_block(tail, true))
    })
}

pub(super) fn levels_to_original(rest: &str, layout: DecoderLayout) -> Option<String> {
    if let Some((n, tail)) = rest.strip_prefix("down_blocks.").and_then(indexed) {
        return Some(format!("downsamples.{n}.{}", residual_block(tail, false)));
    }
    let (level, tail) = rest.strip_prefix("up_blocks.").and_then(indexed)?;
    let base = level * layout.layers_per_level;
    if let Some((j, tail)) = tail.strip_prefix("resnets.").and_then(indexed) {
        Some(format!("upsamples.{}.{}", base + j, residual_block(tail, false)))
    } else {
        tail.strip_prefix("upsamplers.0.").map(|tail| format!("upsamples.{}.{tail}", base + layout.layers_per_level - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: DecoderLayout = DecoderLayout { layers_per_level: 4 };

    #[test]
    fn layout_is_read_from_either_scheme() {
        let original = ["decoder.upsamples.2.residual.0.gamma", "decoder.upsamples.3.resample.1.weight", "decoder.upsamples.7.time_conv.bias"];
        assert_eq!(DecoderLayout::from_original_keys(original.iter().copied()), Some(LAYOUT));
        let diffusers = ["decoder.up_blocks.0.resnets.2.norm1.gamma", "decoder.up_blocks.0.resnets.0.conv1.weight"];
        assert_eq!(DecoderLayout::from_diffusers_keys(diffusers.iter().copied()), Some(LAYOUT));
    }
}
