//! Tile-major decoding: each spatial tile runs over the whole clip before the next one starts, so
//! only one tile's causal cache is alive at a time. Time-major tiling ([`super::streams`]) keeps
//! every tile's cache, which puts the caches of one whole frame under any plan; this order removes
//! that floor. The tiles' decoded frames are spooled to disk (next to the job's output, not in a
//! tmpfs) and blended chunk by chunk afterwards, so nothing holds the whole output video. Each tile
//! computes exactly what it computes in time-major order, so the result is the same.
//!
//! Each tile's stream is an untiled [`TiledDecoder`] and its pushes go through the caller's `push`, so
//! the executor's out-of-memory retry (undo, halve the push, then row-split convolutions) works per
//! tile here as it does time-major; a row split one tile needed is kept for the tiles after it.
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use tch::{Kind, Tensor};

use super::blend::BlendAccumulator;
use super::streams::{Layout, TiledDecoder};
use crate::models::{nn::host_buffer, ModelError};
use crate::models::family::vae::StreamOutput;
use crate::models::vae::VideoVae;
use crate::models::nn::causal_cache::RowSplit;
use crate::tiling::grid::SpatialTiles;

pub struct TileMajorDecode<'a> {
    pub vae: &'a VideoVae,
    pub tiles: SpatialTiles,
    pub latent_frames_per_push: i64,
    pub output: StreamOutput,
}

/// One tile's spooled output: Float `[1, 3, n, h, w]` chunks written one after another.
struct Spool {
    path: PathBuf,
    /// The tile's entry in the layout's blender (its output spans and weights).
    index: usize,
}

/// What a tile-major decode calls back into.
pub struct TileMajorHooks<'h, 'a, E> {
    /// Runs before every push of every tile and every blend with `(done, steps)`: progress and
    /// cancellation.
    pub step: &'h mut dyn FnMut(usize, usize) -> Result<(), E>,
    /// Decodes one push of one tile on that tile's stream (`decoder.push`, or a retrying wrapper).
    pub push: &'h mut dyn FnMut(&mut TiledDecoder<'a>, &Tensor) -> Result<Tensor, E>,
    /// Receives the blended Float `[1, 3, n, H, W]` chunks in order, one per push.
    pub emit: &'h mut dyn FnMut(Tensor) -> Result<(), E>,
}

/// `decoder.push` as a hook.
pub fn plain_push<E: From<ModelError>>(decoder: &mut TiledDecoder<'_>, latent: &Tensor) -> Result<Tensor, E> {
    Ok(decoder.push(latent)?)
}

