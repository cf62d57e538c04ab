//! One FlashVSR run over a prepared LQ clip, a DiT step at a time (`schedule::Step`): the step's LQ clips
//! through the projection, its noise slice through the DiT (`x0 = noise − noise_pred`, timestep 1000, one
//! step), its latents decoded at once — TCDecoder ("Tiny") conditioned on the step's LQ frames, or the Wan
//! 2.1 VAE ("Full") after undoing the latent normalisation the DiT works in — then colour-fixed against the
//! same LQ frames. Decoding after each step is the authors' long-video pipeline; it gives the Tiny pipeline's
//! frames exactly and keeps memory flat in clip length. Every stream is causal, so a run stopped between
//! steps goes on from the streams' saved states.
use std::collections::HashMap;

use tch::Tensor;

use super::colour::colour_fix;
use super::lq_proj::LqProjection;
use super::lq_stream::LqProjStream;
use super::schedule::Step;
use crate::models::family::vae::BoxedStream;
use crate::models::nn::causal_cache::SavedTensors;
use crate::models::stop::StopFlag;
use crate::models::taehv::{TcDecodeStream, TcDecoder};
use crate::models::vae::VideoVae;
use crate::models::wan_dit::{StreamSettings, WanDit, WanDitStream};
use crate::models::ModelError;

/// What turns the DiT's latents into frames.
pub enum Decoder<'a> {
    /// TCDecoder, FlashVSR-Tiny; `parallel`: a step's frames at once, else frame by frame (less memory).
    Tiny { model: &'a TcDecoder, parallel: bool },
    /// A Wan 2.1 VAE, FlashVSR-Full.
    Full(&'a VideoVae),
}

/// The loaded parts of one FlashVSR model.
pub struct FlashVsrParts<'a> {
    pub dit: &'a WanDit,
    pub lq: &'a LqProjection,
    pub decoder: Decoder<'a>,
}

enum DecodeStream<'a> {
    Tiny(TcDecodeStream<'a>),
    Full { vae: &'a VideoVae, stream: BoxedStream<'a> },
}

pub struct FlashVsrRun<'a> {
    dit: WanDitStream<'a>,
    lq: LqProjStream<'a>,
    decode: DecodeStream<'a>,
    next: i64,
    /// The AdaIN colour fix against the LQ frames (the original's, on by default).
    colour_fix: bool,
}

impl<'a> FlashVsrParts<'a> {
    /// A run from its first step under the fixed text `context` (`posi_prompt.pth`, `[1, tokens, text_dim]`).
    pub fn start(&self, context: &Tensor, settings: StreamSettings) -> Result<FlashVsrRun<'a>, ModelError> {
        let dit = self.dit.stream(self.dit.condition(context)?, settings)?;
        let decode = match self.decoder {
            Decoder::Tiny { model, parallel } => DecodeStream::Tiny(model.stream(parallel)),
            Decoder::Full(vae) => DecodeStream::Full { vae, stream: vae.decoder() },
        };
        Ok(FlashVsrRun { dit, lq: self.lq.stream(), decode, next: 0, colour_fix: true })
    }
}

