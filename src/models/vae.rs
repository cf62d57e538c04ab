//! One face for every video VAE family, so the executor's encode/decode/reconstruct pipelines do not
//! care which model they run. Each family keeps its own code; this file only dispatches.
use tch::{Device, Kind, Tensor};

use super::registry::{published_latent_stats, Family, ModelEntry};
use super::seedvr2::{self, SeedVr2LoadOptions, SeedVr2Vae};
use super::wan::{DecodeStream, EncodeStream, RowSplit, WanLoadOptions, WanVae};
use super::ModelError;

pub struct LoadOptions {
    pub device: Device,
    pub kind: Kind,
}

pub enum VideoVae {
    Wan { family: Family, model: WanVae },
    SeedVr2(SeedVr2Vae),
}

/// What a stream hands back: what the VAE pipelines store and show, or the model's own values for
/// SeedVR2's restoration, which samples the posterior (so it needs the log-variance too) and colour-fixes
/// the decoder's unclamped output, as the original does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StreamOutput {
    /// Encode: the posterior's mean. Decode: frames clamped to [-1, 1].
    #[default]
    Pipeline,
    /// Encode: `mean ‖ logvar` along channels (`[1, 2C, t, h, w]`, see [`split_moments`]). Decode: unclamped.
    Raw,
}

pub enum VaeEncoder<'a> {
    Wan(EncodeStream<'a>),
    SeedVr2(seedvr2::EncodeStream<'a>, StreamOutput),
}

pub enum VaeDecoder<'a> {
    Wan(DecodeStream<'a>),
    SeedVr2(seedvr2::DecodeStream<'a>, StreamOutput),
}

/// `[1, 2C, t, h, w]` moments of a [`StreamOutput::Raw`] encoder → the posterior.
pub fn split_moments(moments: &Tensor) -> Result<seedvr2::Posterior, ModelError> {
    let channels = moments.size().get(1).copied().unwrap_or(0);
    if moments.dim() != 5 || channels % 2 != 0 {
        return Err(ModelError::Unsupported { model: "VAE stream".into(), what: format!("moments of shape {:?}", moments.size()) });
    }
    Ok(seedvr2::Posterior { mean: moments.f_narrow(1, 0, channels / 2)?, logvar: moments.f_narrow(1, channels / 2, channels / 2)? })
}

impl VideoVae {
    pub fn load(entry: &ModelEntry, opts: &LoadOptions) -> Result<VideoVae, ModelError> {
        let path = entry.files.first().ok_or_else(|| ModelError::WeightsMissing(entry.name.clone()))?;
        match entry.family {
            Family::Wan21 | Family::Wan22 => {
                let model = WanVae::load(path, &WanLoadOptions { device: opts.device, kind: opts.kind })?;
                Ok(VideoVae::Wan { family: entry.family, model })
            }
            Family::Seedvr2 => Ok(VideoVae::SeedVr2(SeedVr2Vae::load(path, &SeedVr2LoadOptions { device: opts.device, kind: opts.kind })?)),
            other => Err(ModelError::Unsupported { model: entry.name.clone(), what: format!("{} VAE ops", other.as_str()) }),
        }
    }

    pub fn family(&self) -> Family {
        match self {
            VideoVae::Wan { family, .. } => *family,
            VideoVae::SeedVr2(_) => Family::Seedvr2,
        }
    }

    pub fn latent_channels(&self) -> i64 {
        match self {
            VideoVae::Wan { model, .. } => model.config().z_dim,
            VideoVae::SeedVr2(model) => model.config().latent_channels,
        }
    }

    /// Pixels per latent cell along H and W; inputs are padded up to a multiple of it.
    pub fn spatial_factor(&self) -> i64 {
        match self {
            VideoVae::Wan { model, .. } => model.config().spatial_factor(),
            VideoVae::SeedVr2(model) => model.config().spatial_factor(),
        }
    }

    /// Pixel frames per latent frame after the first (causal) one.
    pub fn temporal_factor(&self) -> i64 {
        match self {
            VideoVae::Wan { model, .. } => model.config().temporal_factor(),
            VideoVae::SeedVr2(model) => model.config().temporal_factor(),
        }
    }

    /// Whether the streams can split their convolutions into exact row bands (Wan).
    pub fn supports_row_split(&self) -> bool {
        matches!(self, VideoVae::Wan { .. })
    }

    pub fn encoder(&self) -> VaeEncoder<'_> {
        self.encoder_with(StreamOutput::Pipeline)
    }

    pub fn decoder(&self) -> VaeDecoder<'_> {
        self.decoder_with(StreamOutput::Pipeline)
    }

    /// Whether the family's streams can give [`StreamOutput::Raw`] (Wan's encoder keeps no log-variance).
    pub fn supports_raw_output(&self) -> bool {
        matches!(self, VideoVae::SeedVr2(_))
    }

    /// Callers asking for [`StreamOutput::Raw`] check [`VideoVae::supports_raw_output`] first; Wan's
    /// streams give their pipeline values either way.
    pub fn encoder_with(&self, output: StreamOutput) -> VaeEncoder<'_> {
        match self {
            VideoVae::Wan { model, .. } => VaeEncoder::Wan(model.encoder_stream()),
            VideoVae::SeedVr2(model) => VaeEncoder::SeedVr2(model.encoder_stream(), output),
        }
    }

    pub fn decoder_with(&self, output: StreamOutput) -> VaeDecoder<'_> {
        match self {
            VideoVae::Wan { model, .. } => VaeDecoder::Wan(model.decoder_stream()),
            VideoVae::SeedVr2(model) => VaeDecoder::SeedVr2(model.decoder_stream(), output),
        }
    }

    /// What pipelines apply before diffusion: Wan's published per-channel `(mu - mean) / std` (Wan 2.1's 16
    /// channels, Wan 2.2's 48; other latent sizes have none), SeedVR2's scaling factor 0.9152.
    pub fn normalize(&self, raw: &Tensor) -> Result<Tensor, ModelError> {
        if let VideoVae::SeedVr2(_) = self {
            return seedvr2::scale_latent(raw);
        }
        let (mean, std) = self.latent_stats()?;
        Ok((raw - mean) / std)
    }

    pub fn denormalize(&self, normalized: &Tensor) -> Result<Tensor, ModelError> {
        if let VideoVae::SeedVr2(_) = self {
            return seedvr2::unscale_latent(normalized);
        }
        let (mean, std) = self.latent_stats()?;
        Ok(normalized * std + mean)
    }

    fn latent_stats(&self) -> Result<(Tensor, Tensor), ModelError> {
        let column = |values: &[f64]| Tensor::from_slice(values).to_kind(Kind::Float).view([1, -1, 1, 1, 1]);
        let (family, z_dim) = (self.family(), self.latent_channels());
        let (mean, std) = published_latent_stats(family, z_dim).ok_or_else(|| ModelError::Unsupported {
            model: family.as_str().into(),
            what: "latent normalisation (no published statistics for this latent size)".into(),
        })?;
        Ok((column(mean), column(std)))
    }
}

