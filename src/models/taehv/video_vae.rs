//! TAEHV as a [`VaeModel`]: the pipelines' layout and range (`[1, C, t, h, w]`, pixels in [-1, 1]) turned
//! into the original's (`[N, T, C, H, W]`, [0, 1]) and back inside the streams.
//! Its latents are the diffusion model's own (normalised) latents; the box's are the full VAE's raw ones,
//! so the streams convert with the full VAE's statistics ([`LatentAffine`], given at load): a latent that
//! decodes with `wan_2.1_vae` decodes with `taew2_1` unchanged, and an encode gives the latent the full VAE
//! would. `normalize`/`denormalize` are then the full VAE's.
use std::collections::HashMap;
use std::path::Path;

use tch::{Kind, Tensor};

use super::model::{Taehv, TaehvLoadOptions};
use super::stream::{DecodeStream, EncodeStream};
use crate::models::family::vae::{BoxedStream, LoadOptions, StreamOutput, VaeModel, VaeStream};
use crate::models::family::Family;
use crate::models::nn::causal_cache::SavedTensors;
use crate::models::nn::weights::HeldBytes;
use crate::models::stop::StopFlag;
use crate::models::ModelError;

/// The full VAE's raw latent ↔ the diffusion model's (TAEHV's): `normalised = (raw − mean) / std` per
/// channel (Wan's published `latents_mean`/`latents_std`; Hunyuan Video's scale as a std of 1/0.476986).
#[derive(Debug)]
pub struct LatentAffine {
    mean: Tensor,
    std: Tensor,
}

impl LatentAffine {
    pub fn new(mean: &[f64], std: &[f64]) -> LatentAffine {
        let column = |values: &[f64]| Tensor::from_slice(values).to_kind(Kind::Float).view([1, -1, 1, 1, 1]);
        LatentAffine { mean: column(mean), std: column(std) }
    }

    pub fn channels(&self) -> i64 {
        self.mean.size()[1]
    }

    fn normalize(&self, raw: &Tensor) -> Result<Tensor, ModelError> {
        let (mean, std) = (self.mean.to_device(raw.device()), self.std.to_device(raw.device()));
        Ok(((raw.f_to_kind(Kind::Float)? - mean) / std).f_to_kind(raw.kind())?)
    }

    fn denormalize(&self, normalized: &Tensor) -> Result<Tensor, ModelError> {
        let (mean, std) = (self.mean.to_device(normalized.device()), self.std.to_device(normalized.device()));
        Ok((normalized.f_to_kind(Kind::Float)? * std + mean).f_to_kind(normalized.kind())?)
    }

    fn shallow_clone(&self) -> LatentAffine {
        LatentAffine { mean: self.mean.shallow_clone(), std: self.std.shallow_clone() }
    }
}

pub struct TaehvVideoVae {
    model: Taehv,
    /// `None`: a checkpoint tied to no full VAE; its latents are taken and given as they are.
    latent: Option<LatentAffine>,
}

impl TaehvVideoVae {
    /// The checkpoint's full decoder (no preview reduction: the pipelines count 4 frames per latent), speaking
    /// the raw latent of the full VAE `latent` describes.
    pub fn load(path: &Path, opts: &LoadOptions, latent: Option<LatentAffine>) -> Result<TaehvVideoVae, ModelError> {
        Self::load_with(path, &TaehvLoadOptions { device: opts.device, kind: opts.kind, ..TaehvLoadOptions::default() }, latent)
    }

    /// [`TaehvVideoVae::load`] with every model option (the bench's NCHW row).
    pub fn load_with(path: &Path, opts: &TaehvLoadOptions, latent: Option<LatentAffine>) -> Result<TaehvVideoVae, ModelError> {
        let model = Taehv::load(path, opts)?;
        if let Some(affine) = latent.as_ref().filter(|affine| affine.channels() != model.config().latent_channels) {
            let reason = format!(
                "its name ties it to a latent of {} channels, but its weights take {}",
                affine.channels(),
                model.config().latent_channels
            );
            return Err(ModelError::Format { path: path.to_path_buf(), reason });
        }
        Ok(TaehvVideoVae { model, latent })
    }

    pub fn new(model: Taehv) -> TaehvVideoVae {
        TaehvVideoVae { model, latent: None }
    }

    pub fn model(&self) -> &Taehv {
        &self.model
    }

