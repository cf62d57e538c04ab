//! How a finished job ran, one type per op: what the executor chose (chunks, tiles, batches, the memory
//! budget) and what had to give (out-of-memory fallbacks). Stored with the job and served as its `plan`.
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, Schema};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::models::nn::causal_cache::RowSplit;
use crate::models::restore::colorfix::ColorFix;
use crate::models::restore::prepare::Fit;
use crate::tiling::dit_memory::BatchMemory;
use crate::tiling::dit_tiles::DitTiles;
use crate::tiling::grid::SpatialTiles;
use crate::tiling::planner::Plan as TilePlan;

mod flashvsr;

pub use flashvsr::FlashVsrPlan;

/// The typed plans, each named once: the enum's variants, the order `from_value` tries them in and the
/// schema's `anyOf` and components all come from this one list, so an op's plan is one line of it.
macro_rules! typed_plans {
    ($($variant:ident($plan:ident)),+ $(,)?) => {
        /// One variant per op; its JSON is the plan's own (untagged). The schema is written out below.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        #[serde(untagged)]
        pub enum JobPlan {
            $($variant($plan),)+
            /// A plan stored by an earlier version that the types above do not reproduce (see `from_value`).
            Other(Value),
        }

        impl JobPlan {
            /// Each typed plan that `value` deserializes as, in the list's order.
            fn typed_readings(value: &Value) -> Vec<JobPlan> {
                [$($plan::deserialize(value).ok().map(JobPlan::$variant)),+].into_iter().flatten().collect()
            }

            /// The typed plans' schema names and schemas, for the document's components.
            fn typed_schemas() -> Vec<(String, RefOr<Schema>)> {
                vec![$(($plan::name().into_owned(), $plan::schema())),+]
            }

            /// The schemas the typed plans refer to (their fields' own types).
            fn nested_schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
                $($plan::schemas(schemas);)+
            }
        }
    };
}

typed_plans!(Upscale(UpscalePlan), Vae(VaePlan), Restore(RestorePlan), Interpolate(InterpolatePlan), FlashVsr(FlashVsrPlan));

/// `upscale`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UpscalePlan {
    /// Frames per chunk through the model.
    pub chunk_frames: usize,
    /// Tile core side in input pixels (0 = whole frames).
    pub tile: i64,
    /// Context pixels per tile side.
    pub overlap: i64,
    pub receptive_radius: i64,
    /// Tiled output equals untiled output.
    pub exact: bool,
    /// Inexact tiles are blended with raised-cosine weights across their shared context.
    pub blend: bool,
    pub tiles_per_frame: usize,
    pub scale: i64,
    /// Frames written.
    pub frames: u64,
    /// Out-of-memory retries, in order, in words (a chunk split in halves, a smaller tile); empty when none
    /// were needed.
    pub fallbacks: Vec<String>,
    /// Worker threads each chunk's frames were split between (`cpu_frame_workers`; 1 on CUDA).
    pub frame_workers: usize,
    /// With `interpolate=N`: the re-timing done before the upscaler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpolation: Option<InterpolatePlan>,
    /// The run went on from where a stopped one had got to; absent when it started from the beginning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<ResumedFrom>,
}

/// `interpolate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InterpolatePlan {
    /// The input's frame rate and the output's, as `N/D`.
    pub input_fps: String,
    pub output_fps: String,
    /// Frames read and written.
    pub input_frames: u64,
    pub frames: u64,
    /// Written frames the model made (the others are input frames, at their own time or held).
    pub interpolated: u64,
    /// The input frames that start a new scene: no blended frame is made between one and the frame before.
    pub scene_cuts: Vec<u64>,
    pub scene_threshold: f64,
    /// The resolution the motion is estimated at, relative to the frame's (RIFE's `--scale`).
    pub flow_scale: f64,
    /// Frame pairs per model call.
    pub pairs_per_call: usize,
    /// The run went on from where a stopped one had got to; absent when it started from the beginning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<ResumedFrom>,
}

