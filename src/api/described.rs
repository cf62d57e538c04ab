//! What the executor writes as free-form JSON (a job's `plan` and `metrics`), described for the OpenAPI
//! document until those are typed structs. Nothing builds these types: tests/api_upscale.rs and
//! tests/api_vae.rs check that every key a real job carries is described here.
#![allow(dead_code)]

use utoipa::ToSchema;

use crate::tiling::grid::SpatialTiles;

/// How the job was run. Keys depend on the op; unknown keys may be added. Null until the job has run.
#[derive(ToSchema)]
pub struct Plan {
    /// Out-of-memory retries, in order, in words (e.g. a chunk split in halves, a smaller tile, row-split
    /// convolutions, a VAE job re-planned for a smaller budget and started again); empty when none were needed.
    #[serde(default)]
    fallbacks: Vec<String>,
    /// VAE ops: null when the convolutions ran whole, else RowSplit; vae_reconstruct: {encoder, decoder},
    /// each RowSplit or null.
    #[schema(inline)]
    #[serde(default)]
    row_split: RowSplitOf,
    /// Frames per chunk through the model.
    #[serde(default)]
    chunk_frames: u64,
    /// Frames written (upscale, vae_decode, vae_reconstruct, restore).
    #[serde(default)]
    frames: u64,
    /// VAE ops: latent frames per push the planner chose.
    #[serde(default)]
    latent_frames_per_chunk: u64,
    /// vae_decode: latent frames per push.
    #[serde(default)]
    latent_frames_per_push: u64,
    /// VAE ops.
    #[serde(default)]
    temporal_chunking: String,
    /// VAE ops: null for whole frames.
    #[serde(default)]
    spatial_tiles: Option<SpatialTiles>,
    #[serde(default)]
    blending: Option<String>,
    /// VAE ops: the planner's estimate of working memory; null without a budget.
    #[serde(default)]
    estimated_peak_bytes: Option<u64>,
    #[serde(default)]
    fits_budget: bool,
    /// VAE ops: the working-memory budget the plan was made for, in MiB (smaller than the job's after an
    /// out-of-memory re-plan; see fallbacks); null without a budget.
    #[serde(default)]
    memory_budget_mib: Option<u64>,
    /// VAE decode: tiles run one at a time over the whole clip (one tile's causal cache alive), spooled to
    /// disk beside the output and blended per push; chosen when one frame's caches exceed the budget.
    #[serde(default)]
    tile_major: bool,
    /// VAE ops: pixels per latent cell along H and W.
    #[serde(default)]
    spatial_factor: u64,
    /// VAE ops: pixel frames per latent frame after the first.
    #[serde(default)]
    temporal_factor: u64,
    /// vae_encode, vae_decode: [1, C, t, h, w].
    #[serde(default)]
    latent_shape: Vec<u64>,
    /// vae_encode: copies of the last frame added to reach 1 + 4k.
    #[serde(default)]
    padded_frames: u64,
    /// vae_encode.
    #[serde(default)]
    normalized: bool,
    /// upscale: tile core side in input pixels (0 = whole frames).
    #[serde(default)]
    tile: u64,
    /// upscale: context pixels per tile side.
    #[serde(default)]
    overlap: u64,
    /// upscale.
    #[serde(default)]
    receptive_radius: u64,
    /// upscale: tiled output equals untiled output.
    #[serde(default)]
    exact: bool,
    /// upscale: inexact tiles are blended with raised-cosine weights across their shared context.
    #[serde(default)]
    blend: bool,
    /// upscale.
    #[serde(default)]
    tiles_per_frame: u64,
    /// upscale.
    #[serde(default)]
    scale: u64,
    /// restore: frames per DiT call.
    #[serde(default)]
    batch_frames: u64,
    /// restore: frames shared and cross-faded by consecutive batches.
    #[serde(default)]
    batch_overlap: u64,
    /// restore: DiT calls made.
    #[serde(default)]
    batches: u64,
    /// restore: [height, width] the input was resized to.
    #[serde(default)]
    resize: Vec<u64>,
    /// restore: [height, width] of the output (the resized frames cropped to multiples of 16).
    #[serde(default)]
    output: Vec<u64>,
    /// restore: [t, h, w] of one batch's latent.
    #[serde(default)]
    latent_grid: Vec<u64>,
    /// restore: the noise seed of the first batch.
    #[serde(default)]
    seed: i64,
    /// restore.
    #[serde(default)]
    color_fix: crate::models::restore::colorfix::ColorFix,
    /// restore: the DiT that ran.
    #[schema(inline)]
    #[serde(default)]
    dit: DitInfo,
    /// restore: the device-memory estimate of one batch.
    #[schema(inline)]
    #[serde(default)]
    device_memory: DeviceMemory,
}

/// Convolutions run in exact row bands, set by an out-of-memory retry and kept for the rest of the job;
/// null when they ran whole.
#[derive(ToSchema)]
pub struct RowSplit {
    /// Upper bound on the input plus output bytes of one row band of a convolution.
    max_band_bytes: u64,
}

#[derive(ToSchema)]
#[serde(untagged)]
enum RowSplitOf {
    One(Option<RowSplit>),
    Halves { encoder: Option<RowSplit>, decoder: Option<RowSplit> },
}

#[derive(ToSchema)]
struct DitInfo {
    variant: String,
    blocks: u64,
    dim: u64,
}

#[derive(ToSchema)]
struct DeviceMemory {
    /// Null without a budget.
    budget_bytes: Option<u64>,
    dit_weight_bytes: u64,
    #[schema(inline)]
    estimated_batch_bytes: BatchBytes,
    /// Null without a budget.
    fits: Option<bool>,
}

/// Peak working bytes of one batch, by stage.
#[derive(ToSchema)]
struct BatchBytes {
    encode_bytes: f64,
    dit_bytes: f64,
    decode_bytes: f64,
}

/// vae_reconstruct: how close the decoded frames are to the input.
#[derive(ToSchema)]
pub struct QualityMetrics {
    /// Over all frames compared; null when the frames are identical.
    psnr_db: Option<f64>,
    ssim: f64,
    frames_compared: u64,
}
