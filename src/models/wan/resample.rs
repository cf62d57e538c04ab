//! Spatial ×2 down/up-sampling, optionally with Wan's causal ×2 temporal step.
use tch::Tensor;

use super::cache::{FeatureCache, SlotAllocator};
use super::conv::{CausalConv3d, Conv3d, ConvSpec};
use super::layout;
use super::upsample::NearestUpConv;
use super::weights::WeightPath;
use crate::models::ModelError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResampleMode {
    Down2d,
    Down3d,
    Up2d,
    Up3d,
}

#[derive(Debug)]
enum TimeConv {
    None,
    /// (3,1,1) stride-2 conv over `[last frame of the previous chunk, this chunk]`; the first chunk skips it.
    Down { conv: Conv3d, cache_slot: usize },
    /// (3,1,1) causal conv C → 2C whose halves become two consecutive frames; the first chunk skips it.
    Up(CausalConv3d),
}

#[derive(Debug)]
enum SpatialConv {
    /// Stride-2 3×3 conv after padding right and bottom by one.
    Down(Conv3d),
    /// Nearest ×2 then 3×3 conv, fused.
    Up(NearestUpConv),
}

#[derive(Debug)]
pub struct Resample {
    /// The checkpoint's `resample.1` (index 0 is the parameter-free pad or upsample).
    spatial: SpatialConv,
    time: TimeConv,
}

impl Resample {
    /// `up_out_channels` is the width after an upsampler: half in Wan 2.1, unchanged in Wan 2.2.
    pub fn new(vp: &WeightPath, channels: i64, up_out_channels: i64, mode: ResampleMode, slots: &mut SlotAllocator) -> Result<Self, ModelError> {
        let spatial_vp = vp.pp("resample.1");
        let time_vp = vp.pp("time_conv");
        let (spatial, time) = match mode {
            ResampleMode::Down2d | ResampleMode::Down3d => {
                // Padding is explicit (right/bottom only) in `forward`.
                let spec = ConvSpec::per_frame(channels, channels, 3).with_stride([1, 2, 2]).with_padding([0; 3]);
                let time = if mode == ResampleMode::Down3d {
                    let time_spec = ConvSpec::pointwise(channels, channels).with_kernel([3, 1, 1]).with_stride([2, 1, 1]);
                    TimeConv::Down { conv: Conv3d::new(&time_vp, &time_spec)?, cache_slot: slots.allocate() }
                } else {
                    TimeConv::None
                };
                (SpatialConv::Down(Conv3d::new(&spatial_vp, &spec)?), time)
            }
            ResampleMode::Up2d | ResampleMode::Up3d => {
                let spec = ConvSpec::per_frame(channels, up_out_channels, 3);
                let time = if mode == ResampleMode::Up3d {
                    let time_spec = ConvSpec::pointwise(channels, 2 * channels).with_kernel([3, 1, 1]).with_padding([1, 0, 0]);
                    TimeConv::Up(CausalConv3d::new(&time_vp, &time_spec, slots)?)
                } else {
                    TimeConv::None
                };
                let conv = Conv3d::new(&spatial_vp, &spec)?;
                let fused = NearestUpConv::new(conv.weight(), conv.bias(), vp.weights().conv_channels_last())?;
                (SpatialConv::Up(fused), time)
            }
        };
        Ok(Self { spatial, time })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let _span = tracing::trace_span!("wan.resample").entered();
        match &self.spatial {
            SpatialConv::Down(conv) => {
                // ZeroPad2d((0, 1, 0, 1)): the output is floor(H/2) × floor(W/2).
                let x = conv.forward(&x.f_constant_pad_nd([0, 1, 0, 1])?)?;
                self.downsample_time(x, cache)
            }
            // nearest-exact and nearest agree for an integer factor of 2: pixel duplication.
            SpatialConv::Up(conv) => conv.forward(&self.upsample_time(x, cache)?, cache.row_split()),
        }
    }

    fn downsample_time(&self, x: Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let TimeConv::Down { conv, cache_slot } = &self.time else { return Ok(x) };
        let frames = x.size()[2];
        let last_frame = layout::dense_copy(&x.f_narrow(2, frames - 1, 1)?)?;
        let out = match cache.take(*cache_slot) {
            None => x,
            Some(previous) => conv.forward(&Tensor::f_cat(&[&previous, &x], 2)?)?,
        };
        cache.store(*cache_slot, last_frame);
        Ok(out)
    }

    fn upsample_time(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let TimeConv::Up(conv) = &self.time else { return Ok(x.shallow_clone()) };
        if cache.is_first_chunk() {
            // The first latent frame becomes one frame. The time conv then starts, at the second latent
            // frame, from zero history (the original's 'Rep' marker).
            return Ok(x.shallow_clone());
        }
        let (b, c, t, h, w) = x.size5()?;
        let doubled = conv.forward(x, cache)?;
        // Channels [0:C] are frame 2t, [C:2C] frame 2t+1.
        if layout::is_channels_last(&doubled) {
            // The same interleave in NDHWC order: one copy, and the result stays channels-last.
            let interleaved = doubled
                .f_permute([0, 2, 3, 4, 1])?
                .f_reshape([b, t, h, w, 2, c])?
                .f_permute([0, 1, 4, 2, 3, 5])?
                .f_contiguous()?
                .f_reshape([b, 2 * t, h, w, c])?;
            return Ok(interleaved.f_permute([0, 4, 1, 2, 3])?);
        }
        Ok(doubled.f_reshape([b, 2, c, t, h, w])?.f_permute([0, 2, 3, 1, 4, 5])?.f_reshape([b, c, 2 * t, h, w])?)
    }
}
