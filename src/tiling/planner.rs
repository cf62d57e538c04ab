//! Picks, per job, the temporal chunk and (only when one chunk of whole frames does not fit) the
//! spatial tiles, from a memory budget and the model's [`MemoryModel`]. Temporal chunking is exact,
//! spatial tiling is not, so tiles are the last resort; of the tilings that fit, the one that computes
//! the fewest cells (overlap is computed twice) wins, since that is what tiling costs in time.
use serde::{Deserialize, Serialize};

pub use super::grid::SpatialTiles;
use super::grid::TileGrid;
pub use super::memory::{MemoryModel, TiledOp};

/// Overlap as a share of the tile side (diffusers' Wan default: 64 of 256 pixels).
const OVERLAP_SHARE: f64 = 0.25;
/// The blend width diffusers uses at its default tile (64 px on Wan 2.1). A share alone would make
/// every tiling cost 1/(1 − share)² ≈ 1.8× the frame's work however large the tiles; capped, large
/// tiles cost little more than the frame.
const MAX_OVERLAP_LATENT: i64 = 8;
/// Below this overlap (latent cells) seams show; diffusers' smallest default is 8.
const MIN_OVERLAP_LATENT: i64 = 2;
/// Tiles smaller than this (latent cells) are mostly overlap.
const MIN_TILE_LATENT: i64 = 4;

#[derive(Debug, Clone, PartialEq)]
pub struct PlanRequest {
    pub op: TiledOp,
    /// Latent frames of the whole job.
    pub latent_frames: i64,
    pub latent_height: i64,
    pub latent_width: i64,
    pub spatial_factor: i64,
    pub temporal_factor: i64,
    /// Working memory allowed on top of the loaded model.
    pub budget_bytes: u64,
    /// Longest push the caller wants (latency, progress granularity), in latent frames.
    pub max_latent_frames_per_chunk: i64,
    pub memory: MemoryModel,
    /// The model can compute a push one frame at a time ([`crate::models::family::vae::StreamPace`]).
    pub frame_by_frame: bool,
}

/// What the planner chose for one VAE stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = TilePlan)]
pub struct Plan {
    pub latent_frames_per_chunk: i64,
    pub spatial: Option<SpatialTiles>,
    pub estimated_peak_bytes: u64,
    /// False when even the smallest tiles of one latent frame exceed the budget: the plan is then the
    /// smallest one, and the executor's out-of-memory retry is the last word.
    pub fits: bool,
    /// Decode tile by tile over the whole clip (one tile's causal cache alive at a time, tiles
    /// spooled to disk and blended afterwards): for budgets below the caches of one whole frame.
    #[serde(default)]
    pub tile_major: bool,
    /// Each push computed one frame at a time through the model (TAEHV): exact, a little slower, and
    /// one frame's activations alive instead of the push's; chosen before tiles when whole pushes do not
    /// fit.
    #[serde(default)]
    pub frame_by_frame: bool,
}

impl PlanRequest {
    fn estimate(&self, latent_frames_per_chunk: i64, tiles: Option<&SpatialTiles>) -> f64 {
        let grid = TileGrid::new(self.latent_height, self.latent_width, tiles);
        let f = self.spatial_factor;
        let covered = grid.covered_cells() * f * f;
        // Every tile's stream is pushed, and snapshotted, in each push.
        self.memory.peak_bytes(self.op, self.push_pixel_frames(latent_frames_per_chunk), self.tile_pixels(&grid), covered, covered)
    }

    /// Pixels of one tile (all tiles of a grid are the same size).
    fn tile_pixels(&self, grid: &TileGrid) -> i64 {
        grid.rows[0].len() * grid.cols[0].len() * self.spatial_factor * self.spatial_factor
    }

    /// Pixel frames of the largest push: a whole chunk, unless the clip is shorter than one (its
    /// first latent frame stands for one pixel frame, not `temporal_factor`).
    pub fn push_pixel_frames(&self, latent_frames_per_chunk: i64) -> i64 {
        let clip = 1 + (self.latent_frames - 1).max(0) * self.temporal_factor;
        (latent_frames_per_chunk * self.temporal_factor).min(clip)
    }