impl FlashVsrRun<'_> {
    /// The step to run next.
    pub fn next_step(&self) -> Step {
        Step::new(self.next)
    }

    /// Runs [`Self::next_step`]: `lq` is the prepared clip `[1, 3, F, H, W]` in [-1, 1] (at least up to the
    /// step's last LQ clip), `noise` the step's slice of the run's noise `[1, 16, f, H/8, W/8]`. Returns the
    /// step's frames `[T, 3, H, W]`, colour-fixed, in [-1, 1].
    pub fn step(&mut self, lq: &Tensor, noise: &Tensor) -> Result<Tensor, ModelError> {
        self.step_from(lq, 0, noise)
    }

    /// Frames as they come out, without the colour fix (`color_fix=none`).
    pub fn without_colour_fix(mut self) -> Self {
        self.colour_fix = false;
        self
    }

    /// [`Self::step`] with `lq` a window of the prepared clip whose first frame is frame `first`: a stream
    /// holds only the frames the steps still read (see `schedule::Step`).
    pub fn step_from(&mut self, lq: &Tensor, first: i64, noise: &Tensor) -> Result<Tensor, ModelError> {
        let step = self.next_step();
        let frames_at = |range: &std::ops::Range<i64>| -> Result<Tensor, ModelError> {
            if range.start < first || range.end - first > lq.size()[2] {
                return Err(unsupported(format!("LQ frames {range:?} from a window of frames {first}..{}", first + lq.size()[2])));
            }
            Ok(lq.f_narrow(2, range.start - first, range.end - range.start)?)
        };
        if step.index == 0 {
            // The original's first projection call, frame 0 alone: it only primes the stream.
            self.lq.push(&frames_at(&(0..1))?)?;
        }
        let mut tokens = Vec::with_capacity(step.lq_clips.len());
        for clip in &step.lq_clips {
            let clip = frames_at(clip)?;
            tokens.push(self.lq.push(&clip)?.ok_or_else(|| unsupported("an LQ clip that gave no tokens".into()))?);
        }
        let noise_pred = self.dit.step(noise, &Tensor::f_cat(&tokens, 1)?)?;
        let x0 = noise.f_sub(&noise_pred)?;
        let reference = frames_at(&step.frames)?;
        let frames = match &mut self.decode {
            // NTCHW in [0, 1] from latents NTCHW, conditioned on the LQ frames (BCTHW).
            DecodeStream::Tiny(stream) => stream.push(&x0.f_permute([0, 2, 1, 3, 4])?, &reference)?.f_squeeze_dim(0)?.f_mul_scalar(2.0)?.f_sub_scalar(1.0)?,
            DecodeStream::Full { vae, stream } => stream.push_some(&vae.denormalize(&x0)?)?.f_squeeze_dim(0)?.f_permute([1, 0, 2, 3])?,
        };
        let expected = step.frames.end - step.frames.start;
        if frames.size()[0] != expected {
            return Err(unsupported(format!("step {} decoded {} frames, not {expected}", step.index, frames.size()[0])));
        }
        let fixed = if self.colour_fix { colour_fix(&frames, &reference.f_squeeze_dim(0)?.f_permute([1, 0, 2, 3])?)? } else { frames.f_clamp(-1.0, 1.0)? };
        self.next += 1;
        Ok(fixed)
    }

    /// A step ends with `ModelError::Stopped` inside the DiT, the projection or the decoder once `stop` is
    /// raised; the run then goes on from its last saved state, not from the middle of the step.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.dit.set_stop(stop.clone());
        self.lq.set_stop(stop.clone());
        match &mut self.decode {
            DecodeStream::Tiny(stream) => stream.set_stop(stop),
            DecodeStream::Full { stream, .. } => stream.set_stop(stop),
        }
    }

    /// Every stream's state after the last step, to go on from in another process.
    pub fn save_state(&self, into: &mut SavedTensors) {
        into.push(("flashvsr.next_step".into(), Tensor::from(self.next)));
        self.dit.save_state("flashvsr.dit.", into);
        self.lq.save_state("flashvsr.lq.", into);
        match &self.decode {
            DecodeStream::Tiny(stream) => stream.save_state("flashvsr.decoder.", into),
            DecodeStream::Full { stream, .. } => stream.save_state("flashvsr.decoder.", into),
        }
    }

    /// Takes what [`Self::save_state`] wrote, in a run started from the same parts and context.
    pub fn load_state(&mut self, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        let next = saved.get("flashvsr.next_step").ok_or_else(|| unsupported("a saved state without its step".into()))?;
        self.dit.load_state("flashvsr.dit.", saved)?;
        self.lq.load_state("flashvsr.lq.", saved)?;
        match &mut self.decode {
            DecodeStream::Tiny(stream) => stream.load_state("flashvsr.decoder.", saved)?,
            DecodeStream::Full { stream, .. } => stream.load_state("flashvsr.decoder.", saved)?,
        }
        self.next = next.f_int64_value(&[])?;
        Ok(())
    }
}

fn unsupported(what: String) -> ModelError {
    ModelError::Unsupported { model: "flashvsr".into(), what }
}
