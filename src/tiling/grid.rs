//! Where the overlapping tiles of a VAE's spatial tiling sit, in latent cells. Pure geometry; the
//! pixel side is the latent side times the model's spatial factor.
use serde::{Deserialize, Serialize};

use super::spatial::Span;

/// A spatial tiling of the latent grid: tiles of at most `tile_height_latent × tile_width_latent`
/// cells that overlap their neighbours by at least `overlap_latent` cells. A side at least as long as
/// its axis leaves that axis whole (strips).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SpatialTiles {
    pub tile_height_latent: i64,
    pub tile_width_latent: i64,
    pub overlap_latent: i64,
}

impl SpatialTiles {
    pub const fn square(tile_latent: i64, overlap_latent: i64) -> SpatialTiles {
        SpatialTiles { tile_height_latent: tile_latent, tile_width_latent: tile_latent, overlap_latent }
    }
}

/// Tile spans along both axes; tile `(r, c)` covers `rows[r] × cols[c]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileGrid {
    pub rows: Vec<Span>,
    pub cols: Vec<Span>,
}

impl TileGrid {
    /// `None` (or tiles at least as large as the grid) gives one tile covering everything.
    pub fn new(latent_height: i64, latent_width: i64, tiles: Option<&SpatialTiles>) -> TileGrid {
        let (height, width, overlap) = tiles.map_or((0, 0, 0), |t| (t.tile_height_latent, t.tile_width_latent, t.overlap_latent));
        TileGrid { rows: axis_spans(latent_height, height, overlap), cols: axis_spans(latent_width, width, overlap) }
    }

    pub fn is_single(&self) -> bool {
        self.rows.len() == 1 && self.cols.len() == 1
    }

    pub fn count(&self) -> usize {
        self.rows.len() * self.cols.len()
    }

    /// Latent cells computed per frame over all tiles (shared cells counted once per tile): every row
    /// span meets every column span, so it is the product of the two axes' summed lengths.
    pub fn covered_cells(&self) -> i64 {
        self.rows.iter().map(Span::len).sum::<i64>() * self.cols.iter().map(Span::len).sum::<i64>()
    }

    /// Row-major `(rows, cols)` of every tile.
    pub fn tiles(&self) -> impl Iterator<Item = (Span, Span)> + '_ {
        self.rows.iter().flat_map(move |&r| self.cols.iter().map(move |&c| (r, c)))
    }
}

/// The fewest tiles of at most `tile` cells that cover `[0, len)` with at least `overlap` shared cells
/// between neighbours, all of one length and spread evenly from 0 to `len`. Tiles are shrunk to the
/// shortest length that still covers the axis: a full-size tile on a short axis would only add overlap
/// (16 cells, tile 12, overlap 3: 2 tiles of 10 sharing 4 cells, not 2 of 12 sharing 8 — a fifth less
/// area to compute and hold).
pub fn axis_spans(len: i64, tile: i64, overlap: i64) -> Vec<Span> {
    if len <= 0 {
        return Vec::new();
    }
    if tile <= 0 || tile >= len {
        return vec![Span { start: 0, end: len }];
    }
    // More than half a tile of overlap would let a tile's neighbours cover it entirely.
    let overlap = overlap.clamp(0, tile / 2);
    let step = tile - overlap;
    let count = (len - overlap + step - 1) / step;
    let tile = (len + (count - 1) * overlap + count - 1) / count;
    (0..count)
        .map(|i| {
            let start = i * (len - tile) / (count - 1);
            Span { start, end: start + tile }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_tile_when_it_fits() {
        assert_eq!(axis_spans(16, 16, 4), vec![Span { start: 0, end: 16 }]);
        assert_eq!(axis_spans(16, 0, 4), vec![Span { start: 0, end: 16 }]);
        assert!(TileGrid::new(16, 24, Some(&SpatialTiles::square(32, 8))).is_single());
        assert!(TileGrid::new(16, 24, None).is_single());
    }

    #[test]
    fn tiles_cover_with_the_requested_overlap_and_no_spare_tile() {
        for len in [5, 16, 24, 33, 90] {
            for (tile, overlap) in [(4, 1), (8, 2), (10, 4), (12, 6), (7, 0)] {
                let spans = axis_spans(len, tile, overlap);
                if tile >= len {
                    continue;
                }
                assert_eq!(spans.first().unwrap().start, 0);
                assert_eq!(spans.last().unwrap().end, len);
                for pair in spans.windows(2) {
                    let shared = pair[0].end - pair[1].start;
                    assert!(shared >= overlap.min(tile / 2), "{len} {tile} {overlap}: {spans:?}");
                    assert!(pair[1].start > pair[0].start);
                }
                let shrunk = spans[0].len();
                assert!(shrunk <= tile && spans.iter().all(|s| s.len() == shrunk), "{len} {tile} {overlap}: {spans:?}");
                // One cell shorter and the same count would no longer share `overlap` cells.
                let n = spans.len() as i64;
                assert!(n * (shrunk - 1) - (n - 1) * overlap.min(tile / 2) < len, "{len} {tile} {overlap}: {spans:?}");
                // One tile fewer could not cover the axis with that overlap.
                let fewer = spans.len() as i64 - 1;
                assert!(fewer * tile - (fewer - 1).max(0) * overlap.min(tile / 2) < len, "{len} {tile} {overlap}: {spans:?}");
            }
        }
    }

    #[test]
    fn example_layout() {
        let grid = TileGrid::new(16, 24, Some(&SpatialTiles::square(10, 4)));
        assert_eq!(grid.rows, vec![Span { start: 0, end: 10 }, Span { start: 6, end: 16 }]);
        // 24 cells in 4 tiles sharing 4: 9 cells each, not 10.
        assert_eq!(grid.cols, vec![Span { start: 0, end: 9 }, Span { start: 5, end: 14 }, Span { start: 10, end: 19 }, Span { start: 15, end: 24 }]);
        assert_eq!(grid.count(), 8);
        assert_eq!(grid.covered_cells(), grid.tiles().map(|(r, c)| r.len() * c.len()).sum::<i64>());
        assert_eq!(axis_spans(16, 12, 3), vec![Span { start: 0, end: 10 }, Span { start: 6, end: 16 }]);
    }

    #[test]
    fn strips_leave_one_axis_whole() {
        let strips = SpatialTiles { tile_height_latent: 16, tile_width_latent: 14, overlap_latent: 4 };
        let grid = TileGrid::new(16, 24, Some(&strips));
        assert_eq!(grid.rows, vec![Span { start: 0, end: 16 }]);
        assert_eq!(grid.cols, vec![Span { start: 0, end: 14 }, Span { start: 10, end: 24 }]);
    }
}