/// `vae_encode`, `vae_decode`, `vae_reconstruct`: what the planner chose, and the op's own part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VaePlan {
    /// Pixel frames per push through the model.
    pub chunk_frames: usize,
    /// Latent frames per push the planner chose.
    pub latent_frames_per_chunk: i64,
    pub temporal_chunking: String,
    /// Null for whole frames.
    pub spatial_tiles: Option<SpatialTiles>,
    /// How tiles are joined; null for whole frames.
    pub blending: Option<String>,
    /// The planner's estimate of working memory; null without a budget.
    pub estimated_peak_bytes: Option<u64>,
    pub fits_budget: bool,
    /// The working-memory budget the plan was made for, in MiB (smaller than the job's after an
    /// out-of-memory re-plan; see fallbacks); null without a budget.
    pub memory_budget_mib: Option<u64>,
    /// Decode: tiles run one at a time over the whole clip (one tile's causal cache alive), spooled to disk
    /// beside the output and blended per push; chosen when one frame's caches exceed the budget.
    pub tile_major: bool,
    /// Each push computed one frame at a time through the model (TAEHV): chosen before tiles when a
    /// whole push does not fit the budget; exact, one frame's activations alive.
    #[serde(default)]
    pub frame_by_frame: bool,
    /// Pixels per latent cell along H and W.
    pub spatial_factor: i64,
    /// Pixel frames per latent frame after the first.
    pub temporal_factor: i64,
    /// The model's weights as held, in bytes: not part of the working memory above.
    #[serde(default)]
    pub model_weight_bytes: u64,
    /// What the model made from its weights at load and keeps, in bytes (the Winograd kernels of CPU
    /// float32 convolutions, 16/9 of their weights; 0 elsewhere): not part of the working memory either.
    #[serde(default)]
    pub model_derived_bytes: u64,
    /// Out-of-memory retries, in order, in words (the job re-planned for a smaller budget and started again,
    /// a push split in halves, row-split convolutions); empty when none were needed.
    pub fallbacks: Vec<String>,
    #[serde(flatten)]
    pub op: VaeOpPlan,
}

/// The part of a VAE plan that depends on the op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum VaeOpPlan {
    Encode(VaeEncodePlan),
    Decode(VaeDecodePlan),
    Reconstruct(VaeReconstructPlan),
}

/// `vae_encode`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VaeEncodePlan {
    /// `[1, C, t, h, w]`.
    pub latent_shape: Vec<i64>,
    /// Copies of the last frame added to reach 1 + 4k.
    pub padded_frames: i64,
    pub normalized: bool,
    /// Null when the convolutions ran whole.
    pub row_split: Option<RowSplit>,
    /// The run went on from where a stopped one had got to (`frame`: latent frames kept); absent when it
    /// started from the beginning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<ResumedFrom>,
}

/// `vae_decode`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VaeDecodePlan {
    /// `[1, C, t, h, w]`.
    pub latent_shape: Vec<i64>,
    pub latent_frames_per_push: i64,
    /// Frames written.
    pub frames: u64,
    /// Null when the convolutions ran whole.
    pub row_split: Option<RowSplit>,
    /// The run went on from where a stopped one had got to; absent when it started from the beginning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<ResumedFrom>,
}

/// `vae_reconstruct`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VaeReconstructPlan {
    /// Frames written.
    pub frames: u64,
    pub row_split: RowSplitHalves,
    /// The run went on from where a stopped one had got to; absent when it started from the beginning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<ResumedFrom>,
}

/// The row split each half of a reconstruct ended with; null for a half whose convolutions ran whole.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RowSplitHalves {
    pub encoder: Option<RowSplit>,
    pub decoder: Option<RowSplit>,
}

