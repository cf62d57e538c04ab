//! Any video VAE, loaded: the executor's encode/decode/reconstruct pipelines do not care which family
//! they run. A family implements `family::vae::VaeModel` in its own folder; [`VideoVae::load`] holds the
//! one line per family that names it.
use std::ops::Deref;
use std::path::Path;

use tch::Tensor;

use super::family::vae::{BoxedStream, LoadOptions, StreamOutput, StreamPace, VaeModel};
use super::family::Family;
use super::registry::ModelEntry;
use super::seedvr2::{SeedVr2LoadOptions, SeedVr2Vae};
use super::taehv::{naming, LatentAffine, LatentSpace, TaehvVideoVae};
use super::nn::posterior::Posterior;
use super::wan::{WanVideoVae, WAN21_LATENTS_MEAN, WAN21_LATENTS_STD, WAN22_LATENTS_MEAN, WAN22_LATENTS_STD};
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
        Self::load_file(path, entry.family, opts)
    }

    /// A checkpoint of `family` (the bench and calibration tools name theirs on the command line).
    pub fn load_file(path: &Path, family: Family, opts: &LoadOptions) -> Result<VideoVae, ModelError> {
        match family {
            Family::Wan21 | Family::Wan22 => Ok(VideoVae::new(WanVideoVae::load(path, family, opts)?)),
            Family::Seedvr2 => Ok(VideoVae::new(SeedVr2Vae::load(path, &SeedVr2LoadOptions { device: opts.device, kind: opts.kind })?)),
            Family::Taehv => Ok(VideoVae::new(TaehvVideoVae::load(path, opts, full_vae_latent(path))?)),
            Family::Realesrgan | Family::Realcugan | Family::Seedvr2Dit | Family::Rife | Family::FlashVsr => {
                Err(ModelError::Unsupported { model: naming::file_name(path), what: format!("{} VAE ops", family.as_str()) })
            }
        }
    }

    pub fn encoder(&self) -> BoxedStream<'_> {
        self.0.encode_stream(StreamOutput::Pipeline)
    }

    pub fn decoder(&self) -> BoxedStream<'_> {
        self.0.decode_stream(StreamOutput::Pipeline)
    }

    /// The encode stream at `pace`; a family without frame-by-frame streams computes its pushes whole.
    pub fn encoder_at(&self, output: StreamOutput, pace: StreamPace) -> BoxedStream<'_> {
        match pace {
            StreamPace::FrameByFrame => self.0.frame_by_frame_encode_stream(output).unwrap_or_else(|| self.0.encode_stream(output)),
            StreamPace::Chunk => self.0.encode_stream(output),
        }
    }

    /// The decode stream at `pace`, as [`VideoVae::encoder_at`].
    pub fn decoder_at(&self, output: StreamOutput, pace: StreamPace) -> BoxedStream<'_> {
        match pace {
            StreamPace::FrameByFrame => self.0.frame_by_frame_decode_stream(output).unwrap_or_else(|| self.0.decode_stream(output)),
            StreamPace::Chunk => self.0.decode_stream(output),
        }
    }
}

impl Deref for VideoVae {
    type Target = dyn VaeModel;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref()
    }
}

/// Hunyuan Video's latent scale: its DiT takes the raw VAE latent times this (ComfyUI's `HunyuanVideo`).
const HUNYUAN_VIDEO_SCALE: f64 = 0.476986;

/// The full VAE whose raw latents a TAEHV checkpoint stands in for, as its file name says (the authors'
/// loader tells `taew2_1` from `taehv` by name; their weights have one structure): Wan 2.1's and Wan 2.2's
/// published statistics, Hunyuan Video's scale; none for a name tied to no VAE.
pub fn full_vae_latent(path: &Path) -> Option<LatentAffine> {
    match naming::latent_space(&naming::file_name(path)) {
        LatentSpace::Wan21 => Some(LatentAffine::new(&WAN21_LATENTS_MEAN, &WAN21_LATENTS_STD)),
        LatentSpace::Wan22 => Some(LatentAffine::new(&WAN22_LATENTS_MEAN, &WAN22_LATENTS_STD)),
        LatentSpace::HunyuanVideo => Some(LatentAffine::new(&[0.0; 16], &[1.0 / HUNYUAN_VIDEO_SCALE; 16])),
        LatentSpace::Unknown => None,
    }
}
