//! The causal video decoder: latents `[B, z, T', h, w]` → network pixels `[B, C, 1 + 4(T'−1), 8h, 8w]`
//! (unclamped; Wan 2.2 output is still patchified).
use tch::Tensor;

use super::blocks::{MidBlock, ResidualBlock, RmsNorm};
use super::cache::{FeatureCache, SlotAllocator};
use super::config::WanConfig;
use super::conv::{CausalConv3d, ConvSpec};
use super::resample::{Resample, ResampleMode};
use super::residual::{LevelSpec, ResidualUpBlock};
use super::weights::WeightPath;
use crate::models::ModelError;

/// A Wan 2.1 level: resnets, then an upsampler that halves the channels.
#[derive(Debug)]
struct UpBlock {
    resnets: Vec<ResidualBlock>,
    upsampler: Option<Resample>,
}

impl UpBlock {
    fn new(vp: &WeightPath, level: &LevelSpec, slots: &mut SlotAllocator) -> Result<Self, ModelError> {
        let mut resnets = Vec::new();
        let mut in_dim = level.in_channels;
        for j in 0..level.res_blocks {
            resnets.push(ResidualBlock::new(&vp.pp(format!("resnets.{j}")), in_dim, level.out_channels, slots)?);
            in_dim = level.out_channels;
        }
        let upsampler = if level.resample {
            let mode = if level.temporal { ResampleMode::Up3d } else { ResampleMode::Up2d };
            Some(Resample::new(&vp.pp("upsamplers.0"), level.out_channels, level.out_channels / 2, mode, slots)?)
        } else {
            None
        };
        Ok(Self { resnets, upsampler })
    }

    fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let mut x = x.shallow_clone();
        for resnet in &self.resnets {
            x = resnet.forward(&x, cache)?;
        }
        match &self.upsampler {
            Some(upsampler) => upsampler.forward(&x, cache),
            None => Ok(x),
        }
    }
}

#[derive(Debug)]
enum UpLevel {
    Plain(UpBlock),
    Residual(ResidualUpBlock),
}

#[derive(Debug)]
pub struct Decoder {
    conv_in: CausalConv3d,
    mid_block: MidBlock,
    up_blocks: Vec<UpLevel>,
    norm_out: RmsNorm,
    conv_out: CausalConv3d,
    cache_slots: usize,
}

impl Decoder {
    pub fn new(vp: &WeightPath, cfg: &WanConfig) -> Result<Self, ModelError> {
        let mut slots = SlotAllocator::default();
        let level_dims = cfg.decoder_level_dims();
        let temporal_upsample = cfg.temporal_upsample();
        let top_dim = level_dims[0];
        let conv_in = CausalConv3d::new(&vp.pp("conv_in"), &ConvSpec::cube(cfg.z_dim, top_dim, 3), &mut slots)?;
        let mid_block = MidBlock::new(&vp.pp("mid_block"), top_dim, &mut slots)?;
        let mut up_blocks = Vec::new();
        let mut in_dim = top_dim;
        for (level, &out_dim) in level_dims.iter().enumerate() {
            let spec = LevelSpec {
                in_channels: in_dim,
                out_channels: out_dim,
                res_blocks: cfg.num_res_blocks + 1,
                resample: level + 1 < level_dims.len(),
                temporal: temporal_upsample.get(level).copied().unwrap_or(false),
            };
            let level_vp = vp.pp(format!("up_blocks.{level}"));
            up_blocks.push(if cfg.is_residual {
                in_dim = out_dim;
                UpLevel::Residual(ResidualUpBlock::new(&level_vp, &spec, &mut slots)?)
            } else {
                // Wan 2.1's upsamplers halve the channels.
                in_dim = if spec.resample { out_dim / 2 } else { out_dim };
                UpLevel::Plain(UpBlock::new(&level_vp, &spec, &mut slots)?)
            });
        }
        let norm_out = RmsNorm::for_volume(&vp.pp("norm_out"), in_dim)?;
        let conv_out = CausalConv3d::new(&vp.pp("conv_out"), &ConvSpec::cube(in_dim, cfg.network_channels(), 3), &mut slots)?;
        Ok(Self { conv_in, mid_block, up_blocks, norm_out, conv_out, cache_slots: slots.count() })
    }

    pub fn new_cache(&self) -> FeatureCache {
        FeatureCache::new(self.cache_slots)
    }

    /// One chunk of a stream: exactly 1 latent frame first, then any number.
    pub fn forward(&self, z: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let _span = tracing::debug_span!("wan.decoder").entered();
        let frames = z.size()[2];
        if frames == 0 || (cache.is_first_chunk() && frames != 1) {
            return Err(ModelError::Unsupported {
                model: "wan".into(),
                what: format!("a decoder chunk of {frames} latent frames after {} chunks (the first must be 1)", cache.chunks_done()),
            });
        }
        let x = self.conv_in.forward(z, cache)?;
        let mut x = self.mid_block.forward(&x, cache)?;
        for level in &self.up_blocks {
            x = match level {
                UpLevel::Plain(block) => block.forward(&x, cache)?,
                UpLevel::Residual(block) => block.forward(&x, cache)?,
            };
        }
        let x = self.conv_out.forward(&self.norm_out.forward_silu(&x)?, cache)?;
        cache.finish_chunk();
        Ok(x)
    }
}
