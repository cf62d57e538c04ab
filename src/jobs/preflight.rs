//! Checks before the server takes its first job: the paths it writes are writable, the disk under them
//! has room, and the database still knows the jobs whose folders are on disk. Each failure names the path
//! and what to do, instead of "disk I/O error" from deep inside SQLite or jobs silently orphaned.
use std::path::{Path, PathBuf};

use super::disk::free_bytes;
use super::store::{DatabaseTarget, JobStore, ListFilter};

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error("{path} cannot be written ({source}); give the server's user write access to it, or point `{key}` elsewhere")]
    NotWritable { path: PathBuf, key: &'static str, source: std::io::Error },
    #[error("the disk holding {path} is full ({source}); free some space on it, or point `{key}` at another disk")]
    DiskFull { path: PathBuf, key: &'static str, source: std::io::Error },
    #[error(
        "the database {database} knows no jobs, but {folders} job folders exist in {jobs_dir}: the job history is gone \
         (an emptied or replaced database file?). Restore the database from a backup, or move {jobs_dir} aside to start afresh"
    )]
    OrphanedJobs { database: String, folders: usize, jobs_dir: PathBuf },
    #[error("the database {database} cannot be opened: {reason}{space}")]
    Database { database: String, reason: String, space: String },
    #[error("output_format = \"{format}\", but {ffmpeg} has no {encoder} encoder; install an ffmpeg with it, or choose another output_format")]
    OutputFormatUnavailable { format: &'static str, encoder: &'static str, ffmpeg: PathBuf },
}

/// The default output format must be one this ffmpeg writes, or every job that names none would fail.
pub fn check_default_output_format(config: &crate::config::Config) -> Result<(), PreflightError> {
    let tools = config.media_tools();
    let format = config.output_format;
    match crate::media::available_formats(&tools).get(&format) {
        Some(true) => Ok(()),
        _ => Err(PreflightError::OutputFormatUnavailable { format: format.as_str(), encoder: format.encoder().unwrap_or("?"), ffmpeg: tools.ffmpeg.clone() }),
    }
}

/// Writes and removes a probe file in `dir` (created if missing).
pub fn check_writable(dir: &Path, key: &'static str) -> Result<(), PreflightError> {
    let fail = |source: std::io::Error| match super::disk::is_full(&source) {
        true => PreflightError::DiskFull { path: dir.to_path_buf(), key, source },
        false => PreflightError::NotWritable { path: dir.to_path_buf(), key, source },
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(".vaebox-write-check");
    std::fs::write(&probe, b"ok").map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// Job folders on disk (named by job id) while the database holds no job at all.
pub async fn check_jobs_known(store: &dyn JobStore, database: &str, jobs_dir: &Path) -> Result<(), PreflightError> {
    let folders = std::fs::read_dir(jobs_dir)
        .map(|entries| entries.flatten().filter(|e| e.file_name().to_str().is_some_and(|n| uuid::Uuid::parse_str(n).is_ok())).count())
        .unwrap_or(0);
    if folders == 0 {
        return Ok(());
    }
    let known = store.list(&ListFilter { limit: 1, ..ListFilter::default() }).await.map(|jobs| jobs.len()).unwrap_or(1);
    if known == 0 {
        return Err(PreflightError::OrphanedJobs { database: database.to_string(), folders, jobs_dir: jobs_dir.to_path_buf() });
    }
    Ok(())
}

/// A database that cannot be opened, with the free space of its disk when that is the likely cause.
pub fn database_error(database: &DatabaseTarget, reason: impl std::fmt::Display) -> PreflightError {
    let space = match database {
        DatabaseTarget::Sqlite(path) => {
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            match free_bytes(dir) {
                Some(free) if free < LOW_SPACE_BYTES => {
                    format!(" — the disk holding {} has only {} KiB free: make room", dir.display(), free >> 10)
                }
                _ => String::new(),
            }
        }
        DatabaseTarget::Postgres(_) => String::new(),
    };
    PreflightError::Database { database: database.to_string(), reason: reason.to_string(), space }
}

/// Below this the database cannot grow its write-ahead log reliably.
const LOW_SPACE_BYTES: u64 = 16 << 20;