impl<'a> TileMajorDecode<'a> {
    /// Decodes `latent` (`[1, C, T, h, w]`) through `hooks`, spooling each tile in `spool_dir` (one file
    /// per tile, removed when done). Returns the number of tiles run and the row split the last tile
    /// ended with (an out-of-memory retry's, if one was needed).
    pub fn run<E: From<ModelError>>(&self, latent: &Tensor, spool_dir: &Path, hooks: TileMajorHooks<'_, 'a, E>) -> Result<(usize, Option<RowSplit>), E> {
        let TileMajorHooks { step, push, emit } = hooks;
        let (_, _, frames, h, w) = latent.size5().map_err(ModelError::from)?;
        let factor = self.vae.spatial_factor();
        let layout = Layout::new(h, w, Some(&self.tiles), factor, latent.device());
        let pushes: Vec<(i64, i64)> = (0..frames)
            .step_by(self.latent_frames_per_push.max(1) as usize)
            .map(|start| (start, self.latent_frames_per_push.max(1).min(frames - start)))
            .collect();

        let steps = (layout.tiles.len() + 1) * pushes.len();
        let mut steps_done = 0;
        let mut spools = Vec::new();
        // Pixel frames of each push, as the first tile's stream produced them (every tile produces the same).
        let mut push_frames: Vec<i64> = Vec::new();
        let mut row_split = None;
        for &(index, rows, cols) in &layout.tiles {
            let path = spool_dir.join(format!("tile-{index}.f32"));
            let mut out = BufWriter::new(File::create(&path).map_err(|e| io_error(&path, e))?);
            let mut stream = TiledDecoder::with_output(self.vae, None, self.output);
            stream.set_row_split(row_split);
            for &(start, count) in &pushes {
                step(steps_done, steps)?;
                steps_done += 1;
                let _span = tracing::trace_span!("decode_tile_major", row = rows.start, col = cols.start, start).entered();
                let input = latent.narrow(2, start, count).narrow(3, rows.start, rows.len()).narrow(4, cols.start, cols.len());
                let pixels = push(&mut stream, &input)?.to_kind(Kind::Float).to_device(tch::Device::Cpu).contiguous();
                if spools.is_empty() {
                    push_frames.push(pixels.size()[2]);
                }
                out.write_all(&float_bytes(&pixels)?).map_err(|e| io_error(&path, e))?;
            }
            out.flush().map_err(|e| io_error(&path, e))?;
            row_split = stream.row_split();
            spools.push(Spool { path, index });
        }

        let mut readers = spools
            .iter()
            .map(|s| File::open(&s.path).map(BufReader::new).map_err(|e| io_error(&s.path, e)))
            .collect::<Result<Vec<_>, _>>()?;
        for &pixel_frames in &push_frames {
            step(steps_done, steps)?;
            steps_done += 1;
            let mut sum: Option<BlendAccumulator> = None;
            for (spool, reader) in spools.iter().zip(readers.iter_mut()) {
                let weights = layout.blender.tile(spool.index).expect("kept tile");
                let shape = [1, 3, pixel_frames, weights.rows.len(), weights.cols.len()];
                let mut bytes = host_buffer::zeroed::<u8>((shape.iter().product::<i64>() * 4) as usize)?;
                reader.read_exact(&mut bytes).map_err(|e| io_error(&spool.path, e))?;
                let tile = Tensor::from_data_size(&bytes, &shape, Kind::Float).to_device(latent.device());
                let sum = sum.get_or_insert_with(|| BlendAccumulator::new(&tile, h * factor, w * factor));
                sum.add(&tile, weights)?;
            }
            emit(sum.expect("at least one tile").finish())?;
        }
        for spool in &spools {
            let _ = std::fs::remove_file(&spool.path);
        }
        Ok((spools.len(), row_split))
    }
}

impl<'a> TileMajorDecode<'a> {
    /// The same order without the spool, for callers that hold the whole output anyway (a restoration
    /// batch): each tile's frames go straight into the blend.
    pub fn run_in_memory<E: From<ModelError>>(&self, latent: &Tensor, push: &mut dyn FnMut(&mut TiledDecoder<'a>, &Tensor) -> Result<Tensor, E>) -> Result<Tensor, E> {
        let (_, _, frames, h, w) = latent.size5().map_err(ModelError::from)?;
        let factor = self.vae.spatial_factor();
        let layout = Layout::new(h, w, Some(&self.tiles), factor, latent.device());
        let per_push = self.latent_frames_per_push.max(1);
        let (mut sum, mut row_split): (Option<BlendAccumulator>, Option<RowSplit>) = (None, None);
        for &(index, rows, cols) in &layout.tiles {
            let mut stream = TiledDecoder::with_output(self.vae, None, self.output);
            stream.set_row_split(row_split);
            let mut parts = Vec::new();
            for start in (0..frames).step_by(per_push as usize) {
                let _span = tracing::trace_span!("decode_tile_major", row = rows.start, col = cols.start, start).entered();
                let input = latent.narrow(2, start, per_push.min(frames - start)).narrow(3, rows.start, rows.len()).narrow(4, cols.start, cols.len());
                parts.push(push(&mut stream, &input)?);
            }
            row_split = stream.row_split();
            let tile = Tensor::f_cat(&parts, 2).map_err(ModelError::from)?;
            let sum = sum.get_or_insert_with(|| BlendAccumulator::new(&tile, h * factor, w * factor));
            sum.add(&tile, layout.blender.tile(index).expect("kept tile"))?;
        }
        Ok(sum.expect("at least one tile").finish())
    }
}

fn float_bytes(t: &Tensor) -> Result<Vec<u8>, ModelError> {
    let n = t.numel();
    let mut bytes = host_buffer::zeroed::<u8>(n * 4)?;
    t.f_copy_data_u8(&mut bytes, n)?;
    Ok(bytes)
}

fn io_error(path: &Path, source: std::io::Error) -> ModelError {
    ModelError::Io { path: path.to_path_buf(), source }
}