/// `restore`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RestorePlan {
    /// Frames written.
    pub frames: u64,
    /// Frames per DiT call.
    pub batch_frames: i64,
    /// Frames shared and cross-faded by consecutive batches.
    pub batch_overlap: i64,
    /// DiT calls made.
    pub batches: i64,
    /// `[height, width]` the input was resized to.
    pub resize: [i64; 2],
    /// `[height, width]` of the output: the resized frames cropped to multiples of 16 (`fit` crop), or
    /// the resized frames whole (`fit` pad).
    pub output: [i64; 2],
    /// How sides that were not multiples of 16 were handled.
    pub fit: Fit,
    /// `[rows, columns]` of edge copies added below and to the right of the output's frames for the model
    /// (`fit` pad; 0 with crop), and cut off its output.
    pub padding: [i64; 2],
    /// `[t, h, w]` of one batch's latent.
    pub latent_grid: [i64; 3],
    /// The noise seed of the first batch.
    pub seed: i64,
    pub color_fix: ColorFix,
    /// Mirrored frames run before the clip and dropped from the output.
    pub prepend_frames: i64,
    /// The noise added to the input frames before the encode (0: none).
    pub input_noise_scale: f64,
    /// The noise mixed into the DiT's condition latent (0: none).
    pub latent_noise_scale: f64,
    /// The input frames that start a new scene, and so a new batch: no batch or cross-fade spans a cut.
    pub scene_cuts: Vec<u64>,
    pub scene_threshold: f64,
    /// A scene's shorter last batch was padded to `batch_frames`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub uniform_batches: bool,
    pub dit: DitPlan,
    /// The plans the VAE's last batch ran with.
    pub vae: VaeStagePlans,
    /// The decode's spatial tiles; null for whole frames.
    pub spatial_tiles: Option<SpatialTiles>,
    /// The DiT's spatial tiles, when a batch's latent did not fit its working memory in one piece;
    /// absent when the DiT ran on the whole latent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dit_tiles: Option<DitTiles>,
    pub device_memory: DeviceMemoryPlan,
    /// Out-of-memory retries, in order, in words, each naming its stage; empty when none were needed.
    pub fallbacks: Vec<String>,
    /// The run went on from where a stopped one had got to; absent when it started from the beginning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<ResumedFrom>,
}

/// Where a run went on from the checkpoint of one that had stopped (a server stop, a kill, a lost worker).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ResumedFrom {
    /// Output frames already written, kept and not made again.
    pub frame: u64,
    /// Restore: the batch the run went on with (batches before it were not restored again); FlashVSR: the
    /// DiT step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<i64>,
    /// A tile-major VAE decode: the spatial tiles it had decoded over the whole clip, kept and not decoded
    /// again (the tile in hand went on from its last checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiles: Option<usize>,
    /// Seconds the stopped run had worked for what was kept: the time saved.
    pub saved_s: f64,
}

/// The DiT that ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DitPlan {
    pub variant: String,
    pub blocks: i64,
    pub dim: i64,
    /// `resident`: the blocks stay on the device; `swapped`: they are kept on the host and each goes to the
    /// device for its own forward.
    pub block_placement: String,
    /// Bytes of block weights kept on the host (0 when resident).
    pub host_block_bytes: u64,
}

/// A restore's VAE stages, each null until it ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VaeStagePlans {
    pub encode: Option<TilePlan>,
    pub decode: Option<TilePlan>,
}

/// The device-memory estimate of one restore batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeviceMemoryPlan {
    /// Null without a budget.
    pub budget_bytes: Option<u64>,
    pub dit_weight_bytes: u64,
    pub estimated_batch_bytes: BatchMemory,
    /// Null without a budget.
    pub fits: Option<bool>,
}

impl JobPlan {
    /// The typed plan that reproduces `value` exactly, else `Other(value)`: a plan written by an earlier
    /// version is served as it was stored, never cut down to the keys these types know nor refused.
    pub fn from_value(value: Value) -> JobPlan {
        JobPlan::typed_readings(&value)
            .into_iter()
            .find(|plan| serde_json::to_value(plan).is_ok_and(|again| again == value))
            .unwrap_or(JobPlan::Other(value))
    }

