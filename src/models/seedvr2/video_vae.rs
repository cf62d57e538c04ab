//! SeedVR2's VAE as a [`VaeModel`]: its streams give the pipelines the posterior's mean and clamped
//! frames, or for restoration the raw moments and unclamped frames ([`StreamOutput`]).
use std::collections::HashMap;

use tch::Tensor;

use super::stream::{DecodeStream, EncodeStream};
use super::vae::{scale_latent, unscale_latent, SeedVr2Vae};
use crate::models::family::Family;
use crate::models::family::vae::{BoxedStream, StreamOutput, VaeModel, VaeStream};
use crate::models::nn::causal_cache::SavedTensors;
use crate::models::nn::weights::HeldBytes;
use crate::models::stop::StopFlag;
use crate::models::ModelError;

impl VaeModel for SeedVr2Vae {
    fn family(&self) -> Family {
        Family::Seedvr2
    }

    fn latent_channels(&self) -> i64 {
        self.config().latent_channels
    }

    fn spatial_factor(&self) -> i64 {
        self.config().spatial_factor()
    }

    fn temporal_factor(&self) -> i64 {
        self.config().temporal_factor()
    }

    fn memory_width(&self) -> i64 {
        self.config().block_out_channels.first().copied().unwrap_or(128)
    }

    fn held_bytes(&self) -> HeldBytes {
        SeedVr2Vae::held_bytes(self)
    }

    fn supports_raw_output(&self) -> bool {
        true
    }

    fn encode_stream(&self, output: StreamOutput) -> BoxedStream<'_> {
        Box::new(Encoding { stream: self.encoder_stream(), output })
    }

    fn decode_stream(&self, output: StreamOutput) -> BoxedStream<'_> {
        Box::new(Decoding { stream: self.decoder_stream(), output })
    }

    /// The scaling factor 0.9152, not per-channel statistics.
    fn normalize(&self, raw: &Tensor) -> Result<Tensor, ModelError> {
        scale_latent(raw)
    }

    fn denormalize(&self, normalized: &Tensor) -> Result<Tensor, ModelError> {
        unscale_latent(normalized)
    }
}

struct Encoding<'a> {
    stream: EncodeStream<'a>,
    output: StreamOutput,
}

impl<'a> VaeStream<'a> for Encoding<'a> {
    fn push(&mut self, input: &Tensor) -> Result<Option<Tensor>, ModelError> {
        let Some(posterior) = self.stream.push(input)? else { return Ok(None) };
        Ok(Some(match self.output {
            // The posterior's mean is the latent, as diffusers' `latent_dist.mean` for Wan.
            StreamOutput::Pipeline => posterior.mean,
            StreamOutput::Raw => Tensor::f_cat(&[&posterior.mean, &posterior.logvar], 1)?,
        }))
    }

    fn snapshot(&self) -> BoxedStream<'a> {
        Box::new(Encoding { stream: self.stream.snapshot(), output: self.output })
    }

    fn set_stop(&mut self, stop: StopFlag) {
        self.stream.set_stop(stop);
    }

    fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        self.stream.save_state(prefix, into)
    }

    fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        self.stream.load_state(prefix, saved)
    }
}

struct Decoding<'a> {
    stream: DecodeStream<'a>,
    output: StreamOutput,
}

impl<'a> VaeStream<'a> for Decoding<'a> {
    fn push(&mut self, input: &Tensor) -> Result<Option<Tensor>, ModelError> {
        let frames = self.stream.push(input)?;
        Ok(Some(match self.output {
            // SeedVR2's decoder has no clamp of its own (its pipeline clamps at the end).
            StreamOutput::Pipeline => frames.f_clamp(-1.0, 1.0)?,
            StreamOutput::Raw => frames,
        }))
    }

    fn snapshot(&self) -> BoxedStream<'a> {
        Box::new(Decoding { stream: self.stream.snapshot(), output: self.output })
    }

    fn set_stop(&mut self, stop: StopFlag) {
        self.stream.set_stop(stop);
    }

    fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        self.stream.save_state(prefix, into)
    }

    fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        self.stream.load_state(prefix, saved)
    }
}
