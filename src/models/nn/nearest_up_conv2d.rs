//! Nearest ×2 up-sampling followed by a 3×3 conv (stride 1, padding 1), computed on the low-resolution
//! frames: the 2-D form of the Wan decoder's `NearestUpConv`. Each output phase (row parity a, column
//! parity b) sees a 2×2 window of the input, whose taps are the 3×3 kernel's rows and columns that land
//! on the same input pixel, summed. So the pair is one 2×2 conv with 4× the output channels over the
//! input padded by one, its phases interleaved: 16 instead of 36 multiply-adds per input pixel and
//! channel pair, and no 4×-size copy of the input. Exact up to the rounding of the summed taps (summed
//! once, at load).
use tch::{Kind, Tensor};

use super::layout;
use crate::models::ModelError;

/// Which 3×3 kernel rows (or columns) meet which of the 2 input taps, per output parity: parity 0 reads
/// input rows (i−1, i), parity 1 rows (i, i+1).
const TAPS_PER_PARITY: [[[f32; 3]; 2]; 2] = [[[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]], [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]];

/// The 2×2 kernels of the four output phases, `[4·O, I, 2, 2]` phase-major (phase = 2a + b), from the
/// 3×3 kernel `[O, I, 3, 3]` that follows a nearest ×2 up-sampling; taps summed in `sum_kind`, the result
/// in the kernel's kind. The Wan decoder's 3-D `NearestUpConv` takes its kernels (depth 1) from here too.
pub fn phase_kernels(weight: &Tensor, sum_kind: Kind) -> Result<Tensor, ModelError> {
    let full = weight.f_to_kind(sum_kind)?;
    let mut phases = Vec::with_capacity(4);
    for rows in &TAPS_PER_PARITY {
        for cols in &TAPS_PER_PARITY {
            let rows = Tensor::from_slice2(rows).f_to_device(weight.device())?.f_to_kind(sum_kind)?;
            let cols = Tensor::from_slice2(cols).f_to_device(weight.device())?.f_to_kind(sum_kind)?;
            phases.push(Tensor::f_einsum("pk,oikl,ql->oipq", &[&rows, &full, &cols], None::<&[i64]>)?);
        }
    }
    Ok(Tensor::f_cat(&phases, 0)?.f_to_kind(weight.kind())?)
}

#[derive(Debug)]
pub struct NearestUpConv2d {
    /// `[4·O, I, 2, 2]`, phase-major (phase = 2a + b).
    weight: Tensor,
    bias: Option<Tensor>,
    out_channels: i64,
}

impl NearestUpConv2d {
    /// From the 3×3 conv that follows the nearest ×2 up-sampling (`weight` `[O, I, 3, 3]`).
    pub fn new(weight: &Tensor, bias: Option<&Tensor>, channels_last: bool) -> Result<Self, ModelError> {
        let out_channels = weight.size()[0];
        // Taps summed in fp32, or in fp64 for an fp64 model (its parity is checked to 1e-12).
        let sum_kind = if weight.kind() == Kind::Double { Kind::Double } else { Kind::Float };
        let weight = phase_kernels(weight, sum_kind)?;
        let weight = if channels_last { layout::to_channels_last_2d(&weight)? } else { weight };
        let bias = bias.map(|b| b.f_repeat([4])).transpose()?;
        Ok(Self { weight, bias, out_channels })
    }

    /// `[B, I, H, W]` → `[B, O, 2H, 2W]`, in the input's layout.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        let size = x.size();
        let [b, _, h, w] = size[..] else { return Err(ModelError::Unsupported { model: "nearest_up_conv2d".into(), what: format!("an input of shape {size:?}") }) };
        let o = self.out_channels;
        let phases = x.f_conv2d(&self.weight, self.bias.as_ref(), [1], [1], [1], 1)?;
        let channels_last = layout::is_channels_last_2d(&phases);
        // [B, H, a, W, b, O] is the NHWC order of the interleaved output, [B, O, H, a, W, b] the NCHW one.
        let out = if channels_last { Tensor::f_empty([b, h, 2, w, 2, o], (x.kind(), x.device()))? } else { Tensor::f_empty([b, o, h, 2, w, 2], (x.kind(), x.device()))? };
        for a in 0..2 {
            for c in 0..2 {
                let phase = phases.f_narrow(1, (2 * a + c) * o, o)?.f_narrow(2, a, h)?.f_narrow(3, c, w)?;
                if channels_last {
                    out.f_select(2, a)?.f_select(3, c)?.f_copy_(&phase.f_permute([0, 2, 3, 1])?)?;
                } else {
                    out.f_select(3, a)?.f_select(4, c)?.f_copy_(&phase)?;
                }
            }
        }
        if channels_last {
            return Ok(out.f_view([b, 2 * h, 2 * w, o])?.f_permute([0, 3, 1, 2])?);
        }
        Ok(out.f_view([b, o, 2 * h, 2 * w])?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn equals_nearest_upsampling_then_conv_in_both_layouts() {
        tch::manual_seed(5);
        let opts = (Kind::Float, Device::Cpu);
        let weight = Tensor::randn([5, 4, 3, 3], opts);
        let x = Tensor::randn([2, 4, 7, 6], opts);
        for bias in [None, Some(Tensor::randn([5], opts))] {
            // libtorch's own nearest up-sampling and 3×3 conv, the computation this replaces.
            let expected = x.upsample_nearest2d([14, 12], 2.0, 2.0).conv2d(&weight, bias.as_ref(), [1], [1], [1], 1);
            for channels_last in [false, true] {
                let conv = NearestUpConv2d::new(&weight, bias.as_ref(), channels_last).unwrap();
                let input = if channels_last { layout::to_channels_last_2d(&x).unwrap() } else { x.shallow_clone() };
                let got = conv.forward(&input).unwrap();
                assert_eq!(got.size(), expected.size());
                assert_eq!(layout::is_channels_last_2d(&got), channels_last);
                let diff = (got - &expected).abs().max().double_value(&[]);
                assert!(diff < 1e-5, "channels_last {channels_last}, bias {}: {diff}", bias.is_some());
            }
        }
    }
}
