//! Spatially tiled VAE streams: one ordinary [`VaeStream`] per tile, each carrying its own
//! causal cache across time chunks, blended with raised-cosine weights — in pixel space for decode,
//! in latent space for encode. `push` has the signature of the untiled stream, so the executor can
//! swap one for the other; with a single tile they are the untiled stream itself.
use std::collections::HashMap;

use tch::Tensor;

use super::blend::BlendAccumulator;
use crate::models::ModelError;
use crate::models::family::vae::{BoxedStream, StreamOutput, StreamPace};
use crate::models::vae::VideoVae;
use crate::models::nn::causal_cache::{saved_state_error, RowSplit, SavedTensors};
use crate::models::stop::StopFlag;
use crate::tiling::blend::TileBlender;
use crate::tiling::grid::{SpatialTiles, TileGrid};
use crate::tiling::spatial::Span;

/// Where the tiles of one frame size sit and how they blend. A stream's layout is fixed by its first
/// push: the frame size of a stream does not change.
pub(super) struct Layout {
    latent_height: i64,
    latent_width: i64,
    /// Latent spans of each kept tile, row-major, matching the blender's kept entries.
    pub(super) tiles: Vec<(usize, Span, Span)>,
    pub(super) blender: TileBlender,
}

impl Layout {
    /// `output_scale`: output cells per latent cell (the spatial factor for decode, 1 for encode).
    pub(super) fn new(latent_height: i64, latent_width: i64, tiles: Option<&SpatialTiles>, output_scale: i64, device: tch::Device) -> Layout {
        let grid = TileGrid::new(latent_height, latent_width, tiles);
        let scale = |spans: &[Span]| spans.iter().map(|s| s.scaled(output_scale)).collect::<Vec<_>>();
        let blender = TileBlender::new(&scale(&grid.rows), &scale(&grid.cols), device);
        let kept = blender.kept();
        let tiles = grid.tiles().enumerate().filter(|(i, _)| kept[*i]).map(|(i, (r, c))| (i, r, c)).collect();
        Layout { latent_height, latent_width, tiles, blender }
    }

    fn check(&self, latent_height: i64, latent_width: i64) -> Result<(), ModelError> {
        if (latent_height, latent_width) != (self.latent_height, self.latent_width) {
            return Err(ModelError::Unsupported {
                model: "tiled VAE stream".into(),
                what: format!(
                    "a frame size change mid-stream ({}×{} latent cells, then {latent_height}×{latent_width})",
                    self.latent_height, self.latent_width
                ),
            });
        }
        Ok(())
    }
}

fn narrow_hw(x: &Tensor, rows: Span, cols: Span, scale: i64) -> Result<Tensor, ModelError> {
    Ok(x.f_narrow(3, rows.start * scale, rows.len() * scale)?.f_narrow(4, cols.start * scale, cols.len() * scale)?)
}

/// The per-tile stream states of a tiled stream at one moment (empty before the first push).
pub struct StreamCheckpoint<'a>(Vec<BoxedStream<'a>>);

/// The state both tiled streams share: the layout (fixed by the first push), one stream per kept
/// tile, and the row split and stop every tile stream runs with.
struct TileStreams<'a> {
    layout: Option<Layout>,
    streams: Vec<BoxedStream<'a>>,
    row_split: Option<RowSplit>,
    /// Asked before each tile, and by each tile's stream between its layers.
    stop: StopFlag,
}

impl<'a> TileStreams<'a> {
    fn new() -> Self {
        TileStreams { layout: None, streams: Vec::new(), row_split: None, stop: StopFlag::never() }
    }

