//! The ComfyUI front-end's two noise augmentations, as its notes describe them (shared/reference/colorfix,
//! "Noise scales"): Gaussian noise on the input frames before the VAE encode, and the sampler's noise
//! mixed into the DiT's condition latent at a resolution-shifted timestep. At 0 neither draws a number,
//! so a job without them runs exactly as before.
use tch::Tensor;

/// Each from 0 (off, the default) to 1.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NoiseScales {
    /// `input_noise_scale`.
    pub input: f64,
    /// `latent_noise_scale`.
    pub latent: f64,
}

/// The front-end draws `n = 0.05·randn` and blends `x·(1 − b) + (x + n)·b` with `b = scale / 2`, which is
/// `x + 0.025·scale·randn`; there is no clamp.
const INPUT_NOISE_STD_PER_SCALE: f64 = 0.05 * 0.5;

/// `[3, T, H, W]` frames in [-1, 1] with the input noise added (the same tensor at scale 0).
pub fn noised_input(frames: &Tensor, scale: f64) -> Tensor {
    if scale <= 0.0 {
        return frames.shallow_clone();
    }
    frames + frames.randn_like() * (INPUT_NOISE_STD_PER_SCALE * scale)
}

/// The condition latent `[t, h, w, c]` (scaled, as the DiT takes it) moved towards the augmentation noise
/// `0.1·start_noise + 0.05·randn` by the shifted timestep of `1000·scale`: the lerp schedule's
/// `(1 − t/1000)·latent + (t/1000)·aug`. `start_noise` is the sampler's own noise, `[t, h, w, c]`.
pub fn noised_condition(condition: &Tensor, start_noise: &Tensor, scale: f64) -> Tensor {
    if scale <= 0.0 {
        return condition.shallow_clone();
    }
    let [_, h, w, c] = <[i64; 4]>::try_from(condition.size()).expect("a [t, h, w, c] condition");
    let aug = start_noise * 0.1 + condition.randn_like() * 0.05;
    let share = condition_timestep(1000.0 * scale, [h, w, c]) / 1000.0;
    condition * (1.0 - share) + aug * share
}

/// SeedVR's `timestep_transform` of timestep `t` for the shape it is handed. The front-end hands it the
/// latent's shape less its first axis, `(h, w, c)` of a `[t, h, w, c]` latent, and the transform reads
/// that as `(frames, height, width)` latents: F = (h − 1)·4 + 1, H = 8w, W = 8c. That quirk, inherited from
/// upstream, is kept, so the same scale noises as much as it does there.
pub fn condition_timestep(t: f64, read_as: [i64; 3]) -> f64 {
    let [a, b, c] = read_as.map(|x| x as f64);
    let (frames, height, width) = ((a - 1.0) * 4.0 + 1.0, 8.0 * b, 8.0 * c);
    let shift = if frames == 1.0 {
        through(height * width, (256.0 * 256.0, 1.0), (1024.0 * 1024.0, 3.2))
    } else {
        through(height * width * frames, (256.0 * 256.0 * 37.0, 1.0), (1280.0 * 720.0 * 145.0, 5.0))
    };
    let u = t / 1000.0;
    1000.0 * shift * u / (1.0 + (shift - 1.0) * u)
}

/// The line through two points, at `x`.
fn through(x: f64, (x1, y1): (f64, f64), (x2, y2): (f64, f64)) -> f64 {
    y1 + (x - x1) * (y2 - y1) / (x2 - x1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn the_shift_follows_the_shape_the_front_end_hands_over() {
        // The two ends of the image line (H = 8b, W = 8c): a shift of 1 leaves t alone, 3.2 raises it.
        let image = [1, 1024 / 8, 1024 / 8];
        assert!((condition_timestep(500.0, [1, 256 / 8, 256 / 8]) - 500.0).abs() < 1e-9);
        let s: f64 = 3.2;
        assert!((condition_timestep(500.0, image) - 1000.0 * s * 0.5 / (1.0 + (s - 1.0) * 0.5)).abs() < 1e-9);
        // Video: (h − 1)·4 + 1 = 37 frames, 8w·128 = 256² pixels: shift 1.
        assert!((condition_timestep(300.0, [10, 64, 16]) - 300.0).abs() < 1e-9);
        // The ends of the schedule stay where they are whatever the shift.
        for shape in [[1, 4, 16], [12, 14, 16], [90, 160, 16]] {
            assert!(condition_timestep(0.0, shape).abs() < 1e-9 && (condition_timestep(1000.0, shape) - 1000.0).abs() < 1e-9, "{shape:?}");
        }
    }

    #[test]
    fn scale_0_draws_nothing_and_changes_nothing() {
        let x = Tensor::rand([3, 5, 4, 4], (Kind::Float, Device::Cpu));
        tch::manual_seed(3);
        assert_eq!(noised_input(&x, 0.0), x);
        assert_eq!(noised_condition(&x.permute([1, 2, 3, 0]), &x.permute([1, 2, 3, 0]), 0.0), x.permute([1, 2, 3, 0]));
        let after = Tensor::randn([4], (Kind::Float, Device::Cpu));
        tch::manual_seed(3);
        assert_eq!(after, Tensor::randn([4], (Kind::Float, Device::Cpu)), "no number was drawn");
    }

    #[test]
    fn input_noise_has_the_front_end_s_strength() {
        let x = Tensor::zeros([3, 9, 64, 64], (Kind::Float, Device::Cpu));
        tch::manual_seed(1);
        let noised = noised_input(&x, 1.0);
        let std = noised.std(true).double_value(&[]);
        assert!((std - 0.025).abs() < 0.001, "std {std}");
        tch::manual_seed(1);
        assert_eq!(noised_input(&x, 1.0), noised, "seeded draws repeat");
    }

    #[test]
    fn full_latent_noise_replaces_the_condition_with_the_augmentation() {
        let condition = Tensor::ones([2, 3, 4, 16], (Kind::Float, Device::Cpu));
        let start = Tensor::zeros([2, 3, 4, 16], (Kind::Float, Device::Cpu));
        // At scale 1 the shifted timestep is 1000: nothing of the latent is left, only 0.05·randn.
        let noised = noised_condition(&condition, &start, 1.0);
        assert!(noised.abs().max().double_value(&[]) < 0.5 && noised.std(true).double_value(&[]) > 0.02);
        let half = noised_condition(&condition, &start, 0.5);
        let mean = half.mean(Kind::Float).double_value(&[]);
        let share = condition_timestep(500.0, [3, 4, 16]) / 1000.0;
        assert!((mean - (1.0 - share)).abs() < 0.02, "mean {mean}, share {share}");
    }
}
