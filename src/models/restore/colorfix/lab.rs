//! The ComfyUI front-end's Lab fix: the capped wavelet fix, then each Lab channel histogram-matched to
//! the input over all frames of the batch (a and b fully, L partly), in CIE Lab with the D65 white.
use tch::Tensor;

use super::{check_pair, histogram::match_histogram, signed_range, unit_range, wavelet_reconstruction_capped};
use crate::models::ModelError;

/// The share of the restored frames' own lightness that is kept; the rest is matched to the input's.
/// The front-end's default and the value its pipeline passes.
const LUMINANCE_WEIGHT: f64 = 0.8;
/// sRGB primaries to XYZ (D65), and back: the front-end's back matrix is the usual rounded one, not the
/// inverse of the forward one, so a round trip is not exact.
const RGB_TO_XYZ: [[f64; 3]; 3] = [[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750], [0.0193339, 0.1191920, 0.9503041]];
const XYZ_TO_RGB: [[f64; 3]; 3] = [[3.2404542, -1.5371385, -0.4985314], [-0.9692660, 1.8760108, 0.0415560], [0.0556434, -0.2040259, 1.0572252]];
/// The D65 white point's X and Z (Y is 1).
const WHITE_X: f64 = 0.95047;
const WHITE_Z: f64 = 1.08883;
/// CIE's ε = 6/29 and κ = (29/3)³: below ε³ the cube root is replaced by a line.
const EPSILON: f64 = 6.0 / 29.0;
const KAPPA: f64 = (29.0 / 3.0) * (29.0 / 3.0) * (29.0 / 3.0);

/// `sample` and `reference` `[T,3,H,W]` in [-1,1]; the result is clamped to [-1,1].
pub fn lab_color_transfer(sample: &Tensor, reference: &Tensor) -> Result<Tensor, ModelError> {
    check_pair(sample, reference)?;
    let base = rgb_to_lab(&unit_range(&wavelet_reconstruction_capped(sample, reference)?)?)?;
    let target = rgb_to_lab(&unit_range(reference)?)?;
    let matched = |channel: i64| -> Result<Tensor, ModelError> {
        let own = base.f_select(1, channel)?;
        let flat = match_histogram(&own.f_flatten(0, -1)?, &target.f_select(1, channel)?.f_flatten(0, -1)?)?;
        Ok(flat.f_view_as(&own)?)
    };
    let lightness = base.f_select(1, 0)?.f_mul_scalar(LUMINANCE_WEIGHT)?.f_add(&matched(0)?.f_mul_scalar(1.0 - LUMINANCE_WEIGHT)?)?;
    let lab = Tensor::f_stack(&[lightness, matched(1)?, matched(2)?], 1)?;
    signed_range(&lab_to_rgb(&lab)?)
}

/// `[T,3,H,W]` sRGB in [0,1] to `[T,3,H,W]` Lab (L in [0,100]).
fn rgb_to_lab(rgb: &Tensor) -> Result<Tensor, ModelError> {
    let gamma = rgb.f_add_scalar(0.055)?.f_div_scalar(1.055)?.f_pow_tensor_scalar(2.4)?;
    let linear = gamma.f_where_self(&rgb.f_gt(0.04045)?, &rgb.f_div_scalar(12.92)?)?;
    let xyz = mix(&linear, &RGB_TO_XYZ)?;
    let xyz = [xyz.f_select(1, 0)?, xyz.f_select(1, 1)?, xyz.f_select(1, 2)?];
    let f = |t: Tensor| -> Result<Tensor, ModelError> {
        let line = t.f_mul_scalar(KAPPA)?.f_add_scalar(16.0)?.f_div_scalar(116.0)?;
        Ok(t.f_pow_tensor_scalar(1.0 / 3.0)?.f_where_self(&t.f_gt(EPSILON.powi(3))?, &line)?)
    };
    let fx = f(xyz[0].f_div_scalar(WHITE_X)?)?;
    let fy = f(xyz[1].shallow_clone())?;
    let fz = f(xyz[2].f_div_scalar(WHITE_Z)?)?;
    let lightness = fy.f_mul_scalar(116.0)?.f_sub_scalar(16.0)?;
    let a = fx.f_sub(&fy)?.f_mul_scalar(500.0)?;
    let b = fy.f_sub(&fz)?.f_mul_scalar(200.0)?;
    Ok(Tensor::f_stack(&[lightness, a, b], 1)?)
}

