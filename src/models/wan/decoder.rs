//! The causal video decoder: latents `[B, z, T', h, w]` → pixels `[B, 3, 1 + 4(T'−1), 8h, 8w]` (unclamped).
use tch::Tensor;

use super::blocks::{MidBlock, ResidualBlock, RmsNorm};
use super::cache::{FeatureCache, SlotAllocator};
use super::config::WanConfig;
use super::conv::{CausalConv3d, ConvSpec};
use super::resample::{Resample, ResampleMode};
use super::weights::WeightPath;
use crate::models::ModelError;

#[derive(Debug)]
struct UpBlock {
    resnets: Vec<ResidualBlock>,
    upsampler: Option<Resample>,
}

#[derive(Debug)]
pub struct Decoder {
    conv_in: CausalConv3d,
    mid_block: MidBlock,
    up_blocks: Vec<UpBlock>,
    norm_out: RmsNorm,
    conv_out: CausalConv3d,
    cache_slots: usize,
}

impl Decoder {
    pub fn new(vp: &WeightPath, cfg: &WanConfig) -> Result<Self, ModelError> {
        let mut slots = SlotAllocator::default();
        let level_dims: Vec<i64> = cfg.level_dims().into_iter().rev().collect();
        let temporal_upsample = cfg.temporal_upsample();
        let top_dim = level_dims[0];
        let conv_in = CausalConv3d::new(&vp.pp("conv_in"), &ConvSpec::cube(cfg.z_dim, top_dim, 3), &mut slots)?;
        let mid_block = MidBlock::new(&vp.pp("mid_block"), top_dim, &mut slots)?;
        let mut up_blocks = Vec::new();
        let mut in_dim = top_dim;
        for (level, &out_dim) in level_dims.iter().enumerate() {
            let level_vp = vp.pp(format!("up_blocks.{level}"));
            let mut resnets = Vec::new();
            for j in 0..=cfg.num_res_blocks {
                resnets.push(ResidualBlock::new(&level_vp.pp(format!("resnets.{j}")), in_dim, out_dim, &mut slots)?);
                in_dim = out_dim;
            }
            let upsampler = match temporal_upsample.get(level) {
                Some(&temporal) => {
                    let mode = if temporal { ResampleMode::Up3d } else { ResampleMode::Up2d };
                    // Wan 2.1's upsamplers halve the channels.
                    in_dim = out_dim / 2;
                    Some(Resample::new(&level_vp.pp("upsamplers.0"), out_dim, mode, &mut slots)?)
                }
                None => None,
            };
            up_blocks.push(UpBlock { resnets, upsampler });
        }
        let norm_out = RmsNorm::for_volume(&vp.pp("norm_out"), in_dim)?;
        let conv_out = CausalConv3d::new(&vp.pp("conv_out"), &ConvSpec::cube(in_dim, cfg.image_channels, 3), &mut slots)?;
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
        for block in &self.up_blocks {
            for resnet in &block.resnets {
                x = resnet.forward(&x, cache)?;
            }
            if let Some(upsampler) = &block.upsampler {
                x = upsampler.forward(&x, cache)?;
            }
        }
        let x = self.conv_out.forward(&self.norm_out.forward(&x)?.f_silu()?, cache)?;
        cache.finish_chunk();
        Ok(x)
    }
}
