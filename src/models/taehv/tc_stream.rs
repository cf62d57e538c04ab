//! A TCDecoder stream: the original's `decode_video` called again and again without `clean_mem()`. Each
//! push takes latents and the condition frames that go with them and returns the frames they complete;
//! the MemBlocks' previous frames carry over, so pushes in order give what one call on the whole gives.
use std::collections::HashMap;

use tch::Tensor;

use super::chain::{Memory, Pace};
use super::tc_decoder::TcDecoder;
use crate::models::nn::causal_cache::{saved_state_error, SavedTensors};
use crate::models::stop::StopFlag;
use crate::models::ModelError;

pub struct TcDecodeStream<'a> {
    model: &'a TcDecoder,
    memory: Memory,
    pace: Pace,
    /// Frames still to drop from the start of the output (`frames_to_trim` before the first push).
    to_trim: i64,
    stop: StopFlag,
}

impl<'a> TcDecodeStream<'a> {
    fn new(model: &'a TcDecoder, pace: Pace) -> Self {
        Self { model, memory: model.chain.new_memory(), pace, to_trim: model.config.frames_to_trim(), stop: StopFlag::never() }
    }

    /// Latents `[N, t, C, h, w]` (NTCHW) and their condition, the LR video `[N, 3, T', 8h, 8w]` in [-1, 1]
    /// (BCTHW, as the original takes it; `T' = t_upscale·t`, or fewer by up to `t_upscale − 1`, which are
    /// filled with copies of its first frame) → the frames `[N, t', 3, 8h, 8w]` (NTCHW), about [0, 1] and
    /// not clamped: `t_upscale·t`, fewer by the trim on the first pushes.
    pub fn push(&mut self, latents: &Tensor, cond: &Tensor) -> Result<Tensor, ModelError> {
        let _guard = tch::no_grad_guard();
        let raw = self.model.decoder_pass(latents, cond, &mut self.memory, self.pace, &self.stop)?;
        let trim = self.to_trim.min(raw.size()[1]);
        self.to_trim -= trim;
        Ok(raw.f_narrow(1, trim, raw.size()[1] - trim)?)
    }

    /// A push ends with `ModelError::Stopped` before its next layer once `stop` is raised.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.stop = stop;
    }

    pub fn snapshot(&self) -> Self {
        Self { model: self.model, memory: self.memory.snapshot(), pace: self.pace, to_trim: self.to_trim, stop: self.stop.clone() }
    }

    /// The MemBlocks' previous frames and the frames still to trim, under `prefix`.
    pub fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        self.memory.save(&format!("{prefix}tc_decoder.memory."), into);
        into.push((format!("{prefix}tc_decoder.to_trim"), Tensor::from(self.to_trim)));
    }

    pub fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        self.memory.load(&format!("{prefix}tc_decoder.memory."), saved, self.model.device())?;
        let key = format!("{prefix}tc_decoder.to_trim");
        self.to_trim = saved.get(&key).ok_or_else(|| saved_state_error(format!("no `{key}`")))?.f_int64_value(&[])?;
        Ok(())
    }
}

/// The streams' entry points.
impl TcDecoder {
    /// A stream from the start: frame by frame (`parallel = false`, what FlashVSR runs) or a chunk at a time.
    pub fn stream(&self, parallel: bool) -> TcDecodeStream<'_> {
        TcDecodeStream::new(self, super::model::pace(parallel))
    }

    /// The original's `decode_video(latents, parallel, cond)` on a fresh memory: one push of a new stream.
    pub fn decode_video(&self, latents: &Tensor, cond: &Tensor, parallel: bool) -> Result<Tensor, ModelError> {
        self.stream(parallel).push(latents, cond)
    }
}
