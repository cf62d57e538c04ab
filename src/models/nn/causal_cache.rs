//! Streaming state of the causal video VAEs (Wan and SeedVR2): the frames each causal layer carries from one
//! chunk to the next, held in an explicit struct so a stream is just (model, cache).
use tch::Tensor;

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
        Self { slots: (0..slot_count).map(|_| None).collect(), chunks_done: 0, row_split: None }
    }

    /// The stream as it is now: cached frames are never written in place (layers swap in new tensors),
    /// so shallow copies are a faithful checkpoint to go back to after a failed chunk.
    pub fn snapshot(&self) -> Self {
        Self {
            slots: self.slots.iter().map(|slot| slot.as_ref().map(Tensor::shallow_clone)).collect(),
            chunks_done: self.chunks_done,
            row_split: self.row_split,
        }
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
