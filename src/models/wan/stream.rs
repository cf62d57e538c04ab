//! Exact causal streaming: push chunks of frames in order and get the same result as the whole clip.
use std::collections::HashMap;

use tch::Tensor;

use super::cache::{self, FeatureCache, RowSplit, SavedTensors};
use super::patch::{patchify, unpatchify};
use super::vae::{WanVae, WHOLE_CLIP_CHUNK_PIXELS};
use crate::models::stop::StopFlag;
use crate::models::ModelError;

/// Pixel frames in, latent frames (raw `mu`) out. Any push size is accepted: frames are buffered until
/// they form the next valid encoder chunk (the first frame alone, then whole groups of 4). All
/// complete groups of one push go through the encoder in one call, so the push size sets the memory.
pub struct EncodeStream<'a> {
    vae: &'a WanVae,
    cache: FeatureCache,
    pending: Option<Tensor>,
}

impl<'a> EncodeStream<'a> {
    pub(super) fn new(vae: &'a WanVae) -> Self {
        Self { vae, cache: vae.encoder.new_cache(), pending: None }
    }

    /// Frames `[B, 3, t, H, W]` in [-1, 1]; returns the latent frames `[B, z, t', H/8, W/8]` that became
    /// complete, or `None` while frames are still buffered.
    pub fn push(&mut self, frames: &Tensor) -> Result<Option<Tensor>, ModelError> {
        let _guard = tch::no_grad_guard();
        let size = frames.size();
        let multiple = self.vae.config().size_multiple();
        if size.len() != 5 || size[1] != self.vae.config().image_channels || size[3] % multiple != 0 || size[4] % multiple != 0 {
            return Err(self.vae.bad_input(format!("frames of shape {size:?} (expected [B, {}, t, H, W], H and W multiples of {multiple})", self.vae.config().image_channels)));
        }
        let frames = frames.f_to_device(self.vae.device)?.f_to_kind(self.vae.kind)?;
        let mut available = match self.pending.take() {
            Some(pending) => Tensor::f_cat(&[&pending, &frames], 2)?,
            None => frames,
        };
        let mut latents = Vec::new();
        if self.cache.is_first_chunk() && available.size()[2] > 0 {
            latents.push(self.encode_chunk(&available.f_narrow(2, 0, 1)?)?);
            available = available.f_narrow(2, 1, available.size()[2] - 1)?;
        }
        let step = self.vae.config().temporal_factor();
        let count = available.size()[2];
        let complete = count / step * step;
        if complete > 0 {
            latents.push(self.encode_chunk(&available.f_narrow(2, 0, complete)?)?);
        }
        if complete < count {
            self.pending = Some(available.f_narrow(2, complete, count - complete)?.f_contiguous()?);
        }
        Ok(match latents.len() {
            0 => None,
            _ => Some(Tensor::f_cat(&latents, 2)?),
        })
    }

    /// Runs the stream's large convolutions in bands of rows (exact), or whole with `None`.
    pub fn set_row_split(&mut self, split: Option<RowSplit>) {
        self.cache.set_row_split(split);
    }

    /// A push ends with `ModelError::Stopped` at the next causal convolution once `stop` is raised.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.cache.set_stop(stop);
    }

    /// A copy of the stream's state to return to if the next push fails.
    pub fn snapshot(&self) -> Self {
        Self { vae: self.vae, cache: self.cache.snapshot(), pending: self.pending.as_ref().map(Tensor::shallow_clone) }
    }

    /// Frames waiting for a complete group; the encoder drops them if the clip ends here.
    pub fn pending_frames(&self) -> i64 {
        self.pending.as_ref().map_or(0, |p| p.size()[2])
    }

    /// The cache and the frames waiting for a group, under `prefix`.
    pub fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        self.cache.save(prefix, into);
        cache::save_pending(self.pending.as_ref(), prefix, into);
    }

    pub fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        self.cache.load(prefix, saved)?;
        self.pending = cache::load_pending(prefix, saved);
        Ok(())
    }

    fn encode_chunk(&mut self, frames: &Tensor) -> Result<Tensor, ModelError> {
        let frames = self.vae.to_activation_layout(&patchify(frames, self.vae.config().patch_size)?)?;
        let moments = self.vae.quant_conv.forward(&self.vae.encoder.forward(&frames, &mut self.cache)?)?;
        // Callers get the default layout whatever the network used inside.
        Ok(moments.f_narrow(1, 0, self.vae.config().z_dim)?.f_contiguous()?)
    }
}

/// Latent frames in (any number per push), video frames out (1 for the first latent frame, 4 for each
/// later one), clamped to [-1, 1] unless [`DecodeStream::unclamped`].
pub struct DecodeStream<'a> {
    vae: &'a WanVae,
    cache: FeatureCache,
    clamp: bool,
}

impl<'a> DecodeStream<'a> {
    pub(super) fn new(vae: &'a WanVae) -> Self {
        Self { vae, cache: vae.decoder.new_cache(), clamp: true }
    }

    pub fn unclamped(self) -> Self {
        Self { clamp: false, ..self }
    }

    /// Runs the stream's large convolutions in bands of rows (exact), or whole with `None`.
    pub fn set_row_split(&mut self, split: Option<RowSplit>) {
        self.cache.set_row_split(split);
    }

