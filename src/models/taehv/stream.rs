//! Causal streams in the original's layout (`[N, T, C, H, W]`, pixels in [0, 1]): chunks pushed in order
//! give what the whole clip gives, holding only one previous frame per MemBlock and a TPool's partial
//! group. A decode push returns the frames its latents complete (the clip's first `frames_to_trim` are
//! dropped); an encode push returns the latents whose groups of `t_downscale` frames it completes, and
//! [`EncodeStream::finish`] pads the end with copies of the last frame, as `encode_video` does.
use std::collections::HashMap;

use tch::Tensor;

use super::chain::{Memory, Pace, Run};
use super::model::Taehv;
use crate::models::nn::causal_cache::{saved_state_error, SavedTensors};
use crate::models::stop::StopFlag;
use crate::models::ModelError;

/// What a decoder stream (TAEHV's or TCDecoder's) keeps between pushes: every MemBlock's previous frame,
/// and the frames still to drop from the start of the output (`frames_to_trim` before the first push).
pub(super) struct DecoderMemory {
    pub(super) memory: Memory,
    to_trim: i64,
}

impl DecoderMemory {
    pub(super) fn new(memory: Memory, to_trim: i64) -> Self {
        Self { memory, to_trim }
    }

    /// A push's raw frames `[N, t, 3, H, W]` less those still to trim.
    pub(super) fn trim(&mut self, raw: &Tensor) -> Result<Tensor, ModelError> {
        let trim = self.to_trim.min(raw.size()[1]);
        self.to_trim -= trim;
        Ok(raw.f_narrow(1, trim, raw.size()[1] - trim)?)
    }

    pub(super) fn snapshot(&self) -> Self {
        Self { memory: self.memory.snapshot(), to_trim: self.to_trim }
    }

    /// Under `{prefix}memory.` and `{prefix}to_trim`.
    pub(super) fn save(&self, prefix: &str, into: &mut SavedTensors) {
        self.memory.save(&format!("{prefix}memory."), into);
        into.push((format!("{prefix}to_trim"), Tensor::from(self.to_trim)));
    }

    pub(super) fn load(&mut self, prefix: &str, saved: &HashMap<String, Tensor>, device: tch::Device) -> Result<(), ModelError> {
        self.memory.load(&format!("{prefix}memory."), saved, device)?;
        self.to_trim = saved_count(saved, &format!("{prefix}to_trim"))?;
        Ok(())
    }
}

pub struct DecodeStream<'a> {
    model: &'a Taehv,
    state: DecoderMemory,
    pace: Pace,
    stop: StopFlag,
}

impl<'a> DecodeStream<'a> {
    pub(super) fn new(model: &'a Taehv, pace: Pace) -> Self {
        Self { model, state: DecoderMemory::new(model.decoder.new_memory(), model.config.frames_to_trim()), pace, stop: StopFlag::never() }
    }

    /// Latents `[N, t, C, h, w]` → the frames `[N, t', 3, H, W]` in [0, 1] they complete (`t_upscale·t`,
    /// fewer by the trim on the first pushes; possibly none).
    pub fn push(&mut self, latent: &Tensor) -> Result<Tensor, ModelError> {
        let _guard = tch::no_grad_guard();
        let latent = self.model.checked_latent(latent)?;
        let raw = self.model.decoder_pass(&latent, &mut self.state.memory, self.pace, &self.stop, None)?;
        self.state.trim(&raw)
    }

    /// A push ends with `ModelError::Stopped` before its next layer once `stop` is raised.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.stop = stop;
    }

    pub fn snapshot(&self) -> Self {
        Self { model: self.model, state: self.state.snapshot(), pace: self.pace, stop: self.stop.clone() }
    }

    /// The MemBlocks' previous frames and the frames still to trim, under `prefix`.
    pub fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        self.state.save(&format!("{prefix}decoder."), into);
    }

    pub fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        self.state.load(&format!("{prefix}decoder."), saved, self.model.device())
    }
}

pub struct EncodeStream<'a> {
    model: &'a Taehv,
    memory: Memory,
    pace: Pace,
    /// Frames pushed so far: how many the end padding needs.
    frames_pushed: i64,
    /// The last frame pushed, in patches (`[N, 1, 3p², H/p, W/p]`): the end padding's copies.
    last_frame: Option<Tensor>,
    stop: StopFlag,
}

