//! Nearest ×2 up-sampling followed by a 3×3 conv, computed on the low-resolution input.
//!
//! Every output pixel of "duplicate pixels, then 3×3 conv" sees a 2×2 window of the input: in each
//! of the four output phases (row parity a, column parity b) kernel rows or columns that land on the
//! same input pixel add up. So the pair equals one 2×2 conv with 4× the output channels over the
//! input padded by one, followed by interleaving the phases: 16 instead of 36 multiply-adds per input
//! pixel and channel pair, and no 4×-size copy of the input. Exact up to the rounding of the summed
//! kernel taps (the weights are summed in fp32 once, at load).
use tch::{Kind, Tensor};

use super::cache::RowSplit;
use super::conv::conv3d;
use super::layout;
use crate::models::nn::nearest_up_conv2d::phase_kernels;
use crate::models::ModelError;

#[derive(Debug)]
pub struct NearestUpConv {
    /// `[4·O, I, 1, 2, 2]`, phase-major (phase = 2a + b).
    weight: Tensor,
    bias: Tensor,
    out_channels: i64,
}

impl NearestUpConv {
    /// From the per-frame 3×3 conv that follows the nearest ×2 up-sampling (`weight` `[O, I, 1, 3, 3]`).
    pub fn new(weight: &Tensor, bias: &Tensor, channels_last: bool) -> Result<Self, ModelError> {
        let (out_channels, in_channels) = (weight.size()[0], weight.size()[1]);
        let per_frame = weight.f_reshape([out_channels, in_channels, 3, 3])?;
        let weight = phase_kernels(&per_frame, Kind::Float)?.f_unsqueeze(2)?;
        let weight = if channels_last { layout::to_channels_last(&weight)? } else { weight };
        Ok(Self { weight, bias: bias.f_repeat([4])?, out_channels })
    }

    /// `[B, I, T, H, W]` → `[B, O, T, 2H, 2W]`, in the input's layout; with a row split, in bands
    /// of input rows (each reads one halo row above and below).
    pub fn forward(&self, x: &Tensor, split: Option<RowSplit>) -> Result<Tensor, ModelError> {
        let (b, in_channels, t, h, w) = x.size5()?;
        let o = self.out_channels;
        let element = x.kind().elt_size_in_bytes() as i64;
        // Per input row: the input row, the 4 phase rows and the 4 output rows it becomes.
        let rows = split.map_or(h, |s| s.band_rows((in_channels + 8 * o) * t * w * element)).min(h);
        let channels_last = layout::is_channels_last(x);
        // [B, T, H, a, W, b, O] is the NDHWC order of the interleaved output, [B, O, T, H, a, W, b] the NCDHW one.
        let out = if channels_last {
            Tensor::f_empty([b, t, h, 2, w, 2, o], (x.kind(), x.device()))?
        } else {
            Tensor::f_empty([b, o, t, h, 2, w, 2], (x.kind(), x.device()))?
        };
        let mut top = 0;
        while top < h {
            let bottom = (top + rows).min(h);
            let first = (top - 1).max(0);
            let last = (bottom + 1).min(h);
            let band = x.f_narrow(3, first, last - first)?;
            let (pad_top, pad_bottom) = (1 - (top - first), 1 - (last - bottom));
            let band = if pad_top + pad_bottom > 0 { band.f_constant_pad_nd([0, 0, pad_top, pad_bottom, 0, 0])? } else { band };
            let phases = conv3d(&band, &self.weight, &self.bias, [1, 1, 1], [0, 0, 1])?;
            for a in 0..2 {
                for c in 0..2 {
                    let phase = phases.f_narrow(1, (2 * a + c) * o, o)?.f_narrow(3, a, bottom - top)?.f_narrow(4, c, w)?;
                    if channels_last {
                        out.f_narrow(2, top, bottom - top)?.f_select(3, a)?.f_select(4, c)?.f_copy_(&phase.f_permute([0, 2, 3, 4, 1])?)?;
                    } else {
                        out.f_narrow(3, top, bottom - top)?.f_select(4, a)?.f_select(5, c)?.f_copy_(&phase)?;
                    }
                }
            }
            top = bottom;
        }
        if channels_last {
            return Ok(out.f_reshape([b, t, 2 * h, 2 * w, o])?.f_permute([0, 4, 1, 2, 3])?);
        }
        Ok(out.f_reshape([b, o, t, 2 * h, 2 * w])?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    /// libtorch's own nearest up-sampling and 3×3 conv, the computation this replaces.
    fn upsample_then_conv(x: &Tensor, weight: &Tensor, bias: &Tensor) -> Tensor {
        let (_, _, t, h, w) = x.size5().unwrap();
        x.upsample_nearest3d([t, 2 * h, 2 * w], 1.0, 2.0, 2.0).conv3d(weight, Some(bias), [1, 1, 1], [0, 1, 1], [1, 1, 1], 1)
    }

    #[test]
    fn equals_nearest_upsampling_then_conv_in_both_layouts() {
        tch::manual_seed(3);
        let opts = (Kind::Float, Device::Cpu);
        let weight = Tensor::randn([5, 4, 1, 3, 3], opts);
        let bias = Tensor::randn([5], opts);
        let x = Tensor::randn([1, 4, 2, 7, 6], opts);
        let expected = upsample_then_conv(&x, &weight, &bias);
        for channels_last in [false, true] {
            let conv = NearestUpConv::new(&weight, &bias, channels_last).unwrap();
            let input = if channels_last { layout::to_channels_last(&x).unwrap() } else { x.shallow_clone() };
            // One band, then bands of 1 and 3 input rows (the last band shorter).
            for split in [None, Some(RowSplit { max_band_bytes: 1 }), Some(RowSplit { max_band_bytes: 3 * (4 + 8 * 5) * 2 * 6 * 4 })] {
                let got = conv.forward(&input, split).unwrap();
                assert_eq!(got.size(), expected.size());
                assert_eq!(layout::is_channels_last(&got), channels_last);
                let diff = (got - &expected).abs().max().double_value(&[]);
                assert!(diff < 1e-5, "channels_last {channels_last}, {split:?}: {diff}");
            }
        }
    }
}
