//! Spatial tiles of the DiT, for a latent frame too large for its working memory in one piece (a 4K
//! still going to 8K): the largest tiles whose DiT estimate (`dit_memory`) fits the budget, overlapping
//! by a quarter of a tile, on the DiT's 2×2 patch grid. The DiT places its attention windows as for the
//! whole latent and cuts them to each tile (`models::seedvr2_dit::TileOf`), so the tiles need no window
//! alignment of their own; the overlaps are cross-faded with `blend`'s raised-cosine weights.
use serde::{Deserialize, Serialize};

use super::grid::{axis_spans, TileGrid};
use super::spatial::Span;

/// Latent cells per DiT patch side: tile bounds are multiples of it.
pub const PATCH_CELLS: i64 = 2;
/// The smallest tile side tried, in latent cells (64 pixels): smaller tiles are mostly overlap.
pub const MIN_TILE_CELLS: i64 = 8;

/// How the DiT's latent was split: `rows × cols` tiles of `tile` `[height, width]` latent cells, each
/// sharing at least `overlap` cells with its neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DitTiles {
    /// Tiles down the latent.
    pub rows: i64,
    /// Tiles across it.
    pub cols: i64,
    /// `[height, width]` of a tile in latent cells (the last may be cut at the latent's edge).
    pub tile: [i64; 2],
    /// Latent cells neighbours share at least, cross-faded.
    pub overlap: i64,
}

impl DitTiles {
    /// The tiles' spans over a `height × width` latent (the one they were planned for).
    pub fn grid(&self, height: i64, width: i64) -> TileGrid {
        TileGrid { rows: patch_spans(height, self.tile[0], self.overlap), cols: patch_spans(width, self.tile[1], self.overlap) }
    }
}

/// [`axis_spans`] on whole patches: every bound a multiple of [`PATCH_CELLS`] (or the axis' end).
pub fn patch_spans(len: i64, tile: i64, overlap: i64) -> Vec<Span> {
    let patches = (len + PATCH_CELLS - 1) / PATCH_CELLS;
    axis_spans(patches, tile / PATCH_CELLS, overlap / PATCH_CELLS)
        .into_iter()
        .map(|span| Span { start: span.start * PATCH_CELLS, end: (span.end * PATCH_CELLS).min(len) })
        .collect()
}

/// The overlap planned for tiles of side `side`: a quarter, in whole patches, at least one patch.
fn overlap_for(side: i64) -> i64 {
    (side / 4 / PATCH_CELLS * PATCH_CELLS).max(PATCH_CELLS)
}

/// Tiles for a `height × width` latent whose DiT does not fit in one piece: the largest square side
/// (cut to the latent's sides) whose tile `fits` (`[height, width]` in latent cells); `None` when the
/// whole latent fits. When not even [`MIN_TILE_CELLS`] fits, the smallest tiles, and the out-of-memory
/// retry has the last word.
pub fn plan_dit_tiles(height: i64, width: i64, fits: impl Fn([i64; 2]) -> bool) -> Option<DitTiles> {
    if fits([height, width]) {
        return None;
    }
    let tiles_for = |side: i64| {
        let overlap = overlap_for(side);
        let grid = DitTiles { rows: 0, cols: 0, tile: [side.min(height), side.min(width)], overlap }.grid(height, width);
        let tile = [grid.rows[0].len(), grid.cols[0].len()];
        DitTiles { rows: grid.rows.len() as i64, cols: grid.cols.len() as i64, tile, overlap }
    };
    let largest = (height.max(width) - PATCH_CELLS) / PATCH_CELLS * PATCH_CELLS;
    let mut side = largest;
    while side > MIN_TILE_CELLS {
        let tiles = tiles_for(side);
        if tiles.rows * tiles.cols > 1 && fits(tiles.tile) {
            return Some(tiles);
        }
        side -= PATCH_CELLS;
    }
    Some(tiles_for(MIN_TILE_CELLS.min(largest.max(PATCH_CELLS))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every cell covered, neighbours sharing at least the planned overlap, bounds on the patch grid.
    fn check_layout(height: i64, width: i64, tiles: &DitTiles) {
        let grid = tiles.grid(height, width);
        assert_eq!((grid.rows.len() as i64, grid.cols.len() as i64), (tiles.rows, tiles.cols), "{tiles:?}");
        for (spans, len, side) in [(&grid.rows, height, tiles.tile[0]), (&grid.cols, width, tiles.tile[1])] {
            assert_eq!((spans[0].start, spans.last().unwrap().end), (0, len), "{spans:?}");
            for pair in spans.windows(2) {
                assert!(pair[0].end - pair[1].start >= tiles.overlap, "{len}: {spans:?} overlap {}", tiles.overlap);
                assert!(pair[1].start > pair[0].start);
            }
            for span in spans.iter() {
                assert_eq!(span.start % PATCH_CELLS, 0, "{spans:?}");
                assert!(span.end % PATCH_CELLS == 0 || span.end == len, "{spans:?}");
                assert!(span.len() <= side, "{spans:?} longer than {side}");
            }
        }
    }

    #[test]
    fn tiles_cover_the_latent_overlap_as_planned_and_sit_on_the_patch_grid() {
        // A 4K frame's latent (270 × 480 cells), and small and odd-sized ones.
        for (height, width) in [(270, 480), (64, 64), (48, 80), (30, 54), (126, 34)] {
            for max_cells in [4096, 1024, 300, 64] {
                let fits = |tile: [i64; 2]| tile[0] * tile[1] <= max_cells;
                let Some(tiles) = plan_dit_tiles(height, width, fits) else {
                    assert!(height * width <= max_cells);
                    continue;
                };
                check_layout(height, width, &tiles);
                assert!(tiles.rows * tiles.cols > 1, "{tiles:?}");
                assert!(tiles.overlap >= PATCH_CELLS && tiles.overlap % PATCH_CELLS == 0, "{tiles:?}");
                if tiles.tile[0].max(tiles.tile[1]) > MIN_TILE_CELLS {
                    assert!(fits(tiles.tile), "{height}×{width} in {max_cells}: {tiles:?}");
                }
            }
        }
    }

    #[test]
    fn the_largest_fitting_tile_is_taken_and_a_latent_that_fits_is_not_tiled() {
        assert_eq!(plan_dit_tiles(64, 64, |_| true), None);
        // Sides of 62 down to 40 all give 2 × 2 tiles shrunk to 40 (64 = 2 × 40 − 16): the first, 62, is
        // taken, with its overlap (a quarter of 62, in whole patches).
        let tiles = plan_dit_tiles(64, 64, |[h, w]| h * w <= 40 * 40).unwrap();
        assert_eq!(tiles, DitTiles { rows: 2, cols: 2, tile: [40, 40], overlap: 14 });
        // One cell more and a side of 40 no longer fits: the next smaller side that does is taken.
        let smaller = plan_dit_tiles(64, 64, |[h, w]| h * w < 40 * 40).unwrap();
        assert!(smaller.tile[0] < 40 && smaller.tile[0] * smaller.tile[1] < 1600, "{smaller:?}");
    }
}
