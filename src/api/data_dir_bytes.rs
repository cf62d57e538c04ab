//! The data dir's size as `/healthz` reports it (kept in `AppState`, read by `system`).
/// The data dir's size, walked at most once per [`DataDirBytes::MAX_AGE`]: every open page polls
/// `/healthz` every few seconds, and a walk visits every job's files.
#[derive(Clone, Default)]
pub struct DataDirBytes {
    last: std::sync::Arc<tokio::sync::Mutex<Option<(std::time::Instant, u64)>>>,
}

impl DataDirBytes {
    const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(30);

    pub(super) async fn get(&self, dir: std::path::PathBuf) -> u64 {
        let mut last = self.last.lock().await;
        if let Some((at, bytes)) = *last {
            if at.elapsed() < Self::MAX_AGE {
                return bytes;
            }
        }
        let bytes = tokio::task::spawn_blocking(move || bytes_under(&dir)).await.unwrap_or(0);
        *last = Some((std::time::Instant::now(), bytes));
        bytes
    }
}

/// Bytes of the regular files under `dir` (bounded by retention: finished jobs do not pile up).
fn bytes_under(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => bytes_under(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}
