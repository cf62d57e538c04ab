//! The LQ projection clip by clip, as the pipeline calls `stream_forward`: LR frame 0 alone first (the
//! original repeats it to a clip of 4 and returns nothing), then clips of 4 frames, each giving one latent
//! frame of tokens. What a conv sees in front of a clip is where the releases differ:
//! - v1.0 (`Buffer_LQ4x_Proj`): the clip's own last two frames (conv1: the folded frames; conv2: conv1's two
//!   output frames). Nothing crosses clips but the count: latent frame j depends on LR frames 4j+1..4j+4.
//! - v1.1 (`Causal_LQ4x_Proj`): the PREVIOUS clip's, kept from one call to the next (and from one DiT step
//!   to the next); the first clip, which has none, sees copies of its first frame.
use std::collections::HashMap;

use tch::Tensor;

use super::lq_proj::{LqProjection, CLIP_FRAMES, HISTORY_FRAMES, TOKEN_PIXELS};
use super::version::FlashVsrVersion;
use crate::models::nn::causal_cache::{saved_state_error, SavedTensors};
use crate::models::stop::StopFlag;
use crate::models::ModelError;

/// What v1.1 carries to the next clip: conv1's and conv2's history.
struct History {
    folded: Tensor,
    hidden: Tensor,
}

pub struct LqProjStream<'a> {
    model: &'a LqProjection,
    clips_done: i64,
    /// v1.1 only, after the first push.
    history: Option<History>,
    stop: StopFlag,
}

impl<'a> LqProjStream<'a> {
    fn new(model: &'a LqProjection) -> Self {
        Self { model, clips_done: 0, history: None, stop: StopFlag::never() }
    }

    /// Clips pushed so far (the first, frame 0 alone, included).
    pub fn clips_done(&self) -> i64 {
        self.clips_done
    }

    /// The LR video's next clip `[N, 3, n, H, W]` in [-1, 1] (BCTHW; H and W multiples of 16): n = 1 on the
    /// first push (LR frame 0), 4 afterwards → the tokens `[N, (H/16)·(W/16), out_dim]` of one latent frame,
    /// or `None` for the first push.
    pub fn push(&mut self, clip: &Tensor) -> Result<Option<Tensor>, ModelError> {
        let _guard = tch::no_grad_guard();
        let clip = self.checked_clip(clip)?;
        let model = self.model;
        let first = self.clips_done == 0;
        if first && model.version() == FlashVsrVersion::V1_0 {
            // v1.0 builds each clip's history from the clip itself, so frame 0's clip leaves nothing behind.
            self.clips_done += 1;
            return Ok(None);
        }
        let clip = if first { clip.f_repeat([1, 1, CLIP_FRAMES, 1, 1])? } else { clip };
        let folded = model.fold(&clip)?;
        let folded_tail = folded.f_narrow(2, CLIP_FRAMES - HISTORY_FRAMES, HISTORY_FRAMES)?;
        self.stop.check()?;
        let hidden = match model.version() {
            FlashVsrVersion::V1_0 => model.first_stage(&folded, Some(&folded_tail))?,
            FlashVsrVersion::V1_1 => model.first_stage(&folded, self.history.as_ref().map(|h| &h.folded))?,
        };
        let folded_tail = folded_tail.f_contiguous()?;
        if first {
            self.history = Some(History { folded: folded_tail, hidden });
            self.clips_done += 1;
            return Ok(None);
        }
        self.stop.check()?;
        let tokens = match model.version() {
            FlashVsrVersion::V1_0 => model.second_stage(&hidden, Some(&hidden))?,
            FlashVsrVersion::V1_1 => {
                let previous = self.history.take().map(|h| h.hidden);
                let tokens = model.second_stage(&hidden, previous.as_ref())?;
                self.history = Some(History { folded: folded_tail, hidden });
                tokens
            }
        };
        self.clips_done += 1;
        Ok(Some(tokens))
    }

    /// `[N, 3, n, H, W]` with n as the push count asks, the size of the clips before it, on the model's
    /// device and kind.
    fn checked_clip(&self, clip: &Tensor) -> Result<Tensor, ModelError> {
        let frames = if self.clips_done == 0 { 1 } else { CLIP_FRAMES };
        let channels = self.model.config().in_channels;
        let size = clip.size();
        let fits = matches!(size.as_slice(), &[n, c, t, h, w] if n > 0 && c == channels && t == frames && h > 0 && w > 0 && h % TOKEN_PIXELS == 0 && w % TOKEN_PIXELS == 0);
        let before = self.history.as_ref().map(|h| h.folded.size());
        let same_size = match &before {
            Some(folded) => size[0] == folded[0] && size[3] == folded[3] * TOKEN_PIXELS && size[4] == folded[4] * TOKEN_PIXELS,
            None => true,
        };
        if !fits || !same_size {
            let order = if self.clips_done == 0 { "the first clip (LR frame 0 alone)" } else { "a clip after the first" };
            return Err(ModelError::Unsupported {
                model: "flashvsr lq_proj".into(),
                what: format!("{order} of shape {size:?} (expected [N, {channels}, {frames}, H, W], BCTHW, H and W multiples of {TOKEN_PIXELS}, the same N, H and W in every clip)"),
            });
        }
        Ok(clip.f_to_device(self.model.device())?.f_to_kind(self.model.kind())?)
    }