    /// The decode stream, each push all at once (`parallel`) or frame by frame, depth first (the
    /// original's `parallel=False`: activations of one frame alive at a time, whatever the push).
    pub fn pipeline_decoder(&self, parallel: bool) -> PipelineDecodeStream<'_> {
        PipelineDecodeStream(self.model.decoder_stream(parallel), self.latent.as_ref().map(LatentAffine::shallow_clone))
    }

    /// The encode stream with its end padding ([`PipelineEncodeStream::finish`]).
    pub fn pipeline_encoder(&self) -> PipelineEncodeStream<'_> {
        self.pipeline_encoder_at(true)
    }

    /// [`TaehvVideoVae::pipeline_encoder`], each push all at once (`parallel`) or frame by frame.
    pub fn pipeline_encoder_at(&self, parallel: bool) -> PipelineEncodeStream<'_> {
        PipelineEncodeStream(self.model.encoder_stream(parallel), self.latent.as_ref().map(LatentAffine::shallow_clone))
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

    /// Frames are taken in whole groups (the original pads the clip's end with copies of its last frame):
    /// after the first, a clip's `1 + 4k` frames leave one frame waiting for three more.
    fn encode_end_frames(&self) -> i64 {
        self.model.config().t_downscale() - 1
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
        Box::new(self.pipeline_decoder(true))
    }

    fn frame_by_frame_encode_stream(&self, _output: StreamOutput) -> Option<BoxedStream<'_>> {
        Some(Box::new(self.pipeline_encoder_at(false)))
    }

    fn frame_by_frame_decode_stream(&self, _output: StreamOutput) -> Option<BoxedStream<'_>> {
        Some(Box::new(self.pipeline_decoder(false)))
    }

    /// The full VAE's normalisation (what TAEHV itself takes); the identity for a checkpoint tied to none.
    fn normalize(&self, raw: &Tensor) -> Result<Tensor, ModelError> {
        match &self.latent {
            Some(affine) => affine.normalize(raw),
            None => Ok(raw.shallow_clone()),
        }
    }

    fn denormalize(&self, normalized: &Tensor) -> Result<Tensor, ModelError> {
        match &self.latent {
            Some(affine) => affine.denormalize(normalized),
            None => Ok(normalized.shallow_clone()),
        }
    }
}

/// `[N, C, T, H, W]` ↔ `[N, T, C, H, W]` (the same swap both ways).
fn swap_time_and_channels(x: &Tensor) -> Result<Tensor, ModelError> {
    Ok(x.f_permute([0, 2, 1, 3, 4])?.f_contiguous()?)
}

/// Frames `[1, 3, n, H, W]` in [-1, 1] → latents `[1, C, t, h, w]`; `None` while a group is partial. The
/// end padding of a clip that is not whole groups needs [`EncodeStream::finish`], which the trait lacks.
pub struct PipelineEncodeStream<'a>(EncodeStream<'a>, Option<LatentAffine>);

impl<'a> PipelineEncodeStream<'a> {
    /// The clip ends here: the original's end padding (copies of the last frame) completes the last group.
    pub fn finish(&mut self) -> Result<Option<Tensor>, ModelError> {
        self.0.finish()?.map(|latent| self.to_pipeline(&latent)).transpose()
    }

    /// TAEHV's `[N, T, C, h, w]` latent as the box's: `[1, C, t, h, w]`, in the full VAE's raw space.
    fn to_pipeline(&self, latent: &Tensor) -> Result<Tensor, ModelError> {
        let latent = swap_time_and_channels(latent)?;
        match &self.1 {
            Some(affine) => affine.denormalize(&latent),
            None => Ok(latent),
        }
    }
}

impl<'a> VaeStream<'a> for PipelineEncodeStream<'a> {
    fn push(&mut self, input: &Tensor) -> Result<Option<Tensor>, ModelError> {
        let frames = swap_time_and_channels(&((input + 1.0) / 2.0))?;
        self.0.push(&frames)?.map(|latent| self.to_pipeline(&latent)).transpose()
    }

    fn snapshot(&self) -> BoxedStream<'a> {
        Box::new(PipelineEncodeStream(self.0.snapshot(), self.1.as_ref().map(LatentAffine::shallow_clone)))
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
pub struct PipelineDecodeStream<'a>(DecodeStream<'a>, Option<LatentAffine>);

impl<'a> VaeStream<'a> for PipelineDecodeStream<'a> {
    fn push(&mut self, input: &Tensor) -> Result<Option<Tensor>, ModelError> {
        let latent = match &self.1 {
            Some(affine) => affine.normalize(input)?,
            None => input.shallow_clone(),
        };
        let frames = self.0.push(&swap_time_and_channels(&latent)?)?;
        Ok(Some(swap_time_and_channels(&(frames * 2.0 - 1.0))?))
    }

    fn snapshot(&self) -> BoxedStream<'a> {
        Box::new(PipelineDecodeStream(self.0.snapshot(), self.1.as_ref().map(LatentAffine::shallow_clone)))
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
