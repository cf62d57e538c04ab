//! Building blocks shared by the Wan encoder and decoder: RMS norm, residual block, per-frame
//! attention and the middle block (resblock → attention → resblock).
use tch::{Kind, Tensor};

use super::cache::{FeatureCache, SlotAllocator};
use super::conv::{CausalConv3d, Conv3d, ConvSpec};
use super::weights::WeightPath;
use crate::models::ModelError;

/// `F.normalize` clamps the channel norm at this value before dividing.
const NORMALIZE_EPS: f64 = 1e-12;

/// L2-normalise over channels, times √C and a learned per-channel gamma (no bias). It has no
/// statistics over space or time, so any chunking of the input is exact.
#[derive(Debug)]
pub struct RmsNorm {
    /// `gamma · √C`, folded once at load.
    scaled_gamma: Tensor,
}

impl RmsNorm {
    /// `gamma_shape` is the checkpoint's own: `[C,1,1,1]` in residual/head norms, `[C,1,1]` in attention.
    pub fn new(vp: &WeightPath, gamma_shape: &[i64]) -> Result<Self, ModelError> {
        let channels = gamma_shape[0];
        let gamma = vp.get("gamma", gamma_shape)?.f_reshape([1, channels, 1, 1, 1])?;
        Ok(Self { scaled_gamma: gamma.f_mul_scalar((channels as f64).sqrt())? })
    }

    pub fn for_volume(vp: &WeightPath, channels: i64) -> Result<Self, ModelError> {
        Self::new(vp, &[channels, 1, 1, 1])
    }

    pub fn for_image(vp: &WeightPath, channels: i64) -> Result<Self, ModelError> {
        Self::new(vp, &[channels, 1, 1])
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        // The per-pixel norm is reduced in fp32 (as diffusers does for bf16) and turned into a
        // reciprocal on the small [B, 1, T, H, W] tensor, so the full-size work is two multiplies
        // into one fresh tensor instead of a divide and two multiplies into three.
        let inverse_norm = x
            .f_norm_scalaropt_dim_dtype(2.0, [1], true, Kind::Float)?
            .f_clamp_min_(NORMALIZE_EPS)?
            .f_reciprocal_()?
            .f_to_kind(x.kind())?;
        Ok(x.f_mul(&inverse_norm)?.f_mul_(&self.scaled_gamma)?)
    }

    /// `silu(forward(x))`, activated in place.
    pub fn forward_silu(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        Ok(self.forward(x)?.f_silu_()?)
    }
}

/// RMS → SiLU → causal 3³ conv → RMS → SiLU → causal 3³ conv, plus the input (through a 1×1×1 conv
/// when the width changes). Dropout is inference-irrelevant and absent.
#[derive(Debug)]
pub struct ResidualBlock {
    norm1: RmsNorm,
    conv1: CausalConv3d,
    norm2: RmsNorm,
    conv2: CausalConv3d,
    conv_shortcut: Option<Conv3d>,
}

impl ResidualBlock {
    pub fn new(vp: &WeightPath, in_channels: i64, out_channels: i64, slots: &mut SlotAllocator) -> Result<Self, ModelError> {
        Ok(Self {
            norm1: RmsNorm::for_volume(&vp.pp("norm1"), in_channels)?,
            conv1: CausalConv3d::new(&vp.pp("conv1"), &ConvSpec::cube(in_channels, out_channels, 3), slots)?,
            norm2: RmsNorm::for_volume(&vp.pp("norm2"), out_channels)?,
            conv2: CausalConv3d::new(&vp.pp("conv2"), &ConvSpec::cube(out_channels, out_channels, 3), slots)?,
            conv_shortcut: if in_channels != out_channels {
                Some(Conv3d::new(&vp.pp("conv_shortcut"), &ConvSpec::pointwise(in_channels, out_channels))?)
            } else {
                None
            },
        })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let _span = tracing::trace_span!("wan.residual_block").entered();
        let shortcut = match &self.conv_shortcut {
            Some(conv) => conv.forward(x)?,
            None => x.shallow_clone(),
        };
        let h = self.conv1.forward(&self.norm1.forward_silu(x)?, cache)?;
        Ok(self.conv2.forward(&self.norm2.forward_silu(&h)?, cache)?.f_add_(&shortcut)?)
    }
}

/// Single-head self-attention over the pixels of each frame separately (so it needs no cache).
#[derive(Debug)]
pub struct AttentionBlock {
    norm: RmsNorm,
    to_qkv: Conv3d,
    proj: Conv3d,
    channels: i64,
}

impl AttentionBlock {
    pub fn new(vp: &WeightPath, channels: i64) -> Result<Self, ModelError> {
        Ok(Self {
            norm: RmsNorm::for_image(&vp.pp("norm"), channels)?,
            to_qkv: Conv3d::new(&vp.pp("to_qkv"), &ConvSpec::per_frame(channels, 3 * channels, 1))?,
            proj: Conv3d::new(&vp.pp("proj"), &ConvSpec::per_frame(channels, channels, 1))?,
            channels,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        let _span = tracing::trace_span!("wan.attention").entered();
        let (b, c, t, h, w) = x.size5()?;
        let qkv = self.to_qkv.forward(&self.norm.forward(x)?)?;
        // [B, 3C, T, H, W] → [B·T, 1 head, H·W tokens, 3C]; channels are [q | k | v].
        let tokens = qkv.f_permute([0, 2, 3, 4, 1])?.f_reshape([b * t, 1, h * w, 3 * self.channels])?;
        let qkv = tokens.f_chunk(3, -1)?;
        let attended = Tensor::f_scaled_dot_product_attention::<Tensor>(&qkv[0], &qkv[1], &qkv[2], None, 0.0, false, None, false)?;
        let attended = attended.f_reshape([b, t, h, w, c])?.f_permute([0, 4, 1, 2, 3])?;
        Ok(self.proj.forward(&attended)?.f_add(x)?)
    }
}

/// The bottleneck of both encoder and decoder.
#[derive(Debug)]
pub struct MidBlock {
    resnet0: ResidualBlock,
    attention: AttentionBlock,
    resnet1: ResidualBlock,
}

impl MidBlock {
    pub fn new(vp: &WeightPath, channels: i64, slots: &mut SlotAllocator) -> Result<Self, ModelError> {
        Ok(Self {
            resnet0: ResidualBlock::new(&vp.pp("resnets.0"), channels, channels, slots)?,
            attention: AttentionBlock::new(&vp.pp("attentions.0"), channels)?,
            resnet1: ResidualBlock::new(&vp.pp("resnets.1"), channels, channels, slots)?,
        })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let x = self.resnet0.forward(x, cache)?;
        let x = self.attention.forward(&x)?;
        self.resnet1.forward(&x, cache)
    }
}
