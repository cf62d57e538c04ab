//! What the worker's side and the uploader share: the names in the storage, a saved checkpoint and the
//! stamps of its files, what the storage is known to hold. Below both, so the uploader need not import the
//! module that runs it.
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;

/// The storage's folder of a job's resume files: `jobs/{id}/resume/`.
pub(super) const FOLDER: &str = "resume";
/// The checkpoint's file, in the local folder and in the storage's.
pub const CHECKPOINT: &str = "checkpoint.json";

/// The storage's name of a file of the resume folder.
pub(super) fn stored_name(name: &str) -> String {
    format!("{FOLDER}/{name}")
}

/// What a file of the resume folder was when a checkpoint was saved: a file put or fetched is not put again
/// while it is unchanged (segments and tensor files are written once under their name; a run that starts
/// over writes new ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    bytes: u64,
    modified: SystemTime,
}

impl Stamp {
    pub(super) fn of(path: &Path) -> std::io::Result<Stamp> {
        let meta = std::fs::metadata(path)?;
        Ok(Stamp { bytes: meta.len(), modified: meta.modified()? })
    }
}

/// A checkpoint just saved, and the resume folder's files then: what it names (finished segments, the
/// tensor file of the checkpoint) and nothing else, since the executor reports it right after removing the
/// files of earlier checkpoints and before the next segment begins (partial files, named with a dot, aside).
#[derive(Debug)]
pub struct SavedCheckpoint {
    pub(super) checkpoint: Bytes,
    /// Paths within the folder (`frames/frame_000000.png` for PNG frames).
    pub(super) files: Vec<(String, Stamp)>,
}

impl SavedCheckpoint {
    /// Only a checkpoint of segments goes on elsewhere: one of an output written in place (a latent file
    /// outside the folder, `segments: 0`) or of a tile-major decode's tile spools (large, appended to)
    /// starts over on another box.
    pub(super) fn goes_on_elsewhere(&self) -> bool {
        let Ok(checkpoint) = serde_json::from_slice::<serde_json::Value>(&self.checkpoint) else { return false };
        checkpoint["segments"].as_u64().unwrap_or(0) > 0 && checkpoint.get("tile_major").is_none_or(serde_json::Value::is_null)
    }
}

pub(super) type Latest = Option<Arc<SavedCheckpoint>>;

/// What the storage holds in the job's resume folder, as far as this worker knows.
pub(super) enum Known {
    /// Listed: these names, and those of them this box has the same (fetched now, with their stamps).
    Listed { stored: HashSet<String>, same_here: HashMap<String, Stamp> },
    /// The storage could not be read: anything may be there.
    Unknown,
}
