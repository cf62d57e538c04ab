//! At start-up, what ended jobs left behind to go on from: a job whose run was cut off (kill -9, a crash,
//! a power cut) right after it was cancelled, failed or deleted never reached the clean-up at the end of its
//! run, and its checkpoints (`.NAME.resume/`, as large as the video so far) and partial tensor output
//! (`.NAME.partial`) stayed in its folder for good.
use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::jobs::JobStore;

/// A job folder's leftovers: hidden `.NAME.resume` folders and `.NAME.partial` files.
fn leftovers(jobs_dir: &Path) -> Vec<(Uuid, PathBuf)> {
    let Ok(folders) = std::fs::read_dir(jobs_dir) else { return Vec::new() };
    let mut found = Vec::new();
    for folder in folders.flatten() {
        let Some(id) = folder.file_name().to_str().and_then(|name| Uuid::parse_str(name).ok()) else { continue };
        let Ok(entries) = std::fs::read_dir(folder.path()) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && (name.ends_with(".resume") || name.ends_with(".partial")) {
                found.push((id, entry.path()));
            }
        }
    }
    found
}

/// Removes the leftovers of every job under `jobs_dir` that has ended (succeeded, failed, cancelled) or is
/// no longer in the store (deleted). A job that may still run (queued, paused, running here or on another
/// worker of a shared data dir) keeps them, and so does every job while the store cannot be asked.
pub async fn ended_jobs_leftovers(store: &dyn JobStore, jobs_dir: PathBuf) {
    let found = tokio::task::spawn_blocking(move || leftovers(&jobs_dir)).await.unwrap_or_default();
    let mut removed = 0;
    for (id, path) in found {
        match store.get(id).await {
            Ok(Some(job)) if !job.status.is_terminal() => continue,
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%id, %error, "cannot tell whether a job has ended: its checkpoints stay until the next start");
                continue;
            }
        }
        let gone = match tokio::fs::symlink_metadata(&path).await {
            Ok(meta) if meta.is_dir() => tokio::fs::remove_dir_all(&path).await,
            Ok(_) => tokio::fs::remove_file(&path).await,
            Err(error) => Err(error),
        };
        match gone {
            Ok(()) => removed += 1,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(%id, path = %path.display(), %error, "could not remove an ended job's checkpoints"),
        }
    }
    if removed > 0 {
        tracing::info!(removed, "removed the checkpoints and partial outputs that ended jobs had left behind");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hidden_resume_folders_and_partial_files_of_job_folders_are_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let id = Uuid::new_v4();
        let job = dir.path().join(id.to_string());
        for folder in [".clip_x2.resume", "clip.resume", "frames"] {
            std::fs::create_dir_all(job.join(folder)).unwrap();
        }
        for file in [".in.latent.safetensors.partial", "clip_x2.mp4", "clip.mp4"] {
            std::fs::write(job.join(file), b"").unwrap();
        }
        std::fs::create_dir_all(dir.path().join("not-a-job/.x.resume")).unwrap();
        let mut found: Vec<String> = leftovers(dir.path()).into_iter().map(|(_, p)| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        found.sort();
        assert_eq!(found, [".clip_x2.resume", ".in.latent.safetensors.partial"]);
    }
}
