//! The shape of a Wan 2.1 VAE, read from a checkpoint's tensor shapes rather than assumed.
use super::weights::Weights;
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WanConfig {
    /// Pixel channels (3).
    pub image_channels: i64,
    /// Width of the first encoder level (96 in the released model).
    pub base_dim: i64,
    /// Latent channels (16).
    pub z_dim: i64,
    /// Width of each level as a multiple of `base_dim`.
    pub dim_mult: Vec<i64>,
    /// Residual blocks per encoder level (the decoder has one more per level).
    pub num_res_blocks: usize,
    /// For each encoder downsample (levels − 1 of them): whether it also halves time.
    pub temporal_downsample: Vec<bool>,
}

impl WanConfig {
    /// The released Wan 2.1 VAE (diffusers `AutoencoderKLWan` defaults).
    pub fn wan21() -> Self {
        Self {
            image_channels: 3,
            base_dim: 96,
            z_dim: 16,
            dim_mult: vec![1, 2, 4, 4],
            num_res_blocks: 2,
            temporal_downsample: vec![false, true, true],
        }
    }

    /// Output width of each encoder level.
    pub fn level_dims(&self) -> Vec<i64> {
        self.dim_mult.iter().map(|m| m * self.base_dim).collect()
    }

    pub fn temporal_upsample(&self) -> Vec<bool> {
        self.temporal_downsample.iter().rev().copied().collect()
    }

    /// Pixels per latent pixel along H and W (8).
    pub fn spatial_factor(&self) -> i64 {
        1 << self.temporal_downsample.len()
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

    /// Reads the layout from the encoder's tensors (diffusers names); the decoder is then built as its
    /// mirror and any key that does not fit fails by name while loading.
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
        let (base_dim, image_channels) = (conv_in[0], conv_in[1]);
        let quant = shape_of("quant_conv.weight", 5)?;
        if quant[0] % 2 != 0 || quant[0] != quant[1] {
            return Err(weights.format_error(format!("tensor `{}` has shape {quant:?}, expected [2z, 2z, 1, 1, 1]", name("quant_conv.weight"))));
        }
        let z_dim = quant[0] / 2;

        // Encoder down_blocks are one flat list: per level `num_res_blocks` residual blocks, then a
        // resampler on every level but the last.
        let mut level_widths: Vec<(i64, usize)> = Vec::new();
        let mut temporal_downsample = Vec::new();
        let (mut width, mut blocks) = (None::<i64>, 0usize);
        for n in 0.. {
            let prefix = format!("encoder.down_blocks.{n}.");
            let Some(first_key) = weights.first_key_under(&prefix).map(name) else { break };
            if weights.contains(&format!("{prefix}resample.1.weight")) {
                let level_width = width.ok_or_else(|| weights.format_error(format!("`{first_key}`: a resampler before any residual block")))?;
                level_widths.push((level_width, blocks));
                temporal_downsample.push(weights.contains(&format!("{prefix}time_conv.weight")));
                (width, blocks) = (None, 0);
            } else if let Some(conv1) = weights.shape(&format!("{prefix}conv1.weight")) {
                if width.is_some_and(|w| w != conv1[0]) {
                    let key = name(&format!("{prefix}conv1.weight"));
                    return Err(weights.format_error(format!("tensor `{key}` has shape {conv1:?}: width changes inside a level")));
                }
                width = Some(conv1[0]);
                blocks += 1;
            } else {
                return Err(weights.format_error(format!("tensor `{first_key}` does not fit the Wan 2.1 encoder layout")));
            }
        }
        let last_width = width.ok_or_else(|| weights.format_error("no residual blocks under `encoder.down_blocks`"))?;
        level_widths.push((last_width, blocks));

        let num_res_blocks = level_widths[0].1;
        let mut dim_mult = Vec::with_capacity(level_widths.len());
        for (level, &(level_width, level_blocks)) in level_widths.iter().enumerate() {
            let first_block = name(&format!("encoder.down_blocks.{}.conv1.weight", level * (num_res_blocks + 1)));
            if level_blocks != num_res_blocks || level_width % base_dim != 0 {
                return Err(weights.format_error(format!(
                    "level {level} (from `{first_block}`) has {level_blocks} blocks of width {level_width}; expected {num_res_blocks} blocks of a multiple of {base_dim}"
                )));
            }
            dim_mult.push(level_width / base_dim);
        }
        Ok(Self { image_channels, base_dim, z_dim, dim_mult, num_res_blocks, temporal_downsample })
    }
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
    }
}
