//! Tile-major decoding: each spatial tile runs over the whole clip before the next one starts, so
//! only one tile's causal cache is alive at a time. Time-major tiling ([`super::streams`]) keeps
//! every tile's cache, which puts the caches of one whole frame under any plan; this order removes
//! that floor. The tiles' decoded frames are spooled to disk (in the job's resume folder beside its
//! output, not in a tmpfs) and blended chunk by chunk afterwards, so nothing holds the whole output video. Each tile
//! computes exactly what it computes in time-major order, so the result is the same.
//!
//! Each tile's stream is an untiled [`TiledDecoder`] and its pushes go through the caller's `push`, so
//! the executor's out-of-memory retry (undo, halve the push, then row-split convolutions) works per
//! tile here as it does time-major; a row split one tile needed is kept for the tiles after it.
//!
//! A stopped decode goes on from a [`TileMajorMark`]: the spools of the tiles done are kept, the tile in
//! hand's spool is cut back to what its checkpoint counted and its stream loaded from the state saved
//! then, or, once every tile is done, the blends go on from the push they had reached.
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
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
    /// Decoded frames of a tile between two of its checkpoints (0: none).
    pub checkpoint_frames: u64,
}

/// Where a tile-major decode stood: what a stopped one goes on from, with its spools.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TileMajorMark {
    /// Latent frames per push: the spools hold a push's frames together, so a run that goes on from them
    /// pushes as many.
    pub latent_frames_per_push: i64,
    /// Tiles whose spools are whole.
    pub tiles_done: usize,
    /// Of the tile in hand, its pushes decoded; once every tile is done, the pushes blended and emitted.
    pub pushes_done: usize,
    /// Pixel frames of each push decoded so far (every tile's pushes give as many).
    pub push_frames: Vec<i64>,
    /// The row split the tile in hand runs with (an out-of-memory retry's, kept for the tiles after it);
    /// once every tile is done, the one the last tile ended with.
    pub row_split: Option<RowSplit>,
}

/// What a decode that goes on from a checkpoint starts with.
pub struct TileMajorResume {
    pub at: TileMajorMark,
    /// The state of the tile in hand's stream (empty when no tile was part-way).
    pub stream: HashMap<String, Tensor>,
}

/// What a tile-major decode calls back into.
pub struct TileMajorHooks<'h, 'a, E> {
    /// Runs before every push of every tile and every blend with `(done, steps)`: progress and
    /// cancellation.
    pub step: &'h mut dyn FnMut(usize, usize) -> Result<(), E>,
    /// Decodes one push of one tile on that tile's stream (`decoder.push`, or a retrying wrapper; a job's
    /// hook also hands the stream its cancel, `TiledDecoder::set_stop`, so the push stops between layers).
    pub push: &'h mut dyn FnMut(&mut TiledDecoder<'a>, &Tensor) -> Result<Tensor, E>,
    /// Receives the blended Float `[1, 3, n, H, W]` chunks in order, one per push, with the place after it.
    pub emit: &'h mut dyn FnMut(Tensor, &TileMajorMark) -> Result<(), E>,
    /// Every `checkpoint_frames` of a tile, once its spools are on the disk: the place and the tile's
    /// stream, to record.
    pub checkpoint: &'h mut dyn FnMut(&TileMajorMark, &TiledDecoder<'a>) -> Result<(), E>,
}

/// `decoder.push` as a hook.
pub fn plain_push<E: From<ModelError>>(decoder: &mut TiledDecoder<'_>, latent: &Tensor) -> Result<Tensor, E> {
    Ok(decoder.push(latent)?)
}

/// A checkpoint hook that records nothing.
pub fn no_checkpoints<E>(_: &TileMajorMark, _: &TiledDecoder<'_>) -> Result<(), E> {
    Ok(())
}

