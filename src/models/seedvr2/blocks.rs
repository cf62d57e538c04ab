//! Building blocks shared by the SeedVR2 encoder and decoder: per-frame GroupNorm, residual block,
//! per-frame attention and the middle block (resnet → attention → resnet).
use tch::Tensor;

use super::conv::{CausalConv3d, Conv3d, ConvSpec, SlotAllocator};
use super::weights::WeightPath;
use crate::models::nn::causal_cache::FeatureCache;
use crate::models::ModelError;

const GROUP_NORM_EPS: f64 = 1e-6;

/// `nn.GroupNorm` applied to each frame on its own (the original folds time into the batch), so
/// statistics never cross frames and temporal slicing of the norm is exact.
#[derive(Debug)]
pub struct FrameGroupNorm {
    weight: Tensor,
    bias: Tensor,
    groups: i64,
}

impl FrameGroupNorm {
    pub fn new(vp: &WeightPath, channels: i64, groups: i64) -> Result<Self, ModelError> {
        Ok(Self { weight: vp.get("weight", &[channels])?, bias: vp.get("bias", &[channels])?, groups })
    }

    /// `[B, C, T, H, W]` → same shape.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        let (b, c, t, h, w) = x.size5()?;
        let frames = x.f_transpose(1, 2)?.f_reshape([b * t, c, h, w])?;
        let normed = frames.f_group_norm(self.groups, Some(&self.weight), Some(&self.bias), GROUP_NORM_EPS, false)?;
        Ok(normed.f_reshape([b, t, c, h, w])?.f_transpose(1, 2)?)
    }
}

/// GroupNorm → SiLU → causal 3³ conv → GroupNorm → SiLU → causal 3³ conv, plus the input (through a
/// 1×1×1 `conv_shortcut` when the width changes). No time embedding; dropout is absent at inference.
#[derive(Debug)]
pub struct ResnetBlock {
    norm1: FrameGroupNorm,
    conv1: CausalConv3d,
    norm2: FrameGroupNorm,
    conv2: CausalConv3d,
    conv_shortcut: Option<Conv3d>,
}

/// Widths of one residual block.
#[derive(Debug, Clone, Copy)]
pub struct ResnetSpec {
    pub in_channels: i64,
    pub out_channels: i64,
    pub groups: i64,
}

impl ResnetBlock {
    pub fn new(vp: &WeightPath, spec: &ResnetSpec, slots: &mut SlotAllocator) -> Result<Self, ModelError> {
        let (cin, cout) = (spec.in_channels, spec.out_channels);
        Ok(Self {
            norm1: FrameGroupNorm::new(&vp.pp("norm1"), cin, spec.groups)?,
            conv1: CausalConv3d::new(&vp.pp("conv1"), &ConvSpec::cube(cin, cout, 3), slots)?,
            norm2: FrameGroupNorm::new(&vp.pp("norm2"), cout, spec.groups)?,
            conv2: CausalConv3d::new(&vp.pp("conv2"), &ConvSpec::cube(cout, cout, 3), slots)?,
            conv_shortcut: if cin != cout { Some(Conv3d::new(&vp.pp("conv_shortcut"), &ConvSpec::pointwise(cin, cout))?) } else { None },
        })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let _span = tracing::trace_span!("seedvr2.resnet").entered();
        let h = self.conv1.forward(&self.norm1.forward(x)?.f_silu()?, cache)?;
        let h = self.conv2.forward(&self.norm2.forward(&h)?.f_silu()?, cache)?;
        let shortcut = match &self.conv_shortcut {
            Some(conv) => conv.forward(x)?,
            None => x.shallow_clone(),
        };
        Ok(shortcut.f_add(&h)?)
    }
}

/// A linear layer (`to_q`, `to_k`, `to_v`, `to_out.0`): weight `[out, in]` plus bias.
#[derive(Debug)]
struct Linear {
    weight: Tensor,
    bias: Tensor,
}

impl Linear {
    fn new(vp: &WeightPath, in_features: i64, out_features: i64) -> Result<Self, ModelError> {
        Ok(Self { weight: vp.get("weight", &[out_features, in_features])?, bias: vp.get("bias", &[out_features])? })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        Ok(x.f_linear(&self.weight, Some(&self.bias))?)
    }
}

/// diffusers `Attention` as converted from the old attention block: one head as wide as the channels,
/// over the pixels of each frame separately (so it needs no cache), with its own GroupNorm and a
/// residual add.
#[derive(Debug)]
pub struct FrameAttention {
    group_norm: FrameGroupNorm,
    to_q: Linear,
    to_k: Linear,
    to_v: Linear,
    to_out: Linear,
}

impl FrameAttention {
    pub fn new(vp: &WeightPath, channels: i64, groups: i64) -> Result<Self, ModelError> {
        Ok(Self {
            group_norm: FrameGroupNorm::new(&vp.pp("group_norm"), channels, groups)?,
            to_q: Linear::new(&vp.pp("to_q"), channels, channels)?,
            to_k: Linear::new(&vp.pp("to_k"), channels, channels)?,
            to_v: Linear::new(&vp.pp("to_v"), channels, channels)?,
            to_out: Linear::new(&vp.pp("to_out.0"), channels, channels)?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        let _span = tracing::trace_span!("seedvr2.attention").entered();
        let (b, c, t, h, w) = x.size5()?;
        // [B, C, T, H, W] → [B·T, 1 head, H·W tokens, C].
        let tokens = self.group_norm.forward(x)?.f_permute([0, 2, 3, 4, 1])?.f_reshape([b * t, 1, h * w, c])?;
        let (q, k, v) = (self.to_q.forward(&tokens)?, self.to_k.forward(&tokens)?, self.to_v.forward(&tokens)?);
        // Default SDPA scale is 1/√head_dim = 1/√C, as in the original.
        let attended = Tensor::f_scaled_dot_product_attention::<Tensor>(&q, &k, &v, None, 0.0, false, None, false)?;
        let out = self.to_out.forward(&attended)?.f_reshape([b, t, h, w, c])?.f_permute([0, 4, 1, 2, 3])?;
        // `out + x`, not `x + out`: the sum takes the first operand's (channels-last) layout, as in the
        // original, and the norms and convs after it round differently per layout. This order keeps
        // the result bit-identical to the reference in fp32.
        Ok(out.f_add(x)?)
    }
}

/// The bottleneck of both encoder and decoder.
#[derive(Debug)]
pub struct MidBlock {
    resnet0: ResnetBlock,
    attention: Option<FrameAttention>,
    resnet1: ResnetBlock,
}

impl MidBlock {
    pub fn new(vp: &WeightPath, channels: i64, groups: i64, with_attention: bool, slots: &mut SlotAllocator) -> Result<Self, ModelError> {
        let spec = ResnetSpec { in_channels: channels, out_channels: channels, groups };
        // Attention first: the checkpoint lists it first, and the first bad key should be the one reported.
        Ok(Self {
            attention: if with_attention { Some(FrameAttention::new(&vp.pp("attentions.0"), channels, groups)?) } else { None },
            resnet0: ResnetBlock::new(&vp.pp("resnets.0"), &spec, slots)?,
            resnet1: ResnetBlock::new(&vp.pp("resnets.1"), &spec, slots)?,
        })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let mut x = self.resnet0.forward(x, cache)?;
        if let Some(attention) = &self.attention {
            x = attention.forward(&x)?;
        }
        self.resnet1.forward(&x, cache)
    }
}
