//! Which frames each DiT step of FlashVSR works on (README sections 1, 2.5, 3, 11.1 item 3 of the
//! reference): step 0 denoises latent frames 0..6 from the LQ clips [1:5], [5:9], …, [21:25]; step s ≥ 1
//! latent frames 4+2s and 5+2s from the clips [8s+17 : 8s+21] and [8s+21 : 8s+25]. Latent frame j comes from
//! LQ frames 4j+1 .. 4j+4. Decoding each step's latents right after it (the authors' long-video pipeline,
//! identical to decoding all at the end) makes frames [prev, cur): cur = 21 after step 0, 8s+21 after step s,
//! conditioned and colour-fixed by the LQ frames of the same indices. Memory is then flat in clip length.
use std::ops::Range;

/// LQ frames per LQ-projection call (one latent frame of tokens).
pub const CLIP_FRAMES: i64 = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub index: i64,
    /// Latent frames this step denoises (the noise's slice).
    pub latents: Range<i64>,
    /// The LQ clips, in order, whose projections are this step's tokens.
    pub lq_clips: Vec<Range<i64>>,
    /// Output frames this step's latents decode to (the TCDecoder's condition and the colour fix's
    /// reference are the LQ frames of the same indices).
    pub frames: Range<i64>,
}

impl Step {
    pub fn new(index: i64) -> Step {
        let latents = if index == 0 { 0..6 } else { 4 + 2 * index..6 + 2 * index };
        let lq_clips = latents.clone().map(|j| 4 * j + 1..4 * j + 1 + CLIP_FRAMES).collect();
        let frames = if index == 0 { 0..21 } else { 8 * index + 13..8 * index + 21 };
        Step { index, latents, lq_clips, frames }
    }

    /// The LQ frames the step reads, its clips' and its frames' together: from frame 0 for step 0, from its
    /// frames' start (8s + 13) for step s ≥ 1, to its last clip's end.
    pub fn lq_reads(&self) -> Range<i64> {
        let start = self.frames.start.min(self.lq_clips[0].start);
        start..self.lq_clips.last().map_or(0, |c| c.end).max(self.frames.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_follow_the_original() {
        let first = Step::new(0);
        assert_eq!(first.latents, 0..6);
        assert_eq!(first.lq_clips, vec![1..5, 5..9, 9..13, 13..17, 17..21, 21..25]);
        assert_eq!(first.frames, 0..21);
        let second = Step::new(1);
        assert_eq!((second.latents.clone(), second.lq_clips.clone(), second.frames.clone()), (6..8, vec![25..29, 29..33], 21..29));
        // s ≥ 1: clips [8s+17 : 8s+21] and [8s+21 : 8s+25]; frames [8(s−1)+21, 8s+21).
        for s in 1..20 {
            let step = Step::new(s);
            assert_eq!(step.lq_clips, vec![8 * s + 17..8 * s + 21, 8 * s + 21..8 * s + 25]);
            assert_eq!(step.frames, 8 * (s - 1) + 21..8 * s + 21);
            assert_eq!(step.latents.start, Step::new(s - 1).latents.end, "every latent frame once");
        }
        assert_eq!((Step::new(0).lq_reads(), Step::new(1).lq_reads(), Step::new(2).lq_reads()), (0..25, 21..33, 29..41));
        // A 33-frame input (F = 33): 2 steps make the F − 4 = 29 frames.
        assert_eq!(Step::new(1).frames.end, 29);
    }
}
