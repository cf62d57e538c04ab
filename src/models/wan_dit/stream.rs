//! FlashVSR's streaming loop over the DiT (`flashvsr_tiny.py` `__call__` with `model_fn_wan_video`):
//! step 0 takes latent frames 0..5, every later step the next 2; each block keeps the key and value
//! windows of the last `int(kv_ratio)` segments. The frame positions of RoPE count from the stream's
//! start. A step either completes or changes nothing (a stop or an error leaves the cache as it was), and
//! the cache can be written down between steps and loaded into a fresh stream to resume a job.
use std::collections::HashMap;

use tch::{Kind, Tensor};

use super::block_mask::{local_window_mask, topk_entries};
use super::model::{Conditioning, StepInput, WanDit};
use super::rope::Rotation;
use super::self_attention::{KvWindows, StepLayout};
use super::sparse_attention::AttentionMode;
use super::trace::Trace;
use super::window::{WindowGrid, WINDOW_TOKENS};
use crate::models::nn::causal_cache::{saved_state_error, SavedTensors};
use crate::models::stop::StopFlag;
use crate::models::ModelError;

/// Latent frames of the first step and of every later one (the original asserts both).
pub const FIRST_STEP_FRAMES: i64 = 6;
pub const LATER_STEP_FRAMES: i64 = 2;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamSettings {
    /// Side of the local window neighbourhood (11 in the infer scripts).
    pub local_range: i64,
    /// Kept block entries per (head, query segment), as a multiple of `n_sp²` (`sparse_ratio·768·1280/(H·W)`).
    pub topk_ratio: f64,
    /// Segments of 2 latent frames kept in the KV cache: `int(kv_ratio)` (3.0 in the infer scripts).
    pub kv_ratio: f64,
    pub attention: AttentionMode,
}

impl StreamSettings {
    /// The infer scripts' arguments for an output of `target_hw` pixels: `local_range` 11, `kv_ratio` 3
    /// and `topk_ratio = 2.0·768·1280/(H·W)` (`sparse_ratio` 2), block-sparse attention.
    pub fn official(target_hw: [i64; 2]) -> Self {
        let [height, width] = target_hw;
        Self { local_range: 11, topk_ratio: 2.0 * 768.0 * 1280.0 / (height * width) as f64, kv_ratio: 3.0, attention: AttentionMode::BlockSparse }
    }

    fn kv_segments(&self) -> i64 {
        self.kv_ratio as i64
    }
}

pub struct WanDitStream<'a> {
    model: &'a WanDit,
    cond: Conditioning,
    settings: StreamSettings,
    caches: Vec<Option<KvWindows>>,
    /// Latent frames denoised so far: the RoPE frame position of the next step's first frame.
    frames_done: i64,
    /// Token rows and columns of the stream, fixed by its first step.
    token_hw: Option<[i64; 2]>,
    stop: StopFlag,
}

impl WanDit {
    /// A stream with an empty KV cache under `cond` (from [`WanDit::condition`]).
    pub fn stream(&self, cond: Conditioning, settings: StreamSettings) -> Result<WanDitStream<'_>, ModelError> {
        if settings.local_range < 1 || settings.kv_segments() < 1 || !(settings.topk_ratio.is_finite() && settings.topk_ratio > 0.0) {
            return Err(self.unsupported(format!("stream settings {settings:?} (local_range ≥ 1, kv_ratio ≥ 1, topk_ratio > 0)")));
        }
        let caches = (0..self.config().num_layers).map(|_| None).collect();
        Ok(WanDitStream { model: self, cond, settings, caches, frames_done: 0, token_hw: None, stop: StopFlag::never() })
    }
}

