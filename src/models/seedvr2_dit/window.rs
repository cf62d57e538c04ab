//! The 3-D attention windows of the patched token grid (`window.py` of the original). The configured
//! `(nt, nh, nw)` is a window COUNT for a 720p-sized grid, turned into a window SIZE that keeps the
//! window's token count roughly constant at any resolution; edge windows may be partial, and shifted
//! windows start half a window in.
use std::ops::Range;

/// The grid the window count was designed for (720p patched: 45 × 80 tokens).
const DESIGN_AREA: f64 = 45.0 * 80.0;
/// Time windows are sized as if the clip had at most this many latent frames.
const MAX_WINDOW_TIME: i64 = 30;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub t: Range<i64>,
    pub h: Range<i64>,
    pub w: Range<i64>,
}

impl Window {
    pub fn shape(&self) -> [i64; 3] {
        [self.t.end - self.t.start, self.h.end - self.h.start, self.w.end - self.w.start]
    }

    pub fn tokens(&self) -> i64 {
        self.shape().iter().product()
    }

    /// Indices of this window's tokens in the `(t, h, w)` row-major grid, in that order.
    pub fn token_indices(&self, grid: [i64; 3]) -> Vec<i64> {
        let [_, gh, gw] = grid;
        let mut indices = Vec::with_capacity(self.tokens() as usize);
        for t in self.t.clone() {
            for h in self.h.clone() {
                indices.extend(self.w.clone().map(|w| (t * gh + h) * gw + w));
            }
        }
        indices
    }
}

/// Window size `(wt, wh, ww)` for a patched grid and a window count.
pub fn window_size(grid: [i64; 3], count: [i64; 3]) -> [i64; 3] {
    let [t, h, w] = grid;
    let [nt, nh, nw] = count;
    let scale = (DESIGN_AREA / (h * w) as f64).sqrt();
    // Python's round (half to even), as the original.
    let (rh, rw) = ((h as f64 * scale).round_ties_even() as i64, (w as f64 * scale).round_ties_even() as i64);
    [div_ceil(t.min(MAX_WINDOW_TIME), nt), div_ceil(rh, nh), div_ceil(rw, nw)]
}

/// The windows of one sample, in the original's order: the w tile outermost, then h, then t.
pub fn windows(grid: [i64; 3], count: [i64; 3], shifted: bool) -> Vec<Window> {
    let size = window_size(grid, count);
    let tiles = |axis: usize| if shifted { shifted_tiles(grid[axis], size[axis]) } else { regular_tiles(grid[axis], size[axis]) };
    let (ts, hs, ws) = (tiles(0), tiles(1), tiles(2));
    let mut out = Vec::with_capacity(ts.len() * hs.len() * ws.len());
    for w in &ws {
        for h in &hs {
            out.extend(ts.iter().map(|t| Window { t: t.clone(), h: h.clone(), w: w.clone() }));
        }
    }
    out
}

/// A part of a larger grid run on its own (a spatial tile): the whole grid's size and where the part
/// starts in it, in patched tokens (`t` is never split).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GridPart {
    pub whole: [i64; 3],
    pub offset: [i64; 3],
}

/// The windows of a part of a grid: the whole grid's windows (sized and placed for it, so that a tile's
/// windows are the untiled run's) cut to the part and moved to its origin; windows outside it dropped.
pub fn windows_of_part(part: &GridPart, grid: [i64; 3], count: [i64; 3], shifted: bool) -> Vec<Window> {
    let clip = |range: &Range<i64>, axis: usize| {
        let start = range.start.max(part.offset[axis]) - part.offset[axis];
        let end = range.end.min(part.offset[axis] + grid[axis]) - part.offset[axis];
        start..end
    };
    windows(part.whole, count, shifted)
        .iter()
        .map(|w| Window { t: clip(&w.t, 0), h: clip(&w.h, 1), w: clip(&w.w, 2) })
        .filter(|w| w.t.start < w.t.end && w.h.start < w.h.end && w.w.start < w.w.end)
        .collect()
}

fn regular_tiles(extent: i64, size: i64) -> Vec<Range<i64>> {
    (0..div_ceil(extent, size)).map(|i| i * size..((i + 1) * size).min(extent)).collect()
}

/// Tiles centred on the regular tiles' borders: `[trunc((i − ½)·ws), trunc((i + ½)·ws))`, clipped, empty
/// ones dropped; one tile when the window covers the axis.
fn shifted_tiles(extent: i64, size: i64) -> Vec<Range<i64>> {
    if size >= extent {
        return vec![0..extent];
    }
    let last = ((extent as f64 - 0.5) / size as f64).ceil() as i64;
    (0..=last)
        .map(|i| {
            let start = (((i as f64 - 0.5) * size as f64).trunc() as i64).max(0);
            let end = (((i as f64 + 0.5) * size as f64).trunc() as i64).min(extent);
            start..end
        })
        .filter(|r| r.start < r.end)
        .collect()
}

