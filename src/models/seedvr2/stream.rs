//! Exact temporal slicing with carried causal state: push chunks of frames in order and get the
//! whole-clip result (up to fp32 rounding), in memory bounded by the push size rather than the clip.
use std::collections::HashMap;

use tch::Tensor;

use super::vae::SeedVr2Vae;
use crate::models::nn::posterior::Posterior;
use crate::models::nn::causal_cache::{self, FeatureCache, SavedTensors};
use crate::models::stop::StopFlag;
use crate::models::ModelError;

/// Pixel frames in, posterior frames out. Any push size is accepted: frames are buffered until they
/// form the next valid encoder chunk — `1 + 4a` frames first (as many as the push allows), then
/// multiples of 4 — and all complete frames of one push go through the encoder in one call. Pixel
/// frame `4k` completes latent frame `k`; frames left over after `1 + 4k` are dropped if the clip
/// ends there (see [`EncodeStream::pending_frames`]), as the whole-clip encode drops them.
pub struct EncodeStream<'a> {
    vae: &'a SeedVr2Vae,
    cache: FeatureCache,
    pending: Option<Tensor>,
}

impl<'a> EncodeStream<'a> {
    pub(super) fn new(vae: &'a SeedVr2Vae) -> Self {
        Self { vae, cache: vae.encoder.new_cache(), pending: None }
    }

    /// Frames `[B, 3, t, H, W]` in [-1, 1] (same B, H, W on every push) → the posterior frames that
    /// became complete, or `None` while frames are still buffered.
    pub fn push(&mut self, frames: &Tensor) -> Result<Option<Posterior>, ModelError> {
        let _guard = tch::no_grad_guard();
        let frames = self.vae.checked_input(frames, self.vae.config().in_channels, "frame chunk")?;
        let available = match self.pending.take() {
            Some(pending) => Tensor::f_cat(&[&pending, &frames], 2)?,
            None => frames,
        };
        let count = available.size()[2];
        let step = self.vae.config().temporal_factor();
        let ready = if self.cache.is_first_chunk() { (count - 1) / step * step + 1 } else { count / step * step };
        if ready < count {
            self.pending = Some(available.f_narrow(2, ready, count - ready)?.f_contiguous()?);
        }
        if ready == 0 {
            return Ok(None);
        }
        Ok(Some(self.vae.encode_chunk(&available.f_narrow(2, 0, ready)?, &mut self.cache)?))
    }

    /// A push ends with `ModelError::Stopped` at the next causal convolution once `stop` is raised.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.cache.set_stop(stop);
    }

    /// A copy of the stream's state to return to if the next push fails.
    pub fn snapshot(&self) -> Self {
        Self { vae: self.vae, cache: self.cache.snapshot(), pending: self.pending.as_ref().map(Tensor::shallow_clone) }
    }

    /// Frames waiting for a complete group of 4; the encoder drops them if the clip ends here.
    pub fn pending_frames(&self) -> i64 {
        self.pending.as_ref().map_or(0, |p| p.size()[2])
    }

    /// The cache and the frames waiting for a group, under `prefix`.
    pub fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        self.cache.save(prefix, into);
        causal_cache::save_pending(self.pending.as_ref(), prefix, into);
    }

    pub fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        self.cache.load(prefix, saved)?;
        self.pending = causal_cache::load_pending(prefix, saved);
        Ok(())
    }
}

/// Latent frames in (any number ≥ 1 per push), pixel frames out: `4t − 3` for the first push of `t`
/// latent frames (the clip's first frame stays single), `4t` for every later push. Raw latents
/// (unscaled), unclamped output, as [`SeedVr2Vae::decode`].
pub struct DecodeStream<'a> {
    vae: &'a SeedVr2Vae,
    cache: FeatureCache,
}

impl<'a> DecodeStream<'a> {
    pub(super) fn new(vae: &'a SeedVr2Vae) -> Self {
        Self { vae, cache: vae.decoder.new_cache() }
    }

    pub fn push(&mut self, latent: &Tensor) -> Result<Tensor, ModelError> {
        let _guard = tch::no_grad_guard();
        let latent = self.vae.checked_input(latent, self.vae.config().latent_channels, "latent chunk")?;
        self.vae.decode_chunk(&latent, &mut self.cache)
    }

    /// A push ends with `ModelError::Stopped` at the next causal convolution once `stop` is raised.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.cache.set_stop(stop);
    }

    /// A copy of the stream's state to return to if the next push fails.
    pub fn snapshot(&self) -> Self {
        Self { vae: self.vae, cache: self.cache.snapshot() }
    }

    pub fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        self.cache.save(prefix, into);
    }

    pub fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        self.cache.load(prefix, saved)
    }
}

/// Whole clips through the streams, in the slices the original's `set_causal_slicing` uses.
impl SeedVr2Vae {
    /// Exact temporal slicing of [`SeedVr2Vae::encode`]; see [`EncodeStream`] for the frame rules.
    pub fn encoder_stream(&self) -> EncodeStream<'_> {
        EncodeStream::new(self)
    }

    /// Exact temporal slicing of [`SeedVr2Vae::decode`]; see [`DecodeStream`] for the frame rules.
    pub fn decoder_stream(&self) -> DecodeStream<'_> {
        DecodeStream::new(self)
    }

    /// Pushes each slice of `split` frames (the first slice gets one frame more, so the original's
    /// `set_causal_slicing(split_size)` chunks are reproduced) and joins the results.
    pub fn encode_sliced(&self, video: &Tensor, split: i64) -> Result<Posterior, ModelError> {
        let frames = video.size().get(2).copied().unwrap_or(0);
        let mut stream = self.encoder_stream();
        let mut parts = Vec::new();
        let mut start = 0;
        while start < frames {
            let len = (if start == 0 { split.max(1) + 1 } else { split.max(1) }).min(frames - start);
            parts.extend(stream.push(&video.f_narrow(2, start, len)?)?);
            start += len;
        }
        if parts.is_empty() {
            return Err(self.bad_input(format!("a video of shape {:?} (expected [B, 3, T≥1, H, W])", video.size())));
        }
        Posterior::cat(&parts)
    }

    /// Pushes `split` latent frames at a time (the first push gets one more, like the original's
    /// sliced decode) and joins the results.
    pub fn decode_sliced(&self, latent: &Tensor, split: i64) -> Result<Tensor, ModelError> {
        let frames = latent.size().get(2).copied().unwrap_or(0);
        let mut stream = self.decoder_stream();
        let mut parts = Vec::new();
        let mut start = 0;
        while start < frames {
            let len = (if start == 0 { split.max(1) + 1 } else { split.max(1) }).min(frames - start);
            parts.push(stream.push(&latent.f_narrow(2, start, len)?)?);
            start += len;
        }
        if parts.is_empty() {
            return Err(self.bad_input(format!("a latent of shape {:?} (expected [B, 16, t≥1, h, w])", latent.size())));
        }
        Ok(Tensor::f_cat(&parts, 2)?)
    }
}