    /// Frames written, when the plan says.
    pub fn frames(&self) -> Option<u64> {
        match self {
            JobPlan::Upscale(plan) => Some(plan.frames),
            JobPlan::Vae(plan) => match &plan.op {
                VaeOpPlan::Decode(op) => Some(op.frames),
                VaeOpPlan::Reconstruct(op) => Some(op.frames),
                VaeOpPlan::Encode(_) => None,
            },
            JobPlan::Restore(plan) => Some(plan.frames),
            JobPlan::Interpolate(plan) => Some(plan.frames),
            JobPlan::FlashVsr(plan) => Some(plan.frames),
            JobPlan::Other(value) => value["frames"].as_u64(),
        }
    }
}

/// `anyOf` rather than the `oneOf` a derive would write: an earlier version's plan is any object, so it
/// overlaps the typed ones.
impl PartialSchema for JobPlan {
    fn schema() -> RefOr<Schema> {
        let earlier = ObjectBuilder::new().description(Some("A plan stored by an earlier version, as it was stored."));
        let typed = JobPlan::typed_schemas().into_iter().map(|(name, _)| Ref::from_schema_name(name));
        typed.fold(AnyOfBuilder::new().description(Some("Which one follows the job's op.")), AnyOfBuilder::item).item(earlier).into()
    }
}

impl ToSchema for JobPlan {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.extend(JobPlan::typed_schemas());
        JobPlan::nested_schemas(schemas);
    }
}

impl<'de> Deserialize<'de> for JobPlan {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<JobPlan, D::Error> {
        Value::deserialize(deserializer).map(JobPlan::from_value)
    }
}

