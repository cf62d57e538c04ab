//! What every handler is given: the box's config, its queue, metrics and upload places. Below the handlers
//! (and `api`'s router, which re-exports it) so none of them imports the module that routes to it.
use std::path::PathBuf;
use std::sync::Arc;

use super::data_dir_bytes::DataDirBytes;
use super::metrics::Metrics;
use super::upload_places::UploadPlaces;
use crate::config::Config;
use crate::queue::Queue;

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    /// Every job's life: submit, follow, cancel, delete.
    pub queue: Queue,
    pub metrics: Metrics,
    pub device: String,
    /// Places for uploads being received (`max_concurrent_uploads`, `max_uploads_per_client`).
    pub uploads: UploadPlaces,
    pub data_dir_bytes: DataDirBytes,
    /// Places for open `/events` streams (`max_event_streams_per_client`, half the connections in all).
    pub streams: super::stream_places::StreamPlaces,
}

impl AppState {
    pub fn uploads_dir(&self) -> PathBuf {
        self.config.data_dir.join("uploads")
    }
}
