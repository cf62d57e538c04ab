//! The original's input upscale, exactly: `PIL.Image.resize((4·w, 4·h), BICUBIC)` on 8-bit RGB frames
//! (`prepare_input_tensor`). Pillow's bicubic is not torch's: its kernel has `a = −0.5` (torch's −0.75), its
//! weights are 22-bit fixed point, and it resizes the rows first, rounding and clipping them to 8 bits before
//! the columns (libImaging/Resample.c: `precompute_coeffs`, `normalize_coeffs_8bpc`,
//! `ImagingResampleHorizontal_8bpc`/`Vertical`). The DiT sees these bytes, so the box makes the same ones.

/// Pillow's fixed-point precision for 8-bit images: `32 − 8 − 2`.
const PRECISION_BITS: u32 = 22;
/// The bicubic kernel's support (taps each side) at scale 1.
const SUPPORT: f64 = 2.0;

/// Pillow's bicubic kernel (`a = −0.5`).
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// The taps of one axis: per output index, its first input index and its fixed-point weights.
struct Taps {
    first: Vec<usize>,
    weights: Vec<Vec<i64>>,
}

/// `precompute_coeffs` then `normalize_coeffs_8bpc` for `input → output` samples over the whole axis.
fn taps(input: usize, output: usize) -> Taps {
    let scale = input as f64 / output as f64;
    let filter_scale = scale.max(1.0);
    let support = SUPPORT * filter_scale;
    let mut first = Vec::with_capacity(output);
    let mut weights = Vec::with_capacity(output);
    for out in 0..output {
        let center = (out as f64 + 0.5) * scale;
        // C's `(int)` truncates toward zero; the bounds are then clamped to the axis.
        let min = ((center - support + 0.5) as i64).max(0) as usize;
        let max = ((center + support + 0.5) as i64).min(input as i64) as usize;
        let raw: Vec<f64> = (min..max).map(|x| bicubic((x as f64 - center + 0.5) / filter_scale)).collect();
        let sum: f64 = raw.iter().sum();
        let fixed = raw
            .iter()
            .map(|w| {
                let w = if sum != 0.0 { w / sum } else { *w };
                let scaled = w * f64::from(1u32 << PRECISION_BITS);
                (if scaled < 0.0 { scaled - 0.5 } else { scaled + 0.5 }) as i64
            })
            .collect();
        first.push(min);
        weights.push(fixed);
    }
    Taps { first, weights }
}

/// A fixed-point sum back to a byte, as Pillow's `clip8`.
fn clip8(sum: i64) -> u8 {
    (sum >> PRECISION_BITS).clamp(0, 255) as u8
}

/// An 8-bit RGB frame `[height, width, 3]` (row-major) resized to `out_height × out_width` as Pillow does.
pub fn resize_rgb8(frame: &[u8], height: usize, width: usize, out_height: usize, out_width: usize) -> Vec<u8> {
    assert_eq!(frame.len(), height * width * 3, "an RGB frame of {height}×{width}");
    let rounding = 1i64 << (PRECISION_BITS - 1);
    // Rows first, into 8-bit values (Pillow's temporary image), then columns.
    let across = taps(width, out_width);
    let mut rows = vec![0u8; height * out_width * 3];
    for y in 0..height {
        for (x, (first, weights)) in across.first.iter().zip(&across.weights).enumerate() {
            for c in 0..3 {
                let sum: i64 = weights.iter().enumerate().map(|(k, w)| i64::from(frame[(y * width + first + k) * 3 + c]) * w).sum();
                rows[(y * out_width + x) * 3 + c] = clip8(rounding + sum);
            }
        }
    }
    let down = taps(height, out_height);
    let mut out = vec![0u8; out_height * out_width * 3];
    for (y, (first, weights)) in down.first.iter().zip(&down.weights).enumerate() {
        for x in 0..out_width {
            for c in 0..3 {
                let sum: i64 = weights.iter().enumerate().map(|(k, w)| i64::from(rows[((first + k) * out_width + x) * 3 + c]) * w).sum();
                out[(y * out_width + x) * 3 + c] = clip8(rounding + sum);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_and_a_flat_frame_stays_flat() {
        for (input, output) in [(40, 160), (64, 256), (7, 29), (100, 33)] {
            let taps = taps(input, output);
            for weights in &taps.weights {
                let sum: i64 = weights.iter().sum();
                assert!((sum - (1 << PRECISION_BITS)).abs() <= weights.len() as i64, "{input}→{output}: {sum}");
            }
        }
        let flat = vec![77u8; 5 * 6 * 3];
        assert!(resize_rgb8(&flat, 5, 6, 20, 24).iter().all(|&v| v == 77));
    }

    #[test]
    fn the_kernel_is_pillows() {
        // a = −0.5: 1 at 0, 0 at the integers, 0.5625 and −0.0625 at ±0.5 and ±1.5.
        assert_eq!(bicubic(0.0), 1.0);
        assert_eq!((bicubic(1.0), bicubic(2.0)), (0.0, 0.0));
        assert_eq!((bicubic(0.5), bicubic(-1.5)), (0.5625, -0.0625));
    }
}
