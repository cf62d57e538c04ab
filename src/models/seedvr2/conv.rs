//! SeedVR2's convolutions. Unlike Wan (zero history at the start of a clip), its causal convs start a
//! clip by replicating the first frame in front; after that, the frames carried from the previous
//! chunk take the place of the replicas, so a sliced clip computes exactly the whole-clip convolution.
use tch::Tensor;

use super::weights::WeightPath;
use crate::models::nn::conv3d as shared_conv;
pub use crate::models::nn::causal_cache::SlotAllocator;
use crate::models::nn::causal_cache::FeatureCache;
use crate::models::ModelError;

/// Shape of one convolution, `[time, height, width]` triples; weights are always 5-D in SeedVR2 files.
#[derive(Debug, Clone, Copy)]
pub struct ConvSpec {
    pub in_channels: i64,
    pub out_channels: i64,
    pub kernel: [i64; 3],
    pub stride: [i64; 3],
    /// Symmetric zero padding in space (time is handled by [`CausalConv3d`]).
    pub spatial_padding: [i64; 2],
}

impl ConvSpec {
    /// `k×k×k`, stride 1, "same" spatial padding.
    pub fn cube(in_channels: i64, out_channels: i64, k: i64) -> Self {
        Self { in_channels, out_channels, kernel: [k; 3], stride: [1; 3], spatial_padding: [k / 2; 2] }
    }

    pub fn pointwise(in_channels: i64, out_channels: i64) -> Self {
        Self::cube(in_channels, out_channels, 1)
    }

    pub fn with_kernel(self, kernel: [i64; 3]) -> Self {
        Self { kernel, ..self }
    }

    pub fn with_stride(self, stride: [i64; 3]) -> Self {
        Self { stride, ..self }
    }

    pub fn with_spatial_padding(self, spatial_padding: [i64; 2]) -> Self {
        Self { spatial_padding, ..self }
    }
}

/// A convolution without temporal context (1×1×1 shortcuts and `upscale_conv`, or the frame-wise
/// inner conv of [`CausalConv3d`]): the shared plain convolution, given a spec that never pads time.
#[derive(Debug)]
pub struct Conv3d(shared_conv::Conv3d);

impl Conv3d {
    /// Loads `{vp}.weight` `[out, in, kt, kh, kw]` and `{vp}.bias`.
    pub fn new(vp: &WeightPath, spec: &ConvSpec) -> Result<Self, ModelError> {
        let [pad_h, pad_w] = spec.spatial_padding;
        let plain = shared_conv::ConvSpec::cube(spec.in_channels, spec.out_channels, 1)
            .with_kernel(spec.kernel)
            .with_stride(spec.stride)
            .with_padding([0, pad_h, pad_w]);
        Ok(Self(shared_conv::Conv3d::new(vp, &plain)?))
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        self.0.forward(x)
    }
}

/// Causal in time: on the first chunk `kt − 1` copies of frame 0 go in front (nothing behind); on
/// later chunks the input frames the previous chunk did not finish using go in front instead.
#[derive(Debug)]
pub struct CausalConv3d {
    conv: Conv3d,
    kernel_t: i64,
    stride_t: i64,
    /// Only convs with a time kernel > 1 carry frames.
    cache_slot: Option<usize>,
}

impl CausalConv3d {
    pub fn new(vp: &WeightPath, spec: &ConvSpec, slots: &mut SlotAllocator) -> Result<Self, ModelError> {
        let kernel_t = spec.kernel[0];
        Ok(Self {
            conv: Conv3d::new(vp, spec)?,
            kernel_t,
            stride_t: spec.stride[0],
            cache_slot: (kernel_t > 1).then(|| slots.allocate()),
        })
    }

    /// The chunk must give at least one output frame, and (for a time stride > 1) end on a window
    /// boundary; the encoder's chunk rule (1 + 4a frames, then multiples of 4) guarantees both.
    pub fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        // A cancel ends a long push here, between layers (the time-1 convolutions are cheap beside these).
        cache.check_stop()?;
        let Some(slot) = self.cache_slot else { return self.conv.forward(x) };
        let input = match cache.take(slot) {
            Some(carried) => Tensor::f_cat(&[&carried, x], 2)?,
            None => {
                let first = x.f_narrow(2, 0, 1)?;
                let (b, c, _, h, w) = first.size5()?;
                Tensor::f_cat(&[&first.f_expand([b, c, self.kernel_t - 1, h, w], false)?, x], 2)?
            }
        };
        let frames = input.size()[2];
        let windows = if frames >= self.kernel_t { (frames - self.kernel_t) / self.stride_t + 1 } else { 0 };
        let consumed = windows * self.stride_t;
        // Copy so the cache does not keep the whole chunk alive.
        cache.store(slot, input.f_narrow(2, consumed, frames - consumed)?.f_contiguous()?);
        self.conv.forward(&input)
    }
}