    /// The layout for frames of `h × w` latent cells, made (with a new stream per tile) on first use,
    /// and the tile streams.
    fn layout_for(
        &mut self,
        h: i64,
        w: i64,
        make: impl FnOnce(i64, i64) -> Layout,
        stream: impl Fn() -> BoxedStream<'a>,
    ) -> Result<(&Layout, &mut [BoxedStream<'a>]), ModelError> {
        if self.layout.is_none() {
            let layout = make(h, w);
            self.streams = layout.tiles.iter().map(|_| stream()).collect();
            let split = self.row_split;
            let stop = &self.stop;
            self.streams.iter_mut().for_each(|s| {
                s.set_row_split(split);
                s.set_stop(stop.clone());
            });
            self.layout = Some(layout);
        }
        let layout = self.layout.as_ref().expect("set above");
        layout.check(h, w)?;
        Ok((layout, &mut self.streams))
    }

    fn checkpoint(&self) -> StreamCheckpoint<'a> {
        StreamCheckpoint(self.streams.iter().map(|s| s.snapshot()).collect())
    }

    fn restore(&mut self, checkpoint: StreamCheckpoint<'a>) {
        self.streams = checkpoint.0;
        if self.streams.is_empty() {
            self.layout = None;
        }
    }

    fn set_row_split(&mut self, vae: &VideoVae, split: Option<RowSplit>) -> bool {
        self.row_split = split;
        vae.supports_row_split() && self.streams.iter_mut().all(|s| s.set_row_split(split))
    }

    fn set_stop(&mut self, stop: StopFlag) {
        self.streams.iter_mut().for_each(|s| s.set_stop(stop.clone()));
        self.stop = stop;
    }

    fn tile_count(&self) -> usize {
        self.layout.as_ref().map_or(0, |l| l.tiles.len())
    }

    /// The frame size in latent cells and every tile stream's state (nothing before the first push).
    fn save_state(&self) -> SavedTensors {
        let mut saved = SavedTensors::new();
        if let Some(layout) = &self.layout {
            saved.push((LAYOUT_KEY.into(), Tensor::from_slice(&[layout.latent_height, layout.latent_width])));
            for (index, stream) in self.streams.iter().enumerate() {
                stream.save_state(&format!("tile{index}."), &mut saved);
            }
        }
        saved
    }

    /// The frame size a saved state was made for, if it was made after a push.
    fn saved_layout(saved: &HashMap<String, Tensor>) -> Result<Option<(i64, i64)>, ModelError> {
        let Some(size) = saved.get(LAYOUT_KEY) else { return Ok(None) };
        match Vec::<i64>::try_from(size)?[..] {
            [h, w] => Ok(Some((h, w))),
            _ => Err(saved_state_error(format!("a `{LAYOUT_KEY}` of shape {:?}", size.size()))),
        }
    }

    /// Loads what `save_state` wrote into the tile streams `layout_for` just made.
    fn load_streams(&mut self, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        for (index, stream) in self.streams.iter_mut().enumerate() {
            stream.load_state(&format!("tile{index}."), saved)?;
        }
        Ok(())
    }
}

/// The saved frame size (latent cells): the tiles are laid out again from it when a stream goes on.
const LAYOUT_KEY: &str = "layout";

/// Latent frames in, pixel frames out, tile by tile. Output is Float (blended tiles) or the model's
/// own output (one tile).
pub struct TiledDecoder<'a> {
    vae: &'a VideoVae,
    tiles: Option<SpatialTiles>,
    output: StreamOutput,
    pace: StreamPace,
    state: TileStreams<'a>,
}

impl<'a> TiledDecoder<'a> {
    /// `tiles: None` is the untiled stream.
    pub fn new(vae: &'a VideoVae, tiles: Option<SpatialTiles>) -> TiledDecoder<'a> {
        Self::with_output(vae, tiles, StreamOutput::Pipeline)
    }

    pub fn with_output(vae: &'a VideoVae, tiles: Option<SpatialTiles>, output: StreamOutput) -> TiledDecoder<'a> {
        TiledDecoder { vae, tiles, output, pace: StreamPace::Chunk, state: TileStreams::new() }
    }

    /// Every tile's stream at `pace` (before the first push).
    pub fn with_pace(self, pace: StreamPace) -> TiledDecoder<'a> {
        TiledDecoder { pace, ..self }
    }

    pub fn checkpoint(&self) -> StreamCheckpoint<'a> {
        self.state.checkpoint()
    }

