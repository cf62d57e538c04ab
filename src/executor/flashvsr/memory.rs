//! How much memory a FlashVSR step takes, and the tiles that make it fit a budget. A step's working memory
//! grows with the pixels it runs on (the DiT's tokens, the decoder's activations for up to 21 frames); the
//! state the runs keep between steps grows with the whole frame's pixels whatever the tiling (every tile
//! keeps its own KV cache and caches). Measured with `vaebox bench flashvsr` (full-size random weights, bf16,
//! this CPU; docs/benchmarks.md "FlashVSR"), the KV cache counted from the DiT's shape.
use super::geometry::SIDE_MULTIPLE;
use crate::tiling::flashvsr_tiles::FlashVsrTiles;
use crate::models::wan_dit::WanDitConfig;

/// Working memory of a step per pixel it runs on, in elements of the model's precision, beside the KV
/// cache: the bench's peaks above the models, bf16, were 603 MiB at 128×128 and 1944 MiB at 256×256
/// (28,609 bytes a pixel between them, 14,305 elements, of which the KV cache's 2,160).
const STEP_ELEMENTS_PER_PIXEL: f64 = 12_145.0;
/// What a step holds whatever its size (the text context's cross-attention keys, buffers), bytes: the
/// line through the two peaks at 0 pixels.
const FIXED_BYTES: f64 = 163e6;
/// Pixels of the output per DiT token: the VAE's 8× and the 2×2 patch.
const PIXELS_PER_TOKEN: f64 = 256.0;
/// Latent frames of the KV cache: 3 segments of 2.
const KV_FRAMES: f64 = 6.0;

/// The estimate for steps on tiles of `tile` pixels over a frame of `frame` pixels, in bytes.
pub fn step_bytes(config: &WanDitConfig, element_bytes: usize, tile: [i64; 2], frame: [i64; 2]) -> u64 {
    let pixels = |[h, w]: [i64; 2]| (h * w) as f64;
    let kv_elements_per_pixel = config.num_layers as f64 * 2.0 * config.dim as f64 * KV_FRAMES / PIXELS_PER_TOKEN;
    let elements = STEP_ELEMENTS_PER_PIXEL * pixels(tile) + kv_elements_per_pixel * pixels(frame);
    (FIXED_BYTES + elements * element_bytes as f64) as u64
}

/// What the planner chose: the tiles (none: the whole frame), the estimate, whether it fits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlashVsrMemory {
    pub tiles: Option<FlashVsrTiles>,
    pub estimated_bytes: u64,
    /// Null without a budget.
    pub budget_mib: Option<u64>,
    pub fits: bool,
}

/// The largest tiles (whole frame first) whose step fits `budget_mib` (0: no budget, the whole frame);
/// when not even 128-pixel tiles fit, those.
pub fn plan(config: &WanDitConfig, element_bytes: usize, model: [i64; 2], budget_mib: u64) -> FlashVsrMemory {
    let estimate = |tile: [i64; 2]| step_bytes(config, element_bytes, tile, model);
    let whole = FlashVsrMemory { tiles: None, estimated_bytes: estimate(model), budget_mib: None, fits: true };
    if budget_mib == 0 {
        return whole;
    }
    let budget = budget_mib << 20;
    if whole.estimated_bytes <= budget {
        return FlashVsrMemory { budget_mib: Some(budget_mib), ..whole };
    }
    let mut side = model[0].max(model[1]) - SIDE_MULTIPLE;
    let mut smallest = None;
    while side >= SIDE_MULTIPLE {
        if let Some(tiles) = FlashVsrTiles::of_side(model, side) {
            let estimated_bytes = estimate(tiles.tile);
            let planned = FlashVsrMemory { tiles: Some(tiles), estimated_bytes, budget_mib: Some(budget_mib), fits: estimated_bytes <= budget };
            if planned.fits {
                return planned;
            }
            smallest = Some(planned);
        }
        side -= SIDE_MULTIPLE;
    }
    smallest.unwrap_or(FlashVsrMemory { budget_mib: Some(budget_mib), fits: false, ..whole })
}