impl WanDitStream<'_> {
    /// One step: the noisy latent `[1, C, f, H, W]` (`f` = 6 first, then 2) and its LQ tokens
    /// `[1, f·H/2·W/2, dim]` (added before block 0) → `noise_pred` `[1, C_out, f, H, W]`.
    pub fn step(&mut self, latent: &Tensor, lq_tokens: &Tensor) -> Result<Tensor, ModelError> {
        self.step_traced(latent, lq_tokens, None)
    }

    /// [`Self::step`], recording each block's mask and block 0's intermediates in `trace`.
    pub fn step_traced(&mut self, latent: &Tensor, lq_tokens: &Tensor, mut trace: Option<&mut Trace>) -> Result<Tensor, ModelError> {
        let _guard = tch::no_grad_guard();
        let grid = self.checked_grid(latent, lq_tokens)?;
        let model = self.model;
        let [_, rows, columns] = grid.tokens;
        let device = model.device();
        let local = local_window_mask(grid.spatial(), self.settings.local_range, device)?;
        let topk = topk_entries(grid.per_segment(), self.settings.topk_ratio);
        if topk < 0 {
            return Err(model.unsupported(format!("topk_ratio {} on {} windows per segment: no block would be kept", self.settings.topk_ratio, grid.per_segment())));
        }
        let layout = StepLayout {
            grid,
            rotation: Rotation::for_grid(model.config().rope_split(), grid.tokens, self.frames_done, device)?,
            local,
            topk,
            kv_segments: self.settings.kv_segments(),
            mode: self.settings.attention,
        };
        if let Some(trace) = trace.as_deref_mut() {
            trace.record("local_attn_mask_u8".into(), &layout.local.f_to_kind(Kind::Uint8)?);
        }
        let input = StepInput { latent, lq_tokens, token_grid: grid.tokens, layout: &layout };
        let (noise_pred, next) = model.step(&input, &self.cond, &self.caches, &self.stop, trace)?;
        self.caches = next.into_iter().map(Some).collect();
        self.frames_done += grid.tokens[0];
        self.token_hw = Some([rows, columns]);
        Ok(noise_pred)
    }

    /// A step ends with `ModelError::Stopped` before its next block once `stop` is raised.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.stop = stop;
    }

    pub fn frames_done(&self) -> i64 {
        self.frames_done
    }

    pub fn settings(&self) -> &StreamSettings {
        &self.settings
    }

    fn checked_grid(&self, latent: &Tensor, lq_tokens: &Tensor) -> Result<WindowGrid, ModelError> {
        let cfg = self.model.config();
        let size = latent.size();
        let frames = if self.frames_done == 0 { FIRST_STEP_FRAMES } else { LATER_STEP_FRAMES };
        let [pt, ph, pw] = cfg.patch;
        let unsupported = |what: String| self.model.unsupported(what);
        let &[1, channels, f, height, width] = size.as_slice() else {
            return Err(unsupported(format!("a latent of shape {size:?} (expected [1, {}, f, H, W])", cfg.in_channels)));
        };
        let tokens = [f / pt, height / ph, width / pw];
        let divides = f % pt == 0 && height % ph == 0 && width % pw == 0;
        let Some(grid) = WindowGrid::of(tokens).filter(|_| divides && channels == cfg.in_channels && f == frames) else {
            let what = format!("a latent of shape {size:?} at frame {} (expected [1, {}, {frames}, H, W], H and W multiples of {})", self.frames_done, cfg.in_channels, 8 * ph.max(pw));
            return Err(unsupported(what));
        };
        if self.token_hw.is_some_and(|hw| hw != [tokens[1], tokens[2]]) {
            return Err(unsupported(format!("a latent of {height}×{width} in a stream of another size")));
        }
        let expected = [1, tokens.iter().product(), cfg.dim];
        if lq_tokens.size() != expected {
            return Err(unsupported(format!("LQ tokens of shape {:?} (expected {expected:?})", lq_tokens.size())));
        }
        Ok(grid)
    }

    /// The KV cache (each block's key and value windows, on the CPU), the frames done and the token grid,
    /// under `prefix`. The conditioning is not part of it: a resumed job makes it again from its context.
    pub fn save_state(&self, prefix: &str, into: &mut SavedTensors) {
        into.push((format!("{prefix}frames_done"), Tensor::from(self.frames_done)));
        if let Some(hw) = self.token_hw {
            into.push((format!("{prefix}token_hw"), Tensor::from_slice(&hw)));
        }
        for (index, cache) in self.caches.iter().enumerate() {
            if let Some(cache) = cache {
                into.push((format!("{prefix}block{index}.k"), cache.k.to_device(tch::Device::Cpu).contiguous()));
                into.push((format!("{prefix}block{index}.v"), cache.v.to_device(tch::Device::Cpu).contiguous()));
            }
        }
    }

    /// Takes what [`Self::save_state`] wrote under `prefix`; the stream goes on exactly where that one was.
    pub fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        let get = |name: &str| saved.get(&format!("{prefix}{name}")).ok_or_else(|| saved_state_error(format!("no `{prefix}{name}`")));
        let frames_done = get("frames_done")?.f_int64_value(&[])?;
        let token_hw = match saved.get(&format!("{prefix}token_hw")) {
            Some(hw) => Some([hw.f_int64_value(&[0])?, hw.f_int64_value(&[1])?]),
            None => None,
        };
        let (model, dim) = (self.model, self.model.config().dim);
        let mut caches = Vec::with_capacity(self.caches.len());
        for index in 0..self.caches.len() {
            let cache = match (saved.get(&format!("{prefix}block{index}.k")), saved.get(&format!("{prefix}block{index}.v")), frames_done) {
                (_, _, 0) => None,
                (Some(k), Some(v), _) if k.size() == v.size() && k.size().len() == 3 && k.size()[1..] == [WINDOW_TOKENS, dim] => {
                    let on_device = |t: &Tensor| t.f_to_device(model.device())?.f_to_kind(model.kind());
                    Some(KvWindows { k: on_device(k)?, v: on_device(v)? })
                }
                _ => return Err(saved_state_error(format!("no usable KV cache for block {index} (expected [windows, {WINDOW_TOKENS}, {dim}])"))),
            };
            caches.push(cache);
        }
        if frames_done < 0 || (frames_done > 0 && token_hw.is_none()) {
            return Err(saved_state_error(format!("{frames_done} frames done and no token grid")));
        }
        (self.caches, self.frames_done, self.token_hw) = (caches, frames_done, token_hw);
        Ok(())
    }
}
