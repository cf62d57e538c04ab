//! One face for every video VAE family, so the executor's encode/decode/reconstruct pipelines do not
//! care which model they run. A family implements [`VaeModel`] and its streams [`VaeStream`] in its
//! own folder; [`VideoVae::load`] holds the one line per family that names it.
use std::ops::Deref;

use tch::{Device, Kind, Tensor};

use super::registry::{published_latent_stats, Family, ModelEntry};
use super::seedvr2::{self, SeedVr2LoadOptions, SeedVr2Vae};
use super::wan::{RowSplit, WanVideoVae};
pub use super::weights::HeldBytes;
use super::ModelError;

pub struct LoadOptions {
    pub device: Device,
    pub kind: Kind,
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

/// One direction of a VAE with its exact causal state: chunks pushed in order give what the whole
/// clip gives, in memory bounded by the push.
pub trait VaeStream<'a> {
    /// Encode: frames `[1, 3, n, H, W]` in [-1, 1] → the latent frames this push completed (`None`
    /// while frames wait for a whole group). Decode: latent `[1, C, t, h, w]` → the pixel frames they
    /// decode to (always `Some`).
    fn push(&mut self, input: &Tensor) -> Result<Option<Tensor>, ModelError>;
    /// A push that must give output: every decode push, an encode push of whole groups.
    fn push_some(&mut self, input: &Tensor) -> Result<Tensor, ModelError> {
        self.push(input)?.ok_or_else(|| ModelError::Unsupported { model: "VAE stream".into(), what: "a push that completes no frame here".into() })
    }
    /// A copy of the state to return to if the next push fails.
    fn snapshot(&self) -> BoxedStream<'a>;
    /// Exact row-split convolutions from the next push on; false where the family has none.
    fn set_row_split(&mut self, _split: Option<RowSplit>) -> bool {
        false
    }
}

pub type BoxedStream<'a> = Box<dyn VaeStream<'a> + 'a>;

/// What a video VAE family gives the pipelines.
pub trait VaeModel {
    fn family(&self) -> Family;
    fn latent_channels(&self) -> i64;
    /// Pixels per latent cell along H and W; inputs are padded up to a multiple of it.
    fn spatial_factor(&self) -> i64;
    /// Pixel frames per latent frame after the first (causal) one.
    fn temporal_factor(&self) -> i64;
    /// The decoder's full-resolution channel count: what the calibrated memory rows are keyed by.
    fn memory_width(&self) -> i64;
    /// Bytes of the weights as held, and of what the model made from them at load and keeps (Winograd
    /// kernels): the model's own memory, beside which a job's working memory is planned.
    fn held_bytes(&self) -> HeldBytes;
    /// Whether the streams can split their convolutions into exact row bands.
    fn supports_row_split(&self) -> bool {
        false
    }
    /// Whether the streams can give [`StreamOutput::Raw`] (callers asking for it check this first;
    /// a family without it gives its pipeline values).
    fn supports_raw_output(&self) -> bool {
        false
    }
    fn encode_stream(&self, output: StreamOutput) -> BoxedStream<'_>;
    fn decode_stream(&self, output: StreamOutput) -> BoxedStream<'_>;
    /// What pipelines apply before diffusion; by default the published per-channel `(mu - mean) / std`
    /// of the family's latent size (Wan 2.1's 16 channels, Wan 2.2's 48; other sizes have none).
    fn normalize(&self, raw: &Tensor) -> Result<Tensor, ModelError> {
        let (mean, std) = latent_stats(self.family(), self.latent_channels())?;
        Ok((raw - mean) / std)
    }
    fn denormalize(&self, normalized: &Tensor) -> Result<Tensor, ModelError> {
        let (mean, std) = latent_stats(self.family(), self.latent_channels())?;
        Ok(normalized * std + mean)
    }
}

/// A loaded video VAE of any family.
pub struct VideoVae(Box<dyn VaeModel>);

/// `[1, 2C, t, h, w]` moments of a [`StreamOutput::Raw`] encoder → the posterior.
pub fn split_moments(moments: &Tensor) -> Result<seedvr2::Posterior, ModelError> {
    let channels = moments.size().get(1).copied().unwrap_or(0);
    if moments.dim() != 5 || channels % 2 != 0 {
        return Err(ModelError::Unsupported { model: "VAE stream".into(), what: format!("moments of shape {:?}", moments.size()) });
    }
    Ok(seedvr2::Posterior { mean: moments.f_narrow(1, 0, channels / 2)?, logvar: moments.f_narrow(1, channels / 2, channels / 2)? })
}

impl VideoVae {
    pub fn new(model: impl VaeModel + 'static) -> VideoVae {
        VideoVae(Box::new(model))
    }

    /// The registry's entry loaded by its family's code: the one place that names each family.
    pub fn load(entry: &ModelEntry, opts: &LoadOptions) -> Result<VideoVae, ModelError> {
        let path = entry.files.first().ok_or_else(|| ModelError::WeightsMissing(entry.name.clone()))?;
        match entry.family {
            Family::Wan21 | Family::Wan22 => Ok(VideoVae::new(WanVideoVae::load(path, entry.family, opts)?)),
            Family::Seedvr2 => Ok(VideoVae::new(SeedVr2Vae::load(path, &SeedVr2LoadOptions { device: opts.device, kind: opts.kind })?)),
            other => Err(ModelError::Unsupported { model: entry.name.clone(), what: format!("{} VAE ops", other.as_str()) }),
        }
    }

    pub fn encoder(&self) -> BoxedStream<'_> {
        self.0.encode_stream(StreamOutput::Pipeline)
    }

    pub fn decoder(&self) -> BoxedStream<'_> {
        self.0.decode_stream(StreamOutput::Pipeline)
    }

    pub fn encoder_with(&self, output: StreamOutput) -> BoxedStream<'_> {
        self.0.encode_stream(output)
    }

    pub fn decoder_with(&self, output: StreamOutput) -> BoxedStream<'_> {
        self.0.decode_stream(output)
    }
}

impl Deref for VideoVae {
    type Target = dyn VaeModel;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref()
    }
}

fn latent_stats(family: Family, channels: i64) -> Result<(Tensor, Tensor), ModelError> {
    let column = |values: &[f64]| Tensor::from_slice(values).to_kind(Kind::Float).view([1, -1, 1, 1, 1]);
    let (mean, std) = published_latent_stats(family, channels).ok_or_else(|| ModelError::Unsupported {
        model: family.as_str().into(),
        what: "latent normalisation (no published statistics for this latent size)".into(),
    })?;
    Ok((column(mean), column(std)))
}
