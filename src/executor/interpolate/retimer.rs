//! An input re-timed to a new frame rate, chunk by chunk: the interpolate op writes these chunks, and an
//! upscale with `interpolate=N` upscales them (one decode, one encode for both).
use tch::Tensor;

use crate::executor::scene;
use super::schedule::{FrameRate, Retiming, Source};
use super::settings::InterpolateSettings;
use super::window::FrameWindow;
use crate::executor::stage_clock::StageClock;
use crate::executor::error::ExecError;
use crate::jobs::plan::InterpolatePlan;
use crate::media::MediaInfo;
use crate::models::family::interpolator::Interpolator;

/// Above this many pixels the motion is estimated at half resolution (RIFE's advice: `--scale 0.5` for 4K,
/// where a motion spans twice the pixels its flow network was trained on).
const FULL_SCALE_FLOW_MAX_PIXELS: u64 = 2560 * 1440;

/// The motion's resolution relative to the frame's, for frames of this size.
fn flow_scale(width: u32, height: u32) -> f64 {
    if u64::from(width) * u64::from(height) > FULL_SCALE_FLOW_MAX_PIXELS {
        0.5
    } else {
        1.0
    }
}

pub struct Retimer<'m> {
    model: &'m dyn Interpolator,
    retiming: Retiming,
    input_rate: FrameRate,
    output_rate: FrameRate,
    window: FrameWindow,
    flow_scale: f64,
    scene_threshold: f64,
    /// The next output frame.
    next: u64,
    /// Output frames the model made.
    interpolated: u64,
    /// Input frames that start a new scene.
    scene_cuts: Vec<u64>,
    /// The last pair measured, and whether it was a cut (each pair is measured once).
    last_pair: Option<(u64, bool)>,
}

impl<'m> Retimer<'m> {
    /// `info`'s frames, read through `window`, re-timed as `settings` say; refused for an input whose rate
    /// cannot be read or brought to the one asked for.
    pub fn for_input(model: &'m dyn Interpolator, info: &MediaInfo, settings: &InterpolateSettings, window: FrameWindow) -> Result<Self, ExecError> {
        let input_rate = FrameRate::parse(&info.fps_rational)
            .ok_or_else(|| ExecError::Invalid(format!("the input's frame rate {} cannot be read", info.fps_rational)))?;
        let output_rate = settings.output_rate(input_rate).map_err(ExecError::Invalid)?;
        Ok(Retimer {
            model,
            retiming: Retiming::new(input_rate, output_rate, info.frames),
            input_rate,
            output_rate,
            window,
            flow_scale: flow_scale(info.width, info.height),
            scene_threshold: settings.scene_threshold,
            next: 0,
            interpolated: 0,
            scene_cuts: Vec::new(),
            last_pair: None,
        })
    }

    /// The rate the re-timed frames play at.
    pub fn output_rate(&self) -> FrameRate {
        self.output_rate
    }

    /// What the re-timing did once `written` frames are out, for the job's plan.
    pub fn plan(&self, written: u64) -> InterpolatePlan {
        InterpolatePlan {
            input_fps: self.input_rate.as_text(),
            output_fps: self.output_rate.as_text(),
            input_frames: self.window.frames_read(),
            frames: written,
            interpolated: self.interpolated,
            scene_cuts: self.scene_cuts.clone(),
            scene_threshold: self.scene_threshold,
            flow_scale: self.flow_scale,
            pairs_per_call: 1,
            resumed_from: None,
        }
    }

    pub fn output_frames(&self) -> u64 {
        self.retiming.output_frames()
    }

    /// The next output frames, `[m, 3, H, W]` Float in [0, 1] with m ≥ `at_least` unless the clip ends (a
    /// pair's frames are never split: m may pass it by up to factor − 1); `None` once every frame is out.
    pub fn next_chunk(&mut self, at_least: usize, clock: &mut StageClock) -> Result<Option<Tensor>, ExecError> {
        let total = self.retiming.output_frames();
        let mut frames: Vec<Tensor> = Vec::with_capacity(at_least);
        while frames.len() < at_least && self.next < total {
            let made = match self.retiming.source(self.next) {
                Source::Input(index) => match StageClock::time(&mut clock.read, || self.window.frame(index))? {
                    Some(frame) => vec![frame],
                    // The input ended early (fewer frames than its header said): so does the output.
                    None => break,
                },
                Source::Between { first, .. } => {
                    let times = self.times_between(first);
                    let pair = StageClock::time(&mut clock.read, || Ok::<_, ExecError>((self.window.frame(first)?, self.window.frame(first + 1)?)))?;
                    let (Some(a), Some(b)) = pair else { break };
                    if self.is_cut(first, &a, &b) {
                        times.iter().map(|_| a.shallow_clone()).collect()
                    } else {
                        let (model, scale) = (self.model, self.flow_scale);
                        let middles = StageClock::time(&mut clock.compute, || tch::no_grad(|| model.interpolate_many(&a, &b, &times, scale)))?;
                        self.interpolated += middles.len() as u64;
                        middles
                    }
                }
            };
            self.next += made.len() as u64;
            frames.extend(made);
        }
        if frames.is_empty() {
            self.next = total;
            return Ok(None);
        }
        Ok(Some(Tensor::cat(&frames, 0)))
    }

    /// Passes over up to `frames` output frames without making them: a resumed job's, already written. Their
    /// input frames are read and their pairs measured for cuts, as making them would, so that what the plan
    /// counts (`interpolated`, `scene_cuts`) and where the input is read from are an uninterrupted run's; the
    /// model is not called. A pair's frames may be passed over in part: `next_chunk` makes the rest, each
    /// time on its own (RIFE's bisection gives every time the frame it gives among the pair's others).
    /// Returns the frames passed over: fewer once the input ends early.
    pub fn pass_over(&mut self, frames: u64, clock: &mut StageClock) -> Result<u64, ExecError> {
        let end = (self.next + frames).min(self.retiming.output_frames());
        let start = self.next;
        while self.next < end {
            let passed = match self.retiming.source(self.next) {
                Source::Input(index) => match StageClock::time(&mut clock.read, || self.window.frame(index))? {
                    Some(_) => 1,
                    None => break,
                },
                Source::Between { first, .. } => {
                    let times = (self.times_between(first).len() as u64).min(end - self.next);
                    let pair = StageClock::time(&mut clock.read, || Ok::<_, ExecError>((self.window.frame(first)?, self.window.frame(first + 1)?)))?;
                    let (Some(a), Some(b)) = pair else { break };
                    if !self.is_cut(first, &a, &b) {
                        self.interpolated += times;
                    }
                    times
                }
            };
            self.next += passed;
        }
        Ok(self.next - start)
    }

    /// The times of every output frame from `self.next` on that lies between input frames `first` and `first + 1`.
    fn times_between(&self, first: u64) -> Vec<f64> {
        (self.next..self.retiming.output_frames())
            .map(|j| self.retiming.source(j))
            .map_while(|source| match source {
                Source::Between { first: pair, t } if pair == first => Some(t),
                Source::Between { .. } | Source::Input(_) => None,
            })
            .collect()
    }

    fn is_cut(&mut self, first: u64, a: &Tensor, b: &Tensor) -> bool {
        if self.scene_threshold <= 0.0 {
            return false;
        }
        if let Some((_, cut)) = self.last_pair.filter(|(pair, _)| *pair == first) {
            return cut;
        }
        let cut = scene::change(a, b) > self.scene_threshold;
        if cut {
            self.scene_cuts.push(first + 1);
        }
        self.last_pair = Some((first, cut));
        cut
    }
}
