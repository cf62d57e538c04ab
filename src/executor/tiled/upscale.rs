//! The upscaler run tile by tile on the layout `tiling::spatial` plans: exact tiles keep each core's
//! output; tiles below the model's receptive radius may be blended whole instead.
use tch::{Kind, Tensor};

use super::blend::BlendAccumulator;
use crate::models::family::upscaler::Upscaler;
use crate::models::stop::StopFlag;
use crate::models::ModelError;
use crate::tiling::blend::TileBlender;
use crate::tiling::spatial::{plan_axis, plan_tiles, Span, SpatialTiling};

/// Upscales `[N,3,H,W]` (Float, [0,1], on the model's device) tile by tile into one pre-allocated
/// `[N,3,H*scale,W*scale]` Float output.
pub fn upscale_tiled(model: &dyn Upscaler, x: &Tensor, scale: i64, tiling: &SpatialTiling) -> Result<Tensor, ModelError> {
    upscale_tiled_until(model, x, scale, tiling, &StopFlag::never())
}

/// As [`upscale_tiled`], asking `stop` before each tile and, inside the model, between its layers: a cancel
/// takes effect within about a second, not at the end of a chunk (a 4-frame chunk of x4plus at 720p is half
/// a minute of CPU, and frames that fit one tile are one call). `ModelError::Stopped` then.
pub fn upscale_tiled_until(model: &dyn Upscaler, x: &Tensor, scale: i64, tiling: &SpatialTiling, stop: &StopFlag) -> Result<Tensor, ModelError> {
    upscale_tiled_reporting(model, x, scale, tiling, stop, &|_, _| {})
}

/// `tile_done(done, tiles)` after each tile of `x`'s frames (after the one call for frames that fit one
/// tile): how far the call is, for a job's progress within a chunk of big frames.
pub type TileDone<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// As [`upscale_tiled_until`], reporting each finished tile to `tile_done`.
pub fn upscale_tiled_reporting(model: &dyn Upscaler, x: &Tensor, scale: i64, tiling: &SpatialTiling, stop: &StopFlag, tile_done: TileDone) -> Result<Tensor, ModelError> {
    let size = x.size();
    let &[batch, channels, height, width] = size.as_slice() else {
        return Err(unsupported(format!("input of shape {size:?} (expected [N,3,H,W])")));
    };
    if channels != 3 || height == 0 || width == 0 {
        return Err(unsupported(format!("input of shape {size:?} (expected [N,3,H,W] with H,W > 0)")));
    }
    if tiling.overlap < 0 || tiling.tile < 0 {
        return Err(unsupported(format!("tile {} / overlap {} (both must be >= 0)", tiling.tile, tiling.overlap)));
    }
    stop.check()?;
    let tiles = plan_tiles(height, width, tiling);
    if let [_single] = tiles.as_slice() {
        let output = model.upscale_until(x, scale, stop)?;
        tile_done(1, 1);
        return Ok(output);
    }
    if tiling.blends(model.receptive_radius()) {
        return upscale_blended(model, x, scale, tiling, stop, tile_done);
    }
    let output = Tensor::empty([batch, channels, height * scale, width * scale], (Kind::Float, x.device()));
    for (index, tile) in tiles.iter().enumerate() {
        stop.check()?;
        let _span = tracing::trace_span!("upscale_tile", row = tile.core_rows.start, col = tile.core_cols.start).entered();
        let input = x
            .narrow(2, tile.context_rows.start, tile.context_rows.len())
            .narrow(3, tile.context_cols.start, tile.context_cols.len());
        let upscaled = model.upscale_until(&input, scale, stop)?;
        let core = upscaled
            .narrow(2, (tile.core_rows.start - tile.context_rows.start) * scale, tile.core_rows.len() * scale)
            .narrow(3, (tile.core_cols.start - tile.context_cols.start) * scale, tile.core_cols.len() * scale);
        output
            .narrow(2, tile.core_rows.start * scale, tile.core_rows.len() * scale)
            .narrow(3, tile.core_cols.start * scale, tile.core_cols.len() * scale)
            .f_copy_(&core)?;
        tile_done(index + 1, tiles.len());
    }
    Ok(output)
}

/// Every tile's whole output (core and context), blended where contexts overlap.
fn upscale_blended(model: &dyn Upscaler, x: &Tensor, scale: i64, tiling: &SpatialTiling, stop: &StopFlag, tile_done: TileDone) -> Result<Tensor, ModelError> {
    let size = x.size();
    let scaled = |spans: Vec<(Span, Span)>| spans.into_iter().map(|(_, context)| context.scaled(scale)).collect::<Vec<_>>();
    let rows = scaled(plan_axis(size[2], tiling));
    let cols = scaled(plan_axis(size[3], tiling));
    let blender = TileBlender::new(&rows, &cols, x.device());
    let mut sum = BlendAccumulator::new(&x.unsqueeze(2), size[2] * scale, size[3] * scale);
    let tiles = rows.len() * cols.len();
    for (index, (r, c)) in rows.iter().flat_map(|&r| cols.iter().map(move |&c| (r, c))).enumerate() {
        stop.check()?;
        if let Some(tile) = blender.tile(index) {
            let input = x.narrow(2, r.start / scale, r.len() / scale).narrow(3, c.start / scale, c.len() / scale);
            sum.add(&model.upscale_until(&input, scale, stop)?.unsqueeze(2), tile)?;
        }
        tile_done(index + 1, tiles);
    }
    Ok(sum.finish().squeeze_dim(2))
}

fn unsupported(what: String) -> ModelError {
    ModelError::Unsupported { model: "upscaler (tiled)".into(), what }
}
