//! A TCDecoder stream: the original's `decode_video` called again and again without `clean_mem()`. Each
//! push takes latents and the condition frames that go with them and returns the frames they complete;
//! the MemBlocks' previous frames carry over, so pushes in order give what one call on the whole gives.
use std::collections::HashMap;

use tch::Tensor;

use super::chain::Pace;
use super::stream::DecoderMemory;
use super::tc_decoder::TcDecoder;
use crate::models::nn::causal_cache::SavedTensors;
use crate::models::stop::StopFlag;
use crate::models::ModelError;

pub struct TcDecodeStream<'a> {
    model: &'a TcDecoder,
    state: DecoderMemory,
    pace: Pace,
    stop: StopFlag,
}

impl<'a> TcDecodeStream<'a> {
    fn new(model: &'a TcDecoder, pace: Pace) -> Self {
        Self { model, state: DecoderMemory::new(model.chain.new_memory(), model.config.frames_to_trim()), pace, stop: StopFlag::never() }
    }

    /// Latents `[N, t, C, h, w]` (NTCHW) and their condition, the LR video `[N, 3, T', 8h, 8w]` in [-1, 1]
    /// (BCTHW, as the original takes it; `T' = t_upscale·t`, or fewer by up to `t_upscale − 1`, which are
    /// filled with copies of its first frame) → the frames `[N, t', 3, 8h, 8w]` (NTCHW), about [0, 1] and
    /// not clamped: `t_upscale·t`, fewer by the trim on the first pushes.
    pub fn push(&mut self, latents: &Tensor, cond: &Tensor) -> Result<Tensor, ModelError> {
        let _guard = tch::no_grad_guard();
        let raw = self.model.decoder_pass(latents, cond, &mut self.state.memory, self.pace, &self.stop)?;
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
        self.state.save(&format!("{prefix}tc_decoder."), into);
    }

    pub fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        self.state.load(&format!("{prefix}tc_decoder."), saved, self.model.device())
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
