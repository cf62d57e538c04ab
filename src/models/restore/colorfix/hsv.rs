//! The ComfyUI front-end's HSV fix: hue and value kept, the saturation histogram-matched to the input
//! within each of 12 hue bins, pooled over all frames of the batch.
use tch::{Kind, Tensor};

use super::{check_pair, histogram::match_histogram, signed_range, unit_range};
use crate::models::ModelError;

const HUE_BINS: i64 = 12;
/// A bin is matched only when both the frames and the input have more pixels than this in it.
const MIN_BIN_PIXELS: i64 = 100;
/// Below this a colour has no hue (grey) or no saturation (black).
const TINY: f64 = 1e-10;

/// `sample` and `reference` `[T,3,H,W]` in [-1,1]; the result is clamped to [-1,1].
pub fn hsv_saturation_match(sample: &Tensor, reference: &Tensor) -> Result<Tensor, ModelError> {
    check_pair(sample, reference)?;
    let own = Hsv::of(&unit_range(sample)?)?;
    let target = Hsv::of(&unit_range(reference)?)?;
    let mut saturation = own.saturation.shallow_clone();
    // Later bins overwrite earlier ones: the front-end's bin 0 overlaps bin 11, and bin 11 wins there.
    for bin in 0..HUE_BINS {
        let (own_in, target_in) = (in_hue_bin(&own.hue, bin)?, in_hue_bin(&target.hue, bin)?);
        let count = |mask: &Tensor| -> Result<i64, ModelError> { Ok(mask.f_sum(Kind::Int64)?.f_int64_value(&[])?) };
        if count(&own_in)? <= MIN_BIN_PIXELS || count(&target_in)? <= MIN_BIN_PIXELS {
            continue;
        }
        // The source is always the frames' own saturation, not what an earlier bin wrote.
        let matched = match_histogram(&own.saturation.f_masked_select(&own_in)?, &target.saturation.f_masked_select(&target_in)?)?;
        saturation = saturation.f_masked_scatter(&own_in, &matched)?;
    }
    signed_range(&Hsv { saturation, ..own }.to_rgb()?)
}

/// Per pixel (max − min) / max over the channels of `[T,3,H,W]` in [0,1], 0 where max ≤ 1e-10:
/// `[T,1,H,W]`.
pub(super) fn saturation(rgb: &Tensor) -> Result<Tensor, ModelError> {
    let (max, min) = (rgb.f_amax(1, true)?, rgb.f_amin(1, true)?);
    saturation_of(&max, &max.f_sub(&min)?)
}

fn saturation_of(max: &Tensor, range: &Tensor) -> Result<Tensor, ModelError> {
    Ok(range.f_div(max)?.f_where_self(&max.f_gt(TINY)?, &max.f_zeros_like()?)?)
}

/// Bin 0 is [0, 1/12) and also [11/12, 1): the front-end's, so it overlaps bin 11; bin k ≥ 1 is
/// [k/12, (k+1)/12). The edges are compared in float32.
fn in_hue_bin(hue: &Tensor, bin: i64) -> Result<Tensor, ModelError> {
    let edge = |k: i64| k as f64 / HUE_BINS as f64;
    let below_next = hue.f_lt(edge(bin + 1))?;
    Ok(match bin {
        0 => below_next.f_logical_or(&hue.f_ge(edge(HUE_BINS - 1))?)?,
        _ => below_next.f_logical_and(&hue.f_ge(edge(bin))?)?,
    })
}

/// Hue in [0,1), saturation and value, each `[T,1,H,W]`.
struct Hsv {
    hue: Tensor,
    saturation: Tensor,
    value: Tensor,
}