    /// Back to `checkpoint` (a failed push may have advanced some tiles' caches).
    pub fn restore(&mut self, checkpoint: StreamCheckpoint<'a>) {
        self.state.restore(checkpoint)
    }

    /// Exact row-split convolutions in every tile's stream from the next push on; false where the
    /// family does not have them.
    pub fn set_row_split(&mut self, split: Option<RowSplit>) -> bool {
        self.state.set_row_split(self.vae, split)
    }

    pub fn row_split(&self) -> Option<RowSplit> {
        self.state.row_split
    }

    /// From the next push on, a raised `stop` (a job's cancel) ends the push in hand between its tiles and
    /// between the layers of a tile with `ModelError::Stopped`: one push of a large frame is many seconds.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.state.set_stop(stop);
    }

    /// Tiles actually run per push (known after the first push).
    pub fn tile_count(&self) -> usize {
        self.state.tile_count()
    }

    /// The stream's state after the last push, to go on from in another process ([`TiledDecoder::load_state`]).
    pub fn save_state(&self) -> SavedTensors {
        self.state.save_state()
    }

    /// Goes on from a state `save_state` gave a decoder of the same model and tiles (tensors on `device`).
    pub fn load_state(&mut self, saved: &HashMap<String, Tensor>, device: tch::Device) -> Result<(), ModelError> {
        let Some((h, w)) = TileStreams::saved_layout(saved)? else { return Ok(()) };
        let (vae, tiles, output, pace) = (self.vae, self.tiles, self.output, self.pace);
        let factor = vae.spatial_factor();
        self.state.layout_for(h, w, |h, w| Layout::new(h, w, tiles.as_ref(), factor, device), || vae.decoder_at(output, pace))?;
        self.state.load_streams(saved)
    }

    /// `latent`: `[1, C, t, h, w]`; returns `[1, 3, n, s·h, s·w]` as the untiled decoder does.
    pub fn push(&mut self, latent: &Tensor) -> Result<Tensor, ModelError> {
        let (_, _, _, h, w) = latent.size5()?;
        let (vae, tiles, output, pace) = (self.vae, self.tiles, self.output, self.pace);
        let factor = vae.spatial_factor();
        let stop = self.state.stop.clone();
        let (layout, streams) =
            self.state.layout_for(h, w, |h, w| Layout::new(h, w, tiles.as_ref(), factor, latent.device()), || vae.decoder_at(output, pace))?;
        if let [single] = streams {
            return single.push_some(latent);
        }
        let mut sum: Option<BlendAccumulator> = None;
        for ((index, rows, cols), stream) in layout.tiles.iter().zip(streams.iter_mut()) {
            stop.check()?;
            let _span = tracing::trace_span!("decode_tile", row = rows.start, col = cols.start).entered();
            let pixels = stream.push_some(&narrow_hw(latent, *rows, *cols, 1)?)?;
            let sum = sum.get_or_insert_with(|| BlendAccumulator::new(&pixels, h * factor, w * factor));
            sum.add(&pixels, layout.blender.tile(*index).expect("kept tile"))?;
        }
        Ok(sum.expect("at least two tiles").finish())
    }
}

/// Pixel frames in, latent frames out, tile by tile; any push size, as the untiled encoder.
pub struct TiledEncoder<'a> {
    vae: &'a VideoVae,
    tiles: Option<SpatialTiles>,
    output: StreamOutput,
    pace: StreamPace,
    state: TileStreams<'a>,
}

