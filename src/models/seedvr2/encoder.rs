//! The causal video encoder: pixels `[B, 3, T, H, W]` → moments `[B, 2·latent, T', H/8, W/8]`
//! (mean | log-variance, unclamped).
use tch::Tensor;

use super::blocks::{FrameGroupNorm, MidBlock, ResnetBlock, ResnetSpec};
use super::config::SeedVr2Config;
use super::conv::{CausalConv3d, ConvSpec, SlotAllocator};
use super::resample::Downsample;
use super::weights::WeightPath;
use crate::models::nn::causal_cache::FeatureCache;
use crate::models::ModelError;

/// `down_blocks.i`: resnets, then (except in the bottom block) a down-sampler.
#[derive(Debug)]
struct DownBlock {
    resnets: Vec<ResnetBlock>,
    downsampler: Option<Downsample>,
}

impl DownBlock {
    fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let mut x = x.shallow_clone();
        for resnet in &self.resnets {
            x = resnet.forward(&x, cache)?;
        }
        match &self.downsampler {
            Some(down) => down.forward(&x, cache),
            None => Ok(x),
        }
    }
}

#[derive(Debug)]
pub struct Encoder {
    conv_in: CausalConv3d,
    down_blocks: Vec<DownBlock>,
    mid_block: MidBlock,
    conv_norm_out: FrameGroupNorm,
    conv_out: CausalConv3d,
    cache_slots: usize,
    temporal_factor: i64,
}

impl Encoder {
    pub fn new(vp: &WeightPath, cfg: &SeedVr2Config) -> Result<Self, ModelError> {
        let mut slots = SlotAllocator::default();
        let groups = cfg.norm_num_groups;
        let widths = &cfg.block_out_channels;
        let conv_in = CausalConv3d::new(&vp.pp("conv_in"), &ConvSpec::cube(cfg.in_channels, widths[0], 3), &mut slots)?;
        let mut down_blocks = Vec::new();
        let mut in_channels = widths[0];
        for (i, &out_channels) in widths.iter().enumerate() {
            let block_vp = vp.pp(format!("down_blocks.{i}"));
            let mut resnets = Vec::new();
            for j in 0..cfg.layers_per_block {
                let spec = ResnetSpec { in_channels, out_channels, groups };
                resnets.push(ResnetBlock::new(&block_vp.pp(format!("resnets.{j}")), &spec, &mut slots)?);
                in_channels = out_channels;
            }
            let downsampler = if i + 1 < widths.len() {
                Some(Downsample::new(&block_vp.pp("downsamplers.0"), out_channels, cfg.temporal_down(i), &mut slots)?)
            } else {
                None
            };
            down_blocks.push(DownBlock { resnets, downsampler });
        }
        let mid_block = MidBlock::new(&vp.pp("mid_block"), in_channels, groups, cfg.mid_block_attention, &mut slots)?;
        let conv_norm_out = FrameGroupNorm::new(&vp.pp("conv_norm_out"), in_channels, groups)?;
        let conv_out = CausalConv3d::new(&vp.pp("conv_out"), &ConvSpec::cube(in_channels, 2 * cfg.latent_channels, 3), &mut slots)?;
        Ok(Self { conv_in, down_blocks, mid_block, conv_norm_out, conv_out, cache_slots: slots.count(), temporal_factor: cfg.temporal_factor() })
    }

    pub fn new_cache(&self) -> FeatureCache {
        FeatureCache::new(self.cache_slots)
    }

    /// One chunk: `1 + 4a` frames first (a ≥ 0; the whole clip is one such chunk), then multiples of
    /// 4, so every time-halving conv ends the chunk on a window boundary.
    pub fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let _span = tracing::debug_span!("seedvr2.encoder").entered();
        let frames = x.size()[2];
        let step = self.temporal_factor;
        let valid = if cache.is_first_chunk() { frames >= 1 && (frames - 1) % step == 0 } else { frames > 0 && frames % step == 0 };
        if !valid {
            return Err(ModelError::Unsupported {
                model: "seedvr2".into(),
                what: format!("an encoder chunk of {frames} frames after {} chunks (first 1 + {step}k, then multiples of {step})", cache.chunks_done()),
            });
        }
        let mut x = self.conv_in.forward(x, cache)?;
        for block in &self.down_blocks {
            x = block.forward(&x, cache)?;
        }
        let x = self.mid_block.forward(&x, cache)?;
        let x = self.conv_out.forward(&self.conv_norm_out.forward(&x)?.f_silu()?, cache)?;
        cache.finish_chunk();
        Ok(x)
    }
}