fn div_ceil(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extents(windows: &[Window], axis: usize) -> Vec<i64> {
        let mut seen: Vec<Range<i64>> = Vec::new();
        for w in windows {
            let r = [&w.t, &w.h, &w.w][axis].clone();
            if !seen.contains(&r) {
                seen.push(r);
            }
        }
        seen.sort_by_key(|r| r.start);
        seen.iter().map(|r| r.end - r.start).collect()
    }

    /// The worked examples of the reference README (§1.6), computed there with the original functions.
    #[test]
    fn released_window_tables() {
        let cases: [([i64; 3], [&[i64]; 3], [&[i64]; 3]); 4] = [
            ([21, 45, 80], [&[6, 6, 6, 3], &[15, 15, 15], &[27, 27, 26]], [&[3, 6, 6, 6], &[7, 15, 15, 8], &[13, 27, 27, 13]]),
            ([21, 30, 53], [&[6, 6, 6, 3], &[15, 15], &[27, 26]], [&[3, 6, 6, 6], &[7, 15, 8], &[13, 27, 13]]),
            ([21, 67, 120], [&[6, 6, 6, 3], &[15, 15, 15, 15, 7], &[27, 27, 27, 27, 12]], [&[3, 6, 6, 6], &[7, 15, 15, 15, 15], &[13, 27, 27, 27, 26]]),
            ([1, 64, 64], [&[1], &[20, 20, 20, 4], &[20, 20, 20, 4]], [&[1], &[10, 20, 20, 14], &[10, 20, 20, 14]]),
        ];
        for (grid, regular, shifted) in cases {
            for (is_shifted, expected) in [(false, regular), (true, shifted)] {
                let ws = windows(grid, [4, 3, 3], is_shifted);
                for axis in 0..3 {
                    assert_eq!(extents(&ws, axis), expected[axis], "grid {grid:?} shifted {is_shifted} axis {axis}");
                }
            }
        }
        assert_eq!(windows([21, 45, 80], [4, 3, 3], false).len(), 36);
        assert_eq!(windows([21, 45, 80], [4, 3, 3], true).len(), 64);
    }

    #[test]
    fn a_part_keeps_the_whole_grids_windows_cut_to_it() {
        let whole = [2, 40, 64];
        for shifted in [false, true] {
            let all = windows(whole, [2, 3, 3], shifted);
            let same = windows_of_part(&GridPart { whole, offset: [0, 0, 0] }, whole, [2, 3, 3], shifted);
            assert_eq!(all, same);
            let part = GridPart { whole, offset: [0, 10, 20] };
            let cut = windows_of_part(&part, [2, 20, 30], [2, 3, 3], shifted);
            // Every token of the part is in exactly one window, and each window is a whole-grid window
            // moved by the offset and cut to the part.
            let mut seen = vec![0; 2 * 20 * 30];
            for w in &cut {
                for i in w.token_indices([2, 20, 30]) {
                    seen[i as usize] += 1;
                }
                let moved = |r: &Range<i64>, o: i64| r.start + o..r.end + o;
                assert!(all.iter().any(|a| a.t == w.t
                    && a.h.start.max(10) == w.h.start + 10 && a.h.end.min(30) == w.h.end + 10
                    && a.w.start.max(20) == w.w.start + 20 && a.w.end.min(50) == w.w.end + 20), "{:?}", (moved(&w.h, 10), moved(&w.w, 20)));
            }
            assert!(seen.iter().all(|n| *n == 1));
        }
    }

    #[test]
    fn order_is_w_then_h_then_t_and_tokens_row_major() {
        let ws = windows([3, 6, 8], [2, 15, 15], false);
        assert_eq!(ws[0], Window { t: 0..2, h: 0..4, w: 0..5 });
        assert_eq!(ws[1], Window { t: 2..3, h: 0..4, w: 0..5 });
        assert_eq!(ws[2], Window { t: 0..2, h: 4..6, w: 0..5 });
        assert_eq!(ws[4], Window { t: 0..2, h: 0..4, w: 5..8 });
        let w = Window { t: 1..2, h: 2..4, w: 5..7 };
        assert_eq!(w.token_indices([3, 6, 8]), vec![48 + 21, 48 + 22, 48 + 29, 48 + 30]);
    }
}
