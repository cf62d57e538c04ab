//! The shape of a Wan 2.1 VAE, read from a checkpoint's tensor shapes rather than assumed.
use super::weights::Weights;
use crate::models::family::Family;
use crate::models::ModelError;

/// Published per-channel latent statistics of the Wan 2.1 VAE (diffusers `latents_mean` / `latents_std`).
/// The encoder returns raw `mu`; pipelines use `(mu - mean) / std`.
pub const WAN21_LATENTS_MEAN: [f64; 16] = [
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508, 0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503,
    -0.2921,
];
pub const WAN21_LATENTS_STD: [f64; 16] = [
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743, 3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.916,
];

/// Published per-channel latent statistics of the Wan 2.2 VAE (z_dim 48), used the same way as Wan 2.1's.
/// Transcribed from the original code: github.com/Wan-Video/Wan2.2 `wan/modules/vae2_2.py`, class
/// `Wan2_2_VAE` (`mean`, `std`), commit bf6922968e662f706fcbed74ee7d81e1a3c03f80. The unit test below holds a
/// second transcription, from diffusers' own copy.
pub const WAN22_LATENTS_MEAN: [f64; 48] = [
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
    -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502, -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
    -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748, 0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
];
pub const WAN22_LATENTS_STD: [f64; 48] = [
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659, 0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WanConfig {
    /// Pixel channels (3).
    pub image_channels: i64,
    /// Width of the first encoder level (96 in Wan 2.1, 160 in Wan 2.2).
    pub base_dim: i64,
    /// Width of the last decoder level (same as `base_dim` in Wan 2.1, 256 in Wan 2.2).
    pub decoder_base_dim: i64,
    /// Latent channels (16 in Wan 2.1, 48 in Wan 2.2).
    pub z_dim: i64,
    /// Width of each level as a multiple of the base width.
    pub dim_mult: Vec<i64>,
    /// Residual blocks per encoder level (the decoder has one more per level).
    pub num_res_blocks: usize,
    /// For each encoder downsample (levels − 1 of them): whether it also halves time.
    pub temporal_downsample: Vec<bool>,
    /// Wan 2.2: each level has a parameter-free shortcut and upsamplers keep their channels.
    pub is_residual: bool,
    /// Wan 2.2: pixels are folded `p × p` into channels around the network (1 = none).
    pub patch_size: i64,
}

impl WanConfig {
    /// The released Wan 2.1 VAE (diffusers `AutoencoderKLWan` defaults).
    pub fn wan21() -> Self {
        Self {
            image_channels: 3,
            base_dim: 96,
            decoder_base_dim: 96,
            z_dim: 16,
            dim_mult: vec![1, 2, 4, 4],
            num_res_blocks: 2,
            temporal_downsample: vec![false, true, true],
            is_residual: false,
            patch_size: 1,
        }
    }

    /// The released Wan 2.2 VAE (diffusers `AutoencoderKLWan` with `is_residual`, `patch_size` 2).
    pub fn wan22() -> Self {
        Self { base_dim: 160, decoder_base_dim: 256, z_dim: 48, is_residual: true, patch_size: 2, ..Self::wan21() }
    }

    /// Channels entering the encoder's first conv (pixel channels × p²).
    pub fn network_channels(&self) -> i64 {
        self.image_channels * self.patch_size * self.patch_size
    }

    /// Output width of each encoder level.
    pub fn level_dims(&self) -> Vec<i64> {
        self.dim_mult.iter().map(|m| m * self.base_dim).collect()
    }

    /// Output width of each decoder level, top (latent side) first.
    pub fn decoder_level_dims(&self) -> Vec<i64> {
        self.dim_mult.iter().rev().map(|m| m * self.decoder_base_dim).collect()
    }

    pub fn temporal_upsample(&self) -> Vec<bool> {
        self.temporal_downsample.iter().rev().copied().collect()
    }

    /// Pixels per latent pixel along H and W (8 in Wan 2.1, 16 in Wan 2.2).
    pub fn spatial_factor(&self) -> i64 {
        (1 << self.temporal_downsample.len()) * self.patch_size
    }

    /// H and W of encoder input must be multiples of this. Wan 2.1's downsamplers floor odd sizes (the
    /// decoded video is then smaller), so any size goes; Wan 2.2's average-down shortcuts fold 2×2 pixels
    /// at every level after the 2×2 patchify and cannot, so it needs whole latent pixels (diffusers rejects
    /// the rest too).
    pub fn size_multiple(&self) -> i64 {
        if self.is_residual {
            self.spatial_factor()
        } else {
            self.patch_size
        }
    }

    /// Pixel frames per latent frame after the first (4).
    pub fn temporal_factor(&self) -> i64 {
        1 << self.temporal_downsample.iter().filter(|t| **t).count()
    }

    /// `T = 1 + f·k` pixel frames ↔ `1 + k` latent frames; extra frames are dropped.
    pub fn latent_frames(&self, pixel_frames: i64) -> i64 {
        1 + (pixel_frames - 1) / self.temporal_factor()
    }

    pub fn pixel_frames(&self, latent_frames: i64) -> i64 {
        1 + self.temporal_factor() * (latent_frames - 1)
    }

    /// Reads the layout from the tensors' shapes (diffusers names). The decoder is then built from it,
    /// and any key that does not fit fails by name while loading.
    pub fn detect(weights: &Weights) -> Result<Self, ModelError> {
        let name = |key: &str| weights.name_in_file(key);
        let shape_of = |key: &str, rank: usize| -> Result<Vec<i64>, ModelError> {
            let shape = weights.shape(key).ok_or_else(|| weights.format_error(format!("missing tensor `{}`", name(key))))?;
            if shape.len() != rank {
                return Err(weights.format_error(format!("tensor `{}` has shape {shape:?}, expected rank {rank}", name(key))));
            }
            Ok(shape)
        };
        let conv_in = shape_of("encoder.conv_in.weight", 5)?;
        let (base_dim, network_channels) = (conv_in[0], conv_in[1]);
        // RGB folded p×p into channels: 3 → p = 1, 12 → p = 2.
        let patch_size = (1..=4).find(|p| network_channels == 3 * p * p).unwrap_or(1);
        let image_channels = network_channels / (patch_size * patch_size);
        let quant = shape_of("quant_conv.weight", 5)?;
        if quant[0] % 2 != 0 || quant[0] != quant[1] {
            return Err(weights.format_error(format!("tensor `{}` has shape {quant:?}, expected [2z, 2z, 1, 1, 1]", name("quant_conv.weight"))));
        }
        let z_dim = quant[0] / 2;

        let is_residual = weights.contains("encoder.down_blocks.0.resnets.0.conv1.weight");
        let (levels, temporal_downsample) = if is_residual { residual_levels(weights)? } else { flat_levels(weights)? };
        if temporal_downsample.len() + 1 != levels.len() {
            return Err(weights.format_error(format!(
                "{} encoder levels but {} downsamplers under `{}`",
                levels.len(),
                temporal_downsample.len(),
                name("encoder.down_blocks.0.conv1.weight")
            )));
        }

        let num_res_blocks = levels[0].blocks;
        let mut dim_mult = Vec::with_capacity(levels.len());
        for (level, found) in levels.iter().enumerate() {
            if found.blocks != num_res_blocks || found.width % base_dim != 0 {
                return Err(weights.format_error(format!(
                    "level {level} (from `{}`) has {} blocks of width {}; expected {num_res_blocks} blocks of a multiple of {base_dim}",
                    name(&found.first_key),
                    found.blocks,
                    found.width
                )));
            }
            dim_mult.push(found.width / base_dim);
        }
        let conv_out = shape_of("decoder.conv_out.weight", 5)?;
        let decoder_base_dim = conv_out[1] / dim_mult[0];
        Ok(Self { image_channels, base_dim, decoder_base_dim, z_dim, dim_mult, num_res_blocks, temporal_downsample, is_residual, patch_size })
    }
}

/// One encoder level as found in the checkpoint.
struct FoundLevel {
    width: i64,
    blocks: usize,
    first_key: String,
}

/// Wan 2.1: `encoder.down_blocks` is one flat list; per level `num_res_blocks` residual blocks, then a
/// resampler on every level but the last.
fn flat_levels(weights: &Weights) -> Result<(Vec<FoundLevel>, Vec<bool>), ModelError> {
    let name = |key: &str| weights.name_in_file(key);
    let mut levels = Vec::new();
    let mut temporal_downsample = Vec::new();
    let mut current: Option<FoundLevel> = None;
    for n in 0.. {
        let prefix = format!("encoder.down_blocks.{n}.");
        let Some(first_key) = weights.first_key_under(&prefix).map(str::to_string) else { break };
        if weights.contains(&format!("{prefix}resample.1.weight")) {
            let level = current.take().ok_or_else(|| weights.format_error(format!("`{}`: a resampler before any residual block", name(&first_key))))?;
            levels.push(level);
            temporal_downsample.push(weights.contains(&format!("{prefix}time_conv.weight")));
        } else if let Some(conv1) = weights.shape(&format!("{prefix}conv1.weight")) {
            let key = format!("{prefix}conv1.weight");
            match &mut current {
                Some(level) if level.width != conv1[0] => {
                    return Err(weights.format_error(format!("tensor `{}` has shape {conv1:?}: width changes inside a level", name(&key))));
                }
                Some(level) => level.blocks += 1,
                None => current = Some(FoundLevel { width: conv1[0], blocks: 1, first_key: key }),
            }
        } else {
            return Err(weights.format_error(format!("tensor `{}` does not fit the Wan encoder layout", name(&first_key))));
        }
    }
    levels.push(current.ok_or_else(|| weights.format_error("no residual blocks under `encoder.down_blocks`"))?);
    Ok((levels, temporal_downsample))
}

/// Wan 2.2: `encoder.down_blocks.I` is one level with `resnets.J` and, except on the last, a `downsampler`.
fn residual_levels(weights: &Weights) -> Result<(Vec<FoundLevel>, Vec<bool>), ModelError> {
    let mut levels = Vec::new();
    let mut temporal_downsample = Vec::new();
    for i in 0.. {
        let prefix = format!("encoder.down_blocks.{i}.");
        let Some(first_key) = weights.first_key_under(&prefix).map(str::to_string) else { break };
        let first_conv = format!("{prefix}resnets.0.conv1.weight");
        let width = weights
            .shape(&first_conv)
            .ok_or_else(|| weights.format_error(format!("tensor `{first_key}` does not fit the Wan 2.2 encoder layout (no `{first_conv}`)")))?[0];
        let blocks = (0..).take_while(|j| weights.contains(&format!("{prefix}resnets.{j}.conv1.weight"))).count();
        levels.push(FoundLevel { width, blocks, first_key: first_conv });
        if weights.contains(&format!("{prefix}downsampler.resample.1.weight")) {
            temporal_downsample.push(weights.contains(&format!("{prefix}downsampler.time_conv.weight")));
        }
    }
    if levels.is_empty() {
        return Err(weights.format_error("no residual blocks under `encoder.down_blocks`"));
    }
    Ok((levels, temporal_downsample))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_rules_of_the_released_model() {
        let cfg = WanConfig::wan21();
        assert_eq!((cfg.spatial_factor(), cfg.temporal_factor()), (8, 4));
        assert_eq!([9, 10, 12, 13].map(|t| cfg.latent_frames(t)), [3, 3, 3, 4]);
        assert_eq!(cfg.pixel_frames(21), 81);
        assert_eq!(cfg.temporal_upsample(), vec![true, true, false]);
        let cfg = WanConfig::wan22();
        assert_eq!((cfg.spatial_factor(), cfg.temporal_factor(), cfg.network_channels()), (16, 4, 12));
        assert_eq!(cfg.decoder_level_dims(), vec![1024, 1024, 512, 256]);
        assert_eq!((WanConfig::wan21().size_multiple(), cfg.size_multiple()), (1, 16));
    }

    /// A second, independent transcription: diffusers' `vae22_diffusers_config` (`latents_mean`,
    /// `latents_std`) in github.com/huggingface/diffusers `scripts/convert_wan_to_diffusers.py`, commit
    /// 7d5682739a1ee5b25bb9f5a81c573ea7e38d8e22, the config written to Wan-AI/Wan2.2-TI2V-5B-Diffusers
    /// `vae/config.json`. A slip in either copy shows up as a mismatch at its channel.
    const DIFFUSERS_WAN22_MEAN: [f64; 48] = [
        -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542, 0.2813, 0.0891, //
        0.1570, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502, //
        -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230, -0.0313, -0.1649, 0.0117, 0.0723, //
        -0.2839, -0.2083, -0.0520, 0.3748, 0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
    ];
    const DIFFUSERS_WAN22_STD: [f64; 48] = [
        0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901, //
        0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659, //
        0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944, //
        0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
    ];

    #[test]
    fn wan22_statistics_match_the_diffusers_config() {
        for (channel, (ours, theirs)) in WAN22_LATENTS_MEAN.iter().zip(&DIFFUSERS_WAN22_MEAN).enumerate() {
            assert_eq!(ours, theirs, "mean of channel {channel}");
        }
        for (channel, (ours, theirs)) in WAN22_LATENTS_STD.iter().zip(&DIFFUSERS_WAN22_STD).enumerate() {
            assert_eq!(ours, theirs, "std of channel {channel}");
        }
        assert_eq!(WAN22_LATENTS_MEAN.len() as i64, WanConfig::wan22().z_dim);
    }
}

/// Wan's published per-channel `(mean, std)`, which exist for the released latent sizes only. The registry
/// asks the same question of a checkpoint's header, so a job that would need missing ones is refused
/// before it is queued rather than after its model is loaded.
pub fn published_latent_stats(family: Family, latent_channels: i64) -> Option<(&'static [f64], &'static [f64])> {
    match (family, latent_channels) {
        (Family::Wan21, 16) => Some((&WAN21_LATENTS_MEAN, &WAN21_LATENTS_STD)),
        (Family::Wan22, 48) => Some((&WAN22_LATENTS_MEAN, &WAN22_LATENTS_STD)),
        _ => None,
    }
}
