//! Going on after a stop. Upscale, interpolate, restore, the VAE decode and reconstruct write their video as segments
//! (`media::segments`) in a folder beside the output and, after each finished segment, a checkpoint: how far
//! the job got and what it needs to go on from there (restore: batches done and the frames held for the next
//! cross-fade; the VAE: input frames pushed and its streams' causal caches; reconstruct also the source
//! frames waiting for their reconstruction and its PSNR/SSIM sums). Run
//! again — after a server stop, a kill, a power cut, or by another worker on the same data dir — the job
//! finds the checkpoint, reads its input again without computing up to that point, and appends. A
//! checkpoint made with other settings or another input (`fingerprint`) is not used.
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

use super::media_io::{encoder_crf, encoder_preset, FrameSink};
use super::quality::QualityMeter;
use super::segment_digests::{self, SegmentDigest};
use super::tiled::tile_major::TileMajorMark;
use super::context::{Executor, JobHooks, JobSpec};
use super::error::ExecError;
use crate::jobs::plan::{ResumedFrom, RowSplitHalves};
use crate::jobs::shared_resume::{resume_dir, CheckpointReports, CHECKPOINT};
use crate::media::segments::FinishedSegments;
use crate::media::{MediaError, RgbFrames};
use crate::models::nn::causal_cache::{RowSplit, SavedTensors};

/// What a job had finished when it last wrote a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The job and settings it was made for.
    pub fingerprint: String,
    pub segments: usize,
    /// Output frames in the finished segments.
    pub frames: u64,
    /// Seconds the job had worked for them: what going on from here saves.
    pub work_s: f64,
    /// Restore's place in its batches.
    #[serde(default)]
    pub restore: Option<RestoreMark>,
    /// A VAE stream's (or a reconstruct's two streams') place in its input.
    #[serde(default)]
    pub vae: Option<VaeMark>,
    /// A tile-major decode's place in its tiles and blends (its spools are in the folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tile_major: Option<TileMajorMark>,
    /// `metrics=true`: the sums over the frames written so far.
    #[serde(default)]
    pub quality: Option<QualityMeter>,
    /// The finished segments as written, checked before going on (`None`: a checkpoint from before them,
    /// whose segments are not trusted: the job starts over; an empty list: a PNG output, whose frames are
    /// checked instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_digests: Option<Vec<SegmentDigest>>,
}

impl Checkpoint {
    /// Whether the frame count alone says where the job goes on (an upscale's, an interpolation's), so that
    /// it may go on from an earlier segment than the checkpoint's: streams, held frames and quality sums
    /// belong to the checkpoint's place only.
    fn may_go_on_earlier(&self) -> bool {
        self.restore.is_none() && self.vae.is_none() && self.tile_major.is_none() && self.quality.is_none()
    }
}

/// Where restore's batches stood at a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RestoreMark {
    /// Batches restored (the next draws its noise from the seed and this index).
    pub batches: i64,
    /// Of the `prepend_frames`, those dropped from the output so far.
    pub dropped: i64,
    /// The file of the frames held for the next batch's cross-fade, when any are held.
    pub held: Option<String>,
}

/// Where a VAE stream stood at a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VaeMark {
    /// Input frames pushed (latent frames for a decode).
    pub inputs: i64,
    /// The file of the streams' saved state (causal caches) after those frames.
    pub state: String,
    /// The row split the streams ran with (an out-of-memory fallback; a reconstruct's encoder's), and the
    /// fallbacks logged so far.
    pub row_split: Option<RowSplit>,
    /// A reconstruct's decoder's row split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder_row_split: Option<RowSplit>,
    pub fallbacks: Vec<String>,
}

