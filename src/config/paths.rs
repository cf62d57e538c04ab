//! The config's folders made absolute at load: they reach ffmpeg in argument lists and concat lists, which
//! read a relative path against something else (a concat list against its own folder), so a relative
//! `data_dir` must not travel further as it is.
use std::path::{Path, PathBuf};

use super::Config;

/// `path` against the working directory when it is relative (the file system is not asked: a folder made
/// later is the same folder); an empty path, or one the working directory cannot be read for, stays as it is.
pub fn absolute_path(path: &Path) -> PathBuf {
    if path.as_os_str().is_empty() {
        return path.to_path_buf();
    }
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

impl Config {
    /// The folders as absolute paths, read against the working directory once, at load.
    pub(super) fn with_absolute_paths(mut self) -> Config {
        self.data_dir = absolute_path(&self.data_dir);
        self.models_dir = absolute_path(&self.models_dir);
        for watch in &mut self.watch {
            watch.folder = absolute_path(&watch.folder);
            watch.output = absolute_path(&watch.output);
        }
        self
    }
}
