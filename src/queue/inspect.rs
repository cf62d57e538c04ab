//! The input's own checks before a job is queued: a video is probed, a latent's shape, values and origin
//! are read, and what the job would write is held against the box's limits.
use std::path::Path;
use std::time::Instant;

use super::output_size::{check_output_size, InputSize};
use super::{JobRequest, QueueError};
use crate::config::Config;
use crate::error_codes as codes;
use crate::media::latent::{self, LatentError};
use crate::media::{self, MediaLimits};
use crate::models::registry;

/// How the input arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// A file as a client has it: a video, or for `vae_decode` a latent file.
    File,
    /// A raw tensor (the remote-VAE endpoints): a latent for `vae_decode`, pixels for `vae_encode`.
    Tensor,
}

/// What the checks learnt of the input, and how long they took (the job's `probe` timing).
pub struct Probed {
    pub media: Option<media::MediaInfo>,
    pub seconds: Option<f64>,
    /// The input's size as the output checks read it (none for a pixel tensor).
    pub size: Option<InputSize>,
}

/// Also fits the request's output format to what the input turned out to be (`fit_input::fit_to_input`).
pub async fn inspect_input(config: &Config, request: &mut JobRequest, path: &Path, kind: InputKind) -> Result<Probed, QueueError> {
    let started = Instant::now();
    let limits = config.media_limits();
    if request.op.reads_latent() {
        let shape = match check_latent(path, request, &limits).await {
            Err(QueueError::Latent(LatentError::NotALatent(why))) if !looks_like_safetensors(path) => {
                let hint = "it looks like a video or an image: vae_encode, vae_reconstruct, upscale and restore take those";
                return Err(LatentError::NotALatent(format!("{why}; {hint}")).into());
            }
            checked => checked?,
        };
        return Ok(Probed { media: None, seconds: Some(started.elapsed().as_secs_f64()), size: Some(InputSize::Latent(shape)) });
    }
    if kind == InputKind::Tensor {
        // The shape and dtype were checked from the query; a pixel tensor takes no probe time.
        check_sample_finite(path).await?;
        return Ok(Probed { media: None, seconds: None, size: None });
    }
    let tools = config.media_tools();
    let video = path.to_path_buf();
    let probe_limits = limits.clone();
    let range = request.params.range.clone();
    let mut info = match tokio::task::spawn_blocking(move || media::probe_part(&tools, &video, &probe_limits, range.as_ref())).await? {
        Err(media::MediaError::NotAVideo { reason }) if looks_like_safetensors(path) => {
            let hint = "it is a safetensors file (a latent?): vae_decode takes latents";
            return Err(media::MediaError::NotAVideo { reason: format!("{reason}; {hint}") }.into());
        }
        probed => probed?,
    };
    super::fit_input::fit_to_input(request, &mut info)?;
    let size = InputSize::Video { width: info.width, height: info.height, frames: info.frames, fps_rational: info.fps_rational.clone() };
    check_output_size(request, &size, &limits)?;
    Ok(Probed { media: Some(info), seconds: Some(started.elapsed().as_secs_f64()), size: Some(size) })
}

/// A latent is checked before it is queued: shape, finiteness, channels and the model it came from, and
/// what it decodes to. Returns its shape.
async fn check_latent(path: &Path, request: &JobRequest, limits: &MediaLimits) -> Result<[i64; 5], QueueError> {
    let path = path.to_path_buf();
    let latent::LatentSummary { shape, meta, .. } = tokio::task::spawn_blocking(move || latent::inspect_latent(&path)).await??;
    if let Some(expected) = request.latent_channels {
        if shape[1] != expected {
            return Err(LatentError::ChannelMismatch { model: request.model.clone(), got: shape[1], expected }.into());
        }
    }
    let made_by = meta.model.clone().unwrap_or_default();
    if let Some(family) = meta.family.clone().filter(|f| !registry::shares_latent_space(request.family, &request.model, f, &made_by)) {
        return Err(LatentError::ModelMismatch {
            made_by,
            family,
            model: request.model.clone(),
            model_family: request.family.as_str().into(),
        }
        .into());
    }
    if meta.normalized {
        registry::check_normalization(&request.model, request.family, request.latent_channels, true)?;
    }
    let shape: [i64; 5] = shape.try_into().map_err(|shape| LatentError::BadShape { shape })?;
    check_output_size(request, &InputSize::Latent(shape), limits)?;
    Ok(shape)
}

/// A pixel tensor for `vae_encode` must hold numbers: NaN in would be NaN out, with a success.
async fn check_sample_finite(path: &Path) -> Result<(), QueueError> {
    let path = path.to_path_buf();
    let finite = tokio::task::spawn_blocking(move || latent::first_tensor_finite(&path))
        .await?
        .map_err(|e| QueueError::Internal(format!("cannot read the received tensor: {e}")))?;
    if !finite {
        return Err(QueueError::refused(codes::TENSOR_NOT_FINITE, "the tensor contains NaN or infinite values"));
    }
    Ok(())
}

/// A safetensors file starts with its header's length (8 bytes, little-endian, sane) and then `{`.
fn looks_like_safetensors(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 9];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head));
    let length = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    read.is_ok() && head[8] == b'{' && (2..=100 << 20).contains(&length)
}
