//! Watch folders (`[[watch]]`): a file that has finished arriving becomes a job through the same checks and
//! admission as an HTTP upload; its result is copied into the output folder and the file moves to `done/`
//! (or `failed/` with `NAME.error.txt`). Each file is recorded in the store under its job's id before the
//! job is submitted, so after a restart a file already taken is followed, never submitted twice.
mod files;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use super::error::ApiError;
use super::params::{self, JobFields};
use super::AppState;
use crate::config::{Config, WatchFolder};
use crate::error_codes as codes;
use crate::jobs::{JobStatus, WatchState, WatchedFile};
use crate::queue::{InputKind, StagedFile, Submission};

/// Keys of a `[[watch]]` table that are the folder's own, not job fields.
const FOLDER_KEYS: [&str; 4] = ["folder", "output", "pattern", "extensions"];

/// A file is taken once it looked the same this many times in a row: unchanged over two whole poll
/// intervals, so a writer pausing for longer than one interval is not cut short.
const STABLE_LOOKS: u32 = 3;

/// The job fields of every `[[watch]]` entry, checked as a submission's would be, or why start-up must stop
/// (naming `watch[N].key`).
pub fn check(config: &Config) -> Result<Vec<JobFields>, String> {
    config
        .watch
        .iter()
        .enumerate()
        .map(|(index, watch)| {
            let at = |key: &str| format!("watch[{index}].{key}");
            for (key, path) in [("folder", &watch.folder), ("output", &watch.output)] {
                if !path.is_dir() {
                    return Err(format!("{}: {} is not an existing folder", at(key), path.display()));
                }
            }
            let known = JobFields::names();
            if let Some(key) = watch.fields.keys().find(|key| !known.contains(&key.as_str()) || key.as_str() == "filename") {
                let folder_keys = FOLDER_KEYS.join(", ");
                return Err(format!("{} is not a job field (the fields of POST /v1/jobs, or {folder_keys})", at(key)));
            }
            let fields = job_fields(watch).map_err(|e| format!("watch[{index}]: {e}"))?;
            super::fields::job_request(&fields, config, None).map_err(|e| format!("watch[{index}]: {e}"))?;
            Ok(fields)
        })
        .collect()
}