impl Hsv {
    /// From `[T,3,H,W]` in [0,1]. Where two channels share the maximum, B's rule wins over G's over R's
    /// (the front-end applies them in that order, each overwriting the last); greys keep hue 0.
    fn of(rgb: &Tensor) -> Result<Hsv, ModelError> {
        let (r, g, b) = (rgb.f_narrow(1, 0, 1)?, rgb.f_narrow(1, 1, 1)?, rgb.f_narrow(1, 2, 1)?);
        let (max, min) = (rgb.f_amax(1, true)?, rgb.f_amin(1, true)?);
        let range = max.f_sub(&min)?;
        let has_hue = range.f_gt(TINY)?;
        let sector = |a: &Tensor, b: &Tensor| -> Result<Tensor, ModelError> { Ok(a.f_sub(b)?.f_div(&range)?) };
        let rules = [
            (&r, sector(&g, &b)?.f_remainder(6.0)?),
            (&g, sector(&b, &r)?.f_add_scalar(2.0)?),
            (&b, sector(&r, &g)?.f_add_scalar(4.0)?),
        ];
        let mut hue = max.f_zeros_like()?;
        for (top, sixths) in rules {
            let applies = max.f_eq_tensor(top)?.f_logical_and(&has_hue)?;
            hue = sixths.f_where_self(&applies, &hue)?;
        }
        let saturation = saturation_of(&max, &range)?;
        Ok(Hsv { hue: hue.f_div_scalar(6.0)?, saturation, value: max })
    }

    /// Back to `[T,3,H,W]`, clamped to [0,1].
    fn to_rgb(&self) -> Result<Tensor, ModelError> {
        let Hsv { hue, saturation: s, value: v } = self;
        let sixths = hue.f_mul_scalar(6.0)?;
        let whole = sixths.f_floor()?;
        let f = sixths.f_sub(&whole)?;
        let sector = whole.f_remainder(6.0)?;
        let one_minus = |x: Tensor| -> Result<Tensor, ModelError> { Ok(x.f_neg()?.f_add_scalar(1.0)?) };
        let p = v.f_mul(&one_minus(s.shallow_clone())?)?;
        let q = v.f_mul(&one_minus(s.f_mul(&f)?)?)?;
        let t = v.f_mul(&one_minus(s.f_mul(&one_minus(f.shallow_clone())?)?)?)?;
        // (R, G, B) of sectors 0..5.
        let table = [[v, &t, &p], [&q, v, &p], [&p, v, &t], [&p, &q, v], [&t, &p, v], [v, &p, &q]];
        let mut channels = Vec::with_capacity(3);
        for channel in 0..3 {
            let mut out = table[5][channel].shallow_clone();
            for (index, row) in table.iter().enumerate().take(5) {
                out = row[channel].f_where_self(&sector.f_eq(index as f64)?, &out)?;
            }
            channels.push(out);
        }
        Ok(Tensor::f_cat(&channels, 1)?.f_clamp(0.0, 1.0)?)
    }
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use super::*;

    fn rgb(pixels: &[[f32; 3]]) -> Tensor {
        let flat: Vec<f32> = pixels.iter().flatten().copied().collect();
        Tensor::from_slice(&flat).view([1, pixels.len() as i64, 3]).permute([0, 2, 1]).unsqueeze(2).contiguous()
    }

    #[test]
    fn hues_of_primaries_ties_and_greys() {
        let hsv = Hsv::of(&rgb(&[[1., 0., 0.], [0., 1., 0.], [0., 0., 1.], [1., 1., 0.], [0.5, 0.5, 0.5], [1., 0., 0.5]])).unwrap();
        let hue: Vec<f32> = Vec::try_from(hsv.hue.flatten(0, -1)).unwrap();
        // Yellow ties R and G: G's rule wins, (B − R)/range + 2 = 1 sixth. Rose wraps below 0 to 11/12.
        let expected = [0.0, 2.0 / 6.0, 4.0 / 6.0, 1.0 / 6.0, 0.0, 11.0 / 12.0];
        for (got, want) in hue.iter().zip(expected) {
            assert!((got - want).abs() < 1e-6, "{hue:?}");
        }
    }

    #[test]
    fn hsv_round_trips() {
        tch::manual_seed(13);
        let x = Tensor::rand([2, 3, 8, 8], (Kind::Float, Device::Cpu));
        let back = Hsv::of(&x).unwrap().to_rgb().unwrap();
        assert!((&back - &x).abs().max().double_value(&[]) <= 1e-6);
    }

    #[test]
    fn bin_zero_overlaps_bin_eleven() {
        let hue = Tensor::from_slice(&[0.0f32, 0.05, 0.1, 0.95]);
        let members = |bin| Vec::<bool>::try_from(in_hue_bin(&hue, bin).unwrap()).unwrap();
        assert_eq!(members(0), [true, true, false, true]);
        assert_eq!(members(1), [false, false, true, false]);
        assert_eq!(members(11), [false, false, false, true]);
    }
}