impl<'a> TileMajorDecode<'a> {
    /// Decodes `latent` (`[1, C, T, h, w]`) through `hooks`, spooling each tile in `spool_dir` (one file
    /// per tile, `tile-{index}.f32`, removed when done), from the start or from where `from` says a
    /// stopped run got (its spools in `spool_dir`). Returns the number of tiles run and the row split the
    /// last tile ended with (an out-of-memory retry's, if one was needed).
    pub fn run<E: From<ModelError>>(&self, latent: &Tensor, spool_dir: &Path, from: Option<TileMajorResume>, hooks: TileMajorHooks<'_, 'a, E>) -> Result<(usize, Option<RowSplit>), E> {
        let TileMajorHooks { step, push, emit, checkpoint } = hooks;
        let (_, _, frames, h, w) = latent.size5().map_err(ModelError::from)?;
        let factor = self.vae.spatial_factor();
        let layout = Layout::new(h, w, Some(&self.tiles), factor, latent.device());
        let (mut at, mut stream_state) = match from {
            Some(from) => (from.at, Some(from.stream)),
            None => (TileMajorMark { latent_frames_per_push: self.latent_frames_per_push.max(1), ..TileMajorMark::default() }, None),
        };
        let per_push = at.latent_frames_per_push.max(1);
        let pushes: Vec<(i64, i64)> = (0..frames).step_by(per_push as usize).map(|start| (start, per_push.min(frames - start))).collect();
        let spool_path = |index: usize| spool_dir.join(format!("tile-{index}.f32"));
        // Bytes of `push_frames` frames of tile `index` in its spool.
        let spool_bytes = |index: usize, push_frames: &[i64]| {
            let weights = layout.blender.tile(index).expect("kept tile");
            12 * push_frames.iter().sum::<i64>() as u64 * (weights.rows.len() * weights.cols.len()) as u64
        };

        let steps = (layout.tiles.len() + 1) * pushes.len();
        let mut since_checkpoint = 0;
        while at.tiles_done < layout.tiles.len() {
            let (index, rows, cols) = layout.tiles[at.tiles_done];
            let path = spool_path(index);
            let mut stream = TiledDecoder::with_output(self.vae, None, self.output);
            stream.set_row_split(at.row_split);
            let file = if at.pushes_done > 0 {
                stream.load_state(&stream_state.take().unwrap_or_default(), latent.device())?;
                reopen_at(&path, spool_bytes(index, &at.push_frames[..at.pushes_done]))?
            } else {
                File::create(&path).map_err(|e| io_error(&path, e))?
            };
            let mut out = BufWriter::new(file);
            while at.pushes_done < pushes.len() {
                step(at.tiles_done * pushes.len() + at.pushes_done, steps)?;
                let (start, count) = pushes[at.pushes_done];
                let _span = tracing::trace_span!("decode_tile_major", row = rows.start, col = cols.start, start).entered();
                let input = latent.narrow(2, start, count).narrow(3, rows.start, rows.len()).narrow(4, cols.start, cols.len());
                let pixels = push(&mut stream, &input)?.to_kind(Kind::Float).to_device(tch::Device::Cpu).contiguous();
                let pixel_frames = pixels.size()[2];
                if at.tiles_done == 0 {
                    at.push_frames.push(pixel_frames);
                }
                out.write_all(&float_bytes(&pixels)?).map_err(|e| io_error(&path, e))?;
                at.pushes_done += 1;
                since_checkpoint += pixel_frames as u64;
                if self.checkpoint_frames > 0 && since_checkpoint >= self.checkpoint_frames && at.pushes_done < pushes.len() {
                    to_disk(&mut out, &path)?;
                    at.row_split = stream.row_split();
                    checkpoint(&at, &stream)?;
                    since_checkpoint = 0;
                }
            }
            // Whole on the disk before a later checkpoint counts it done.
            if self.checkpoint_frames > 0 {
                to_disk(&mut out, &path)?;
            } else {
                out.flush().map_err(|e| io_error(&path, e))?;
            }
            at.row_split = stream.row_split();
            at.tiles_done += 1;
            at.pushes_done = 0;
        }

        let spools: Vec<(usize, PathBuf)> = layout.tiles.iter().map(|&(index, _, _)| (index, spool_path(index))).collect();
        let mut readers = Vec::with_capacity(spools.len());
        for (index, path) in &spools {
            let mut file = File::open(path).map_err(|e| io_error(path, e))?;
            file.seek(SeekFrom::Start(spool_bytes(*index, &at.push_frames[..at.pushes_done]))).map_err(|e| io_error(path, e))?;
            readers.push(BufReader::new(file));
        }
        while at.pushes_done < at.push_frames.len() {
            step(layout.tiles.len() * pushes.len() + at.pushes_done, steps)?;
            let pixel_frames = at.push_frames[at.pushes_done];
            let mut sum: Option<BlendAccumulator> = None;
            for ((index, path), reader) in spools.iter().zip(readers.iter_mut()) {
                let weights = layout.blender.tile(*index).expect("kept tile");
                let shape = [1, 3, pixel_frames, weights.rows.len(), weights.cols.len()];
                let mut bytes = host_buffer::zeroed::<u8>((shape.iter().product::<i64>() * 4) as usize)?;
                reader.read_exact(&mut bytes).map_err(|e| io_error(path, e))?;
                let tile = Tensor::from_data_size(&bytes, &shape, Kind::Float).to_device(latent.device());
                let sum = sum.get_or_insert_with(|| BlendAccumulator::new(&tile, h * factor, w * factor));
                sum.add(&tile, weights)?;
            }
            at.pushes_done += 1;
            emit(sum.expect("at least one tile").finish(), &at)?;
        }
        for (_, path) in &spools {
            let _ = std::fs::remove_file(path);
        }
        Ok((spools.len(), at.row_split))
    }
}