    /// Latent cells computed per frame with these tiles (the frame's own cells when untiled).
    fn covered_cells(&self, tiles: &SpatialTiles) -> i64 {
        TileGrid::new(self.latent_height, self.latent_width, Some(tiles)).covered_cells()
    }

    fn plan(&self, latent_frames_per_chunk: i64, spatial: Option<SpatialTiles>, fits: bool, tile_major: bool) -> Plan {
        let estimated_peak_bytes = self.estimated_peak_bytes(latent_frames_per_chunk, spatial.as_ref(), tile_major);
        Plan { latent_frames_per_chunk, spatial, estimated_peak_bytes, fits, tile_major, frame_by_frame: false }
    }

    /// Whole frames, each push computed frame by frame: one pixel frame's activations, every cache
    /// (and its snapshot), and the push's frames themselves (its Float input or output, 12 B a pixel).
    pub fn estimated_frame_by_frame_bytes(&self, latent_frames_per_chunk: i64) -> u64 {
        self.estimate_frame_by_frame(latent_frames_per_chunk).max(0.0).ceil() as u64
    }

    fn estimate_frame_by_frame(&self, latent_frames_per_chunk: i64) -> f64 {
        let frame_pixels = self.latent_height * self.latent_width * self.spatial_factor * self.spatial_factor;
        let activations = self.memory.peak_bytes(self.op, 1, frame_pixels, frame_pixels, frame_pixels);
        activations + 12.0 * (self.push_pixel_frames(latent_frames_per_chunk) * frame_pixels) as f64
    }

    /// The estimated peak of pushes of `latent_frames_per_chunk` on `spatial` tiles (tile-major or not).
    pub fn estimated_peak_bytes(&self, latent_frames_per_chunk: i64, spatial: Option<&SpatialTiles>, tile_major: bool) -> u64 {
        let estimate = match (tile_major, spatial) {
            (true, Some(tiles)) => self.estimate_tile_major(latent_frames_per_chunk, tiles),
            _ => self.estimate(latent_frames_per_chunk, spatial),
        };
        estimate.max(0.0).ceil() as u64
    }

    /// Tile-major decode: one tile's stream (its activations and its own cache) while decoding, then
    /// the blend of one push: the Float output chunk plus a tile chunk read back and its weighted copy.
    fn estimate_tile_major(&self, latent_frames_per_chunk: i64, tiles: &SpatialTiles) -> f64 {
        let tile_pixels = self.tile_pixels(&TileGrid::new(self.latent_height, self.latent_width, Some(tiles)));
        let frame_pixels = self.latent_height * self.latent_width * self.spatial_factor * self.spatial_factor;
        let frames = self.push_pixel_frames(latent_frames_per_chunk);
        let float_rgb = 12.0 * frames as f64;
        let decoding = self.memory.peak_bytes(TiledOp::Decode, frames, tile_pixels, tile_pixels, tile_pixels) + 2.0 * float_rgb * tile_pixels as f64;
        let blending = float_rgb * (frame_pixels + 3 * tile_pixels) as f64;
        decoding.max(blending)
    }

    /// Every tiling worth considering: each count of tiles along each axis (tiles at least
    /// `MIN_TILE_LATENT` cells), square grids and strips alike, whole frames excluded.
    fn tilings(&self) -> Vec<SpatialTiles> {
        let most = |len: i64| (len / MIN_TILE_LATENT).max(1);
        let mut tilings: Vec<SpatialTiles> = (1..=most(self.latent_height))
            .flat_map(|rows| (1..=most(self.latent_width)).map(move |cols| (rows, cols)))
            .filter(|&counts| counts != (1, 1))
            .map(|(rows, cols)| tiles_for_counts(self.latent_height, self.latent_width, rows, cols))
            .collect();
        tilings.dedup();
        tilings
    }