/// What a job needs, beside its finished segments, to go on from a checkpoint.
pub enum Mark<'a> {
    /// Upscale: the frame count alone.
    Frames,
    /// Restore: batches done, `prepend_frames` dropped, the frames held for the next cross-fade.
    Restore { batches: i64, dropped: i64, held: Option<&'a Tensor> },
    /// A VAE stream: input frames pushed, the streams' state after them, how they ran.
    Vae { inputs: i64, state: SavedTensors, row_split: Option<RowSplit>, fallbacks: &'a [String] },
    /// A tile-major decode: its place, and the state of the tile in hand's stream (empty between tiles).
    TileMajor { at: &'a TileMajorMark, state: SavedTensors, fallbacks: &'a [String] },
    /// A VAE reconstruct: as `Vae`, with the state of both its streams (and the source frames waiting for
    /// their reconstruction) in `state`, and each stream's row split.
    Reconstruct { inputs: i64, state: SavedTensors, row_split: RowSplitHalves, fallbacks: &'a [String] },
}

impl Checkpoint {
    pub fn finished(&self) -> FinishedSegments {
        FinishedSegments { segments: self.segments, frames: self.frames }
    }

    pub fn resumed_from(&self) -> ResumedFrom {
        ResumedFrom {
            frame: self.frames,
            batch: self.restore.as_ref().map(|mark| mark.batches),
            tiles: self.tile_major.as_ref().map(|mark| mark.tiles_done),
            saved_s: self.work_s,
        }
    }
}

/// A running job's checkpoints: its folder, the checkpoint it went on from, where its segments end.
pub struct Checkpoints {
    pub folder: ResumeFolder,
    pub resumed: Option<Checkpoint>,
    /// Output frames per segment, at least 1 (`checkpoint_s` at the output's rate).
    pub segment_frames: u64,
    can_resume: bool,
    started: Instant,
    /// Raised: stop right after the next checkpoint (`JobHooks::make_way`).
    make_way: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Checkpoints {
    /// `fps`: the output's rate. A job that cannot go on from a checkpoint (a still, written whole; a
    /// tile-major VAE decode) starts over.
    pub fn open(exec: &Executor, job: &JobSpec, hooks: &JobHooks, settings: serde_json::Value, fps: f64, can_resume: bool) -> Checkpoints {
        let folder = ResumeFolder::for_job(exec, job, settings);
        let resumed = if can_resume { folder.load() } else { None };
        if let Some(checkpoint) = &resumed {
            tracing::info!(id = %job.id, frame = checkpoint.frames, segments = checkpoint.segments, "going on from the last checkpoint");
        }
        let segment_frames = (exec.config.checkpoint_s * fps).round().max(1.0) as u64;
        Checkpoints { folder, resumed, segment_frames, can_resume, started: Instant::now(), make_way: hooks.make_way.clone() }
    }

    pub fn finished(&self) -> FinishedSegments {
        self.resumed.as_ref().map(Checkpoint::finished).unwrap_or_default()
    }

    /// Whether the job's checkpoints are used when it runs again (see [`Checkpoints::open`]).
    pub fn can_resume(&self) -> bool {
        self.can_resume
    }

    /// The PSNR/SSIM sums the checkpoint the job goes on from kept (none: a fresh meter), for figures over
    /// every frame.
    pub fn resumed_quality(&self) -> QualityMeter {
        self.resumed.as_ref().and_then(|c| c.quality.clone()).unwrap_or_default()
    }

    /// Whether `frames` since the last checkpoint (in the segment in hand, or pushed into a latent file)
    /// complete a segment, so that a checkpoint is due; never for a job that cannot go on from one.
    pub fn segment_full(&self, frames: u64) -> bool {
        self.can_resume && frames >= self.segment_frames
    }

    pub fn resumed_from(&self) -> Option<ResumedFrom> {
        self.resumed.as_ref().map(Checkpoint::resumed_from)
    }

    /// Records `frames` written to an output that is not in segments (a latent file written in place).
    pub fn save_written(&self, frames: u64, mark: Mark) -> Result<(), ExecError> {
        self.folder.save(FinishedSegments { segments: 0, frames }, self.work_s(), mark, None)?;
        self.made_way()
    }

    /// Right after a checkpoint: `MadeWay` when the job was asked to make way and can go on from it.
    fn made_way(&self) -> Result<(), ExecError> {
        if self.can_resume && self.make_way.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(ExecError::MadeWay);
        }
        Ok(())
    }

    /// Seconds of work behind the output so far: the stopped runs' and this one's.
    fn work_s(&self) -> f64 {
        self.resumed.as_ref().map_or(0.0, |c| c.work_s) + self.started.elapsed().as_secs_f64()
    }

    /// The checkpoint cannot be gone on from after all (what it names is gone): start over.
    pub fn discard(&mut self) {
        self.folder.remove();
        self.resumed = None;
    }

    /// `run` cut where the segments end: the first piece fills at most the segment in hand, each other one
    /// at most a whole segment, so that segments end at whole multiples of `segment_frames` however the
    /// chunks fall.
    pub fn split_at_segments(&self, sink: &FrameSink, mut run: RgbFrames) -> Vec<RgbFrames> {
        let mut room = self.segment_frames - sink.frames_in_segment().unwrap_or(0);
        let mut pieces = Vec::new();
        while run.count > 0 {
            let rest = run.split_off(room as usize);
            pieces.push(run);
            run = rest;
            room = self.segment_frames;
        }
        pieces
    }

    /// A checkpoint once the segment in hand is full, for a job whose frame count alone says where it goes
    /// on (`Mark::Frames`).
    pub fn save_frames_when_full(&self, sink: &mut FrameSink, quality: Option<&QualityMeter>) -> Result<(), ExecError> {
        if sink.frames_in_segment() != Some(self.segment_frames) {
            return Ok(());
        }
        self.save(sink, Mark::Frames, quality)
    }

    /// Finishes the segment in hand and records it with what going on from it needs (`mark`).
    pub fn save(&self, sink: &mut FrameSink, mark: Mark, quality: Option<&QualityMeter>) -> Result<(), ExecError> {
        if sink.frames_in_segment().unwrap_or(0) == 0 {
            return Ok(());
        }
        let finished = sink.end_segment()?;
        self.folder.save(finished, self.work_s(), mark, quality)?;
        self.made_way()
    }
}

/// The folder of a job's segments and checkpoint: `.NAME.resume` beside the output `NAME.ext`.
pub struct ResumeFolder {
    pub dir: PathBuf,
    fingerprint: String,
    /// With a shared storage, where each checkpoint is reported to be put there.
    reports: Option<CheckpointReports>,
    /// The finished segments' digests so far (each hashed once, when its checkpoint is written).
    digests: RefCell<Vec<SegmentDigest>>,
}

impl ResumeFolder {
    /// `settings`: what else decides the output's frames (restore's batch shape, the precision, …).
    pub fn for_job(exec: &Executor, job: &JobSpec, settings: serde_json::Value) -> ResumeFolder {
        let input = std::fs::metadata(&job.input_path).ok();
        let bytes = input.as_ref().map(|m| m.len());
        let input = match job.shared_checkpoints {
            // The job's input in the storage is written once; each box's copy has its own path and time,
            // and the job may go on on another box.
            Some(_) => serde_json::json!({ "name": job.input_path.file_name().map(|n| n.to_string_lossy()), "bytes": bytes }),
            None => {
                let modified = input.and_then(|m| m.modified().ok()).and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_secs());
                serde_json::json!({ "path": job.input_path, "bytes": bytes, "modified": modified })
            }
        };
        let fingerprint = serde_json::json!({
            "op": job.op.as_str(),
            "model": job.model,
            "params": job.params,
            "input": input,
            "encoder": { "crf": encoder_crf(exec, job), "preset": encoder_preset(exec, job), "checkpoint_s": exec.config.checkpoint_s },
            "settings": settings,
        });
        ResumeFolder { dir: resume_dir(&job.output_path), fingerprint: fingerprint.to_string(), reports: job.shared_checkpoints.clone(), digests: RefCell::default() }
    }

    /// The last checkpoint, if one was made for this job with these settings; any other is removed with
    /// its segments.
    pub fn load(&self) -> Option<Checkpoint> {
        let text = std::fs::read_to_string(self.dir.join(CHECKPOINT)).ok()?;
        match serde_json::from_str::<Checkpoint>(&text) {
            Ok(checkpoint) if checkpoint.fingerprint == self.fingerprint => match self.verified(checkpoint) {
                Some(checkpoint) => {
                    *self.digests.borrow_mut() = checkpoint.segment_digests.clone().unwrap_or_default();
                    return Some(checkpoint);
                }
                None => {}
            },
            Ok(_) => tracing::info!(dir = %self.dir.display(), "a checkpoint made with other settings; starting over"),
            Err(error) => tracing::warn!(dir = %self.dir.display(), %error, "an unreadable checkpoint; starting over"),
        }
        self.remove();
        None
    }

    /// The checkpoint as far as the folder still holds what it names: whole; cut back to its last good
    /// segment where the frame count alone says where to go on; else `None` (start over). Never a checkpoint
    /// that names frames the folder does not hold.
    fn verified(&self, checkpoint: Checkpoint) -> Option<Checkpoint> {
        if checkpoint.segments == 0 {
            return Some(checkpoint);
        }
        // A finished segment recorded without its digest (what builds before them wrote, or an edited
        // checkpoint) is never trusted: cut short, it gave a "succeeded" job with 30 of 120 frames.
        let Some(digests) = &checkpoint.segment_digests else {
            tracing::warn!(dir = %self.dir.display(), segments = checkpoint.segments, "a checkpoint that records no digests of its segments; starting over");
            return None;
        };
        if digests.is_empty() {
            // A PNG output: its frames, one file each.
            if segment_digests::frames_present(&self.dir, checkpoint.frames) {
                return Some(checkpoint);
            }
            tracing::warn!(dir = %self.dir.display(), frames = checkpoint.frames, "frames the checkpoint names are missing; starting over");
            return None;
        }
        let claimed: u64 = digests.iter().map(|d| d.frames).sum();
        let good = segment_digests::good_prefix(&self.dir, digests);
        if digests.len() == checkpoint.segments && good == digests.len() && claimed == checkpoint.frames {
            return Some(checkpoint);
        }
        if good > 0 && claimed == checkpoint.frames && checkpoint.may_go_on_earlier() {
            let kept = digests[..good].to_vec();
            let frames = kept.iter().map(|d| d.frames).sum();
            tracing::warn!(dir = %self.dir.display(), segments = checkpoint.segments, good, frames, "a segment is not as its checkpoint recorded it; going on from the last good one");
            return Some(Checkpoint { segments: good, frames, segment_digests: Some(kept), ..checkpoint });
        }
        tracing::warn!(dir = %self.dir.display(), segments = checkpoint.segments, good, claimed, frames = checkpoint.frames, "the segments are not as the checkpoint recorded them; starting over");
        None
    }

    /// The digests with the segments `finished` adds: each save finishes one segment, whose frames are those
    /// past the ones before it. A PNG output has frame files, not segments: none.
    fn digests_with(&self, finished: FinishedSegments) -> Result<Vec<SegmentDigest>, ExecError> {
        let mut digests = self.digests.borrow_mut();
        let before: u64 = digests.iter().map(|d| d.frames).sum();
        let new = finished.segments.saturating_sub(digests.len());
        for index in digests.len()..finished.segments {
            let frames = if new == 1 { finished.frames - before } else { 0 };
            match segment_digests::digest(&self.dir, index, frames).map_err(|e| self.io_error("hashing a finished segment", e))? {
                Some(digest) => digests.push(digest),
                None => return Ok(Vec::new()),
            }
        }
        Ok(digests.clone())
    }

    /// A checkpoint after `finished`: written whole or not at all, after the frames it names.
    pub fn save(&self, finished: FinishedSegments, work_s: f64, mark: Mark, quality: Option<&QualityMeter>) -> Result<(), ExecError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io_error("making the checkpoint's folder", e))?;
        let (mut restore, mut vae, mut tile_major) = (None, None, None);
        match mark {
            Mark::Frames => {}
            Mark::Restore { batches, dropped, held } => {
                // Named per batch (and the VAE state per frame), so a crash between this file and the
                // checkpoint cannot pair a checkpoint with another one's tensors.
                let name = held.map(|_| format!("held_{batches:06}.safetensors"));
                if let (Some(held), Some(name)) = (held, &name) {
                    self.write_tensors(name, &[("held".to_string(), held.to_device(Device::Cpu).contiguous())])?;
                }
                restore = Some(RestoreMark { batches, dropped, held: name });
            }
            Mark::Vae { inputs, state, row_split, fallbacks } => {
                vae = Some(self.save_streams(&format!("stream_{inputs:06}.safetensors"), inputs, &state, [row_split, None], fallbacks)?);
            }
            Mark::TileMajor { at, state, fallbacks } => {
                let inputs = at.pushes_done as i64 * at.latent_frames_per_push;
                // Named per tile too: each tile pushes the same frames.
                let name = format!("stream_t{:04}_{inputs:06}.safetensors", at.tiles_done);
                vae = Some(self.save_streams(&name, inputs, &state, [at.row_split, None], fallbacks)?);
                tile_major = Some(at.clone());
            }
            Mark::Reconstruct { inputs, state, row_split, fallbacks } => {
                vae = Some(self.save_streams(&format!("stream_{inputs:06}.safetensors"), inputs, &state, [row_split.encoder, row_split.decoder], fallbacks)?);
            }
        }
        let tensors_file = restore.as_ref().and_then(|mark| mark.held.clone()).or_else(|| vae.as_ref().map(|mark| mark.state.clone()));
        let segment_digests = Some(self.digests_with(finished)?);
        let checkpoint = Checkpoint { fingerprint: self.fingerprint.clone(), segments: finished.segments, frames: finished.frames, work_s, restore, vae, tile_major, quality: quality.cloned(), segment_digests };
        let partial = self.dir.join(format!(".{CHECKPOINT}.partial"));
        let text = serde_json::to_vec(&checkpoint).expect("a checkpoint serializes");
        std::fs::write(&partial, &text).and_then(|_| sync_and_rename(&partial, &self.dir.join(CHECKPOINT))).map_err(|e| self.io_error("saving the checkpoint", e))?;
        self.remove_tensor_files_but(tensors_file.as_deref());
        if let Some(reports) = &self.reports {
            reports.saved(&self.dir, &text);
        }
        Ok(())
    }

    /// Writes a VAE stream's `state` (a reconstruct's two) after `inputs` frames in the file `name`;
    /// `row_split`: the stream's and, for a reconstruct, the decoder's (`VaeMark`).
    fn save_streams(&self, name: &str, inputs: i64, state: &[(String, Tensor)], [row_split, decoder_row_split]: [Option<RowSplit>; 2], fallbacks: &[String]) -> Result<VaeMark, ExecError> {
        self.write_tensors(name, state)?;
        Ok(VaeMark { inputs, state: name.to_string(), row_split, decoder_row_split, fallbacks: fallbacks.to_vec() })
    }

    fn write_tensors(&self, name: &str, tensors: &[(String, Tensor)]) -> Result<(), ExecError> {
        let partial = self.dir.join(format!(".{name}.partial"));
        Tensor::write_safetensors(tensors, &partial)?;
        sync_and_rename(&partial, &self.dir.join(name)).map_err(|e| self.io_error("saving a checkpoint's tensors", e))
    }

    fn io_error(&self, what: &str, error: std::io::Error) -> ExecError {
        ExecError::Media(MediaError::io(format!("{what} in {}", self.dir.display()), error))
    }

    /// A checkpoint's tensor file (a VAE stream's saved state), by name, on `device`.
    pub fn tensors(&self, name: &str, device: Device) -> Result<std::collections::HashMap<String, Tensor>, ExecError> {
        let tensors = Tensor::read_safetensors(self.dir.join(name))?;
        Ok(tensors.into_iter().map(|(key, tensor)| (key, tensor.to_device(device))).collect())
    }

    /// The frames a checkpoint holds for the next cross-fade, on `device`.
    pub fn held(&self, name: &str, device: Device) -> Result<Tensor, ExecError> {
        self.tensors(name, device)?.remove("held").ok_or_else(|| ExecError::Invalid(format!("the checkpoint's {name} holds no frames")))
    }

    /// The folder, once the output is whole (or the checkpoint is of no use).
    pub fn remove(&self) {
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %self.dir.display(), %error, "could not remove a job's segments");
            }
        }
    }

    /// Earlier checkpoints' tensor files (held frames, stream states): only the last checkpoint's is used.
    fn remove_tensor_files_but(&self, keep: Option<&str>) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if (name.starts_with("held_") || name.starts_with("stream_")) && Some(name.as_str()) != keep {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

fn sync_and_rename(partial: &Path, path: &Path) -> std::io::Result<()> {
    std::fs::File::open(partial)?.sync_all()?;
    std::fs::rename(partial, path)
}
