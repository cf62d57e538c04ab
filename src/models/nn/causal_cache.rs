//! Streaming state of the causal video VAEs (Wan and SeedVR2): the frames each causal layer carries from one
//! chunk to the next, held in an explicit struct so a stream is just (model, cache).
use std::collections::HashMap;

use tch::Tensor;

use super::layout;
use crate::models::stop::StopFlag;
use crate::models::ModelError;

/// A stream's state written down (a checkpoint on disk, `executor::resume`): named tensors, each layer's
/// remembered frames and counters, that a stream of the same model loads to go on exactly where it was.
pub type SavedTensors = Vec<(String, Tensor)>;

/// Hands out one cache slot to every layer that needs history; used while a model is built.
#[derive(Debug, Default)]
pub struct SlotAllocator {
    next: usize,
}

impl SlotAllocator {
    pub fn allocate(&mut self) -> usize {
        let slot = self.next;
        self.next += 1;
        slot
    }

    pub fn count(&self) -> usize {
        self.next
    }
}

/// The remembered frames of every causal layer of one encoder or decoder, plus how many chunks have
/// gone through. The first chunk is special in Wan's temporal resamplers (it is never resampled in time).
#[derive(Debug)]
pub struct FeatureCache {
    slots: Vec<Option<Tensor>>,
    chunks_done: usize,
    row_split: Option<RowSplit>,
    /// Asked by every causal convolution before it runs: a long push stops between layers on a cancel.
    stop: StopFlag,
}

/// Exact spatial splitting: every large convolution of the stream runs in bands of output rows, each
/// reading its (kernel − stride) halo rows from the full input, so no band sees a seam and the result
/// equals the unsplit one. What it saves is the convolution's own working memory (the history-padded
/// copy of its input, the scratch of one big call): the activations between layers stay whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct RowSplit {
    /// Upper bound on the input plus output bytes of one band.
    pub max_band_bytes: i64,
}

impl RowSplit {
    /// Rows per band for a conv whose input and output rows take `bytes_per_row` together (at least 1).
    pub fn band_rows(&self, bytes_per_row: i64) -> i64 {
        (self.max_band_bytes / bytes_per_row.max(1)).max(1)
    }
}

impl FeatureCache {
    pub fn new(slot_count: usize) -> Self {
        Self { slots: (0..slot_count).map(|_| None).collect(), chunks_done: 0, row_split: None, stop: StopFlag::never() }
    }

    /// The stream as it is now: cached frames are never written in place (layers swap in new tensors),
    /// so shallow copies are a faithful checkpoint to go back to after a failed chunk.
    pub fn snapshot(&self) -> Self {
        Self {
            slots: self.slots.iter().map(|slot| slot.as_ref().map(Tensor::shallow_clone)).collect(),
            chunks_done: self.chunks_done,
            row_split: self.row_split,
            stop: self.stop.clone(),
        }
    }

    /// The flag the stream's layers ask (`check_stop`) from the next layer on.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.stop = stop;
    }

    /// `ModelError::Stopped` once the stream's stop is raised. A push stopped here leaves the cache
    /// part-way through a chunk: the stream is not pushed again (its job is over).
    pub fn check_stop(&self) -> Result<(), ModelError> {
        self.stop.check()
    }

    pub fn row_split(&self) -> Option<RowSplit> {
        self.row_split
    }

    pub fn set_row_split(&mut self, split: Option<RowSplit>) {
        self.row_split = split;
    }

    pub fn is_first_chunk(&self) -> bool {
        self.chunks_done == 0
    }

    pub fn chunks_done(&self) -> usize {
        self.chunks_done
    }

    /// The cache under `prefix`: every held slot (on the CPU), the slot and chunk counts. The row split is
    /// the caller's to keep: it is a choice of how to run, not state.
    pub fn save(&self, prefix: &str, into: &mut SavedTensors) {
        for (index, slot) in self.slots.iter().enumerate() {
            if let Some(frames) = slot {
                into.push((format!("{prefix}cache.{index}"), frames.to_device(tch::Device::Cpu).contiguous()));
                // A file keeps no strides; the convolutions' results depend on them in the last bits.
                if layout::is_channels_last(frames) {
                    into.push((format!("{prefix}cache.{index}.channels_last"), Tensor::from(1i64)));
                }
            }
        }
        into.push((format!("{prefix}cache.slots"), Tensor::from(self.slots.len() as i64)));
        into.push((format!("{prefix}cache.chunks"), Tensor::from(self.chunks_done as i64)));
    }

    /// Takes what [`FeatureCache::save`] wrote under `prefix` (the tensors already on the model's device).
    pub fn load(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        let count = |name: &str| -> Result<i64, ModelError> {
            let key = format!("{prefix}cache.{name}");
            let value = saved.get(&key).ok_or_else(|| saved_state_error(format!("no `{key}`")))?;
            Ok(value.f_int64_value(&[])?)
        };
        if count("slots")? != self.slots.len() as i64 {
            return Err(saved_state_error(format!("{} cache slots, the model has {}", count("slots")?, self.slots.len())));
        }
        for (index, slot) in self.slots.iter_mut().enumerate() {
            let key = format!("{prefix}cache.{index}");
            *slot = match saved.get(&key) {
                Some(frames) if saved.contains_key(&format!("{key}.channels_last")) => Some(layout::to_channels_last(frames)?),
                Some(frames) => Some(frames.shallow_clone()),
                None => None,
            };
        }
        self.chunks_done = count("chunks")? as usize;
        Ok(())
    }

    pub(crate) fn take(&mut self, slot: usize) -> Option<Tensor> {
        self.slots[slot].take()
    }

    pub(crate) fn store(&mut self, slot: usize, frames: Tensor) {
        self.slots[slot] = Some(frames);
    }

    pub(crate) fn finish_chunk(&mut self) {
        self.chunks_done += 1;
    }
}

/// A saved stream state that does not fit the stream loading it (another model, or a damaged file).
pub fn saved_state_error(what: String) -> ModelError {
    ModelError::Unsupported { model: "VAE stream".into(), what: format!("a saved state with {what}") }
}

/// The frames an encoder stream holds for its next group, saved under `prefix` when there are any.
pub fn save_pending(pending: Option<&Tensor>, prefix: &str, into: &mut SavedTensors) {
    if let Some(frames) = pending {
        into.push((format!("{prefix}pending"), frames.to_device(tch::Device::Cpu).contiguous()));
    }
}

pub fn load_pending(prefix: &str, saved: &HashMap<String, Tensor>) -> Option<Tensor> {
    saved.get(&format!("{prefix}pending")).map(Tensor::shallow_clone)
}