    /// The longest chunk (at most the cap and the clip) whose estimate fits the budget.
    fn longest_chunk_where(&self, estimate: impl Fn(i64) -> f64) -> Option<i64> {
        let longest = self.max_latent_frames_per_chunk.min(self.latent_frames).max(1);
        (1..=longest).rev().find(|&k| estimate(k) <= self.budget_bytes as f64)
    }

    /// The longest chunk that fits with these tiles, time-major.
    fn longest_chunk(&self, tiles: Option<&SpatialTiles>) -> Option<i64> {
        self.longest_chunk_where(|k| self.estimate(k, tiles))
    }
}

/// `rows × cols` tiles over a `latent_height × latent_width` grid: the overlap is a quarter of the
/// shorter tiled side (within limits), and each side just long enough to cover its axis with it; an
/// axis cut into one piece stays whole (strips).
pub fn tiles_for_counts(latent_height: i64, latent_width: i64, rows: i64, cols: i64) -> SpatialTiles {
    let base = |len: i64, parts: i64| (len + parts - 1) / parts;
    let shorter = [(latent_height, rows), (latent_width, cols)].iter().filter(|(_, parts)| *parts > 1).map(|&(len, parts)| base(len, parts)).min();
    let overlap = shorter.map_or(0, |side| ((side as f64 * OVERLAP_SHARE).round() as i64).clamp(MIN_OVERLAP_LATENT, MAX_OVERLAP_LATENT));
    let side = |len: i64, parts: i64| if parts > 1 { base(len + (parts - 1) * overlap, parts) } else { len };
    SpatialTiles { tile_height_latent: side(latent_height, rows), tile_width_latent: side(latent_width, cols), overlap_latent: overlap }
}

/// Whole frames with the longest chunk that fits; else, of the tilings that fit — time-major, and for
/// decode tile-major, which holds one tile's cache instead of every tile's — the one that computes
/// the fewest cells (then time-major, the longest chunk, the fewest tiles), with the longest chunk
/// for it; else, marked unfit, the cheapest plan of one latent frame per push (smaller tiles are not
/// always cheaper: every tile also keeps a causal cache over its overlap, and on the full-size Wan 2.1
/// the caches weigh as much as a push). Tilings are any count of tiles per axis, so a wide frame can
/// be cut into strips, which share fewer overlap cells than a grid of squares of the same size.
pub fn plan(request: &PlanRequest) -> Plan {
    if let Some(chunk) = request.longest_chunk(None) {
        return request.plan(chunk, None, true, false);
    }
    if request.frame_by_frame {
        if let Some(chunk) = request.longest_chunk_where(|k| request.estimate_frame_by_frame(k)) {
            let estimated_peak_bytes = request.estimated_frame_by_frame_bytes(chunk);
            return Plan { latent_frames_per_chunk: chunk, spatial: None, estimated_peak_bytes, fits: true, tile_major: false, frame_by_frame: true };
        }
    }
    let tilings = request.tilings();
    // Every fitting tiling, time-major (each tile keeps its cache) and, for decode, tile-major (one
    // tile's cache at a time, which lets larger tiles fit). Fewest computed cells first (time), then
    // time-major (no spool), then the longest chunk, then the fewest tiles.
    let time_major = tilings.iter().filter_map(|&tiles| request.longest_chunk(Some(&tiles)).map(|chunk| (tiles, chunk, false)));
    let tile_major = tilings.iter().filter(|_| request.op == TiledOp::Decode).filter_map(|&tiles| {
        request.longest_chunk_where(|k| request.estimate_tile_major(k, &tiles)).map(|chunk| (tiles, chunk, true))
    });
    let tile_count = |tiles: &SpatialTiles| TileGrid::new(request.latent_height, request.latent_width, Some(tiles)).count();
    let best = time_major
        .chain(tile_major)
        .min_by_key(|(tiles, chunk, spooled)| (request.covered_cells(tiles), *spooled, -chunk, tile_count(tiles)));
    if let Some((tiles, chunk, tile_major)) = best {
        return request.plan(chunk, Some(tiles), true, tile_major);
    }
    // Tile-major holds one tile's cache (and its snapshot) instead of every tile's: for decode it is
    // often the cheapest of all.
    let time_major = std::iter::once(None).chain(tilings.iter().copied().map(Some)).map(|tiles| (tiles, false, request.estimate(1, tiles.as_ref())));
    let tile_major = tilings.iter().filter(|_| request.op == TiledOp::Decode).map(|&tiles| (Some(tiles), true, request.estimate_tile_major(1, &tiles)));
    let (tiles, tile_major, _) = time_major.chain(tile_major).min_by(|a, b| a.2.total_cmp(&b.2)).expect("whole frames are a candidate");
    request.plan(1, tiles, false, tile_major)
}

