//! TAEHV's layers on frames flattened to one batch (`[N·T, C, H, W]`): every conv is 2-D, and the only
//! mixing in time is what the chain (`chain.rs`) hands these blocks: the previous frame (MemBlocks), a
//! group of frames on channels (TPool), or frames to unfold from channels (TGrow).
use tch::Tensor;

use super::weights::WeightPath;
use crate::models::nn::layout;
use crate::models::nn::nearest_up_conv2d::NearestUpConv2d;
use crate::models::ModelError;

/// A `nn.Conv2d` as the original builds it; `padding` is `kernel / 2` throughout.
#[derive(Debug, Clone, Copy)]
pub struct ConvSpec {
    pub in_channels: i64,
    pub out_channels: i64,
    pub kernel: i64,
    pub stride: i64,
    pub groups: i64,
    pub bias: bool,
}

impl ConvSpec {
    /// `conv(a, b)` of taehv.py: 3×3, padding 1, with bias.
    pub fn conv3(in_channels: i64, out_channels: i64) -> Self {
        Self { in_channels, out_channels, kernel: 3, stride: 1, groups: 1, bias: true }
    }

    pub fn pointwise(in_channels: i64, out_channels: i64) -> Self {
        Self { in_channels, out_channels, kernel: 1, stride: 1, groups: 1, bias: false }
    }

    pub fn without_bias(self) -> Self {
        Self { bias: false, ..self }
    }

    pub fn with_bias(self) -> Self {
        Self { bias: true, ..self }
    }

    pub fn strided(self, stride: i64) -> Self {
        Self { stride, ..self }
    }
}

#[derive(Debug)]
pub struct Conv2d {
    weight: Tensor,
    bias: Option<Tensor>,
    spec: ConvSpec,
}

impl Conv2d {
    pub fn new(path: &WeightPath, spec: ConvSpec) -> Result<Self, ModelError> {
        let weight = path.get("weight", &[spec.out_channels, spec.in_channels / spec.groups, spec.kernel, spec.kernel])?;
        Self::from_weight(path, weight, spec)
    }

    /// With a weight the caller read (a TGrow cut to its last rows) and the bias, if any, from `path`.
    fn from_weight(path: &WeightPath, weight: Tensor, spec: ConvSpec) -> Result<Self, ModelError> {
        // A channels-last weight makes libtorch run the conv channels-last whatever its input's layout,
        // and its output stays so down the chain (`TaehvLoadOptions::channels_last`).
        let weight = if path.weights().conv_channels_last() { layout::to_channels_last_2d(&weight)? } else { weight };
        let bias = if spec.bias { Some(path.get("bias", &[spec.out_channels])?) } else { None };
        Ok(Self { weight, bias, spec })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        let padding = self.spec.kernel / 2;
        Ok(x.f_conv2d(&self.weight, self.bias.as_ref(), [self.spec.stride], [padding], [1], self.spec.groups)?)
    }
}

impl Conv2d {
    /// This conv fused with the nearest ×2 up-sampling before it; `None` for a conv it cannot follow
    /// (only a plain 3×3, stride 1, can).
    pub fn after_nearest_up(&self) -> Result<Option<NearestUpConv2d>, ModelError> {
        let spec = self.spec;
        if spec.kernel != 3 || spec.stride != 1 || spec.groups != 1 {
            return Ok(None);
        }
        Ok(Some(NearestUpConv2d::new(&self.weight, self.bias.as_ref(), layout::is_channels_last_2d(&self.weight))?))
    }
}

/// `MemBlock(n, n)`: `ReLU(conv.4(ReLU(conv.2(ReLU(conv.0(x ‖ past))))) + x)`. The skip is the identity:
/// every released MemBlock keeps its width (a width change would bring `skip` weights, refused as unused).
#[derive(Debug)]
pub struct MemBlock {
    convs: [Conv2d; 3],
}

impl MemBlock {
    pub fn new(path: &WeightPath, n: i64) -> Result<Self, ModelError> {
        let conv = path.pp("conv");
        Ok(Self { convs: [Conv2d::new(&conv.pp(0), ConvSpec::conv3(2 * n, n))?, Conv2d::new(&conv.pp(2), ConvSpec::conv3(n, n))?, Conv2d::new(&conv.pp(4), ConvSpec::conv3(n, n))?] })
    }