impl VaeEncoder<'_> {
    /// `frames`: `[1, 3, n, H, W]` in [-1, 1]. Returns the latent frames completed by this push, if any.
    pub fn push(&mut self, frames: &Tensor) -> Result<Option<Tensor>, ModelError> {
        match self {
            VaeEncoder::Wan(stream) => stream.push(frames),
            // The posterior's mean is the latent, as diffusers' `latent_dist.mean` for Wan.
            VaeEncoder::SeedVr2(stream, StreamOutput::Pipeline) => Ok(stream.push(frames)?.map(|posterior| posterior.mean)),
            VaeEncoder::SeedVr2(stream, StreamOutput::Raw) => match stream.push(frames)? {
                Some(posterior) => Ok(Some(Tensor::f_cat(&[&posterior.mean, &posterior.logvar], 1)?)),
                None => Ok(None),
            },
        }
    }

    pub fn snapshot(&self) -> Self {
        match self {
            VaeEncoder::Wan(stream) => VaeEncoder::Wan(stream.snapshot()),
            VaeEncoder::SeedVr2(stream, output) => VaeEncoder::SeedVr2(stream.snapshot(), *output),
        }
    }

    /// Exact row-split convolutions; false where the family does not have them (SeedVR2).
    pub fn set_row_split(&mut self, split: Option<RowSplit>) -> bool {
        match self {
            VaeEncoder::Wan(stream) => {
                stream.set_row_split(split);
                true
            }
            VaeEncoder::SeedVr2(..) => false,
        }
    }
}

impl VaeDecoder<'_> {
    /// `latent`: `[1, C, t, h, w]`; returns the pixel frames they decode to, in [-1, 1].
    pub fn push(&mut self, latent: &Tensor) -> Result<Tensor, ModelError> {
        match self {
            VaeDecoder::Wan(stream) => stream.push(latent),
            // SeedVR2's decoder has no clamp of its own (its pipeline clamps at the end).
            VaeDecoder::SeedVr2(stream, StreamOutput::Pipeline) => Ok(stream.push(latent)?.clamp(-1.0, 1.0)),
            VaeDecoder::SeedVr2(stream, StreamOutput::Raw) => stream.push(latent),
        }
    }

    pub fn snapshot(&self) -> Self {
        match self {
            VaeDecoder::Wan(stream) => VaeDecoder::Wan(stream.snapshot()),
            VaeDecoder::SeedVr2(stream, output) => VaeDecoder::SeedVr2(stream.snapshot(), *output),
        }
    }

    /// Exact row-split convolutions; false where the family does not have them (SeedVR2).
    pub fn set_row_split(&mut self, split: Option<RowSplit>) -> bool {
        match self {
            VaeDecoder::Wan(stream) => {
                stream.set_row_split(split);
                true
            }
            VaeDecoder::SeedVr2(..) => false,
        }
    }
}
