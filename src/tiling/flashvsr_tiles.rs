//! Spatial tiles of a FlashVSR job, for a frame whose step does not fit the memory budget in one piece:
//! the frame (at the model's size) split into tiles whose sides are 128-multiples (the model's), placed on
//! 16-pixel steps (one DiT token) with neighbours sharing at least 64 pixels, each tile a run of its own over the whole clip (its own KV cache, LQ projection and decoder
//! caches) on its part of the LQ frames and of the noise, the tiles' frames cross-faded with raised-cosine
//! weights. As ComfyUI's FlashVSR tilers do, each tile's attention and colour fix see only its tile: the
//! result is close to the untiled one, not equal.
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::blend::TileBlender;
use super::spatial::Span;

/// FlashVSR's frame sides are multiples of this (its DiT's attention windows over the 8× latent).
pub const SIDE_MULTIPLE: i64 = 128;
/// Tiles start on multiples of this: one DiT token (the VAE's 8× and the 2×2 patch).
const TOKEN_PIXELS: i64 = 16;
/// Pixels neighbours share at least, cross-faded.
pub const MIN_OVERLAP: i64 = 64;

/// How the frame was split: `rows × cols` tiles of `tile` `[height, width]` pixels (at the model's size),
/// neighbours sharing at least `overlap` pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FlashVsrTiles {
    pub rows: i64,
    pub cols: i64,
    pub tile: [i64; 2],
    pub overlap: i64,
}

/// One tile: its pixels of the frame and its blend weight `[1, 1, h, w]` (the weights sum to one).
pub struct Tile {
    pub rows: Span,
    pub cols: Span,
    pub weight: Tensor,
}

impl Tile {
    /// `[.., H, W]` → the tile's part; `divisor`: frame pixels per pixel of `frames` (8 for the latent noise).
    pub fn of(&self, frames: &Tensor, divisor: i64) -> Result<Tensor, tch::TchError> {
        let dims = frames.dim() as i64;
        Ok(frames
            .f_narrow(dims - 2, self.rows.start / divisor, self.rows.len() / divisor)?
            .f_narrow(dims - 1, self.cols.start / divisor, self.cols.len() / divisor)?)
    }
}

impl FlashVsrTiles {
    /// Tiles of `side` pixels (a multiple of 128; a side of the frame shorter than it is one tile) over a
    /// `[height, width]` frame, sharing at least [`MIN_OVERLAP`]; `None` when one tile covers it.
    pub fn of_side(model: [i64; 2], side: i64) -> Option<FlashVsrTiles> {
        let [rows, cols] = model.map(|len| spans(len, side));
        if rows.len() * cols.len() <= 1 {
            return None;
        }
        let shared = |spans: &[Span]| spans.windows(2).map(|pair| pair[0].end - pair[1].start).min();
        let overlap = shared(&rows).into_iter().chain(shared(&cols)).min().unwrap_or(0);
        Some(FlashVsrTiles { rows: rows.len() as i64, cols: cols.len() as i64, tile: [rows[0].len(), cols[0].len()], overlap })
    }

    /// The tiles over a `[height, width]` frame, row by row, with their weights on `device`.
    pub fn tiles(&self, model: [i64; 2], device: Device) -> Vec<Tile> {
        let [side_h, side_w] = self.tile;
        let (rows, cols) = (spans(model[0], side_h), spans(model[1], side_w));
        let blender = TileBlender::new(&rows, &cols, device);
        let mut tiles = Vec::new();
        for (index, (r, c)) in rows.iter().flat_map(|r| cols.iter().map(move |c| (*r, *c))).enumerate() {
            if let Some(blend) = blender.tile(index) {
                tiles.push(Tile { rows: r, cols: c, weight: blend.weight.view([1, 1, r.len(), c.len()]) });
            }
        }
        tiles
    }
}

/// The fewest spans of `side` pixels over `[0, len)` sharing at least [`MIN_OVERLAP`], spread evenly from 0
/// to `len` on token steps; one span of `len` when `side` covers it.
fn spans(len: i64, side: i64) -> Vec<Span> {
    if side >= len {
        return vec![Span { start: 0, end: len }];
    }
    let count = (len - MIN_OVERLAP + side - MIN_OVERLAP - 1) / (side - MIN_OVERLAP);
    (0..count)
        .map(|i| {
            let start = (i * (len - side) / (count - 1)) / TOKEN_PIXELS * TOKEN_PIXELS;
            let start = if i == count - 1 { len - side } else { start };
            Span { start, end: start + side }
        })
        .collect()
}

/// The weighted sum of the tiles' frames `[T, 3, h, w]` into one `[T, 3, H, W]` frame.
pub fn blend(tiles: &[&Tile], frames: &[Tensor], model: [i64; 2]) -> Result<Tensor, tch::TchError> {
    let (count, device) = frames.first().map_or((0, Device::Cpu), |f| (f.size()[0], f.device()));
    let canvas = Tensor::f_zeros([count, 3, model[0], model[1]], (Kind::Float, device))?;
    for (tile, frames) in tiles.iter().zip(frames) {
        let mut part = canvas.f_narrow(2, tile.rows.start, tile.rows.len())?.f_narrow(3, tile.cols.start, tile.cols.len())?;
        let _ = part.f_add_(&frames.f_to_kind(Kind::Float)?.f_mul(&tile.weight)?)?;
    }
    Ok(canvas)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_sides_are_128_multiples_on_token_steps_and_their_weights_sum_to_one() {
        // 768×1408 in tiles of 512: 2 rows sharing 256, 3 columns sharing 64 (starts 0, 448, 896).
        let tiles = FlashVsrTiles::of_side([768, 1408], 512).unwrap();
        assert_eq!((tiles.rows, tiles.cols, tiles.tile, tiles.overlap), (2, 3, [512, 512], 64));
        let laid = tiles.tiles([768, 1408], Device::Cpu);
        assert_eq!(laid.len(), 6);
        for tile in &laid {
            assert!(tile.rows.start % 16 == 0 && tile.cols.start % 16 == 0 && tile.rows.len() == 512 && tile.cols.len() == 512);
            assert!(tile.rows.end <= 768 && tile.cols.end <= 1408);
        }
        let ones: Vec<Tensor> = laid.iter().map(|t| Tensor::ones([2, 3, t.rows.len(), t.cols.len()], (Kind::Float, Device::Cpu))).collect();
        let sum = blend(&laid.iter().collect::<Vec<_>>(), &ones, [768, 1408]).unwrap();
        assert!((sum - 1.0).abs().max().double_value(&[]) < 1e-6);
        assert_eq!(FlashVsrTiles::of_side([256, 256], 256), None);
        // 128-pixel tiles over 256×384: 3 × 5, each sharing 64 with the next.
        assert_eq!(FlashVsrTiles::of_side([256, 384], 128).map(|t| (t.rows, t.cols, t.tile, t.overlap)), Some((3, 5, [128, 128], 64)));
    }
}
