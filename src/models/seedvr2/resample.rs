//! SeedVR2's resamplers. Down: zero-pad right/bottom, then a stride-2 conv that is causal (and halves
//! time) in temporal blocks. Up (MAGViT style): 1×1×1 `upscale_conv` to `x·y·z·C` channels, depth to
//! space(-time), drop the duplicate of the clip's first frame, then a causal 3³ conv.
use tch::Tensor;

use super::conv::{CausalConv3d, Conv3d, ConvSpec, SlotAllocator};
use super::weights::WeightPath;
use crate::models::nn::causal_cache::FeatureCache;
use crate::models::ModelError;

const SPATIAL_RATIO: i64 = 2;

/// Encoder `downsamplers.0`: `n → floor(n/2)` in space; in time `n → floor((n−1)/2) + 1` on the
/// first chunk (two replicas of frame 0 in front) and `n → n/2` after it.
#[derive(Debug)]
pub struct Downsample {
    conv: CausalConv3d,
}

impl Downsample {
    pub fn new(vp: &WeightPath, channels: i64, temporal: bool, slots: &mut SlotAllocator) -> Result<Self, ModelError> {
        let (kernel_t, stride_t) = if temporal { (3, 2) } else { (1, 1) };
        let spec = ConvSpec::cube(channels, channels, 3)
            .with_kernel([kernel_t, 3, 3])
            .with_stride([stride_t, SPATIAL_RATIO, SPATIAL_RATIO])
            .with_spatial_padding([0, 0]);
        Ok(Self { conv: CausalConv3d::new(&vp.pp("conv"), &spec, slots)? })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let _span = tracing::trace_span!("seedvr2.downsample").entered();
        // F.pad(x, (0, 1, 0, 1)): zeros on the right and bottom only.
        self.conv.forward(&x.f_constant_pad_nd([0, 1, 0, 1])?, cache)
    }
}

/// Decoder `upsamplers.0`: ×2 in space, and in time ×2 for temporal blocks (`n → 2n − 1` on the
/// first chunk, whose first frame stays single; `n → 2n` on later chunks).
#[derive(Debug)]
pub struct Upsample {
    upscale_conv: Conv3d,
    conv: CausalConv3d,
    channels: i64,
    temporal_ratio: i64,
}

impl Upsample {
    pub fn new(vp: &WeightPath, channels: i64, temporal: bool, slots: &mut SlotAllocator) -> Result<Self, ModelError> {
        let temporal_ratio = if temporal { 2 } else { 1 };
        let expanded = SPATIAL_RATIO * SPATIAL_RATIO * temporal_ratio * channels;
        // Checkpoint order: `conv` before `upscale_conv`.
        let conv = CausalConv3d::new(&vp.pp("conv"), &ConvSpec::cube(channels, channels, 3), slots)?;
        let upscale_conv = Conv3d::new(&vp.pp("upscale_conv"), &ConvSpec::pointwise(channels, expanded))?;
        Ok(Self { upscale_conv, conv, channels, temporal_ratio })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let _span = tracing::trace_span!("seedvr2.upsample").entered();
        let expanded = self.upscale_conv.forward(x)?;
        let (b, _, t, h, w) = expanded.size5()?;
        let (r, z, c) = (SPATIAL_RATIO, self.temporal_ratio, self.channels);
        // einops `b (x y z c) f h w -> b c (f z) (h x) (w y)`.
        let mut x = expanded
            .f_reshape([b, r, r, z, c, t, h, w])?
            .f_permute([0, 4, 5, 3, 6, 1, 7, 2])?
            .f_reshape([b, c, t * z, h * r, w * r])?;
        if z > 1 && cache.is_first_chunk() {
            // The clip's first latent frame stands for one frame: keep the first of its pair.
            let frames = x.size()[2];
            x = Tensor::f_cat(&[x.f_narrow(2, 0, 1)?, x.f_narrow(2, z, frames - z)?], 2)?;
        }
        self.conv.forward(&x, cache)
    }
}