impl<'a> TiledEncoder<'a> {
    pub fn new(vae: &'a VideoVae, tiles: Option<SpatialTiles>) -> TiledEncoder<'a> {
        Self::with_output(vae, tiles, StreamOutput::Pipeline)
    }

    /// With [`StreamOutput::Raw`] the tiles' moments (mean and log-variance) are blended alike.
    pub fn with_output(vae: &'a VideoVae, tiles: Option<SpatialTiles>, output: StreamOutput) -> TiledEncoder<'a> {
        TiledEncoder { vae, tiles, output, pace: StreamPace::Chunk, state: TileStreams::new() }
    }

    /// Every tile's stream at `pace` (before the first push).
    pub fn with_pace(self, pace: StreamPace) -> TiledEncoder<'a> {
        TiledEncoder { pace, ..self }
    }

    pub fn checkpoint(&self) -> StreamCheckpoint<'a> {
        self.state.checkpoint()
    }

    pub fn restore(&mut self, checkpoint: StreamCheckpoint<'a>) {
        self.state.restore(checkpoint)
    }

    pub fn set_row_split(&mut self, split: Option<RowSplit>) -> bool {
        self.state.set_row_split(self.vae, split)
    }

    pub fn row_split(&self) -> Option<RowSplit> {
        self.state.row_split
    }

    /// From the next push on, a raised `stop` (a job's cancel) ends the push in hand between its tiles and
    /// between the layers of a tile with `ModelError::Stopped`: one push of a large frame is many seconds.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.state.set_stop(stop);
    }

    pub fn tile_count(&self) -> usize {
        self.state.tile_count()
    }

    /// The stream's state after the last push, to go on from in another process ([`TiledEncoder::load_state`]).
    pub fn save_state(&self) -> SavedTensors {
        self.state.save_state()
    }

    /// Goes on from a state `save_state` gave an encoder of the same model and tiles (tensors on `device`).
    pub fn load_state(&mut self, saved: &HashMap<String, Tensor>, device: tch::Device) -> Result<(), ModelError> {
        let Some((h, w)) = TileStreams::saved_layout(saved)? else { return Ok(()) };
        let (vae, tiles, output, pace) = (self.vae, self.tiles, self.output, self.pace);
        self.state.layout_for(h, w, |h, w| Layout::new(h, w, tiles.as_ref(), 1, device), || vae.encoder_at(output, pace))?;
        self.state.load_streams(saved)
    }

    /// `frames`: `[1, 3, n, H, W]` in [-1, 1], H and W multiples of the spatial factor.
    pub fn push(&mut self, frames: &Tensor) -> Result<Option<Tensor>, ModelError> {
        let (_, _, _, height, width) = frames.size5()?;
        let factor = self.vae.spatial_factor();
        if height % factor != 0 || width % factor != 0 {
            return Err(ModelError::Unsupported {
                model: "tiled VAE encoder".into(),
                what: format!("frames of {height}×{width} (pad to a multiple of {factor} first)"),
            });
        }
        let (h, w) = (height / factor, width / factor);
        let (vae, tiles, output, pace) = (self.vae, self.tiles, self.output, self.pace);
        let stop = self.state.stop.clone();
        let (layout, streams) = self.state.layout_for(h, w, |h, w| Layout::new(h, w, tiles.as_ref(), 1, frames.device()), || vae.encoder_at(output, pace))?;
        if let [single] = streams {
            return single.push(frames);
        }
        let mut sum: Option<BlendAccumulator> = None;
        for ((index, rows, cols), stream) in layout.tiles.iter().zip(streams.iter_mut()) {
            stop.check()?;
            let _span = tracing::trace_span!("encode_tile", row = rows.start, col = cols.start).entered();
            // Every tile buffers the same frames, so they all complete latent frames on the same push.
            let Some(latent) = stream.push(&narrow_hw(frames, *rows, *cols, factor)?)? else { continue };
            let sum = sum.get_or_insert_with(|| BlendAccumulator::new(&latent, h, w));
            sum.add(&latent, layout.blender.tile(*index).expect("kept tile"))?;
        }
        Ok(sum.map(BlendAccumulator::finish))
    }
}