    /// A push ends with `ModelError::Stopped` before its next conv once `stop` is raised.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.stop = stop;
    }

    pub fn snapshot(&self) -> Self {
        let history = self.history.as_ref().map(|h| History { folded: h.folded.shallow_clone(), hidden: h.hidden.shallow_clone() });
        Self { model: self.model, clips_done: self.clips_done, history, stop: self.stop.clone() }
    }

    /// The clip count, the release (a state resumes only with the same one) and v1.1's history, under `prefix`.
    pub fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        into.push((format!("{prefix}lq_proj.clips_done"), Tensor::from(self.clips_done)));
        into.push((format!("{prefix}lq_proj.version"), Tensor::from(version_tag(self.model.version()))));
        if let Some(history) = &self.history {
            into.push((format!("{prefix}lq_proj.history.folded"), history.folded.to_device(tch::Device::Cpu)));
            into.push((format!("{prefix}lq_proj.history.hidden"), history.hidden.to_device(tch::Device::Cpu)));
        }
    }

    pub fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        let number = |name: &str| -> Result<i64, ModelError> {
            let key = format!("{prefix}lq_proj.{name}");
            Ok(saved.get(&key).ok_or_else(|| saved_state_error(format!("no `{key}`")))?.f_int64_value(&[])?)
        };
        let version = number("version")?;
        if version != version_tag(self.model.version()) {
            return Err(saved_state_error(format!("an LQ projection state of release tag {version}, the model is release {}", self.model.version().as_str())));
        }
        let clips_done = number("clips_done")?;
        let (device, kind) = (self.model.device(), self.model.kind());
        let restored = |name: &str| -> Result<Option<Tensor>, ModelError> {
            match saved.get(&format!("{prefix}lq_proj.history.{name}")) {
                Some(tensor) => Ok(Some(tensor.f_to_device(device)?.f_to_kind(kind)?)),
                None => Ok(None),
            }
        };
        self.history = match (restored("folded")?, restored("hidden")?) {
            (Some(folded), Some(hidden)) => Some(History { folded, hidden }),
            (None, None) if self.model.version() == FlashVsrVersion::V1_0 || clips_done == 0 => None,
            _ => return Err(saved_state_error(format!("the v1.1 LQ projection's history is missing after {clips_done} clips"))),
        };
        self.clips_done = clips_done;
        Ok(())
    }
}

/// How a saved state names the release (a number, as the state's other values).
fn version_tag(version: FlashVsrVersion) -> i64 {
    match version {
        FlashVsrVersion::V1_0 => 10,
        FlashVsrVersion::V1_1 => 11,
    }
}

/// The stream's entry points.
impl LqProjection {
    pub fn stream(&self) -> LqProjStream<'_> {
        LqProjStream::new(self)
    }

    /// The original's non-streaming `forward(video)`: the LR video `[N, 3, T, H, W]` (T ≥ 5) as the
    /// pipeline streams it (frame 0 alone, then clips 1..5, 5..9, …; frames after the last whole clip are
    /// not read) → the tokens of `(T − 1) / 4` latent frames `[N, f·h·w, out_dim]`, in (f, h, w) order.
    pub fn project_video(&self, video: &Tensor) -> Result<Tensor, ModelError> {
        let frames = match video.size().as_slice() {
            &[_, _, t, _, _] if t > CLIP_FRAMES => t,
            other => {
                return Err(ModelError::Unsupported { model: "flashvsr lq_proj".into(), what: format!("a video of shape {other:?} (expected [N, 3, T ≥ 5, H, W], BCTHW)") })
            }
        };
        let mut stream = self.stream();
        stream.push(&video.f_narrow(2, 0, 1)?)?;
        let mut tokens = Vec::new();
        for clip in 0..(frames - 1) / CLIP_FRAMES {
            tokens.extend(stream.push(&video.f_narrow(2, 1 + clip * CLIP_FRAMES, CLIP_FRAMES)?)?);
        }
        Ok(Tensor::f_cat(&tokens, 1)?)
    }
}
