//! The shape of a SeedVR2 VAE, read from a checkpoint's tensor shapes rather than assumed.
use crate::models::nn::weights::Weights;
use crate::models::ModelError;

/// GroupNorm groups everywhere in the model; not visible in the weights (the original's default).
const NORM_NUM_GROUPS: i64 = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedVr2Config {
    /// Pixel channels in (3).
    pub in_channels: i64,
    /// Pixel channels out (3).
    pub out_channels: i64,
    /// Width of each encoder block; the decoder uses them in reverse (128, 256, 512, 512 released).
    pub block_out_channels: Vec<i64>,
    /// Residual blocks per encoder block; decoder blocks have one more.
    pub layers_per_block: usize,
    /// Latent channels (16); the encoder emits twice as many (mean | log-variance).
    pub latent_channels: i64,
    pub norm_num_groups: i64,
    /// How many down/up blocks also halve/double time: the last ones before the bottom block in the
    /// encoder, the first ones in the decoder (2 released, so the temporal factor is 4).
    pub temporal_scale_num: usize,
    /// Per-frame self-attention in both mid blocks.
    pub mid_block_attention: bool,
    /// Optional 1×1×1 `quant_conv` / `post_quant_conv` (absent in the released model).
    pub use_quant_conv: bool,
}

impl SeedVr2Config {
    /// The released SeedVR2 VAE (`s8_c16_t4_inflation_sd3.yaml`).
    pub fn seedvr2() -> Self {
        Self {
            in_channels: 3,
            out_channels: 3,
            block_out_channels: vec![128, 256, 512, 512],
            layers_per_block: 2,
            latent_channels: 16,
            norm_num_groups: NORM_NUM_GROUPS,
            temporal_scale_num: 2,
            mid_block_attention: true,
            use_quant_conv: false,
        }
    }

    pub fn block_count(&self) -> usize {
        self.block_out_channels.len()
    }

    /// Encoder block `i` halves time (the original's `i >= n − temporal_scale_num − 1`, and only
    /// blocks with a down-sampler, i.e. not the last).
    pub fn temporal_down(&self, block: usize) -> bool {
        let n = self.block_count();
        block + 1 < n && block + 1 + self.temporal_scale_num >= n
    }

    /// Decoder block `i` doubles time (`i < temporal_scale_num`).
    pub fn temporal_up(&self, block: usize) -> bool {
        block < self.temporal_scale_num && block + 1 < self.block_count()
    }

    /// Pixels per latent pixel along H and W (8).
    pub fn spatial_factor(&self) -> i64 {
        1 << (self.block_count() - 1)
    }

    /// Pixel frames per latent frame after the first (4).
    pub fn temporal_factor(&self) -> i64 {
        1 << self.temporal_scale_num
    }

    /// `T = 1 + 4k` pixel frames ↔ `1 + k` latent frames; extra trailing frames are dropped.
    pub fn latent_frames(&self, pixel_frames: i64) -> i64 {
        1 + (pixel_frames - 1) / self.temporal_factor()
    }

    pub fn pixel_frames(&self, latent_frames: i64) -> i64 {
        1 + self.temporal_factor() * (latent_frames - 1)
    }

    /// Reads the layout from tensor shapes. Only the encoder is read here; the decoder is built from
    /// the result, so any decoder key that does not fit fails by name while loading.
    pub fn detect(weights: &Weights) -> Result<Self, ModelError> {
        let shape_of = |key: &str, rank: usize| -> Result<Vec<i64>, ModelError> {
            let shape = weights.shape(key).ok_or_else(|| weights.format_error(format!("missing tensor `{key}`")))?;
            if shape.len() != rank {
                return Err(weights.format_error(format!("tensor `{key}` has shape {shape:?}, expected rank {rank}")));
            }
            Ok(shape)
        };
        let in_channels = shape_of("encoder.conv_in.weight", 5)?[1];
        let mut block_out_channels = Vec::new();
        while weights.first_key_under(&format!("encoder.down_blocks.{}.", block_out_channels.len())).is_some() {
            let key = format!("encoder.down_blocks.{}.resnets.0.conv1.weight", block_out_channels.len());
            block_out_channels.push(shape_of(&key, 5)?[0]);
        }
        if block_out_channels.is_empty() {
            return Err(weights.format_error("missing tensor `encoder.down_blocks.0.resnets.0.conv1.weight`"));
        }
        let layers_per_block =
            (0..).take_while(|j| weights.first_key_under(&format!("encoder.down_blocks.0.resnets.{j}.")).is_some()).count();
        let last = block_out_channels.len() - 1;
        let mut temporal_scale_num = 0;
        for block in 0..last {
            let key = format!("encoder.down_blocks.{block}.downsamplers.0.conv.weight");
            match shape_of(&key, 5)?[2] {
                1 => {}
                3 => temporal_scale_num += 1,
                _ => return Err(weights.format_error(format!("tensor `{key}` has shape {:?}, expected a time kernel of 1 or 3", weights.shape(&key)))),
            }
        }
        let conv_out = shape_of("encoder.conv_out.weight", 5)?;
        if conv_out[0] % 2 != 0 {
            return Err(weights.format_error(format!("tensor `encoder.conv_out.weight` has shape {conv_out:?}, expected an even channel count (mean | logvar)")));
        }
        let config = Self {
            in_channels,
            out_channels: shape_of("decoder.conv_out.weight", 5)?[0],
            block_out_channels,
            layers_per_block,
            latent_channels: conv_out[0] / 2,
            norm_num_groups: NORM_NUM_GROUPS,
            temporal_scale_num,
            mid_block_attention: weights.contains("encoder.mid_block.attentions.0.group_norm.weight"),
            use_quant_conv: weights.contains("quant_conv.weight"),
        };
        // The time-halving blocks must be the ones the original's rule picks, or the decoder would not mirror them.
        for block in 0..last {
            let key = format!("encoder.down_blocks.{block}.downsamplers.0.conv.weight");
            if (shape_of(&key, 5)?[2] == 3) != config.temporal_down(block) {
                return Err(weights.format_error(format!("tensor `{key}`: time-halving down-samplers must be the last {temporal_scale_num} before the bottom block")));
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_rules_of_the_released_model() {
        let cfg = SeedVr2Config::seedvr2();
        assert_eq!((cfg.spatial_factor(), cfg.temporal_factor()), (8, 4));
        assert_eq!([1, 9, 10, 12, 13].map(|t| cfg.latent_frames(t)), [1, 3, 3, 3, 4]);
        assert_eq!([1, 3, 4].map(|t| cfg.pixel_frames(t)), [1, 9, 13]);
        assert_eq!((0..4).map(|b| cfg.temporal_down(b)).collect::<Vec<_>>(), [false, true, true, false]);
        assert_eq!((0..4).map(|b| cfg.temporal_up(b)).collect::<Vec<_>>(), [true, true, false, false]);
    }
}
