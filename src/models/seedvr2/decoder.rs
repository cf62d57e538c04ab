//! The causal video decoder: latents `[B, latent, T', h, w]` → pixels `[B, 3, 4T' − 3, 8h, 8w]`
//! on the first chunk (`4T'` on later chunks), unclamped like the original.
use tch::Tensor;

use super::blocks::{FrameGroupNorm, MidBlock, ResnetBlock, ResnetSpec};
use super::config::SeedVr2Config;
use super::conv::{CausalConv3d, ConvSpec, SlotAllocator};
use super::resample::Upsample;
use super::weights::WeightPath;
use crate::models::nn::causal_cache::FeatureCache;
use crate::models::ModelError;

/// `up_blocks.i`: `layers_per_block + 1` resnets, then (except in the last block) an up-sampler.
#[derive(Debug)]
struct UpBlock {
    resnets: Vec<ResnetBlock>,
    upsampler: Option<Upsample>,
}

impl UpBlock {
    fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let mut x = x.shallow_clone();
        for resnet in &self.resnets {
            x = resnet.forward(&x, cache)?;
        }
        match &self.upsampler {
            Some(up) => up.forward(&x, cache),
            None => Ok(x),
        }
    }
}

#[derive(Debug)]
pub struct Decoder {
    conv_in: CausalConv3d,
    up_blocks: Vec<UpBlock>,
    mid_block: MidBlock,
    conv_norm_out: FrameGroupNorm,
    conv_out: CausalConv3d,
    cache_slots: usize,
}

impl Decoder {
    pub fn new(vp: &WeightPath, cfg: &SeedVr2Config) -> Result<Self, ModelError> {
        let mut slots = SlotAllocator::default();
        let groups = cfg.norm_num_groups;
        let widths: Vec<i64> = cfg.block_out_channels.iter().rev().copied().collect();
        let conv_in = CausalConv3d::new(&vp.pp("conv_in"), &ConvSpec::cube(cfg.latent_channels, widths[0], 3), &mut slots)?;
        // Built in the checkpoint's order (up blocks before the mid block) so the first bad key is reported.
        let mut up_blocks = Vec::new();
        let mut in_channels = widths[0];
        for (i, &out_channels) in widths.iter().enumerate() {
            let block_vp = vp.pp(format!("up_blocks.{i}"));
            let mut resnets = Vec::new();
            for j in 0..cfg.layers_per_block + 1 {
                let spec = ResnetSpec { in_channels, out_channels, groups };
                resnets.push(ResnetBlock::new(&block_vp.pp(format!("resnets.{j}")), &spec, &mut slots)?);
                in_channels = out_channels;
            }
            let upsampler = if i + 1 < widths.len() {
                Some(Upsample::new(&block_vp.pp("upsamplers.0"), out_channels, cfg.temporal_up(i), &mut slots)?)
            } else {
                None
            };
            up_blocks.push(UpBlock { resnets, upsampler });
        }
        let mid_block = MidBlock::new(&vp.pp("mid_block"), widths[0], groups, cfg.mid_block_attention, &mut slots)?;
        let conv_norm_out = FrameGroupNorm::new(&vp.pp("conv_norm_out"), in_channels, groups)?;
        let conv_out = CausalConv3d::new(&vp.pp("conv_out"), &ConvSpec::cube(in_channels, cfg.out_channels, 3), &mut slots)?;
        Ok(Self { conv_in, up_blocks, mid_block, conv_norm_out, conv_out, cache_slots: slots.count() })
    }

    pub fn new_cache(&self) -> FeatureCache {
        FeatureCache::new(self.cache_slots)
    }

    /// One chunk of any number (≥ 1) of latent frames; the first chunk of a clip is the one whose
    /// first frame stays single.
    pub fn forward(&self, z: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let _span = tracing::debug_span!("seedvr2.decoder").entered();
        if z.size()[2] == 0 {
            return Err(ModelError::Unsupported { model: "seedvr2".into(), what: "a decoder chunk of 0 latent frames".into() });
        }
        let x = self.conv_in.forward(z, cache)?;
        let mut x = self.mid_block.forward(&x, cache)?;
        for block in &self.up_blocks {
            x = block.forward(&x, cache)?;
        }
        let x = self.conv_out.forward(&self.conv_norm_out.forward(&x)?.f_silu()?, cache)?;
        cache.finish_chunk();
        Ok(x)
    }
}
