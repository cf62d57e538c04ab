//! An interpolation's parameters as the job runs them, resolved once for the checks before queueing and
//! for the run: the output's rate (a factor or a target rate) and the scene-cut threshold.
use crate::executor::scene;
use super::schedule::FrameRate;
use crate::jobs::InterpolateParams;

/// Output frames per input frame a `factor` may ask for.
pub const FACTORS: std::ops::RangeInclusive<i64> = 2..=4;
/// The factor of a job that gives neither `factor` nor `fps`.
pub const DEFAULT_FACTOR: i64 = *FACTORS.start();
/// A target `fps` may be at most this many times the input's (`max_frames` bounds the rest).
pub const MAX_RATE_RATIO: u64 = 8;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateChange {
    Factor(u64),
    Fps(FrameRate),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InterpolateSettings {
    pub rate: RateChange,
    /// 0: no detection.
    pub scene_threshold: f64,
}

impl InterpolateSettings {
    /// The settings, or why they cannot be run (said as the parameter's refusal).
    pub fn resolve(params: Option<&InterpolateParams>) -> Result<InterpolateSettings, String> {
        let default = InterpolateParams::default();
        let params = params.unwrap_or(&default);
        let rate = match (params.factor, params.fps.as_deref()) {
            (Some(_), Some(_)) => return Err("give factor or fps, not both".into()),
            (Some(factor), None) if FACTORS.contains(&factor) => RateChange::Factor(factor as u64),
            (Some(factor), None) => return Err(format!("factor must be {} to {}, not {factor}", FACTORS.start(), FACTORS.end())),
            (None, Some(fps)) => RateChange::Fps(
                FrameRate::parse(fps).ok_or_else(|| format!("fps `{fps}` is not a frame rate like 60, 59.94 or 60000/1001"))?,
            ),
            (None, None) => RateChange::Factor(DEFAULT_FACTOR as u64),
        };
        let scene_threshold = params.scene_threshold.unwrap_or(scene::DEFAULT_THRESHOLD);
        if !scene::THRESHOLDS.contains(&scene_threshold) {
            let (least, most) = (scene::THRESHOLDS.start(), scene::THRESHOLDS.end());
            return Err(format!("scene_threshold must be {least} (off) to {most}, not {scene_threshold}"));
        }
        Ok(InterpolateSettings { rate, scene_threshold })
    }

    /// The params as stored with the job: the rate filled in, so that the job says what it will do.
    pub fn params(&self) -> InterpolateParams {
        let (factor, fps) = match self.rate {
            RateChange::Factor(factor) => (Some(factor as i64), None),
            RateChange::Fps(rate) => (None, Some(rate.as_text())),
        };
        InterpolateParams { factor, fps, scene_threshold: Some(self.scene_threshold) }
    }

    /// The output's rate for an input at `input`, or why that input cannot be brought to it.
    pub fn output_rate(&self, input: FrameRate) -> Result<FrameRate, String> {
        match self.rate {
            RateChange::Factor(factor) => Ok(input.times(factor)),
            RateChange::Fps(output) => {
                let (faster, ratio_ok) = (
                    u128::from(output.num) * u128::from(input.den) > u128::from(input.num) * u128::from(output.den),
                    u128::from(output.num) * u128::from(input.den) <= u128::from(MAX_RATE_RATIO) * u128::from(input.num) * u128::from(output.den),
                );
                match (faster, ratio_ok) {
                    (true, true) => Ok(output),
                    (false, _) => Err(format!("fps {} is not above the input's {}: interpolate adds frames", output.as_text(), input.as_text())),
                    (true, false) => Err(format!("fps {} is more than {MAX_RATE_RATIO} times the input's {}", output.as_text(), input.as_text())),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(factor: Option<i64>, fps: Option<&str>, scene_threshold: Option<f64>) -> Result<InterpolateSettings, String> {
        InterpolateSettings::resolve(Some(&InterpolateParams { factor, fps: fps.map(String::from), scene_threshold }))
    }

    #[test]
    fn defaults_and_refusals() {
        let default = InterpolateSettings::resolve(None).unwrap();
        assert_eq!(default, InterpolateSettings { rate: RateChange::Factor(2), scene_threshold: scene::DEFAULT_THRESHOLD });
        assert_eq!(resolve(None, Some("59.94"), Some(0.0)).unwrap().rate, RateChange::Fps(FrameRate { num: 2997, den: 50 }));
        for (factor, fps, threshold, refusal) in [
            (Some(1), None, None, "factor must be 2 to 4"),
            (Some(5), None, None, "factor must be 2 to 4"),
            (Some(2), Some("60"), None, "not both"),
            (None, Some("fast"), None, "is not a frame rate"),
            (None, None, Some(1.5), "scene_threshold must be"),
        ] {
            let why = resolve(factor, fps, threshold).unwrap_err();
            assert!(why.contains(refusal), "{why}");
        }
    }

    #[test]
    fn a_target_rate_must_add_frames_within_reason() {
        let settings = |fps: &str| resolve(None, Some(fps), None).unwrap();
        let input = FrameRate::parse("30000/1001").unwrap();
        assert_eq!(settings("60").output_rate(input), Ok(FrameRate { num: 60, den: 1 }));
        assert!(settings("29.97").output_rate(input).unwrap_err().contains("not above"));
        assert!(settings("30000/1001").output_rate(input).unwrap_err().contains("not above"));
        assert!(settings("240").output_rate(input).unwrap_err().contains("more than 8 times"));
        assert_eq!(resolve(Some(3), None, None).unwrap().output_rate(input), Ok(FrameRate { num: 90000, den: 1001 }));
    }
}