fn job_fields(watch: &WatchFolder) -> Result<JobFields, ApiError> {
    let text = |value: &toml::Value| match value {
        toml::Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    params::from_map(watch.fields.iter().map(|(key, value)| (key.clone(), serde_json::Value::String(text(value)))).collect())
}

/// One watch folder's loop.
pub struct Watcher {
    app: AppState,
    index: usize,
    watch: WatchFolder,
    fields: JobFields,
    /// The folder as the store records it.
    key: String,
    /// What each file looked like at the last looks: size, time, how many looks in a row, and since when.
    seen: HashMap<String, (u64, Option<SystemTime>, u32, Instant)>,
    /// Taken files that could not be moved to `done/` or `failed/`, as they were then (size, time): left
    /// alone until they change, not probed and logged again at every look.
    unmovable: HashMap<String, (u64, Option<SystemTime>)>,
}

impl Watcher {
    /// One per `[[watch]]` entry, with the fields `check` read.
    pub fn all(app: &AppState, fields: Vec<JobFields>) -> Vec<Watcher> {
        app.config
            .watch
            .iter()
            .zip(fields)
            .enumerate()
            .map(|(index, (watch, fields))| Watcher {
                app: app.clone(),
                index,
                key: std::fs::canonicalize(&watch.folder).unwrap_or_else(|_| watch.folder.clone()).to_string_lossy().into_owned(),
                watch: watch.clone(),
                fields,
                seen: HashMap::new(),
                unmovable: HashMap::new(),
            })
            .collect()
    }

    pub async fn run(mut self) {
        let every = Duration::from_secs_f64(self.app.config.watch_poll_s);
        tracing::info!(watch = self.index, folder = %self.watch.folder.display(), output = %self.watch.output.display(), "watching");
        loop {
            if let Err(e) = self.look().await {
                tracing::warn!(watch = self.index, error = %e, "watch folder: trying again at the next look");
            }
            tokio::time::sleep(every).await;
        }
    }

    async fn look(&mut self) -> Result<(), ApiError> {
        let settle = Duration::from_secs_f64(self.app.config.watch_settle_s);
        let open = self.app.queue.store().watch_open(&self.key).await?;
        for file in &open {
            if !self.still_unmovable(&file.file_name).await {
                self.follow(file).await?;
            }
        }
        let taken: Vec<&str> = open.iter().map(|f| f.file_name.as_str()).collect();
        let mut present = Vec::new();
        let mut entries = tokio::fs::read_dir(&self.watch.folder).await?;
        while let Some(entry) = entries.next_entry().await? {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(meta) = entry.metadata().await else { continue };
            if !meta.is_file() || !self.watch.takes(&name) || taken.contains(&name.as_str()) {
                continue;
            }
            present.push(name.clone());
            let now = (meta.len(), meta.modified().ok());
            let (looks, since) = match self.seen.get(&name) {
                Some((len, modified, looks, since)) if (*len, *modified) == now => (looks + 1, *since),
                _ => (1, Instant::now()),
            };
            self.seen.insert(name.clone(), (now.0, now.1, looks, since));
            if looks >= STABLE_LOOKS && since.elapsed() >= settle {
                self.seen.remove(&name);
                self.take(name).await?;
            }
        }
        self.seen.retain(|name, _| present.contains(name));
        Ok(())
    }

    /// The file's size and time, `None` when it is gone.
    async fn looks(&self, name: &str) -> Option<(u64, Option<SystemTime>)> {
        let meta = tokio::fs::metadata(self.watch.folder.join(name)).await.ok()?;
        Some((meta.len(), meta.modified().ok()))
    }

    /// Whether the file could not be moved on and has not changed since; one that changed (or went) is
    /// forgotten, so it is tried again.
    async fn still_unmovable(&mut self, name: &str) -> bool {
        let Some(then) = self.unmovable.get(name).copied() else { return false };
        if self.looks(name).await == Some(then) {
            return true;
        }
        self.unmovable.remove(name);
        false
    }

    /// A file that could not be moved on to `sub/`: logged once, then left alone until it changes.
    async fn unmovable(&mut self, file: &WatchedFile, sub: &str, error: std::io::Error) {
        tracing::warn!(watch = self.index, file = %file.file_name, %error, "watch folder: cannot move the input to {sub}/; it is tried again once the file changes (touch it)");
        if let Some(now) = self.looks(&file.file_name).await {
            self.unmovable.insert(file.file_name.clone(), now);
        }
    }

    /// Records the file under a new job id, then submits it.
    async fn take(&mut self, name: String) -> Result<(), ApiError> {
        let file = WatchedFile { job_id: uuid::Uuid::new_v4(), folder: self.key.clone(), file_name: name, state: WatchState::Submitted, output_name: None };
        self.app.queue.store().watch_record(&file).await?;
        tracing::info!(watch = self.index, file = %file.file_name, id = %file.job_id, "watch folder: taking a file");
        self.submit(&file).await
    }

    /// Submits the file's job under its recorded id. A refusal of the file (bad media, bad fields) moves it
    /// to `failed/`; a full queue or an unreachable store leaves it for the next look.
    async fn submit(&mut self, file: &WatchedFile) -> Result<(), ApiError> {
        let path = self.watch.folder.join(&file.file_name);
        let staged = self.app.uploads_dir().join(format!("{}.part", uuid::Uuid::new_v4()));
        let submitted = async {
            let ticket = self.app.queue.admit(None).await?;
            let bytes = tokio::fs::metadata(&path).await?.len();
            if bytes > self.app.config.max_upload_bytes {
                return Err(ApiError::UploadTooLarge { limit: self.app.config.max_upload_bytes });
            }
            let request = super::fields::job_request(&self.fields, &self.app.config, None)?;
            let input = self.stage(&path, staged.clone(), &file.file_name, bytes).await?;
            let submission = Submission { request, input, kind: InputKind::File, owner: None, ticket };
            Ok(self.app.queue.submit_as(submission, file.job_id).await?)
        };
        match submitted.await {
            Ok(_) => Ok(()),
            Err(e) => {
                let (status, code) = e.status_and_code();
                if status.is_client_error() && status.as_u16() != 429 {
                    // The message names the file as its owner knows it, and no path of the box.
                    let message = e.to_string().replace(&*staged.to_string_lossy(), &file.file_name);
                    self.fail(file, code, &crate::redact::client_message(&message)).await
                } else {
                    Err(e)
                }
            }
        }
    }

    /// A copy of the file in the uploads folder (the file stays in place until its job is done).
    async fn stage(&self, path: &Path, to: std::path::PathBuf, name: &str, bytes: u64) -> Result<StagedFile, ApiError> {
        tokio::fs::create_dir_all(self.app.uploads_dir()).await?;
        let mut staged = StagedFile::new(to, super::upload::sanitize_file_name(name));
        tokio::fs::copy(path, &staged.path).await?;
        staged.bytes = bytes;
        Ok(staged)
    }

    /// Moves a taken file on as its job went.
    async fn follow(&mut self, file: &WatchedFile) -> Result<(), ApiError> {
        let store = self.app.queue.store();
        let job = store.get(file.job_id).await?;
        match (file.state, job) {
            // Recorded, then the process stopped (or the queue was full) before the job existed.
            (WatchState::Submitted, None) if self.watch.folder.join(&file.file_name).is_file() => self.submit(file).await,
            // ... and the file was taken away meanwhile: nothing is left to do.
            (WatchState::Submitted, None) => {
                tracing::warn!(watch = self.index, file = %file.file_name, "watch folder: a file taken but not yet submitted is gone");
                Ok(store.watch_set(file.job_id, WatchState::Failed, None).await?)
            }
            (WatchState::Submitted, Some(job)) => match job.status {
                JobStatus::Queued | JobStatus::Paused | JobStatus::Running => Ok(()),
                JobStatus::Succeeded => {
                    let id = job.id.to_string();
                    let result = self.app.queue.local_result(&job, &id).await?;
                    let placed = files::place_result(&result.path, &self.watch.output, &result.file_name).await?;
                    store.watch_set(file.job_id, WatchState::OutputWritten, Some(&placed)).await?;
                    tracing::info!(watch = self.index, file = %file.file_name, output = %placed, "watch folder: result written");
                    self.finish(file).await
                }
                JobStatus::Failed => {
                    let error = job.error.unwrap_or(crate::jobs::JobError { code: codes::INTERNAL_ERROR.into(), message: "the job failed".into() });
                    self.fail(file, &error.code, &error.message).await
                }
                JobStatus::Cancelled => self.fail(file, codes::CANCELLED, "the job was cancelled").await,
            },
            (WatchState::OutputWritten, _) => self.finish(file).await,
            (WatchState::Done | WatchState::Failed, _) => Ok(()),
        }
    }

    /// The input moves to `done/`. Until it has, the file stays recorded as open (a file left in the folder
    /// as done would be taken again as a new one), and the move is tried again once the file changes.
    async fn finish(&mut self, file: &WatchedFile) -> Result<(), ApiError> {
        if let Err(e) = files::move_input(&self.watch.folder, &file.file_name, "done").await {
            self.unmovable(file, "done", e).await;
            return Ok(());
        }
        Ok(self.app.queue.store().watch_set(file.job_id, WatchState::Done, None).await?)
    }

    /// The input moves to `failed/` with its error, or (as in `finish`) stays open until it can.
    async fn fail(&mut self, file: &WatchedFile, code: &str, message: &str) -> Result<(), ApiError> {
        tracing::warn!(watch = self.index, file = %file.file_name, code, message, "watch folder: the file failed");
        if let Err(e) = files::fail_input(&self.watch.folder, &file.file_name, code, message).await {
            self.unmovable(file, "failed", e).await;
            return Ok(());
        }
        Ok(self.app.queue.store().watch_set(file.job_id, WatchState::Failed, None).await?)
    }
}