/// A 480×832 decode of 21 latent frames with round constants, so expected plans can be worked out by
/// hand (tests here and of the executor's re-plan).
#[cfg(test)]
pub(crate) fn example_request(budget_bytes: u64) -> PlanRequest {
    let cost = super::memory::StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 1000.0, bytes_per_pixel: 100.0 };
    PlanRequest {
        op: TiledOp::Decode,
        latent_frames: 21,
        latent_height: 60,
        latent_width: 104,
        spatial_factor: 8,
        temporal_factor: 4,
        budget_bytes,
        max_latent_frames_per_chunk: 4,
        memory: MemoryModel { encode: cost, decode: cost },
        frame_by_frame: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::memory::StreamCost;

    const MIB: u64 = 1 << 20;

    fn request(budget_bytes: u64) -> PlanRequest {
        example_request(budget_bytes)
    }

    #[test]
    fn ample_budget_takes_whole_frames_and_the_longest_chunk() {
        // 480×832 px = 399,360 px: 4 latent frames = 16 px frames → 6.4 GB + 40 MB of caches, twice
        // (the retry's snapshot keeps the previous ones through the push).
        let plan = plan(&request(8 << 30));
        assert_eq!(plan, Plan { latent_frames_per_chunk: 4, spatial: None, estimated_peak_bytes: 6_469_632_000, fits: true, tile_major: false, frame_by_frame: false });
    }

    #[test]
    fn chunk_shrinks_before_any_tiling() {
        // 2 latent frames: 8 · 399,360 · 1000 + 399,360 · 100 = 3.235 GB fits 3.5 GB; 3 frames do not.
        let plan = plan(&request(3500 * MIB));
        assert_eq!((plan.latent_frames_per_chunk, plan.spatial), (2, None));
        let plan = super::plan(&request(1700 * MIB));
        assert_eq!((plan.latent_frames_per_chunk, plan.spatial), (1, None));
    }

    #[test]
    fn a_model_that_runs_frame_by_frame_does_so_before_any_tiling() {
        // One latent frame whole: 4 · 399,360 · 1000 + 2 · 399,360 · 100 = 1.68 GB. Frame by frame: one
        // frame's 399 MB, the caches' 80 MB and 12 B a pixel of each frame pushed (4 frames a latent).
        let one_latent = request(0).estimate(1, None);
        let frame_by_frame = PlanRequest { frame_by_frame: true, ..request(1000 * MIB) };
        let plan = plan(&frame_by_frame);
        assert!(1000.0 * (MIB as f64) < one_latent);
        assert_eq!((plan.frame_by_frame, plan.spatial, plan.fits, plan.latent_frames_per_chunk), (true, None, true, 4), "{plan:?}");
        assert_eq!(plan.estimated_peak_bytes, 399_360 * 1000 + 2 * 399_360 * 100 + 12 * 16 * 399_360);
        // A model without the mode tiles under the same budget; with more room either pushes whole.
        assert!(super::plan(&request(1000 * MIB)).spatial.is_some());
        assert!(!super::plan(&PlanRequest { frame_by_frame: true, ..request(8 << 30) }).frame_by_frame);
        // Below one frame's activations, frame by frame does not fit either: tiles.
        let tight = super::plan(&PlanRequest { frame_by_frame: true, ..request(300 * MIB) });
        assert!(!tight.frame_by_frame && tight.spatial.is_some(), "{tight:?}");
    }

    /// Whether `tiles` fit `budget` with one latent frame per push, time-major or tile-major.
    fn fits_one_frame(budget: f64, tiles: &SpatialTiles) -> bool {
        let r = request(0);
        r.estimate(1, Some(tiles)) <= budget || r.estimate_tile_major(1, tiles) <= budget
    }

    fn counts(tiles: &SpatialTiles) -> (i64, i64) {
        let grid = TileGrid::new(60, 104, Some(tiles));
        (grid.rows.len() as i64, grid.cols.len() as i64)
    }

    #[test]
    fn tiles_only_when_one_frame_group_does_not_fit() {
        let whole_one_chunk = request(0).estimate(1, None);
        let budget = whole_one_chunk * 0.6;
        let plan = plan(&request(budget as u64));
        let tiles = plan.spatial.expect("tiled");
        assert!(plan.fits && plan.estimated_peak_bytes as f64 <= budget);
        assert_eq!(plan.latent_frames_per_chunk, 1);
        // No tiling that fits computes fewer cells.
        let least = request(0).tilings().iter().filter(|t| fits_one_frame(budget, t)).map(|t| request(0).covered_cells(t)).min().unwrap();
        assert_eq!(request(0).covered_cells(&tiles), least, "{tiles:?}");
        let (rows, cols) = counts(&tiles);
        assert_eq!(tiles, tiles_for_counts(60, 104, rows, cols));
    }

    #[test]
    fn a_wide_frame_is_cut_into_strips_when_they_compute_less_than_squares() {
        let whole_one_chunk = request(0).estimate(1, None);
        let budget = whole_one_chunk * 0.45;
        let chosen = plan(&request(budget as u64)).spatial.expect("tiled");
        let squares = (4..104).map(|side| SpatialTiles::square(side, ((side as f64 / 4.0).round() as i64).clamp(2, 8)));
        let best_square = squares.filter(|t| fits_one_frame(budget, t)).map(|t| request(0).covered_cells(&t)).min().unwrap();
        assert_eq!(counts(&chosen).0, 1, "strips across the height: {chosen:?}");
        assert!(request(0).covered_cells(&chosen) < best_square, "{chosen:?}: {} cells, squares {best_square}", request(0).covered_cells(&chosen));
    }

    #[test]
    fn overlap_is_a_quarter_of_the_shorter_tiled_side_within_limits() {
        assert_eq!(tiles_for_counts(16, 16, 4, 1), SpatialTiles { tile_height_latent: 6, tile_width_latent: 16, overlap_latent: 2 });
        assert_eq!(tiles_for_counts(60, 104, 3, 1).overlap_latent, 5);
        assert_eq!(tiles_for_counts(128, 128, 4, 4).overlap_latent, 8);
        assert_eq!(tiles_for_counts(360, 360, 4, 4).overlap_latent, 8);
        // Strips: only the width is cut; 104 + 8 shared cells in two tiles of 56.
        assert_eq!(tiles_for_counts(60, 104, 1, 2), SpatialTiles { tile_height_latent: 60, tile_width_latent: 56, overlap_latent: 8 });
        for (rows, cols) in [(2, 2), (3, 5), (1, 7), (6, 1)] {
            assert_eq!(counts(&tiles_for_counts(60, 104, rows, cols)), (rows, cols));
        }
    }

    #[test]
    fn hopeless_budget_gives_the_cheapest_plan_marked_unfit() {
        let hopeless = request(1000);
        let plan = plan(&hopeless);
        assert!(!plan.fits);
        assert_eq!(plan.latent_frames_per_chunk, 1);
        assert!(plan.spatial.is_some(), "{plan:?}");
        // The cheapest of whole frames, every time-major tiling and (decode) every tile-major one.
        let chosen = plan.estimated_peak_bytes as f64;
        for tiles in hopeless.tilings() {
            assert!(hopeless.estimate(1, Some(&tiles)) >= chosen.floor(), "{tiles:?} {plan:?}");
            assert!(hopeless.estimate_tile_major(1, &tiles) >= chosen.floor(), "{tiles:?} {plan:?}");
        }
        assert!(hopeless.estimate(1, None) > chosen);
    }

    #[test]
    fn below_one_frame_of_caches_decode_goes_tile_major() {
        let mut heavy_caches = request(0);
        heavy_caches.memory.decode = StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 100.0, bytes_per_pixel: 10_000.0 };
        heavy_caches.budget_bytes = (heavy_caches.estimate(1, None) * 0.5) as u64;
        let plan = plan(&heavy_caches);
        assert!(plan.fits && plan.tile_major, "{plan:?}");
        let tiles = plan.spatial.expect("tiled");
        assert!(plan.estimated_peak_bytes <= heavy_caches.budget_bytes);
        assert_eq!(plan.estimated_peak_bytes, heavy_caches.estimate_tile_major(plan.latent_frames_per_chunk, &tiles).ceil() as u64);
        // Encode streams are not spooled: the same budget leaves an encode unfit.
        heavy_caches.op = TiledOp::Encode;
        heavy_caches.memory.encode = heavy_caches.memory.decode;
        assert!(!super::plan(&heavy_caches).fits);
    }

    #[test]
    fn when_caches_dominate_tiles_that_do_not_fit_are_not_chosen() {
        // Caches cost more than a push: every time-major tiling covers more area than the frame, so
        // costs more; only tile-major, which holds one tile's cache, can beat whole frames.
        let mut heavy_caches = request(1000);
        heavy_caches.memory.decode = StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 100.0, bytes_per_pixel: 10_000.0 };
        let plan = plan(&heavy_caches);
        assert_eq!((plan.fits, plan.latent_frames_per_chunk), (false, 1));
        assert!(plan.spatial.is_none() || plan.tile_major, "{plan:?}");
        assert!(plan.estimated_peak_bytes as f64 <= heavy_caches.estimate(1, None));
        heavy_caches.op = TiledOp::Encode;
        heavy_caches.memory.encode = heavy_caches.memory.decode;
        let plan = super::plan(&heavy_caches);
        assert_eq!((plan.fits, plan.latent_frames_per_chunk, plan.spatial), (false, 1, None), "encode has no tile-major");
    }

    #[test]
    fn a_clip_shorter_than_a_chunk_is_estimated_at_its_own_length() {
        let mut short = request(8 << 30);
        short.latent_frames = 2;
        // One push of 2 latent frames decodes 1 + 4 = 5 pixel frames, not 8 (caches and their snapshot: 2 × 100 B/px).
        let pixels: i64 = 480 * 832;
        assert_eq!(short.estimate(2, None), (5 * pixels * 1000 + pixels * 200) as f64);
        short.latent_frames = 21;
        assert_eq!(short.estimate(2, None), (8 * pixels * 1000 + pixels * 200) as f64);
    }

    #[test]
    fn a_4k_frame_is_cut_under_a_tight_budget() {
        // 2160×3840 px: 270×480 latent cells, 8,040 counts of tiles per axis to weigh.
        let mut uhd = request(0);
        (uhd.latent_height, uhd.latent_width) = (270, 480);
        uhd.budget_bytes = (uhd.estimate(1, None) * 0.2) as u64;
        let plan = plan(&uhd);
        assert!(plan.fits && plan.estimated_peak_bytes <= uhd.budget_bytes, "{plan:?}");
        let grid = TileGrid::new(270, 480, plan.spatial.as_ref());
        assert!(grid.count() >= 2, "{plan:?}");
        assert_eq!(plan.spatial.unwrap().overlap_latent, MAX_OVERLAP_LATENT);
    }

    #[test]
    fn short_clips_are_not_chunked_beyond_their_length() {
        let mut short = request(8 << 30);
        short.latent_frames = 2;
        assert_eq!(plan(&short).latent_frames_per_chunk, 2);
    }
}
