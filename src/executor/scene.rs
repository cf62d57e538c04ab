//! Scene cuts: two consecutive frames whose pictures differ too much for motion to explain get no blended
//! frames between them (a blend of two scenes is a ghost). The measure is cheap and needs no model: the
//! mean absolute difference of the two frames' luma, each averaged down to at most 64 px on its long side
//! (so noise and grain cancel out), in 0–1.
use tch::{Kind, Tensor};

/// The default `scene_threshold`. On the test clips neighbouring frames of one shot, fast motion included,
/// measured at most 0.078 and the five cuts of bikes.mp4 0.18 or more (tests/it/interpolate.rs).
pub const DEFAULT_THRESHOLD: f64 = 0.1;
/// The thresholds a job may give: a change is in 0–1, and 0 turns the detection off.
pub const THRESHOLDS: std::ops::RangeInclusive<f64> = 0.0..=1.0;
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

/// Finds the cuts in a stream of frames, one frame at a time, keeping only the last frame's thumbnail.
pub struct CutFinder {
    threshold: f64,
    previous: Option<Tensor>,
    /// Frames seen so far.
    seen: u64,
    /// The indices (from 0, the first frame seen) of the frames that start a new scene.
    pub cuts: Vec<u64>,
}

impl CutFinder {
    /// `threshold` 0 finds no cut.
    pub fn new(threshold: f64) -> CutFinder {
        CutFinder { threshold, previous: None, seen: 0, cuts: Vec::new() }
    }

    /// Whether `frame` (`[1, 3, H, W]` Float in [0, 1]) starts a new scene: it changed more than the
    /// threshold from the frame before.
    pub fn starts_scene(&mut self, frame: &Tensor) -> bool {
        let index = self.seen;
        self.seen += 1;
        if self.threshold <= 0.0 {
            return false;
        }
        let luma = thumbnail_luma(frame);
        let change = self.previous.as_ref().map(|previous| f64::try_from((previous - &luma).abs().mean(Kind::Float)).unwrap_or(0.0));
        self.previous = Some(luma);
        let cut = change.is_some_and(|change| change > self.threshold);
        if cut {
            self.cuts.push(index);
        }
        cut
    }
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

    #[test]
    fn a_cut_is_found_where_the_picture_changes_and_nowhere_with_threshold_zero() {
        let grey = Tensor::full([1, 3, 90, 160], 0.5, (Kind::Float, tch::Device::Cpu));
        let frames = [grey.zeros_like(), grey.zeros_like() + 0.02, grey.ones_like(), grey.ones_like()];
        let mut finder = CutFinder::new(DEFAULT_THRESHOLD);
        let starts: Vec<bool> = frames.iter().map(|frame| finder.starts_scene(frame)).collect();
        assert_eq!((starts, finder.cuts), (vec![false, false, true, false], vec![2]));
        let mut off = CutFinder::new(0.0);
        assert!(frames.iter().all(|frame| !off.starts_scene(frame)));
    }
}
