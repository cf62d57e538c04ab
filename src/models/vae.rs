//! Any video VAE, loaded: the executor's encode/decode/reconstruct pipelines do not care which family
//! they run. A family implements `family::vae::VaeModel` in its own folder; [`VideoVae::load`] holds the
//! one line per family that names it.
use std::ops::Deref;

use tch::Tensor;

use super::family::vae::{BoxedStream, LoadOptions, StreamOutput, VaeModel};
use super::family::Family;
use super::registry::ModelEntry;
use super::seedvr2::{SeedVr2LoadOptions, SeedVr2Vae};
use super::nn::posterior::Posterior;
use super::wan::WanVideoVae;
use super::ModelError;

/// A loaded video VAE of any family.
pub struct VideoVae(Box<dyn VaeModel>);

/// `[1, 2C, t, h, w]` moments of a [`StreamOutput::Raw`] encoder → the posterior.
pub fn split_moments(moments: &Tensor) -> Result<Posterior, ModelError> {
    let channels = moments.size().get(1).copied().unwrap_or(0);
    if moments.dim() != 5 || channels % 2 != 0 {
        return Err(ModelError::Unsupported { model: "VAE stream".into(), what: format!("moments of shape {:?}", moments.size()) });
    }
    Ok(Posterior { mean: moments.f_narrow(1, 0, channels / 2)?, logvar: moments.f_narrow(1, channels / 2, channels / 2)? })
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
