//! Exact spatial tiling for the upscaler: the frame is cut into cores that cover it exactly
//! once; each tile is run with `overlap` extra input pixels of context per side (clipped at the
//! frame edge) and only its core's output is kept. With `overlap >= model.receptive_radius()`
//! every kept pixel saw the same input as in a whole-frame run, so no blending is needed; below it
//! (RRDB's 349 px) the tiles' whole outputs can be blended instead (`SpatialTiling::blend`). This is the
//! plan; `executor::tiled::upscale` runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpatialTiling {
    /// Largest core side in input pixels (0 = whole frame). The model sees at most
    /// `tile + 2 * overlap` pixels per side, which is what bounds memory.
    pub tile: i64,
    /// Context pixels per side around each core.
    pub overlap: i64,
    /// Where the tiles cannot be exact (overlap below the model's receptive radius), blend their whole
    /// outputs with raised-cosine weights across the shared context instead of keeping each core.
    pub blend: bool,
}

impl SpatialTiling {
    /// Every kept output pixel saw the input a whole-frame run sees.
    pub fn is_exact(&self, receptive_radius: i64) -> bool {
        self.tile == 0 || self.overlap >= receptive_radius
    }

    /// Whether a run with a model of this receptive radius blends its tiles.
    pub fn blends(&self, receptive_radius: i64) -> bool {
        self.blend && !self.is_exact(receptive_radius)
    }
}

/// Half-open pixel range `[start, end)` along one axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: i64,
    pub end: i64,
}

impl Span {
    pub fn len(&self) -> i64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// The same range in units `factor` times smaller (latent cells to pixels, input to output).
    pub fn scaled(self, factor: i64) -> Span {
        Span { start: self.start * factor, end: self.end * factor }
    }
}

/// One tile in input pixels: the core it is responsible for and the larger region fed to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    pub core_rows: Span,
    pub core_cols: Span,
    pub context_rows: Span,
    pub context_cols: Span,
}

/// Row-major tiles for an `height`×`width` frame. Cores per axis are as equal as possible (sizes
/// differ by at most one pixel) rather than full tiles plus a sliver, which would waste a whole
/// tile's context on a few pixels.
pub fn plan_tiles(height: i64, width: i64, tiling: &SpatialTiling) -> Vec<Tile> {
    let rows = plan_axis(height, tiling);
    let cols = plan_axis(width, tiling);
    rows.iter()
        .flat_map(|&(core_rows, context_rows)| {
            cols.iter().map(move |&(core_cols, context_cols)| Tile { core_rows, core_cols, context_rows, context_cols })
        })
        .collect()
}

/// (core, context) spans along one axis.
pub fn plan_axis(len: i64, tiling: &SpatialTiling) -> Vec<(Span, Span)> {
    if len <= 0 {
        return Vec::new();
    }
    let count = if tiling.tile <= 0 || len <= tiling.tile { 1 } else { (len + tiling.tile - 1) / tiling.tile };
    let overlap = tiling.overlap.max(0);
    (0..count)
        .map(|index| {
            let core = Span { start: index * len / count, end: (index + 1) * len / count };
            let context = Span { start: (core.start - overlap).max(0), end: (core.end + overlap).min(len) };
            (core, context)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiling(tile: i64, overlap: i64) -> SpatialTiling {
        SpatialTiling { tile, overlap, blend: false }
    }

    #[test]
    fn whole_frame_when_tile_is_zero_or_large_enough() {
        for plan in [plan_tiles(144, 176, &tiling(0, 10)), plan_tiles(144, 176, &tiling(176, 10))] {
            let full_rows = Span { start: 0, end: 144 };
            let full_cols = Span { start: 0, end: 176 };
            assert_eq!(plan, vec![Tile { core_rows: full_rows, core_cols: full_cols, context_rows: full_rows, context_cols: full_cols }]);
        }
        assert!(plan_tiles(0, 10, &tiling(4, 1)).is_empty());
    }

    /// Every pixel lies in exactly one core; cores respect the tile size, sit inside their
    /// context, and the context reaches exactly `overlap` further unless the frame ends first.
    #[test]
    fn cores_partition_the_frame_and_contexts_are_clipped_overlaps() {
        for (height, width) in [(1, 1), (7, 5), (64, 64), (144, 176), (97, 33)] {
            for (tile, overlap) in [(1, 0), (3, 2), (16, 0), (16, 19), (32, 8), (50, 100)] {
                let plan = plan_tiles(height, width, &tiling(tile, overlap));
                let mut hits = vec![0u32; (height * width) as usize];
                for t in &plan {
                    for (core, context, len) in [(t.core_rows, t.context_rows, height), (t.core_cols, t.context_cols, width)] {
                        assert!(!core.is_empty() && core.len() <= tile, "{t:?}");
                        assert_eq!(context.start, (core.start - overlap).max(0), "{t:?}");
                        assert_eq!(context.end, (core.end + overlap).min(len), "{t:?}");
                    }
                    for row in t.core_rows.start..t.core_rows.end {
                        for col in t.core_cols.start..t.core_cols.end {
                            hits[(row * width + col) as usize] += 1;
                        }
                    }
                }
                assert!(hits.iter().all(|&h| h == 1), "{height}x{width} tile {tile} overlap {overlap}: gap or double cover");
            }
        }
    }

    #[test]
    fn edge_tiles_touch_the_frame_and_sizes_are_balanced() {
        let plan = plan_tiles(100, 70, &tiling(32, 6));
        let rows: Vec<Span> = plan.iter().filter(|t| t.core_cols.start == 0).map(|t| t.core_rows).collect();
        assert_eq!(rows, vec![Span { start: 0, end: 25 }, Span { start: 25, end: 50 }, Span { start: 50, end: 75 }, Span { start: 75, end: 100 }]);
        let first = plan.first().unwrap();
        let last = plan.last().unwrap();
        assert_eq!((first.context_rows.start, first.context_cols.start), (0, 0));
        assert_eq!((first.context_rows.end, first.context_cols.end), (31, 29));
        assert_eq!((last.core_rows.end, last.core_cols.end), (100, 70));
        assert_eq!((last.context_rows.start, last.context_cols.start), (69, 40));
        let widths: Vec<i64> = plan.iter().filter(|t| t.core_rows.start == 0).map(|t| t.core_cols.len()).collect();
        assert_eq!(widths, vec![23, 23, 24]);
    }
}
