//! An input received but not yet queued: a file under the uploads folder, removed on drop unless its job
//! took it (so an upload refused at any step leaves nothing behind).
use std::path::{Path, PathBuf};

pub struct StagedFile {
    pub path: PathBuf,
    /// The client's name for it (sanitised); its extension names the job's input file.
    pub file_name: String,
    pub bytes: u64,
    kept: bool,
}

impl StagedFile {
    pub fn new(path: PathBuf, file_name: String) -> StagedFile {
        StagedFile { path, file_name, bytes: 0, kept: false }
    }

    /// Moves the file to its final place; from then on it is not ours to clean up.
    pub async fn keep_as(mut self, dest: &Path) -> std::io::Result<()> {
        tokio::fs::rename(&self.path, dest).await?;
        self.kept = true;
        Ok(())
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
