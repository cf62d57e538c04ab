//! Long clips in bounded memory: the restoration runs on temporal batches of `4n + 1` frames that
//! overlap by a few frames; each overlapped frame is a linear cross-fade of the two batches' versions,
//! so batch borders do not show as jumps. Pure bookkeeping over frame tensors.
use std::collections::VecDeque;

use tch::Tensor;

/// Frames per DiT call and frames shared by consecutive batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BatchShape {
    pub frames: i64,
    pub overlap: i64,
}

impl BatchShape {
    /// The step between batch starts.
    pub fn stride(&self) -> i64 {
        self.frames - self.overlap
    }

    /// Batches a clip of `total` frames takes.
    pub fn batches(&self, total: i64) -> i64 {
        if total <= self.frames {
            1
        } else {
            1 + (total - self.frames + self.stride() - 1) / self.stride()
        }
    }
}

/// Collects prepared input frames (`[3, H, W]` each) into batches.
pub struct BatchBuffer {
    shape: BatchShape,
    frames: VecDeque<Tensor>,
    /// Frames at the front that the previous batch already restored (the overlap it handed on).
    seen: i64,
}

impl BatchBuffer {
    pub fn new(shape: BatchShape) -> Self {
        Self { shape, frames: VecDeque::new(), seen: 0 }
    }

    pub fn push(&mut self, frame: Tensor) {
        self.frames.push_back(frame);
    }

    /// Frames pushed and not yet let go of: the next batch starts this many frames before the last pushed.
    pub fn buffered(&self) -> u64 {
        self.frames.len() as u64
    }

    /// The next batch, `[3, n, H, W]`, once a whole one is buffered, or (at the end of the input) what is
    /// left if it holds a frame no batch has covered yet.
    pub fn next_batch(&mut self, input_ended: bool) -> Option<Tensor> {
        let buffered = self.frames.len() as i64;
        let ready = buffered >= self.shape.frames || (input_ended && buffered > self.seen);
        if !ready {
            return None;
        }
        let take = buffered.min(self.shape.frames) as usize;
        let batch: Vec<&Tensor> = self.frames.iter().take(take).collect();
        let batch = Tensor::stack(&batch, 1);
        let keep = (self.shape.overlap as usize).min(take);
        self.frames.drain(..take - keep);
        self.seen = keep as i64;
        Some(batch)
    }

    /// Frames the next batch starts with that the last one already restored.
    pub fn overlap_with_previous(&self) -> i64 {
        self.seen
    }
}

/// Blends each batch's leading frames into the previous batch's trailing ones.
pub struct TemporalBlender {
    /// Frames of each batch kept back for the next batch's blend.
    hold: i64,
    /// The previous batch's last frames, `[hold, 3, H, W]`, waiting for their blend.
    held: Option<Tensor>,
}

impl TemporalBlender {
    pub fn new(shape: BatchShape) -> Self {
        Self { hold: shape.overlap, held: None }
    }

    /// `restored`: a batch's frames `[n, 3, H, W]`, of which the first `overlap` repeat held frames.
    /// Returns the frames that are final; the last few wait for the next batch (or [`Self::finish`]).
    pub fn push(&mut self, restored: &Tensor, overlap: i64) -> Tensor {
        let n = restored.size()[0];
        let mut out = restored.shallow_clone();
        if let Some(held) = self.held.take() {
            let shared = overlap.min(held.size()[0]).min(n);
            let ramp = Tensor::arange_start(1, shared + 1, (tch::Kind::Float, restored.device())) / (shared + 1) as f64;
            let ramp = ramp.view([shared, 1, 1, 1]);
            let blended = held.narrow(0, 0, shared) * (1.0 - &ramp) + restored.narrow(0, 0, shared) * &ramp;
            out = Tensor::cat(&[blended, restored.narrow(0, shared, n - shared)], 0);
        }
        let hold = self.hold.min(n);
        if hold > 0 {
            self.held = Some(out.narrow(0, n - hold, hold).copy());
        }
        out.narrow(0, 0, n - hold)
    }

    /// The held frames, final once no batch follows.
    pub fn finish(&mut self) -> Option<Tensor> {
        self.held.take()
    }

    /// The frames held for the next batch's blend, as a checkpoint keeps them.
    pub fn held(&self) -> Option<&Tensor> {
        self.held.as_ref()
    }

    /// Holds what a checkpoint kept, as if the batches before it had just been pushed.
    pub fn resume_with(&mut self, held: Option<Tensor>) {
        self.held = held;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    fn frame(value: f64) -> Tensor {
        Tensor::full([3, 2, 2], value, (Kind::Float, Device::Cpu))
    }

    /// Feeds `total` frames numbered 0.. through buffer and blender with an identity "restoration" that
    /// adds 100 × the batch index, and returns the value of every output frame.
    fn run(shape: BatchShape, total: i64) -> Vec<f64> {
        let (mut buffer, mut blender) = (BatchBuffer::new(shape), TemporalBlender::new(shape));
        let (mut out, mut batch_index) = (Vec::new(), 0);
        fn values(frames: &Tensor) -> Vec<f64> {
            (0..frames.size()[0]).map(|i| frames.get(i).mean(Kind::Float).double_value(&[])).collect()
        }
        let mut drain = |buffer: &mut BatchBuffer, blender: &mut TemporalBlender, ended: bool, out: &mut Vec<f64>| loop {
            let overlap = buffer.overlap_with_previous();
            let Some(batch) = buffer.next_batch(ended) else { break };
            let restored = batch.transpose(0, 1) + 100.0 * batch_index as f64;
            batch_index += 1;
            out.extend(values(&blender.push(&restored, overlap)));
        };
        for i in 0..total {
            buffer.push(frame(i as f64));
            drain(&mut buffer, &mut blender, false, &mut out);
        }
        drain(&mut buffer, &mut blender, true, &mut out);
        if let Some(rest) = blender.finish() {
            out.extend(values(&rest));
        }
        out
    }

    #[test]
    fn every_frame_comes_out_once_in_order() {
        for (frames, overlap, total) in [(5, 0, 12), (5, 2, 12), (9, 4, 30), (5, 2, 3), (9, 4, 9), (9, 4, 10), (1, 0, 4)] {
            let shape = BatchShape { frames, overlap };
            let values = run(shape, total);
            assert_eq!(values.len() as i64, total, "{shape:?}, {total} frames");
            let batches = shape.batches(total) as f64;
            assert!(values.last().unwrap() - (total - 1) as f64 >= 100.0 * (batches - 1.0) - 1e-4, "{shape:?} {total}: the last batch made the last frame");
            for (i, v) in values.iter().enumerate() {
                // Each frame is its own input plus a blend of batch offsets: never another frame's content.
                let offset = v - i as f64;
                assert!((-1e-4..=100.0 * (batches - 1.0) + 1e-4).contains(&offset), "{shape:?}: frame {i} is {v}");
            }
        }
    }

    #[test]
    fn overlapped_frames_cross_fade_between_batches() {
        // Batch 0 covers frames 0..5 (+0), batch 1 frames 3..8 (+100): frames 3 and 4 blend 1/3 and 2/3 in.
        let values = run(BatchShape { frames: 5, overlap: 2 }, 8);
        let expected = [0.0, 1.0, 2.0, 3.0 + 100.0 / 3.0, 4.0 + 200.0 / 3.0, 105.0, 106.0, 107.0];
        for (v, e) in values.iter().zip(expected) {
            assert!((v - e).abs() < 1e-4, "{values:?}");
        }
    }
}
