//! The DiT step over spatial tiles of the latent, for a frame whose latent is too large for the DiT's
//! memory in one piece. The tiles get the whole latent's tokens there (its noise included: it was drawn
//! once for the whole latent) and the whole grid's attention windows cut to them; their velocities are
//! summed with weights that the caller made sum to one over every latent cell, so the overlaps cross-fade.
use std::ops::Range;

use tch::{Kind, Tensor};

use crate::models::seedvr2_dit::{DitInput, SeedVr2Dit, TileOf};
use crate::models::stop::StopFlag;
use crate::models::ModelError;

/// One tile of the latent: its rows and columns (even bounds) and its blend weight `[rows, columns]`.
pub struct DitTile {
    pub rows: Range<i64>,
    pub cols: Range<i64>,
    pub weight: Tensor,
}

/// The velocity `[t, h, w, c]` (Float) of `tokens` `[t, h, w, channels in]` run tile by tile; `stop` is
/// asked between tiles and between each tile's blocks (`ModelError::Stopped`).
pub fn tiled_velocity(dit: &SeedVr2Dit, tokens: &Tensor, text: &Tensor, timestep: f64, tiles: &[DitTile], stop: &StopFlag) -> Result<Tensor, ModelError> {
    let [t, h, w, _] = <[i64; 4]>::try_from(tokens.size()).expect("4-D tokens");
    let mut sum: Option<Tensor> = None;
    for tile in tiles {
        stop.check()?;
        let (rows, cols) = (tile.rows.end - tile.rows.start, tile.cols.end - tile.cols.start);
        let vid = tokens.narrow(1, tile.rows.start, rows).narrow(2, tile.cols.start, cols).reshape([t * rows * cols, -1]);
        let input = DitInput { vid: &vid, grid: [t, rows, cols], txt: text, timestep };
        let tile_of = TileOf { whole: [t, h, w], offset: [tile.rows.start, tile.cols.start] };
        let velocity = {
            let _heap = crate::device::HeapReuse::for_call();
            dit.forward_tile_until(&input, &tile_of, stop)?
        };
        let velocity = velocity.to_kind(Kind::Float).to_device(tokens.device()).view([t, rows, cols, -1]);
        let total = sum.get_or_insert_with(|| Tensor::zeros([t, h, w, velocity.size()[3]], (Kind::Float, tokens.device())));
        let weight = tile.weight.to_device(tokens.device()).to_kind(Kind::Float).view([1, rows, cols, 1]);
        let mut place = total.narrow(1, tile.rows.start, rows).narrow(2, tile.cols.start, cols);
        let _ = place.addcmul_(&velocity, &weight);
    }
    Ok(sum.expect("at least one tile"))
}
