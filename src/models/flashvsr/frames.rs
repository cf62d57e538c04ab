//! How many frames FlashVSR runs on. The original (`prepare_input_tensor`) appends 4 copies of the last
//! frame and cuts the list to the largest `8n + 1`, `F = ((N0 + 3) // 8)·8 + 1`, and writes `F − 4` frames:
//! up to 7 tail frames are dropped, and fewer than 21 frames (one DiT step) fail. The box keeps every frame
//! by default: it appends copies of the last frame up to the smallest `F = 8n + 1` with `F − 4 ≥ N0` (and
//! `F ≥ 25`), and writes the first `N0` of the `F − 4` frames made. For `N0 % 8 == 5` (21, 29, …) and at
//! least 21 frames both are the original's exactly.

/// Latent frames of the first DiT step (0..5) and of every later one: `F = 8·steps + 17`.
const FIRST_STEP_INPUT_FRAMES: u64 = 25;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramePlan {
    /// Frames given.
    pub input: u64,
    /// Frames the pipeline runs on (`8n + 1`): the input, cut or extended by copies of its last frame.
    pub padded: u64,
    /// Frames written: the first `output` of the `padded − 4` the pipeline makes.
    pub output: u64,
}

impl FramePlan {
    /// Every input frame in the output (the box's default).
    pub fn keeping_every_frame(input: u64) -> FramePlan {
        let least = (input + 4).max(FIRST_STEP_INPUT_FRAMES);
        let padded = (least - 1).div_ceil(8) * 8 + 1;
        FramePlan { input, padded, output: input }
    }

    /// The original's count; `None` below 21 frames, which it cannot run.
    pub fn as_the_original(input: u64) -> Option<FramePlan> {
        let padded = (input + 3) / 8 * 8 + 1;
        (padded >= FIRST_STEP_INPUT_FRAMES).then_some(FramePlan { input, padded, output: padded - 4 })
    }

    /// DiT steps: 6 latent frames, then 2 per step.
    pub fn steps(&self) -> u64 {
        (self.padded - 1) / 8 - 2
    }

    /// Latent frames denoised: `(F − 1) / 4`.
    pub fn latent_frames(&self) -> u64 {
        (self.padded - 1) / 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_original_drops_tail_frames_and_needs_21() {
        // README section 1: 29 frames → F = 33 (frames 29..32 copies of 28), 29 written; 30 → 33, 29 written.
        assert_eq!(FramePlan::as_the_original(29), Some(FramePlan { input: 29, padded: 33, output: 29 }));
        assert_eq!(FramePlan::as_the_original(30).map(|p| p.output), Some(29));
        assert_eq!(FramePlan::as_the_original(21), Some(FramePlan { input: 21, padded: 25, output: 21 }));
        assert_eq!(FramePlan::as_the_original(20), None);
        assert_eq!(FramePlan::as_the_original(29).unwrap().steps(), 2);
        assert_eq!(FramePlan::as_the_original(29).unwrap().latent_frames(), 8);
    }

    #[test]
    fn the_box_keeps_every_frame() {
        for input in 1..200 {
            let plan = FramePlan::keeping_every_frame(input);
            assert_eq!((plan.padded - 1) % 8, 0, "{plan:?}");
            assert!(plan.padded - 4 >= input && plan.padded >= 25, "{plan:?}");
            assert!(plan.padded - 8 < (input + 4).max(25), "the smallest such count: {plan:?}");
            if input >= 21 && input % 8 == 5 {
                assert_eq!(Some(plan), FramePlan::as_the_original(input), "the original's own count");
            }
        }
        assert_eq!(FramePlan::keeping_every_frame(1), FramePlan { input: 1, padded: 25, output: 1 });
        assert_eq!(FramePlan::keeping_every_frame(30), FramePlan { input: 30, padded: 41, output: 30 });
    }
}