impl<'a> EncodeStream<'a> {
    pub(super) fn new(model: &'a Taehv, pace: Pace) -> Self {
        Self { model, memory: model.encoder.new_memory(), pace, frames_pushed: 0, last_frame: None, stop: StopFlag::never() }
    }

    /// Frames `[N, n, 3, H, W]` in [0, 1] → the latents `[N, t, C, H/8p, W/8p]` completed by them, or
    /// `None` while the TPools hold a partial group.
    pub fn push(&mut self, frames: &Tensor) -> Result<Option<Tensor>, ModelError> {
        let _guard = tch::no_grad_guard();
        let x = self.model.patches(&self.model.checked_frames(frames)?)?;
        let count = x.size()[1];
        let latent = self.model.encoder.run(&x, &mut Run { memory: &mut self.memory, pace: self.pace, stop: &self.stop, trace: None })?;
        self.frames_pushed += count;
        self.last_frame = Some(x.f_narrow(1, count - 1, 1)?.f_contiguous()?);
        Ok(latent)
    }

    /// Frames waiting for their group to be whole; [`EncodeStream::finish`] completes it.
    pub fn pending_frames(&self) -> i64 {
        self.frames_pushed % self.model.config.t_downscale()
    }

    /// The clip ends here: the last group is completed with copies of the last frame (the original's
    /// end padding) and its latent returned; `None` when no frame is pending.
    pub fn finish(&mut self) -> Result<Option<Tensor>, ModelError> {
        let _guard = tch::no_grad_guard();
        let (pending, Some(last)) = (self.pending_frames(), self.last_frame.as_ref()) else { return Ok(None) };
        if pending == 0 {
            return Ok(None);
        }
        let padding = last.f_repeat([1, self.model.config.t_downscale() - pending, 1, 1, 1])?;
        let latent = self.model.encoder.run(&padding, &mut Run { memory: &mut self.memory, pace: self.pace, stop: &self.stop, trace: None })?;
        self.frames_pushed += padding.size()[1];
        Ok(latent)
    }

    /// A push ends with `ModelError::Stopped` before its next layer once `stop` is raised.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.stop = stop;
    }

    pub fn snapshot(&self) -> Self {
        Self {
            model: self.model,
            memory: self.memory.snapshot(),
            pace: self.pace,
            frames_pushed: self.frames_pushed,
            last_frame: self.last_frame.as_ref().map(Tensor::shallow_clone),
            stop: self.stop.clone(),
        }
    }

    /// The MemBlocks' previous frames, the TPools' partial groups, the frame count and the last frame.
    pub fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        self.memory.save(&format!("{prefix}encoder.memory."), into);
        into.push((format!("{prefix}encoder.frames_pushed"), Tensor::from(self.frames_pushed)));
        if let Some(last) = &self.last_frame {
            into.push((format!("{prefix}encoder.last_frame"), last.to_device(tch::Device::Cpu)));
        }
    }

    pub fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        self.memory.load(&format!("{prefix}encoder.memory."), saved, self.model.device())?;
        self.frames_pushed = saved_count(saved, &format!("{prefix}encoder.frames_pushed"))?;
        self.last_frame = saved.get(&format!("{prefix}encoder.last_frame")).map(|last| last.to_device(self.model.device()));
        Ok(())
    }
}

fn saved_count(saved: &HashMap<String, Tensor>, key: &str) -> Result<i64, ModelError> {
    Ok(saved.get(key).ok_or_else(|| saved_state_error(format!("no `{key}`")))?.f_int64_value(&[])?)
}

/// The streams' entry points.
impl Taehv {
    /// Frame by frame (`parallel = false`) or a chunk at a time.
    pub fn decoder_stream(&self, parallel: bool) -> DecodeStream<'_> {
        DecodeStream::new(self, super::model::pace(parallel))
    }

    pub fn encoder_stream(&self, parallel: bool) -> EncodeStream<'_> {
        EncodeStream::new(self, super::model::pace(parallel))
    }
}
