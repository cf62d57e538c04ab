//! `prepend_frames`: the ComfyUI front-end puts the clip's frames N..1 before it, mirrored around frame 0,
//! so the first batch has something before the real first frame; the output drops them again. The frames
//! arrive in chunks, so the first ones are held until the mirror can be made.
use tch::Tensor;

/// Which input frames, in order, make the lead of `count` frames before a clip of `available` frames
/// (`available` > 0): frames `count, …, 1`, where a frame past the clip's end is its last (the
/// front-end's: the last frame repeated, then frames `T − 1 … 1`).
pub fn mirrored_lead(count: usize, available: usize) -> Vec<usize> {
    (1..=count).rev().map(|i| i.min(available - 1)).collect()
}

/// Holds the first frames until the lead can be made, then passes frames through.
pub struct PrependMirror {
    count: usize,
    held: Vec<Tensor>,
    led: bool,
}

impl PrependMirror {
    pub fn new(count: i64) -> Self {
        Self { count: count.max(0) as usize, held: Vec::new(), led: false }
    }

    /// The next input frame in; the frames for the batches out, in order (none while it still holds).
    pub fn push(&mut self, frame: Tensor) -> Vec<Tensor> {
        if self.led {
            return vec![frame];
        }
        self.held.push(frame);
        // Frame `count` is the lead's first: once it is here, everything the lead needs is.
        if self.held.len() > self.count {
            return self.release();
        }
        Vec::new()
    }

    /// The end of the input: a clip shorter than the lead still gets it, made from what there is.
    pub fn finish(&mut self) -> Vec<Tensor> {
        if self.led || self.held.is_empty() {
            return Vec::new();
        }
        self.release()
    }

    fn release(&mut self) -> Vec<Tensor> {
        self.led = true;
        let held = std::mem::take(&mut self.held);
        let lead = mirrored_lead(self.count, held.len()).into_iter().map(|i| held[i].shallow_clone());
        lead.collect::<Vec<_>>().into_iter().chain(held).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn the_lead_mirrors_around_the_first_frame() {
        assert_eq!(mirrored_lead(3, 10), [3, 2, 1]);
        assert_eq!(mirrored_lead(0, 10), Vec::<usize>::new());
        // Past the clip's end: the last frame (2) repeated count − T + 1 = 3 times, then frames 2..1.
        assert_eq!(mirrored_lead(5, 3), [2, 2, 2, 2, 1]);
        assert_eq!(mirrored_lead(2, 1), [0, 0]);
    }

    fn values(frames: &[Tensor]) -> Vec<i64> {
        frames.iter().map(|f| f.int64_value(&[])).collect()
    }

    #[test]
    fn frames_come_out_led_by_the_mirror_however_they_arrive() {
        let frame = |i: i64| Tensor::from(i).to_kind(Kind::Int64).to_device(Device::Cpu);
        for (count, clip, expected) in [
            (2, 5, vec![2, 1, 0, 1, 2, 3, 4]),
            (0, 3, vec![0, 1, 2]),
            (4, 2, vec![1, 1, 1, 1, 0, 1]),
        ] {
            let mut mirror = PrependMirror::new(count);
            let mut out = Vec::new();
            for i in 0..clip {
                out.extend(mirror.push(frame(i)));
            }
            out.extend(mirror.finish());
            assert_eq!(values(&out), expected, "{count} before {clip} frames");
        }
    }
}
