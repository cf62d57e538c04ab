//! vaebox: a LAN-shared GPU box for video VAEs and upscaling.
//! HTTP (`api`) → a job's life and its scheduler (`queue`) over the job store (`jobs`, SQLite) → one executor
//! thread (`executor`) that owns the device and models (`models`), streams frames through ffmpeg (`media`)
//! and tiles work (`tiling`).
pub mod api;
pub mod bench;
pub mod config;
pub mod device;
pub mod error_codes;
pub mod executor;
pub mod jobs;
pub mod queue;
pub mod media;
pub mod models;
pub mod redact;
pub mod server;
pub mod stats;
pub mod tiling;
