//! The causal video encoder: pixels `[B, 3, T, H, W]` → `[B, 2z, T', H/8, W/8]` (mean | log-variance).
use tch::Tensor;

use super::blocks::{MidBlock, ResidualBlock, RmsNorm};
use super::cache::{FeatureCache, SlotAllocator};
use super::config::WanConfig;
use super::conv::{CausalConv3d, ConvSpec};
use super::resample::{Resample, ResampleMode};
use super::residual::{LevelSpec, ResidualDownBlock};
use super::weights::WeightPath;
use crate::models::ModelError;

#[derive(Debug)]
enum DownLayer {
    Residual(ResidualBlock),
    Resample(Resample),
    /// A whole Wan 2.2 level.
    ResidualLevel(ResidualDownBlock),
}

#[derive(Debug)]
pub struct Encoder {
    conv_in: CausalConv3d,
    down_blocks: Vec<DownLayer>,
    mid_block: MidBlock,
    norm_out: RmsNorm,
    conv_out: CausalConv3d,
    cache_slots: usize,
    temporal_factor: i64,
}

impl Encoder {
    pub fn new(vp: &WeightPath, cfg: &WanConfig) -> Result<Self, ModelError> {
        let mut slots = SlotAllocator::default();
        let conv_in = CausalConv3d::new(&vp.pp("conv_in"), &ConvSpec::cube(cfg.network_channels(), cfg.base_dim, 3), &mut slots)?;
        let level_dims = cfg.level_dims();
        let mut down_blocks = Vec::new();
        let mut in_dim = cfg.base_dim;
        for (level, &out_dim) in level_dims.iter().enumerate() {
            if cfg.is_residual {
                let spec = LevelSpec {
                    in_channels: in_dim,
                    out_channels: out_dim,
                    res_blocks: cfg.num_res_blocks,
                    resample: level + 1 < level_dims.len(),
                    temporal: cfg.temporal_downsample.get(level).copied().unwrap_or(false),
                };
                down_blocks.push(DownLayer::ResidualLevel(ResidualDownBlock::new(&vp.pp(format!("down_blocks.{level}")), &spec, &mut slots)?));
                in_dim = out_dim;
                continue;
            }
            for _ in 0..cfg.num_res_blocks {
                let block_vp = vp.pp(format!("down_blocks.{}", down_blocks.len()));
                down_blocks.push(DownLayer::Residual(ResidualBlock::new(&block_vp, in_dim, out_dim, &mut slots)?));
                in_dim = out_dim;
            }
            if let Some(&temporal) = cfg.temporal_downsample.get(level) {
                let mode = if temporal { ResampleMode::Down3d } else { ResampleMode::Down2d };
                let block_vp = vp.pp(format!("down_blocks.{}", down_blocks.len()));
                down_blocks.push(DownLayer::Resample(Resample::new(&block_vp, out_dim, out_dim, mode, &mut slots)?));
            }
        }
        let mid_block = MidBlock::new(&vp.pp("mid_block"), in_dim, &mut slots)?;
        let norm_out = RmsNorm::for_volume(&vp.pp("norm_out"), in_dim)?;
        let conv_out = CausalConv3d::new(&vp.pp("conv_out"), &ConvSpec::cube(in_dim, 2 * cfg.z_dim, 3), &mut slots)?;
        Ok(Self { conv_in, down_blocks, mid_block, norm_out, conv_out, cache_slots: slots.count(), temporal_factor: cfg.temporal_factor() })
    }

    pub fn new_cache(&self) -> FeatureCache {
        FeatureCache::new(self.cache_slots)
    }

    /// One chunk of a stream: exactly 1 frame first, then multiples of the temporal factor (4).
    pub fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let _span = tracing::debug_span!("wan.encoder").entered();
        let frames = x.size()[2];
        let valid = if cache.is_first_chunk() { frames == 1 } else { frames > 0 && frames % self.temporal_factor == 0 };
        if !valid {
            return Err(ModelError::Unsupported {
                model: "wan".into(),
                what: format!("an encoder chunk of {frames} frames after {} chunks (first 1, then multiples of {})", cache.chunks_done(), self.temporal_factor),
            });
        }
        let mut x = self.conv_in.forward(x, cache)?;
        for layer in &self.down_blocks {
            x = match layer {
                DownLayer::Residual(block) => block.forward(&x, cache)?,
                DownLayer::Resample(resample) => resample.forward(&x, cache)?,
                DownLayer::ResidualLevel(level) => level.forward(&x, cache)?,
            };
        }
        let x = self.mid_block.forward(&x, cache)?;
        let x = self.conv_out.forward(&self.norm_out.forward_silu(&x)?, cache)?;
        cache.finish_chunk();
        Ok(x)
    }
}