impl VaePlan {
    /// Fallbacks that happened before this plan's own (the re-plans of the whole job) go first.
    pub fn prepend_fallbacks(&mut self, earlier: &[String]) {
        self.fallbacks.splice(0..0, earlier.iter().cloned());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vae_plan(op: VaeOpPlan) -> VaePlan {
        VaePlan {
            chunk_frames: 5,
            latent_frames_per_chunk: 2,
            temporal_chunking: "exact (causal cache)".into(),
            spatial_tiles: Some(SpatialTiles::square(16, 4)),
            blending: Some("raised cosine over the overlap".into()),
            estimated_peak_bytes: Some(1 << 30),
            fits_budget: true,
            memory_budget_mib: Some(2048),
            tile_major: false,
            frame_by_frame: false,
            spatial_factor: 8,
            temporal_factor: 4,
            model_weight_bytes: 1000,
            model_derived_bytes: 160,
            fallbacks: vec!["decode: out of memory on 2 latent frames: 1 + 1".into()],
            op,
        }
    }

    /// The JSON the VAE plans were built as before they were typed (`json!` in `executor::vae`), which
    /// `static/js/plan-table.js` and the tests read: the typed plans must serialise to exactly this.
    fn vae_json(op: Value) -> Value {
        let mut plan = json!({
            "chunk_frames": 5, "latent_frames_per_chunk": 2, "temporal_chunking": "exact (causal cache)",
            "spatial_tiles": {"tile_height_latent": 16, "tile_width_latent": 16, "overlap_latent": 4},
            "blending": "raised cosine over the overlap", "estimated_peak_bytes": 1u64 << 30, "fits_budget": true,
            "memory_budget_mib": 2048, "tile_major": false, "frame_by_frame": false, "spatial_factor": 8, "temporal_factor": 4,
            "model_weight_bytes": 1000, "model_derived_bytes": 160,
            "fallbacks": ["decode: out of memory on 2 latent frames: 1 + 1"],
        });
        plan.as_object_mut().unwrap().extend(op.as_object().unwrap().clone());
        plan
    }

    fn restore_plan() -> RestorePlan {
        let tiles = SpatialTiles { tile_height_latent: 8, tile_width_latent: 14, overlap_latent: 2 };
        let tile_plan =
            |tile_major| TilePlan { latent_frames_per_chunk: 2, spatial: Some(tiles), estimated_peak_bytes: 9000, fits: true, tile_major, frame_by_frame: false };
        RestorePlan {
            frames: 7,
            batch_frames: 5,
            batch_overlap: 2,
            batches: 2,
            resize: [94, 115],
            output: [80, 112],
            fit: Fit::Pad,
            padding: [0, 0],
            latent_grid: [2, 10, 14],
            seed: 7,
            color_fix: ColorFix::Adain,
            prepend_frames: 2,
            input_noise_scale: 0.25,
            latent_noise_scale: 0.0,
            scene_cuts: vec![4],
            scene_threshold: 0.1,
            dit: DitPlan { variant: "3b".into(), blocks: 32, dim: 2560, block_placement: "swapped".into(), host_block_bytes: 123 },
            vae: VaeStagePlans { encode: Some(tile_plan(false)), decode: Some(tile_plan(true)) },
            spatial_tiles: Some(tiles),
            dit_tiles: None,
            device_memory: DeviceMemoryPlan {
                budget_bytes: Some(20 << 20),
                dit_weight_bytes: 456,
                estimated_batch_bytes: BatchMemory { encode_bytes: 1536.0, dit_bytes: 2560.0, decode_bytes: 3584.0 },
                fits: Some(true),
            },
            fallbacks: vec![],
            resumed_from: None,
            uniform_batches: false,
        }
    }

    fn restore_json() -> Value {
        let tiles = json!({"tile_height_latent": 8, "tile_width_latent": 14, "overlap_latent": 2});
        let tile_plan = |tile_major| {
            json!({"latent_frames_per_chunk": 2, "spatial": tiles, "estimated_peak_bytes": 9000, "fits": true, "tile_major": tile_major, "frame_by_frame": false})
        };
        json!({
            "frames": 7, "batch_frames": 5, "batch_overlap": 2, "batches": 2, "resize": [94, 115], "output": [80, 112],
            "fit": "pad", "padding": [0, 0], "latent_grid": [2, 10, 14], "seed": 7, "color_fix": "adain",
            "prepend_frames": 2, "input_noise_scale": 0.25, "latent_noise_scale": 0.0, "scene_cuts": [4], "scene_threshold": 0.1,
            "dit": {"variant": "3b", "blocks": 32, "dim": 2560, "block_placement": "swapped", "host_block_bytes": 123},
            "vae": {"encode": tile_plan(false), "decode": tile_plan(true)},
            "spatial_tiles": tiles,
            "device_memory": {"budget_bytes": 20 << 20, "dit_weight_bytes": 456,
                "estimated_batch_bytes": {"encode_bytes": 1536, "dit_bytes": 2560, "decode_bytes": 3584}, "fits": true},
            "fallbacks": [],
        })
    }

    /// Every op's plan with the JSON it was served as before (the `json!` the executor built), and the
    /// variant that JSON must read back as.
    fn every_plan() -> Vec<(JobPlan, Value)> {
        let split = Some(RowSplit { max_band_bytes: 1 << 20 });
        let upscale = UpscalePlan {
            chunk_frames: 8,
            tile: 256,
            overlap: 16,
            receptive_radius: 349,
            exact: false,
            blend: true,
            tiles_per_frame: 4,
            scale: 4,
            frames: 2,
            fallbacks: vec!["out of memory at tile 512: tile 256".into()],
            frame_workers: 2,
            interpolation: None,
            resumed_from: None,
        };
        let encode = VaeEncodePlan { latent_shape: vec![1, 16, 3, 18, 22], padded_frames: 1, normalized: true, row_split: None, resumed_from: None };
        let decode = VaeDecodePlan { latent_shape: vec![1, 16, 3, 18, 22], latent_frames_per_push: 2, frames: 9, row_split: split, resumed_from: None };
        let reconstruct = VaeReconstructPlan { frames: 10, row_split: RowSplitHalves { encoder: None, decoder: split }, resumed_from: None };
        vec![
            (
                JobPlan::Upscale(upscale),
                json!({"chunk_frames": 8, "tile": 256, "overlap": 16, "receptive_radius": 349, "exact": false, "blend": true,
                    "tiles_per_frame": 4, "scale": 4, "frames": 2, "fallbacks": ["out of memory at tile 512: tile 256"], "frame_workers": 2}),
            ),
            (
                JobPlan::Vae(vae_plan(VaeOpPlan::Encode(encode))),
                vae_json(json!({"latent_shape": [1, 16, 3, 18, 22], "padded_frames": 1, "normalized": true, "row_split": null})),
            ),
            (
                JobPlan::Vae(vae_plan(VaeOpPlan::Decode(decode))),
                vae_json(json!({"latent_shape": [1, 16, 3, 18, 22], "latent_frames_per_push": 2, "frames": 9,
                    "row_split": {"max_band_bytes": 1 << 20}})),
            ),
            (
                JobPlan::Vae(vae_plan(VaeOpPlan::Reconstruct(reconstruct))),
                vae_json(json!({"frames": 10, "row_split": {"encoder": null, "decoder": {"max_band_bytes": 1 << 20}}})),
            ),
            (JobPlan::Restore(restore_plan()), restore_json()),
        ]
    }

    #[test]
    fn typed_plans_serialise_to_the_json_served_before_and_read_back_as_themselves() {
        for (plan, served_before) in every_plan() {
            let json = serde_json::to_value(&plan).unwrap();
            assert_eq!(json, served_before);
            assert_eq!(serde_json::from_value::<JobPlan>(json).unwrap(), plan);
        }
    }

    #[test]
    fn a_plan_the_types_do_not_reproduce_is_served_as_stored() {
        // A restore plan from before block swap: its DiT had no placement.
        let mut before_swap = restore_json();
        let dit = before_swap["dit"].as_object_mut().unwrap();
        dit.remove("block_placement");
        dit.remove("host_block_bytes");
        // A key no type knows would be dropped by a typed read.
        let mut extra_key = every_plan()[0].1.clone();
        extra_key["notes"] = json!(["tiles exact"]);
        // An upscale plan whose tile was a float.
        let mut float_tile = every_plan()[0].1.clone();
        float_tile["tile"] = json!(256.5);
        for stored in [before_swap, extra_key, float_tile, json!({}), json!("not an object")] {
            let text = serde_json::to_string(&stored).unwrap();
            let read: JobPlan = serde_json::from_str(&text).unwrap();
            assert_eq!(read, JobPlan::Other(stored.clone()));
            assert_eq!(serde_json::to_value(&read).unwrap(), stored);
        }
    }

    #[test]
    fn frames_come_from_the_plan_that_wrote_them() {
        let frames: Vec<Option<u64>> = every_plan().iter().map(|(plan, _)| plan.frames()).collect();
        assert_eq!(frames, [Some(2), None, Some(9), Some(10), Some(7)]);
        assert_eq!(JobPlan::Other(json!({"frames": 3})).frames(), Some(3));
    }

    #[test]
    fn a_vae_job_s_replans_come_before_its_run_s_own_fallbacks() {
        let row_split = RowSplitHalves { encoder: None, decoder: None };
        let mut plan = vae_plan(VaeOpPlan::Reconstruct(VaeReconstructPlan { frames: 1, row_split, resumed_from: None }));
        plan.prepend_fallbacks(&["re-planned for 1024 MiB".into(), "re-planned for 512 MiB".into()]);
        let expected = ["re-planned for 1024 MiB", "re-planned for 512 MiB", "decode: out of memory on 2 latent frames: 1 + 1"];
        assert_eq!(plan.fallbacks, expected);
        plan.prepend_fallbacks(&[]);
        assert_eq!(plan.fallbacks, expected);
    }
}
