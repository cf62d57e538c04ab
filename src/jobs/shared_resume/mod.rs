//! A job's checkpoints in the shared storage (`storage`), so that a job stopped on one box goes on from its
//! last checkpoint on another box with its own data dir. Each checkpoint the executor saves is reported here
//! (`CheckpointReports`), and an uploader task of the worker puts the resume folder's new files under
//! `jobs/{id}/resume/`, then the checkpoint, then removes what it no longer names (`upload`); a worker that
//! claims the job fetches them into its `.NAME.resume/` before the job runs, when they go further than what
//! this box has.
mod saved;
mod upload;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;
use uuid::Uuid;

use super::blobs::{BlobError, Blobs};
use super::files::{JobFiles, Patience};
use upload::{Control, Uploader};
pub use saved::{SavedCheckpoint, CHECKPOINT};
use saved::{stored_name, Known, Latest, Stamp, FOLDER};

/// A job handed back at a graceful stop waits this long at most for its last checkpoint to go up.
const HAND_OVER_WAIT: Duration = Duration::from_secs(30);
/// A job that succeeded waits this long at most for the file being put before its checkpoints are removed.
const STOP_WAIT: Duration = Duration::from_secs(60);

/// The folder of a job's segments and checkpoint: `.NAME.resume` beside the output `NAME.ext`.
pub fn resume_dir(output: &Path) -> PathBuf {
    let stem = output.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    output.with_file_name(format!(".{stem}.resume"))
}

/// The executor's side: its thread reports each checkpoint it saved. Reporting never waits for the storage:
/// it lists the folder (microseconds) and replaces the latest report in a `watch`, so the model goes on at
/// once, and a storage slower than the checkpoints skips the ones it had no time for.
#[derive(Clone)]
pub struct CheckpointReports(Arc<watch::Sender<Latest>>);

impl std::fmt::Debug for CheckpointReports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckpointReports")
    }
}

impl CheckpointReports {
    /// `checkpoint`: what was just written as `dir/checkpoint.json`.
    pub fn saved(&self, dir: &Path, checkpoint: &[u8]) {
        let mut files = Vec::new();
        list_files(dir, "", &mut files);
        self.0.send_replace(Some(Arc::new(SavedCheckpoint { checkpoint: Bytes::copy_from_slice(checkpoint), files })));
    }
}

/// The files under `dir` but the checkpoint itself, partial files (`.name.partial`) and the segment list
/// written at the end.
fn list_files(dir: &Path, within: &str, out: &mut Vec<(String, Stamp)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || (within.is_empty() && (name == CHECKPOINT || name == "segments.txt")) {
            continue;
        }
        let relative = if within.is_empty() { name } else { format!("{within}/{name}") };
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => list_files(&entry.path(), &relative, out),
            Ok(_) => {
                if let Ok(stamp) = Stamp::of(&entry.path()) {
                    out.push((relative, stamp));
                }
            }
            Err(_) => {}
        }
    }
}

/// A running job's checkpoints in the shared storage: fetched before it runs, put while it runs.
pub struct SharedCheckpoints {
    blobs: Arc<Blobs>,
    id: Uuid,
    reports: CheckpointReports,
    control: watch::Sender<Control>,
    uploader: AbortOnDropHandle<()>,
}

impl SharedCheckpoints {
    /// With a shared storage: puts the storage's checkpoint for job `id` in `dir` (the job's resume folder
    /// here) when it goes further than the one `dir` holds, and starts the uploader. `cancel`: the job's flag
    /// (a cancelled job's checkpoints are put only when it is handed over, see [`Uploader`]).
    pub async fn start(files: &JobFiles, id: Uuid, dir: PathBuf, patience: &Patience<'_>, cancel: Arc<AtomicBool>) -> Option<SharedCheckpoints> {
        let blobs = files.shared_blobs()?;
        let known = match patience.retry("fetching the job's last checkpoint", || fetch_if_further(&blobs, id, &dir)).await {
            Ok(known) => known,
            Err(error) => {
                tracing::warn!(%id, %error, "could not fetch the job's last checkpoint from the shared storage; it goes on from what this box has");
                Known::Unknown
            }
        };
        let (reports, latest) = watch::channel(None);
        let (control, control_rx) = watch::channel(Control::Run);
        let uploader = Uploader::new(blobs.clone(), id, dir, known, control_rx);
        let uploader = AbortOnDropHandle::new(tokio::spawn(uploader.run(latest, cancel)));
        Some(SharedCheckpoints { blobs, id, reports: CheckpointReports(Arc::new(reports)), control, uploader })
    }

