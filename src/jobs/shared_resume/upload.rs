//! The uploader: an async task of the worker that puts the latest reported checkpoint into the storage, in
//! an order that never leaves the stored `checkpoint.json` naming a file that is not there: the files it
//! names first, the checkpoint last, then the files of earlier checkpoints removed.
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::watch;
use uuid::Uuid;

use super::saved::{stored_name, Known, Latest, SavedCheckpoint, Stamp, CHECKPOINT, FOLDER};
use crate::jobs::blobs::{BlobError, Blobs};

/// What the scheduler tells the uploader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Run,
    /// End now (after the storage call in hand).
    Stop,
    /// Put the latest checkpoint if it is not yet, then end.
    PutLastThenStop,
}

/// Why a checkpoint was not put.
enum NotPut {
    /// The scheduler ended the uploader.
    Stopped,
    /// A file it names changed or is gone: a later checkpoint replaced it, and is reported too.
    Superseded,
    Storage(BlobError),
}

impl From<BlobError> for NotPut {
    fn from(error: BlobError) -> Self {
        match error {
            BlobError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => NotPut::Superseded,
            other => NotPut::Storage(other),
        }
    }
}

pub struct Uploader {
    blobs: Arc<Blobs>,
    id: Uuid,
    dir: PathBuf,
    /// The storage's names in the job's resume folder; `None`: it could not be listed, anything may be there.
    stored: Option<HashSet<String>>,
    /// Files the storage has as they are here (put or fetched by this run, and unchanged since).
    same_there: HashMap<String, Stamp>,
    /// The last checkpoint put.
    last: Latest,
    control: watch::Receiver<Control>,
}

impl Uploader {
    pub(super) fn new(blobs: Arc<Blobs>, id: Uuid, dir: PathBuf, known: Known, control: watch::Receiver<Control>) -> Uploader {
        let (stored, same_there) = match known {
            Known::Listed { stored, same_here } => (Some(stored), same_here),
            Known::Unknown => (None, HashMap::new()),
        };
        Uploader { blobs, id, dir, stored, same_there, last: None, control }
    }

    /// Puts each reported checkpoint until the scheduler ends it. Once the job's `cancel` flag is up, only a
    /// hand-over puts one more: a job whose lease was lost may already run on another worker, whose
    /// checkpoints this one's must not replace.
    pub async fn run(mut self, mut latest: watch::Receiver<Latest>, cancel: Arc<AtomicBool>) {
        loop {
            tokio::select! {
                reported = latest.changed() => if reported.is_err() { return },
                told = self.control.changed() => if told.is_err() { return },
            }
            let control = *self.control.borrow_and_update();
            let saved = latest.borrow_and_update().clone();
            match control {
                Control::Stop => return,
                Control::Run if cancel.load(Ordering::Relaxed) => continue,
                Control::Run | Control::PutLastThenStop => {}
            }
            if let Some(saved) = saved {
                self.put(saved).await;
            }
            if control == Control::PutLastThenStop {
                return;
            }
        }
    }

    async fn put(&mut self, saved: Arc<SavedCheckpoint>) {
        if self.last.as_ref().is_some_and(|last| Arc::ptr_eq(last, &saved)) {
            return;
        }
        let put = if saved.goes_on_elsewhere() { self.put_checkpoint(&saved).await } else { self.clear().await };
        match put {
            Ok(()) => self.last = Some(saved),
            Err(NotPut::Stopped) => {}
            Err(NotPut::Superseded) => tracing::debug!(id = %self.id, "a later checkpoint replaced this one before it was put"),
            Err(NotPut::Storage(error)) => {
                tracing::warn!(id = %self.id, %error, "could not put the job's checkpoint into the shared storage; the next one tries again")
            }
        }
    }

    /// The files `saved` names that the storage lacks, then the checkpoint, then the files it no longer names.
    async fn put_checkpoint(&mut self, saved: &SavedCheckpoint) -> Result<(), NotPut> {
        let missing: Vec<&(String, Stamp)> = saved.files.iter().filter(|(name, stamp)| self.same_there.get(name) != Some(stamp)).collect();
        let replaces = match &self.stored {
            Some(stored) => missing.iter().any(|(name, _)| stored.contains(name)),
            None => true,
        };
        if replaces {
            // A stored file is replaced (this run started over, or the storage could not be listed): the
            // stored checkpoint may name it, so that checkpoint goes first.
            self.delete(CHECKPOINT).await?;
        }
        for (name, stamp) in missing {
            self.go_on()?;
            let path = self.dir.join(name);
            if Stamp::of(&path).map_err(BlobError::Io)? != *stamp {
                return Err(NotPut::Superseded);
            }
            self.blobs.put_file_as(self.id, &stored_name(name), &path).await?;
            self.same_there.insert(name.clone(), *stamp);
            self.stored.get_or_insert_default().insert(name.clone());
        }
        self.go_on()?;
        self.blobs.put_bytes(self.id, &stored_name(CHECKPOINT), saved.checkpoint.clone()).await?;
        self.stored.get_or_insert_default().insert(CHECKPOINT.to_string());
        let named: HashSet<&str> = saved.files.iter().map(|(name, _)| name.as_str()).collect();
        let stale: Vec<String> = self.stored.iter().flatten().filter(|name| *name != CHECKPOINT && !named.contains(name.as_str())).cloned().collect();
        for name in stale {
            self.go_on()?;
            self.delete(&name).await?;
        }
        Ok(())
    }

    /// A checkpoint that cannot go on elsewhere: the storage's older one is removed too, so that another box
    /// starts over rather than going back to it.
    async fn clear(&mut self) -> Result<(), NotPut> {
        if self.stored.as_ref().is_some_and(HashSet::is_empty) {
            return Ok(());
        }
        self.delete(CHECKPOINT).await?;
        self.blobs.delete_folder(self.id, FOLDER).await?;
        self.stored = Some(HashSet::new());
        self.same_there.clear();
        Ok(())
    }

    async fn delete(&mut self, name: &str) -> Result<(), NotPut> {
        self.blobs.delete(self.id, &stored_name(name)).await?;
        if let Some(stored) = &mut self.stored {
            stored.remove(name);
        }
        self.same_there.remove(name);
        Ok(())
    }

    fn go_on(&self) -> Result<(), NotPut> {
        match *self.control.borrow() {
            Control::Stop => Err(NotPut::Stopped),
            Control::Run | Control::PutLastThenStop => Ok(()),
        }
    }
}
