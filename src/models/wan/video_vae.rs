//! Wan 2.1 / 2.2 as a [`VaeModel`]: the checkpoint's `WanVae` with the family the registry listed it as
//! (the two share code; the latent statistics differ), and its streams as [`VaeStream`]s.
use std::collections::HashMap;
use std::path::Path;

use tch::Tensor;

use super::stream::{DecodeStream, EncodeStream};
use super::vae::{WanLoadOptions, WanVae};
use super::cache::{RowSplit, SavedTensors};
use crate::models::family::Family;
use crate::models::family::vae::{BoxedStream, LoadOptions, StreamOutput, VaeModel, VaeStream};
use crate::models::nn::weights::HeldBytes;
use crate::models::stop::StopFlag;
use crate::models::ModelError;

pub struct WanVideoVae {
    family: Family,
    model: WanVae,
}

impl WanVideoVae {
    pub fn load(path: &Path, family: Family, opts: &LoadOptions) -> Result<WanVideoVae, ModelError> {
        Ok(WanVideoVae::new(family, WanVae::load(path, &WanLoadOptions { device: opts.device, kind: opts.kind })?))
    }

    pub fn new(family: Family, model: WanVae) -> WanVideoVae {
        WanVideoVae { family, model }
    }
}

impl WanVideoVae {
    /// The published statistics as `[1, C, 1, 1, 1]` columns, or why there are none.
    fn latent_stats(&self) -> Result<(Tensor, Tensor), ModelError> {
        let column = |values: &[f64]| Tensor::from_slice(values).to_kind(tch::Kind::Float).view([1, -1, 1, 1, 1]);
        let (mean, std) = super::published_latent_stats(self.family, self.latent_channels()).ok_or_else(|| ModelError::Unsupported {
            model: self.family.as_str().into(),
            what: "latent normalisation (no published statistics for this latent size)".into(),
        })?;
        Ok((column(mean), column(std)))
    }
}

impl VaeModel for WanVideoVae {
    fn normalize(&self, raw: &Tensor) -> Result<Tensor, ModelError> {
        let (mean, std) = self.latent_stats()?;
        Ok((raw - mean) / std)
    }

    fn denormalize(&self, normalized: &Tensor) -> Result<Tensor, ModelError> {
        let (mean, std) = self.latent_stats()?;
        Ok(normalized * std + mean)
    }

    fn family(&self) -> Family {
        self.family
    }

    fn latent_channels(&self) -> i64 {
        self.model.config().z_dim
    }

    fn spatial_factor(&self) -> i64 {
        self.model.config().spatial_factor()
    }

    fn temporal_factor(&self) -> i64 {
        self.model.config().temporal_factor()
    }

    fn memory_width(&self) -> i64 {
        self.model.config().decoder_base_dim
    }

    fn held_bytes(&self) -> HeldBytes {
        self.model.held_bytes()
    }

    fn supports_row_split(&self) -> bool {
        true
    }

    /// Wan keeps no log-variance and clamps its decode: its pipeline values whatever is asked.
    fn encode_stream(&self, _output: StreamOutput) -> BoxedStream<'_> {
        Box::new(self.model.encoder_stream())
    }

    fn decode_stream(&self, _output: StreamOutput) -> BoxedStream<'_> {
        Box::new(self.model.decoder_stream())
    }
}

impl<'a> VaeStream<'a> for EncodeStream<'a> {
    fn push(&mut self, input: &Tensor) -> Result<Option<Tensor>, ModelError> {
        EncodeStream::push(self, input)
    }

    fn snapshot(&self) -> BoxedStream<'a> {
        Box::new(EncodeStream::snapshot(self))
    }

    fn set_stop(&mut self, stop: StopFlag) {
        EncodeStream::set_stop(self, stop);
    }

    fn set_row_split(&mut self, split: Option<RowSplit>) -> bool {
        EncodeStream::set_row_split(self, split);
        true
    }

    fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        EncodeStream::save_state(self, prefix, into)
    }

    fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        EncodeStream::load_state(self, prefix, saved)
    }
}

impl<'a> VaeStream<'a> for DecodeStream<'a> {
    fn push(&mut self, input: &Tensor) -> Result<Option<Tensor>, ModelError> {
        Ok(Some(DecodeStream::push(self, input)?))
    }

    fn snapshot(&self) -> BoxedStream<'a> {
        Box::new(DecodeStream::snapshot(self))
    }

    fn set_stop(&mut self, stop: StopFlag) {
        DecodeStream::set_stop(self, stop);
    }

    fn set_row_split(&mut self, split: Option<RowSplit>) -> bool {
        DecodeStream::set_row_split(self, split);
        true
    }

    fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        DecodeStream::save_state(self, prefix, into)
    }

    fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        DecodeStream::load_state(self, prefix, saved)
    }
}
