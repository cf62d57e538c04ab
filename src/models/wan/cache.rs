//! Streaming state of the causal encoder and decoder: the frames each causal layer carries from one
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
}

impl FeatureCache {
    pub fn new(slot_count: usize) -> Self {
        Self { slots: (0..slot_count).map(|_| None).collect(), chunks_done: 0 }
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