/// `[T,3,H,W]` Lab to sRGB clamped to [0,1].
fn lab_to_rgb(lab: &Tensor) -> Result<Tensor, ModelError> {
    let fy = lab.f_select(1, 0)?.f_add_scalar(16.0)?.f_div_scalar(116.0)?;
    let fx = fy.f_add(&lab.f_select(1, 1)?.f_div_scalar(500.0)?)?;
    let fz = fy.f_sub(&lab.f_select(1, 2)?.f_div_scalar(200.0)?)?;
    let inverse = |f: &Tensor| -> Result<Tensor, ModelError> {
        let line = f.f_mul_scalar(116.0)?.f_sub_scalar(16.0)?.f_div_scalar(KAPPA)?;
        Ok(f.f_pow_tensor_scalar(3.0)?.f_where_self(&f.f_gt(EPSILON)?, &line)?)
    };
    let xyz = Tensor::f_stack(&[inverse(&fx)?.f_mul_scalar(WHITE_X)?, inverse(&fy)?, inverse(&fz)?.f_mul_scalar(WHITE_Z)?], 1)?;
    let linear = mix(&xyz, &XYZ_TO_RGB)?;
    let gamma = linear.f_clamp_min(0.0)?.f_pow_tensor_scalar(1.0 / 2.4)?.f_mul_scalar(1.055)?.f_sub_scalar(0.055)?;
    let rgb = gamma.f_where_self(&linear.f_gt(0.0031308)?, &linear.f_mul_scalar(12.92)?)?;
    Ok(rgb.f_clamp(0.0, 1.0)?)
}

/// `matrix` applied to the channels of `[T,3,H,W]`, as one `[3,3] × [3, T·H·W]` product: the form that
/// reproduces the front-end's outputs bit for bit on CPU (three separate weighted sums round differently,
/// up to 1e-5 after the Lab round trip, and move near-tied ranks).
fn mix(x: &Tensor, matrix: &[[f64; 3]; 3]) -> Result<Tensor, ModelError> {
    let size = x.size();
    let weights: Vec<f32> = matrix.iter().flatten().map(|&w| w as f32).collect();
    let weights = Tensor::f_from_slice(&weights)?.f_view([3, 3])?.f_to_device(x.device())?;
    let pixels = x.f_transpose(0, 1)?.f_reshape([3, -1])?;
    let mixed = weights.f_matmul(&pixels)?.f_reshape([3, size[0], size[2], size[3]])?;
    Ok(mixed.f_transpose(0, 1)?)
}

#[cfg(test)]
mod tests {
    use crate::models::restore::colorfix::test_frames::max_abs;
    use tch::{Device, Kind};

    use super::*;

    #[test]
    fn white_black_and_red_have_their_textbook_lab() {
        let rgb = Tensor::from_slice(&[1f32, 0., 1., 1., 0., 0., 1., 0., 0.]).view([1, 3, 1, 3]);
        let lab = rgb_to_lab(&rgb).unwrap();
        let at = |c: i64, x: i64| lab.double_value(&[0, c, 0, x]);
        assert!((at(0, 0) - 100.0).abs() < 1e-3 && at(1, 0).abs() < 1e-2 && at(2, 0).abs() < 1e-2, "white");
        assert!(at(0, 1).abs() < 1e-4 && at(1, 1).abs() < 1e-4 && at(2, 1).abs() < 1e-4, "black");
        assert!((at(0, 2) - 53.24).abs() < 0.01 && (at(1, 2) - 80.09).abs() < 0.01 && (at(2, 2) - 67.20).abs() < 0.01, "red");
    }

    #[test]
    fn lab_round_trips() {
        tch::manual_seed(12);
        let rgb = Tensor::rand([2, 3, 8, 8], (Kind::Float, Device::Cpu));
        let back = lab_to_rgb(&rgb_to_lab(&rgb).unwrap()).unwrap();
        assert!(max_abs(&back, &rgb) <= 1e-5, "{}", max_abs(&back, &rgb));
    }
}
