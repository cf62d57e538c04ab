//! TAEHV as a [`VaeModel`]: the pipelines' layout and range (`[1, C, t, h, w]`, pixels in [-1, 1]) turned
//! into the original's (`[N, T, C, H, W]`, [0, 1]) and back inside the streams.
//! Its latents are the diffusion model's own (normalised) latents, not a VAE's raw ones: `normalize` and
//! `denormalize` are the identity, so a latent written with or without `normalize` is the same tensor.
use std::collections::HashMap;
use std::path::Path;

use tch::Tensor;

use super::model::{Taehv, TaehvLoadOptions};
use super::stream::{DecodeStream, EncodeStream};
use crate::models::family::vae::{BoxedStream, LoadOptions, StreamOutput, VaeModel, VaeStream};
use crate::models::family::Family;
use crate::models::nn::causal_cache::SavedTensors;
use crate::models::nn::weights::HeldBytes;
use crate::models::stop::StopFlag;
use crate::models::ModelError;

pub struct TaehvVideoVae {
    model: Taehv,
}

impl TaehvVideoVae {
    /// The checkpoint's full decoder (no preview reduction: the pipelines count 4 frames per latent).
    pub fn load(path: &Path, opts: &LoadOptions) -> Result<TaehvVideoVae, ModelError> {
        Ok(TaehvVideoVae::new(Taehv::load(path, &TaehvLoadOptions { device: opts.device, kind: opts.kind, ..TaehvLoadOptions::default() })?))
    }

    pub fn new(model: Taehv) -> TaehvVideoVae {
        TaehvVideoVae { model }
    }

    pub fn model(&self) -> &Taehv {
        &self.model
    }

    /// The encode stream with its end padding ([`PipelineEncodeStream::finish`]), which the trait lacks.
    pub fn pipeline_encoder(&self) -> PipelineEncodeStream<'_> {
        PipelineEncodeStream(self.model.encoder_stream(true))
    }
}

impl VaeModel for TaehvVideoVae {
    fn family(&self) -> Family {
        Family::Taehv
    }

    fn latent_channels(&self) -> i64 {
        self.model.config().latent_channels
    }

    fn spatial_factor(&self) -> i64 {
        self.model.config().spatial_factor()
    }

    fn temporal_factor(&self) -> i64 {
        self.model.config().t_downscale()
    }

    /// The width of the decoder's full-resolution activations (its last `n_f`, 64 released).
    fn memory_width(&self) -> i64 {
        self.model.config().decoder_widths[3]
    }

    fn held_bytes(&self) -> HeldBytes {
        self.model.held_bytes()
    }

    /// TAEHV has no posterior and clamps its output: its pipeline values whatever is asked.
    fn encode_stream(&self, _output: StreamOutput) -> BoxedStream<'_> {
        Box::new(self.pipeline_encoder())
    }

    fn decode_stream(&self, _output: StreamOutput) -> BoxedStream<'_> {
        Box::new(PipelineDecodeStream(self.model.decoder_stream(true)))
    }

    /// TAEHV encodes to, and decodes from, the diffusion model's latent: already normalised.
    fn normalize(&self, raw: &Tensor) -> Result<Tensor, ModelError> {
        Ok(raw.shallow_clone())
    }

    fn denormalize(&self, normalized: &Tensor) -> Result<Tensor, ModelError> {
        Ok(normalized.shallow_clone())
    }
}

/// `[N, C, T, H, W]` ↔ `[N, T, C, H, W]` (the same swap both ways).
fn swap_time_and_channels(x: &Tensor) -> Result<Tensor, ModelError> {
    Ok(x.f_permute([0, 2, 1, 3, 4])?.f_contiguous()?)
}

/// Frames `[1, 3, n, H, W]` in [-1, 1] → latents `[1, C, t, h, w]`; `None` while a group is partial. The
/// end padding of a clip that is not whole groups needs [`EncodeStream::finish`], which the trait lacks.
pub struct PipelineEncodeStream<'a>(EncodeStream<'a>);

impl<'a> PipelineEncodeStream<'a> {
    /// The clip ends here: the original's end padding (copies of the last frame) completes the last group.
    pub fn finish(&mut self) -> Result<Option<Tensor>, ModelError> {
        self.0.finish()?.map(|latent| swap_time_and_channels(&latent)).transpose()
    }
}

impl<'a> VaeStream<'a> for PipelineEncodeStream<'a> {
    fn push(&mut self, input: &Tensor) -> Result<Option<Tensor>, ModelError> {
        let frames = swap_time_and_channels(&((input + 1.0) / 2.0))?;
        self.0.push(&frames)?.map(|latent| swap_time_and_channels(&latent)).transpose()
    }

    fn snapshot(&self) -> BoxedStream<'a> {
        Box::new(PipelineEncodeStream(self.0.snapshot()))
    }

    fn set_stop(&mut self, stop: StopFlag) {
        self.0.set_stop(stop);
    }

    fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        self.0.save_state(prefix, into);
    }

    fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        self.0.load_state(prefix, saved)
    }
}

/// Latents `[1, C, t, h, w]` → frames `[1, 3, t', H, W]` in [-1, 1] (`4t − 3` on the first push, `4t` after).
pub struct PipelineDecodeStream<'a>(DecodeStream<'a>);

impl<'a> VaeStream<'a> for PipelineDecodeStream<'a> {
    fn push(&mut self, input: &Tensor) -> Result<Option<Tensor>, ModelError> {
        let frames = self.0.push(&swap_time_and_channels(input)?)?;
        Ok(Some(swap_time_and_channels(&(frames * 2.0 - 1.0))?))
    }

    fn snapshot(&self) -> BoxedStream<'a> {
        Box::new(PipelineDecodeStream(self.0.snapshot()))
    }

    fn set_stop(&mut self, stop: StopFlag) {
        self.0.set_stop(stop);
    }

    fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        self.0.save_state(prefix, into);
    }

    fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        self.0.load_state(prefix, saved)
    }
}