    /// Each intermediate is replaced, not shadowed, and activated in place: one of them alive at a time.
    pub fn forward(&self, x: &Tensor, past: &Tensor) -> Result<Tensor, ModelError> {
        let mut h = self.convs[0].forward(&Tensor::f_cat(&[x, past], 1)?)?.f_relu_()?;
        h = self.convs[1].forward(&h)?.f_relu_()?;
        h = self.convs[2].forward(&h)?;
        Ok(h.f_add_(x)?.f_relu_()?)
    }
}

/// `SuperMemBlock(n)`: `conv.3(ReLU(conv.1(conv.0(x ‖ past)))) + x`, conv.0 a depthwise 7×7 over the 2n
/// channels, conv.1 a 1×1 to 4n with bias, conv.3 a 1×1 back to n; no activation after the sum.
#[derive(Debug)]
pub struct SuperMemBlock {
    depthwise: Conv2d,
    expand: Conv2d,
    project: Conv2d,
}

impl SuperMemBlock {
    pub fn new(path: &WeightPath, n: i64) -> Result<Self, ModelError> {
        let conv = path.pp("conv");
        let depthwise = ConvSpec { in_channels: 2 * n, out_channels: 2 * n, kernel: 7, stride: 1, groups: 2 * n, bias: false };
        Ok(Self {
            depthwise: Conv2d::new(&conv.pp(0), depthwise)?,
            expand: Conv2d::new(&conv.pp(1), ConvSpec::pointwise(2 * n, 4 * n).with_bias())?,
            project: Conv2d::new(&conv.pp(3), ConvSpec::pointwise(4 * n, n))?,
        })
    }

    pub fn forward(&self, x: &Tensor, past: &Tensor) -> Result<Tensor, ModelError> {
        let mut h = self.depthwise.forward(&Tensor::f_cat(&[x, past], 1)?)?;
        h = self.expand.forward(&h)?.f_relu_()?;
        h = self.project.forward(&h)?;
        Ok(h.f_add_(x)?)
    }
}

/// `TPool(n, stride)`: a group of `stride` consecutive frames, concatenated on channels (earlier first),
/// through a 1×1 conv to `n` channels.
#[derive(Debug)]
pub struct TPool {
    pub stride: i64,
    conv: Conv2d,
}

impl TPool {
    pub fn new(path: &WeightPath, n: i64, stride: i64) -> Result<Self, ModelError> {
        Ok(Self { stride, conv: Conv2d::new(&path.pp("conv"), ConvSpec::pointwise(n * stride, n))? })
    }

    /// `grouped`: `[groups, stride·C, H, W]`.
    pub fn forward(&self, grouped: &Tensor) -> Result<Tensor, ModelError> {
        self.conv.forward(grouped)
    }
}

/// `TGrow(n, stride)`: a 1×1 conv to `stride·n` channels whose k-th block of `n` is output frame k.
#[derive(Debug)]
pub struct TGrow {
    pub stride: i64,
    conv: Conv2d,
}

impl TGrow {
    /// `checkpoint_stride` is the stride the file's conv was trained with; a smaller built stride keeps
    /// the conv's LAST `stride·n` output rows (the last timestep's), as the original's `patch_tgrow_layers`.
    pub fn new(path: &WeightPath, n: i64, stride: i64, checkpoint_stride: i64) -> Result<Self, ModelError> {
        let conv = path.pp("conv");
        let stored = conv.get("weight", &[n * checkpoint_stride, n, 1, 1])?;
        let weight = stored.f_narrow(0, n * (checkpoint_stride - stride), n * stride)?.f_contiguous()?;
        Ok(Self { stride, conv: Conv2d::from_weight(&conv, weight, ConvSpec::pointwise(n, n * stride))? })
    }

    /// `[frames, C, H, W]` → `[frames, stride·C, H, W]` (the chain unfolds the channel blocks into frames).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        self.conv.forward(x)
    }
}
