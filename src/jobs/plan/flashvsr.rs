//! The plan of a `restore` run by a FlashVSR model: the release and decoder, the frames the streaming run
//! made and how they were fitted to the model's sides.
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ResumedFrom;
use crate::models::restore::colorfix::ColorFix;
use crate::models::restore::prepare::Fit;
use crate::tiling::flashvsr_tiles::FlashVsrTiles;

/// `restore` with a FlashVSR model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FlashVsrPlan {
    /// The release the model ran as: `1.0` or `1.1` (from its folder's name).
    pub flashvsr_release: String,
    /// `tiny` (the folder's TCDecoder) or `full` (the Wan 2.1 VAE named in `vae`).
    pub decoder: String,
    /// The Wan 2.1 VAE that decoded (`full`); absent for `tiny`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vae: Option<String>,
    /// The models' weights as held, in bytes, and the DiT's among them (an fp8 DiT's linear weights at one
    /// byte each).
    pub model_weight_bytes: u64,
    pub dit_weight_bytes: u64,
    /// The attention over the KV cache: `block-sparse` (the original's locality-constrained masks).
    pub attention: String,
    /// Frames read and written (every input frame).
    pub input_frames: u64,
    pub frames: u64,
    /// Copies of the last frame appended to the clip (the streaming runs in steps of 8 frames and reads 4
    /// past the last it makes); their frames are cut off the output.
    pub padded_frames: u64,
    /// DiT steps run: the first makes 21 frames, each later one 8.
    pub steps: u64,
    /// `[height, width]` of the output (4× the input, or the centre window `crop` kept).
    pub output: [i64; 2],
    /// `[height, width]` the model worked at: 128-multiples.
    pub model_size: [i64; 2],
    /// `pad`: the 4× frame's last rows and columns repeated out to `model_size` and cut off after; `crop`:
    /// the original's centre window.
    pub fit: Fit,
    pub seed: i64,
    pub color_fix: ColorFix,
    /// The frame's spatial tiles, each a run of its own, cross-faded: when a step on the whole frame did not
    /// fit the memory budget; absent for the whole frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiles: Option<FlashVsrTiles>,
    /// The planner's estimate of a step's memory (on the tiles, with every run's KV cache).
    pub estimated_peak_bytes: u64,
    /// The working-memory budget planned for; null without one.
    pub memory_budget_mib: Option<u64>,
    pub fits_budget: bool,
    /// The run went on from where a stopped one had got to; absent when it started from the beginning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<ResumedFrom>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::jobs::plan::JobPlan;

    #[test]
    fn a_flashvsr_plan_reads_back_as_itself_and_says_its_frames() {
        let plan = FlashVsrPlan {
            flashvsr_release: "1.1".into(),
            decoder: "full".into(),
            vae: Some("wan21".into()),
            model_weight_bytes: 1 << 20,
            dit_weight_bytes: 1 << 19,
            attention: "block-sparse".into(),
            input_frames: 29,
            frames: 29,
            padded_frames: 4,
            steps: 2,
            output: [160, 256],
            model_size: [256, 256],
            fit: Fit::Pad,
            seed: 0,
            color_fix: ColorFix::Adain,
            tiles: Some(FlashVsrTiles { rows: 1, cols: 2, tile: [256, 256], overlap: 128 }),
            estimated_peak_bytes: 1 << 30,
            memory_budget_mib: Some(800),
            fits_budget: false,
            resumed_from: Some(ResumedFrom { frame: 21, batch: Some(1), tiles: None, saved_s: 1.5 }),
        };
        let json = serde_json::to_value(JobPlan::FlashVsr(plan.clone())).unwrap();
        assert_eq!(json["flashvsr_release"], "1.1");
        assert_eq!(json["resumed_from"], json!({"frame": 21, "batch": 1, "saved_s": 1.5}));
        let read = JobPlan::from_value(json);
        assert_eq!(read, JobPlan::FlashVsr(plan));
        assert_eq!(read.frames(), Some(29));
    }
}