    /// A push ends with `ModelError::Stopped` at the next causal convolution once `stop` is raised.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.cache.set_stop(stop);
    }

    /// A copy of the stream's state to return to if the next push fails.
    pub fn snapshot(&self) -> Self {
        Self { vae: self.vae, cache: self.cache.snapshot(), clamp: self.clamp }
    }

    pub fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        self.cache.save(prefix, into);
    }

    pub fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        self.cache.load(prefix, saved)
    }

    /// Latent frames `[B, z, t, h, w]` → video frames `[B, 3, 4t (or 4t−3 on the first push), 8h, 8w]`.
    pub fn push(&mut self, latent: &Tensor) -> Result<Tensor, ModelError> {
        let _guard = tch::no_grad_guard();
        let size = latent.size();
        if size.len() != 5 || size[1] != self.vae.config().z_dim || size[2] < 1 {
            return Err(self.vae.bad_input(format!("latent frames of shape {size:?} (expected [B, {}, t≥1, h, w])", self.vae.config().z_dim)));
        }
        let latent = latent.f_to_device(self.vae.device)?.f_to_kind(self.vae.kind)?;
        // The decoder's first call must be a single latent frame (its temporal upsamplers skip it).
        let video = if self.cache.is_first_chunk() && size[2] > 1 {
            let first = self.decode_chunk(&latent.f_narrow(2, 0, 1)?)?;
            let rest = self.decode_chunk(&latent.f_narrow(2, 1, size[2] - 1)?)?;
            Tensor::f_cat(&[first, rest], 2)?
        } else {
            self.decode_chunk(&latent)?
        };
        Ok(if self.clamp { video.f_clamp(-1.0, 1.0)? } else { video })
    }

    fn decode_chunk(&mut self, latent: &Tensor) -> Result<Tensor, ModelError> {
        let latent = self.vae.to_activation_layout(latent)?;
        let video = self.vae.decoder.forward(&self.vae.post_quant_conv.forward(&latent)?, &mut self.cache)?;
        // Callers get the default layout whatever the network used inside.
        Ok(unpatchify(&video, self.vae.config().patch_size)?.f_contiguous()?)
    }
}

/// Whole clips through the streams, and the streams' entry points.
impl WanVae {
    /// `[B, 3, T, H, W]` in [-1, 1] → raw `mu` `[B, z, 1 + (T−1)/4, H/s, W/s]` (not normalised), s = 8 (2.1) or 16 (2.2).
    /// Runs as a stream (first frame, then groups of 4 frames, as many per call as
    /// [`WHOLE_CLIP_CHUNK_PIXELS`] allows), so memory does not grow with T; frames beyond `1 + 4k`
    /// are dropped, as in the original.
    pub fn encode(&self, video: &Tensor) -> Result<Tensor, ModelError> {
        let size = video.size();
        let frames = size.get(2).copied().unwrap_or(0);
        if frames < 1 || size.len() != 5 {
            return Err(self.bad_input(format!("a video of shape {size:?} (expected [B, {}, T≥1, H, W])", self.config.image_channels)));
        }
        let step = self.config.temporal_factor();
        let used = self.config.pixel_frames(self.config.latent_frames(frames));
        let groups_per_call = (WHOLE_CLIP_CHUNK_PIXELS / (step * size[3] * size[4]).max(1)).max(1);
        let mut stream = self.encoder_stream();
        let mut latents = Vec::new();
        let mut start = 0;
        while start < used {
            let len = if start == 0 { 1 } else { (groups_per_call * step).min(used - start) };
            latents.extend(stream.push(&video.f_narrow(2, start, len)?)?);
            start += len;
        }
        Ok(Tensor::f_cat(&latents, 2)?)
    }

    /// Whole latent `[B, z, T', h, w]` → video `[B, 3, 1 + 4(T'−1), s·h, s·w]` clamped to [-1, 1],
    /// decoded as a stream: the first latent frame, then as many per call as [`WHOLE_CLIP_CHUNK_PIXELS`] allows.
    pub fn decode(&self, latent: &Tensor) -> Result<Tensor, ModelError> {
        let _guard = tch::no_grad_guard();
        Ok(self.decode_unclamped(latent)?.f_clamp(-1.0, 1.0)?)
    }

    /// [`WanVae::decode`] without the final clamp.
    pub fn decode_unclamped(&self, latent: &Tensor) -> Result<Tensor, ModelError> {
        let size = latent.size();
        let frames = size.get(2).copied().unwrap_or(0);
        if frames < 1 || size.len() != 5 {
            return Err(self.bad_input(format!("a latent of shape {size:?} (expected [B, {}, T≥1, h, w])", self.config.z_dim)));
        }
        let (step, spatial) = (self.config.temporal_factor(), self.config.spatial_factor());
        let latents_per_call = (WHOLE_CLIP_CHUNK_PIXELS / (step * size[3] * spatial * size[4] * spatial).max(1)).max(1);
        let mut stream = self.decoder_stream().unclamped();
        let mut chunks = Vec::new();
        let mut start = 0;
        while start < frames {
            let len = if start == 0 { 1 } else { latents_per_call.min(frames - start) };
            chunks.push(stream.push(&latent.f_narrow(2, start, len)?)?);
            start += len;
        }
        Ok(Tensor::f_cat(&chunks, 2)?)
    }

    pub fn encoder_stream(&self) -> EncodeStream<'_> {
        EncodeStream::new(self)
    }

    pub fn decoder_stream(&self) -> DecodeStream<'_> {
        DecodeStream::new(self)
    }
}