    pub fn reports(&self) -> CheckpointReports {
        self.reports.clone()
    }

    /// The job succeeded: its checkpoints are of no more use anywhere. The file being put is finished first,
    /// so that nothing comes back after the removal.
    pub async fn remove(self) {
        let (blobs, id) = (self.blobs.clone(), self.id);
        self.end(Control::Stop, STOP_WAIT).await;
        if let Err(error) = blobs.delete_folder(id, FOLDER).await {
            tracing::warn!(%id, %error, "could not remove the job's checkpoints from the shared storage");
        }
    }

    /// The job goes back to the queue (a graceful stop): its last checkpoint goes up first, for the worker
    /// that takes it next.
    pub async fn hand_over(self) {
        self.end(Control::PutLastThenStop, HAND_OVER_WAIT).await;
    }

    /// The job ended otherwise (failed, cancelled, or its lease was lost and another worker has it): what the
    /// storage holds stays.
    pub async fn stop(self) {
        self.end(Control::Stop, STOP_WAIT).await;
    }

    async fn end(self, control: Control, wait: Duration) {
        self.control.send_replace(control);
        if tokio::time::timeout(wait, self.uploader).await.is_err() {
            tracing::warn!(id = %self.id, wait_s = wait.as_secs(), "the job's checkpoint upload did not end in time; left behind");
        }
    }
}

/// Copies the storage's resume folder into `dir` (through a sibling folder, put in place whole) when its
/// checkpoint has more frames than `dir`'s; the box's own folder stays otherwise (its run got further
/// before it stopped, or the storage has none).
async fn fetch_if_further(blobs: &Blobs, id: Uuid, dir: &Path) -> Result<Known, BlobError> {
    let stored: HashSet<String> = blobs.list_folder(id, FOLDER).await?.into_iter().collect();
    let unchanged = Known::Listed { stored: stored.clone(), same_here: HashMap::new() };
    if !stored.contains(CHECKPOINT) {
        return Ok(unchanged);
    }
    let checkpoint = blobs.get_bytes(id, &stored_name(CHECKPOINT)).await?;
    let here = std::fs::read(dir.join(CHECKPOINT)).ok().and_then(|text| frames_in(&text));
    let Some(frames) = frames_in(&checkpoint).filter(|frames| here.is_none_or(|here| *frames > here)) else {
        return Ok(unchanged);
    };
    let fetching = dir.with_file_name(format!("{}.fetching", super::blobs::file_name(dir)));
    remove_dir(&fetching).await?;
    for name in stored.iter().filter(|name| *name != CHECKPOINT) {
        blobs.fetch(id, &stored_name(name), &fetching.join(name)).await?;
    }
    tokio::fs::create_dir_all(&fetching).await?;
    tokio::fs::write(fetching.join(CHECKPOINT), &checkpoint).await?;
    remove_dir(dir).await?;
    tokio::fs::rename(&fetching, dir).await?;
    let same_here = stored.iter().filter(|name| *name != CHECKPOINT).filter_map(|name| Some((name.clone(), Stamp::of(&dir.join(name)).ok()?))).collect();
    tracing::info!(%id, frames, files = stored.len(), "the job's last checkpoint came from the shared storage");
    Ok(Known::Listed { stored, same_here })
}

/// A part's folder for its join (`jobs::parts`): the storage's copy of job `id`'s checkpoints put in `dir`
/// when it goes further than this box's; nothing without a shared storage (every part wrote here).
pub async fn fetch_stored(files: &JobFiles, id: Uuid, dir: &Path) -> Result<(), BlobError> {
    match files.shared_blobs() {
        Some(blobs) => fetch_if_further(&blobs, id, dir).await.map(|_| ()),
        None => Ok(()),
    }
}

/// Removes job `id`'s checkpoints from the shared storage, if there is one.
pub async fn delete_stored(files: &JobFiles, id: Uuid) {
    if let Some(blobs) = files.shared_blobs() {
        if let Err(error) = blobs.delete_folder(id, FOLDER).await {
            tracing::warn!(%id, %error, "could not remove a job's checkpoints from the shared storage");
        }
    }
}

fn frames_in(checkpoint: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(checkpoint).ok()?["frames"].as_u64()
}

/// Removes `dir` and what it holds; one that is not there is no error.
pub async fn remove_dir(dir: &Path) -> std::io::Result<()> {
    match tokio::fs::remove_dir_all(dir).await {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