impl TileMajorDecode<'_> {
    /// Whether a run can go on from `at` over `latent`'s shape with the spools in `spool_dir`: the place is
    /// inside this decode's tiles and pushes, and every spool it counts holds at least what it counts.
    pub fn can_go_on(&self, latent_shape: &[i64], spool_dir: &Path, at: &TileMajorMark) -> bool {
        let &[_, _, frames, h, w] = latent_shape else { return false };
        let layout = Layout::new(h, w, Some(&self.tiles), self.vae.spatial_factor(), tch::Device::Cpu);
        let pushes = (frames + at.latent_frames_per_push.max(1) - 1) / at.latent_frames_per_push.max(1);
        let inside = at.latent_frames_per_push > 0
            && at.tiles_done <= layout.tiles.len()
            && at.push_frames.len() as i64 <= pushes
            && at.pushes_done <= at.push_frames.len()
            && (if at.tiles_done == 0 { at.pushes_done == at.push_frames.len() } else { at.push_frames.len() as i64 == pushes });
        inside
            && layout.tiles.iter().enumerate().all(|(ordinal, &(index, _, _))| {
                let counted = match ordinal.cmp(&at.tiles_done) {
                    std::cmp::Ordering::Less => &at.push_frames[..],
                    std::cmp::Ordering::Equal => &at.push_frames[..at.pushes_done],
                    std::cmp::Ordering::Greater => &[][..],
                };
                let weights = layout.blender.tile(index).expect("kept tile");
                let bytes = 12 * counted.iter().sum::<i64>() as u64 * (weights.rows.len() * weights.cols.len()) as u64;
                bytes == 0 || std::fs::metadata(spool_dir.join(format!("tile-{index}.f32"))).is_ok_and(|m| m.len() >= bytes)
            })
    }
}

/// A tile's spool cut back to its first `bytes` (what the checkpoint counted), to write on after them.
fn reopen_at(path: &Path, bytes: u64) -> Result<File, ModelError> {
    let mut file = std::fs::OpenOptions::new().write(true).open(path).map_err(|e| io_error(path, e))?;
    file.set_len(bytes).map_err(|e| io_error(path, e))?;
    file.seek(SeekFrom::Start(bytes)).map_err(|e| io_error(path, e))?;
    Ok(file)
}

fn to_disk(out: &mut BufWriter<File>, path: &Path) -> Result<(), ModelError> {
    out.flush().and_then(|()| out.get_ref().sync_data()).map_err(|e| io_error(path, e))
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
