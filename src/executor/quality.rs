//! Reconstruction quality, accumulated chunk by chunk: PSNR over all pixels, SSIM averaged over frames
//! (Gaussian window 11, σ 1.5, per channel, constants of Wang et al. 2004, pixels in [0, 1]).
use tch::{Kind, Tensor};

use crate::jobs::QualityMetrics;

/// Sums over the frames so far; a checkpoint keeps them, so a resumed job's figures cover every frame.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct QualityMeter {
    squared_error: f64,
    values: f64,
    ssim_sum: f64,
    frames: u64,
}

impl QualityMeter {
    /// `reference`, `test`: `[n, 3, H, W]` in [0, 1].
    pub fn add(&mut self, reference: &Tensor, test: &Tensor) {
        let (reference, test) = (reference.to_kind(Kind::Float), test.to_kind(Kind::Float));
        let diff = &reference - &test;
        self.squared_error += f64::try_from((&diff * &diff).sum(Kind::Double)).unwrap_or(f64::NAN);
        self.values += reference.numel() as f64;
        let per_frame = ssim_per_frame(&reference, &test);
        self.ssim_sum += f64::try_from(per_frame.sum(Kind::Double)).unwrap_or(f64::NAN);
        self.frames += reference.size()[0] as u64;
    }

    pub fn psnr_db(&self) -> f64 {
        let mse = self.squared_error / self.values.max(1.0);
        if mse == 0.0 {
            f64::INFINITY
        } else {
            10.0 * (1.0 / mse).log10()
        }
    }

    pub fn ssim(&self) -> f64 {
        self.ssim_sum / (self.frames.max(1) as f64)
    }

    /// JSON has no infinity: identical frames report a null PSNR.
    pub fn metrics(&self) -> QualityMetrics {
        let finite = |value: f64| value.is_finite().then_some(value);
        QualityMetrics { psnr_db: finite(self.psnr_db()), ssim: finite(self.ssim()), frames_compared: self.frames }
    }
}

fn gaussian_window(channels: i64, device: tch::Device) -> Tensor {
    const SIZE: i64 = 11;
    const SIGMA: f64 = 1.5;
    let coords = Tensor::arange(SIZE, (Kind::Float, device)) - (SIZE / 2) as f64;
    let g = (-(&coords * &coords) / (2.0 * SIGMA * SIGMA)).exp();
    let g = &g / g.sum(Kind::Float);
    let window = g.unsqueeze(1).matmul(&g.unsqueeze(0));
    window.expand([channels, 1, SIZE, SIZE], false).contiguous()
}

fn ssim_per_frame(x: &Tensor, y: &Tensor) -> Tensor {
    const C1: f64 = 0.01 * 0.01;
    const C2: f64 = 0.03 * 0.03;
    let channels = x.size()[1];
    let window = gaussian_window(channels, x.device());
    // "valid" filtering: the border where the window does not fit is left out, as in the reference code.
    let filter = |t: &Tensor| t.conv2d(&window, None::<Tensor>, [1, 1], [0, 0], [1, 1], channels);
    let (mu_x, mu_y) = (filter(x), filter(y));
    let sigma_x = filter(&(x * x)) - &mu_x * &mu_x;
    let sigma_y = filter(&(y * y)) - &mu_y * &mu_y;
    let sigma_xy = filter(&(x * y)) - &mu_x * &mu_y;
    let numerator = (&mu_x * &mu_y * 2.0 + C1) * (sigma_xy * 2.0 + C2);
    let denominator = (&mu_x * &mu_x + &mu_y * &mu_y + C1) * (sigma_x + sigma_y + C2);
    (numerator / denominator).mean_dim([1i64, 2, 3].as_slice(), false, Kind::Float)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(seed: i64) -> Tensor {
        tch::manual_seed(seed);
        Tensor::rand([2, 3, 24, 32], (Kind::Float, tch::Device::Cpu))
    }

    #[test]
    fn identical_frames_are_perfect() {
        let mut meter = QualityMeter::default();
        let x = image(1);
        meter.add(&x, &x);
        assert_eq!(meter.psnr_db(), f64::INFINITY);
        assert!((meter.ssim() - 1.0).abs() < 1e-5, "{}", meter.ssim());
    }

    #[test]
    fn a_constant_offset_of_a_tenth_is_20_db() {
        let mut meter = QualityMeter::default();
        let x = image(2) * 0.5;
        meter.add(&x, &(&x + 0.1));
        assert!((meter.psnr_db() - 20.0).abs() < 1e-3, "{}", meter.psnr_db());
        // SSIM's structure term ignores a constant offset; only luminance drops it below 1.
        assert!(meter.ssim() > 0.8 && meter.ssim() < 1.0, "{}", meter.ssim());
    }

    #[test]
    fn noise_lowers_ssim_more_than_it_lowers_a_clean_copy() {
        let x = image(3);
        let mut slight = QualityMeter::default();
        slight.add(&x, &(&x + Tensor::randn_like(&x) * 0.01));
        let mut heavy = QualityMeter::default();
        heavy.add(&x, &(&x + Tensor::randn_like(&x) * 0.3));
        assert!(slight.ssim() > heavy.ssim());
        assert!(slight.psnr_db() > heavy.psnr_db());
    }
}
