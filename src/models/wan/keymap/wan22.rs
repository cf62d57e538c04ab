//! Wan 2.2 original levels (`wan/modules/vae2_2.py`, also ComfyUI's `wan2.2_vae.safetensors`): each encoder
//! level is a `Down_ResidualBlock` whose `downsamples` list holds its residual blocks and then its resampler
//! (`encoder.downsamples.I.downsamples.J`); each decoder level an `Up_ResidualBlock` with an `upsamples` list
//! (`decoder.upsamples.I.upsamples.J`). The levels' `avg_shortcut`s have no parameters. diffusers names the
//! same things `down_blocks.I.resnets.J` / `down_blocks.I.downsampler` and `up_blocks.I.resnets.J` / `up_blocks.I.upsampler`.
use super::names::{indexed, residual_block};

/// Residual blocks per level list; the resampler follows them at that index. The decoder's levels have one
/// block more than the encoder's (`num_res_blocks + 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelLists {
    pub encoder_resnets: usize,
    pub decoder_resnets: usize,
}

/// The names of one side in both schemes. The original's inner list has the outer list's name.
struct Side {
    outer: &'static str,
    diffusers_outer: &'static str,
    diffusers_resampler: &'static str,
    resnets: fn(LevelLists) -> usize,
}

const ENCODER: Side =
    Side { outer: "downsamples", diffusers_outer: "down_blocks", diffusers_resampler: "downsampler", resnets: |l| l.encoder_resnets };
const DECODER: Side =
    Side { outer: "upsamples", diffusers_outer: "up_blocks", diffusers_resampler: "upsampler", resnets: |l| l.decoder_resnets };

impl Side {
    /// `downsamples.I.downsamples.J.tail` → `(I, J, tail)`.
    fn split_original<'k>(&self, rest: &'k str) -> Option<(usize, usize, &'k str)> {
        let (level, inner) = rest.strip_prefix(self.outer)?.strip_prefix('.').and_then(indexed)?;
        let (position, tail) = inner.strip_prefix(self.outer)?.strip_prefix('.').and_then(indexed)?;
        Some((level, position, tail))
    }

    fn to_diffusers(&self, rest: &str, lists: LevelLists) -> Option<String> {
        let (level, position, tail) = self.split_original(rest)?;
        let outer = self.diffusers_outer;
        Some(if position == (self.resnets)(lists) {
            format!("{outer}.{level}.{}.{tail}", self.diffusers_resampler)
        } else {
            format!("{outer}.{level}.resnets.{position}.{}", residual_block(tail, true))
        })
    }

    fn to_original(&self, rest: &str, lists: LevelLists) -> Option<String> {
        let (level, tail) = rest.strip_prefix(self.diffusers_outer)?.strip_prefix('.').and_then(indexed)?;
        let outer = self.outer;
        if let Some((j, tail)) = tail.strip_prefix("resnets.").and_then(indexed) {
            return Some(format!("{outer}.{level}.{outer}.{j}.{}", residual_block(tail, false)));
        }
        let tail = tail.strip_prefix(self.diffusers_resampler)?.strip_prefix('.')?;
        Some(format!("{outer}.{level}.{outer}.{}.{tail}", (self.resnets)(lists)))
    }

    /// One more than the largest residual-block index in level 0's list.
    fn count_resnets(&self, coder: &str, keys: &[&str]) -> Option<usize> {
        let prefix = format!("{coder}.");
        keys.iter()
            .filter_map(|k| self.split_original(k.strip_prefix(&prefix)?))
            .filter(|(level, _, tail)| *level == 0 && (tail.starts_with("residual.") || tail.starts_with("shortcut.")))
            .map(|(_, position, _)| position + 1)
            .max()
    }
}

impl LevelLists {
    pub fn from_original_keys(keys: &[&str]) -> Option<Self> {
        Some(Self { encoder_resnets: ENCODER.count_resnets("encoder", keys)?, decoder_resnets: DECODER.count_resnets("decoder", keys)? })
    }
}

/// Whether original-naming keys list the encoder per level (Wan 2.2) rather than flat (Wan 2.1).
pub(super) fn is_nested(keys: &[&str]) -> bool {
    keys.iter().any(|k| k.strip_prefix("encoder.").and_then(|rest| ENCODER.split_original(rest)).is_some())
}

/// `rest` is a key below `encoder.` / `decoder.`; `None` when it is not part of a level.
pub(super) fn levels_to_diffusers(rest: &str, lists: LevelLists) -> Option<String> {
    ENCODER.to_diffusers(rest, lists).or_else(|| DECODER.to_diffusers(rest, lists))
}

pub(super) fn levels_to_original(rest: &str, lists: LevelLists) -> Option<String> {
    ENCODER.to_original(rest, lists).or_else(|| DECODER.to_original(rest, lists))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTS: LevelLists = LevelLists { encoder_resnets: 2, decoder_resnets: 3 };

    #[test]
    fn counts_resnets_per_level() {
        let keys = [
            "encoder.downsamples.0.downsamples.0.residual.0.gamma",
            "encoder.downsamples.0.downsamples.1.residual.0.gamma",
            "encoder.downsamples.0.downsamples.2.resample.1.weight",
            "decoder.upsamples.0.upsamples.2.residual.0.gamma",
            "decoder.upsamples.0.upsamples.3.resample.1.weight",
        ];
        assert_eq!(LevelLists::from_original_keys(&keys), Some(LISTS));
        assert!(is_nested(&keys));
        assert!(!is_nested(&["encoder.downsamples.0.residual.0.gamma"]));
    }
}
