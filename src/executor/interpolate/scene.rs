//! Scene cuts: two consecutive frames whose pictures differ too much for motion to explain get no blended
//! frames between them (a blend of two scenes is a ghost). The measure is cheap and needs no model: the
//! mean absolute difference of the two frames' luma, each averaged down to at most 64 px on its long side
//! (so noise and grain cancel out), in 0–1.
use tch::{Kind, Tensor};

/// The default `scene_threshold`. On the test clips neighbouring frames of one shot, fast motion included,
/// measured at most 0.078 and the five cuts of bikes.mp4 0.18 or more (tests/interpolate.rs).
pub const DEFAULT_THRESHOLD: f64 = 0.1;
/// The long side of the pictures compared.
const THUMBNAIL_SIDE: i64 = 64;

/// The change from `a` to `b`, `[1, 3, H, W]` Float in [0, 1] on one device: 0 for equal pictures, 1 for
/// black against white.
pub fn change(a: &Tensor, b: &Tensor) -> f64 {
    let (a, b) = (thumbnail_luma(a), thumbnail_luma(b));
    f64::try_from((a - b).abs().mean(Kind::Float)).unwrap_or(0.0)
}

fn thumbnail_luma(frame: &Tensor) -> Tensor {
    let (_, _, height, width) = frame.size4().expect("[1, 3, H, W]");
    let shrink = (height.max(width) + THUMBNAIL_SIDE - 1) / THUMBNAIL_SIDE;
    let weights = Tensor::from_slice(&[0.299f32, 0.587, 0.114]).to_device(frame.device()).view([1, 3, 1, 1]);
    let luma = (frame.to_kind(Kind::Float) * weights).sum_dim_intlist([1i64].as_slice(), true, Kind::Float);
    if shrink <= 1 {
        return luma;
    }
    luma.avg_pool2d([shrink, shrink], [shrink, shrink], [0, 0], true, true, None::<i64>)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_pictures_do_not_change_and_opposites_change_fully() {
        let grey = Tensor::full([1, 3, 90, 160], 0.5, (Kind::Float, tch::Device::Cpu));
        assert_eq!(change(&grey, &grey), 0.0);
        let (black, white) = (grey.zeros_like(), grey.ones_like());
        assert!((change(&black, &white) - 1.0).abs() < 1e-5);
        // Grain averages out: ±0.1 noise on one of two equal pictures moves the measure far less than 0.1.
        let noisy = (&grey + (Tensor::rand_like(&grey) - 0.5) * 0.2).clamp(0.0, 1.0);
        assert!(change(&grey, &noisy) < 0.02, "{}", change(&grey, &noisy));
    }
}
