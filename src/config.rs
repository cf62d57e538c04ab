//! Configuration: built-in defaults, then `config.toml` (or `--config PATH`), then `VAEBOX_<KEY>`
//! environment variables; validated once at start-up so a bad value stops the server with a clear message.
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::device::{DeviceChoice, DtypeChoice, HostAllocator};
use crate::media::{MediaLimits, MediaTools, OutputFormat, ProcessPriority};

mod callback_hosts;
mod deployment;
mod paths;
mod text_values;
mod tokens;
mod watch;

pub use tokens::AccessToken;
use tokens::{tokens_from_env, MIN_SECRET_CHARS};
pub use callback_hosts::CallbackHosts;
pub use watch::WatchFolder;
pub use paths::absolute_path;
pub use deployment::{DatabaseTarget, DeviceEntry, Role};
pub use text_values::TextValue;
use text_values::as_text;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to listen on; `0.0.0.0:8080` opens the box to the LAN.
    #[serde(with = "as_text")]
    pub listen: SocketAddr,
    /// Uploads, results and (by default) the SQLite database live here.
    pub data_dir: PathBuf,
    /// Model files (e.g. `models_dir/realesrgan/*.param|bin`).
    pub models_dir: PathBuf,
    /// Where the jobs are kept: a SQLite file (empty means `data_dir/vaebox.db`; `sqlite://` may lead it), or
    /// `postgres://user:password@host:port/db`, the queue several boxes share (see `role`).
    pub database: PathBuf,
    /// Where inputs and results are shared when the boxes share no disk: `file:///path` (a shared mount) or
    /// `s3://bucket/prefix` (any S3-compatible store); empty: each file stays in the data dir of the box that
    /// made it, and every process must see the same data dir. Workers copy inputs into their own data dir.
    pub storage: String,
    /// S3 settings beside the `AWS_*` variables (which come first): `aws_endpoint`, `aws_region`,
    /// `aws_access_key_id`, `aws_secret_access_key`, `aws_allow_http` (for an `http://` endpoint), ...
    pub storage_options: std::collections::BTreeMap<String, String>,
    /// A worker whose shared storage refuses (down, unreachable) waits this long for it, retrying, before the
    /// job fails with `storage-unavailable`.
    pub storage_wait_s: u64,
    /// What `serve` runs: `all` (API and executor, one box), `api` (uploads, results, the page; no device) or
    /// `worker` (the executor: claims jobs from the shared database, no HTTP). `serve --role` overrides it.
    pub role: Role,
    /// This worker's name in the store (leases, `/healthz`); empty: the host name.
    pub worker_name: String,
    /// A claimed job belongs to its worker this long past its last heartbeat (sent every third of it);
    /// then it goes back to the queue for another worker.
    pub lease_s: u64,
    /// A job whose worker was lost this many times (killed, cut off) fails with the reasons instead of
    /// running again.
    pub max_attempts: u32,
    /// `auto` (first CUDA device if any, else CPU), `cpu`, `cuda` or `cuda:N`.
    #[serde(with = "as_text")]
    pub device: DeviceChoice,
    /// A box with several GPUs: one worker per entry (`["cuda:0", "cuda:1"]`, or device indices `[0, 1]`),
    /// each claiming its own jobs, named `worker_name-N`; empty: one worker on `device`.
    pub devices: Vec<DeviceEntry>,
    /// Compute precision when a job does not ask: `auto` (bf16 on CUDA and on CPUs with AVX512-BF16), `f32`, `bf16`, `f16`.
    #[serde(with = "as_text")]
    pub dtype: DtypeChoice,
    /// The device memory this box's workers offer jobs, in MiB: a worker claims only jobs that need at most
    /// this much (their weights on the device plus the working memory they ask for). 0: a CUDA device's
    /// total, no limit on CPU.
    pub device_memory_mib: u64,
    /// libtorch intra-op threads; 0 keeps libtorch's default (one per core).
    pub threads: i32,
    pub max_upload_bytes: u64,
    pub max_width: u32,
    pub max_height: u32,
    pub max_frames: u64,
    pub max_duration_s: f64,
    /// Jobs waiting at once; more get 429 `queue-full`.
    pub max_queued_jobs: u32,
    /// Jobs one access token may have waiting at once (0 = only `max_queued_jobs`); more get 429 `queue-full`.
    pub max_queued_jobs_per_token: u32,
    /// Uploads are refused with 507 `insufficient-storage` while the data dir's disk has less free (MiB).
    pub min_free_disk_mib: u64,
    /// Space (MiB) held in a file in the data dir and given up when the disk fills, so that a job's
    /// failure and a `DELETE` can still be written; 0 = none.
    pub disk_reserve_mib: u64,
    /// Finished jobs (their files and rows) are removed this long after they ended; 0 keeps them forever.
    pub retention_hours: f64,
    pub ffmpeg: PathBuf,
    pub ffprobe: PathBuf,
    pub probe_timeout_s: u64,
    /// Upper bound on one job's decode or encode process.
    pub job_timeout_s: u64,
    /// Frames per chunk through the model; bounds host memory together with the tile. On a GPU a VAE
    /// push is planned from the memory budget instead (as many frames as it holds).
    pub chunk_frames: usize,
    /// Upscaler tiles: the side of each tile's core in input pixels (0 = whole frames); the model
    /// sees the core plus `overlap` context pixels on each side.
    pub upscale_tile: i64,
    /// Context pixels per tile side; 0 = automatic: the model's receptive radius (exact) up to 32 px.
    pub upscale_overlap: i64,
    /// Working memory a VAE job may use, in MiB, beyond the loaded weights (0 = no budget: whole
    /// frames, `chunk_frames` at a time). The planner shortens the temporal chunk first, then tiles.
    pub memory_budget_mib: u64,
    /// On CUDA with no budget set, the budget is the device's free memory minus this margin (MiB); on
    /// the CPU, what the host has available minus it bounds a job whose whole frames would not fit.
    pub device_memory_margin_mib: u64,
    /// Host memory (MiB) a CPU job with no budget may use for its frames and working memory (0 = what the
    /// host has available when the job starts, less `device_memory_margin_mib`). A job whose whole frames
    /// would need more is planned under it (shorter pushes, then tiles) instead of swapping or being killed.
    pub host_memory_mib: u64,
    /// A `restore`'s DiT working memory in MiB, when lower than the job's budget (0 = the job's budget):
    /// a batch's latent that does not fit it runs through the DiT in overlapping spatial tiles.
    pub dit_memory_budget_mib: u64,
    /// TF32 for float32 convolutions and matmuls on CUDA (Ampere and newer): faster, ~1e-3 relative.
    pub tf32: bool,
    /// cuDNN's autotuning on CUDA: each new convolution shape is timed against every algorithm once, then
    /// the fastest is kept. Pays when shapes repeat chunk after chunk; costs where every tile or retry
    /// is a new shape under little free memory (the GPU kit's capped decode).
    pub cudnn_benchmark: bool,
    /// Float32 3×3 convolutions of the video VAEs on the CPU by Winograd F(2×2, 3×3): 2.25× fewer
    /// multiplications, results within 1e-5 of the direct ones; each such convolution keeps its
    /// transformed kernel, 16/9 of its weight, from its first use.
    pub cpu_winograd: bool,
    /// Host memory on CPU: `bounded` (RSS follows live tensors, budgets hold) or `fast` (glibc's heap
    /// reuses freed tensors: 10–25% faster, 1.5–2.3× the working memory, budgets do not hold).
    #[serde(with = "as_text")]
    pub cpu_allocator: HostAllocator,
    /// Access tokens (`[[tokens]]` tables with `name`, `secret`, `admin`; or `VAEBOX_TOKENS=name:secret[:admin],...`).
    /// With any, every `/v1/*` call needs `Authorization: Bearer <secret>` and sees only its own jobs
    /// (admins see all); without, the API is open to whoever reaches `listen`.
    pub tokens: Vec<AccessToken>,
    /// SeedVR2 DiT blocks kept on the host and brought to the device one at a time: `auto` (on CUDA when
    /// the weights and a one-frame batch do not fit the free memory together), `always` or `never`.
    pub dit_block_swap: BlockSwap,
    /// The results' format when a job names none: h264, h265, prores, ffv1, png or png16 (a still picture
    /// on upscale or restore is written as PNG: png16 when this says so, else png).
    #[serde(with = "as_text")]
    pub output_format: OutputFormat,
    /// x264/x265 quality and speed for outputs.
    pub output_crf: u8,
    pub output_preset: String,
    /// Upscale and restore write their video in segments of about this many seconds, each a point a
    /// stopped job goes on from (restore ends a segment after the batch that reaches it).
    pub checkpoint_s: f64,
    /// CPU priority of a job's ffmpeg decoder and encoder: `normal`, or `idle` (Linux `SCHED_IDLE`: they get
    /// the CPU time the model leaves; faster on a box whose model runs on the CPU, see docs/benchmarks.md).
    pub media_priority: ProcessPriority,
    /// Upscale jobs on the CPU: a chunk's frames are split between this many worker threads of one
    /// intra-op thread each; 0 (the default) = as many as the model's threads, 1 = one call with all of
    /// them. Workers share no barrier, so ffmpeg taking a core stalls one frame, not every operator of
    /// the call.
    pub cpu_frame_workers: usize,
    /// Named job settings (`[presets.NAME]` tables of job fields: `op = "upscale"`, `scale = 2`, …), used by
    /// `preset=NAME` on a submission; fields given with the job override the preset's. Listed at `/v1/presets`.
    pub presets: std::collections::BTreeMap<String, toml::Table>,
    /// Origins (`scheme://host:port`) of other pages allowed to call the API from a browser (CORS); empty = none.
    pub cors_origins: Vec<String>,
    /// Host names the box answers to besides its IP addresses, `localhost` and its own host name; `*`: any.
    pub allowed_hosts: Vec<String>,
    /// A connection that has not sent a whole request head within this many seconds is closed.
    pub header_timeout_s: u64,
    /// A request body that sends nothing for this many seconds is cut off (408 `upload-stalled`).
    pub body_idle_timeout_s: u64,
    /// Uploads received at once (`POST /v1/jobs`, `/v1/decode`, `/v1/encode`); more get 503 `too-many-uploads`.
    pub max_concurrent_uploads: u32,
    /// Of those, at most this many from one address (0: no share per address), so that one client
    /// cannot hold every place.
    pub max_uploads_per_client: u32,
    /// A body slower than this (KiB/s, averaged over 10 s) is cut with 408 `upload-too-slow` (0: no
    /// minimum), so that slow clients cannot hold the places for ever.
    pub min_upload_rate_kib_s: u64,
    /// Open connections at once (0: as many as the process's descriptor limit allows, less
    /// 256 kept for the jobs' ffmpeg pipes and files). Beyond it a new
    /// connection is answered 503 `too-many-connections` and closed.
    pub max_connections: u32,
    /// Of those, at most this many from one address (0: no share per address).
    pub max_connections_per_client: u32,
    /// Open `/events` streams from one address (0: no share per address); more get 429 `too-many-streams`.
    /// All addresses together hold at most half of the connections in streams.
    pub max_event_streams_per_client: u32,
    /// On SIGTERM or Ctrl-C, a running job stops at its next checkpoint (and goes on from it at the next start),
    /// or finishes, within this many seconds; then it stops where it is and is re-queued.
    pub shutdown_grace_s: u64,
    /// A synchronous call (`/v1/decode`, `/v1/encode`) and a job the box expects to take at most this many seconds
    /// run at the running job's next chunk end, which then goes on where it stood; 0: synchronous calls only.
    pub short_job_s: f64,
    /// With tokens: a running job makes way at its next checkpoint when another owner's job, next in the claim
    /// order, has waited this many seconds (it goes on from the checkpoint at its turn); 0: never.
    pub fair_wait_s: f64,
    /// The key webhook deliveries are signed with (`Vaebox-Signature`, HMAC-SHA256); empty: `callback_url`
    /// is refused with 400 `callback-not-configured`.
    pub callback_secret: String,
    /// Hosts a `callback_url` may name: host names, IP addresses, CIDR blocks (`["hooks.lan", "10.0.0.0/24"]`);
    /// empty: every `callback_url` is refused with 400 `callback-host-not-allowed`.
    pub callback_hosts: Vec<String>,
    /// Seconds before a failed delivery's first retry; each later wait doubles, up to an hour, for a day.
    pub callback_retry_first_s: u64,
    /// Seconds one delivery try may take (connecting, sending, the answer's head); a receiver slower than this failed.
    pub callback_timeout_s: f64,
    /// Seconds between two looks at the watch folders; a file is taken once its size and time stayed the
    /// same over two looks and for `watch_settle_s`.
    pub watch_poll_s: f64,
    /// Seconds a watched file's size and time must stay the same before it is taken: a writer that pauses
    /// for less (a network copy, a recorder between segments) is not cut short.
    pub watch_settle_s: f64,
    /// Folders whose arriving files become jobs (`[[watch]]` tables: `folder`, `output`, optional `pattern`
    /// and `extensions`, and job fields or a `preset`).
    pub watch: Vec<WatchFolder>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: "data".into(),
            models_dir: "models".into(),
            database: PathBuf::new(),
            storage: String::new(),
            storage_options: Default::default(),
            storage_wait_s: 600,
            device_memory_mib: 0,
            role: Role::All,
            worker_name: String::new(),
            lease_s: 60,
            max_attempts: 3,
            device: DeviceChoice::Auto,
            devices: Vec::new(),
            dtype: DtypeChoice::Auto,
            threads: 0,
            max_upload_bytes: 4 << 30,
            max_width: 4096,
            max_height: 4096,
            max_frames: 100_000,
            max_duration_s: 4.0 * 3600.0,
            max_queued_jobs: 256,
            max_queued_jobs_per_token: 0,
            min_free_disk_mib: 1024,
            disk_reserve_mib: 64,
            retention_hours: 72.0,
            ffmpeg: "ffmpeg".into(),
            ffprobe: "ffprobe".into(),
            probe_timeout_s: 30,
            job_timeout_s: 24 * 3600,
            chunk_frames: 4,
            upscale_tile: 512,
            upscale_overlap: 0,
            memory_budget_mib: 0,
            device_memory_margin_mib: 1024,
            host_memory_mib: 0,
            dit_memory_budget_mib: 0,
            tf32: false,
            cudnn_benchmark: true,
            cpu_winograd: true,
            cpu_allocator: HostAllocator::Bounded,
            tokens: Vec::new(),
            dit_block_swap: BlockSwap::Auto,
            output_format: OutputFormat::H264,
            output_crf: 18,
            output_preset: "veryfast".into(),
            checkpoint_s: 10.0,
            media_priority: ProcessPriority::Normal,
            cpu_frame_workers: 0,
            presets: Default::default(),
            cors_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            header_timeout_s: 30,
            body_idle_timeout_s: 60,
            max_concurrent_uploads: 8,
            max_uploads_per_client: 4,
            min_upload_rate_kib_s: 16,
            max_connections: 0,
            max_connections_per_client: 64,
            max_event_streams_per_client: 16,
            shutdown_grace_s: 30,
            short_job_s: 30.0,
            fair_wait_s: 120.0,
            callback_secret: String::new(),
            callback_hosts: Vec::new(),
            callback_retry_first_s: 10,
            callback_timeout_s: 5.0,
            watch_poll_s: 2.0,
            watch_settle_s: 10.0,
            watch: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BlockSwap {
    Auto,
    Always,
    Never,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("configuration (defaults and VAEBOX_* variables): {message}")]
    Value { message: String },
    #[error("config key `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
}

pub const ENV_PREFIX: &str = "VAEBOX_";

/// The Python client's settings (`vaebox submit --url`, `--token`), which the server does not read but must
/// not refuse as unknown keys: one shell often runs both.
pub const CLIENT_VARIABLES: [&str; 2] = ["VAEBOX_CLIENT_URL", "VAEBOX_CLIENT_TOKEN"];

/// 4 PiB: any real budget, and far from where `MiB << 20` in bytes would wrap (a budget of 2^44 MiB
/// used to wrap to the same plan as 1 MiB).
pub const MAX_MEMORY_BUDGET_MIB: u64 = 1 << 32;

impl Config {
    /// Defaults, then the file (explicit path, or `./config.toml` when present), then `VAEBOX_*`.
    pub fn load(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        let implicit = Path::new("config.toml");
        let path = explicit.or_else(|| implicit.exists().then_some(implicit));
        let mut table = toml::Table::try_from(Config::default()).expect("defaults serialize");
        if let Some(path) = path {
            let text = std::fs::read_to_string(path)
                .map_err(|source| ConfigError::Read { path: path.into(), source })?;
            let file: toml::Table = text
                .parse()
                .map_err(|e: toml::de::Error| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
            table.extend(file);
        }
        apply_env_overrides(&mut table, std::env::vars())?;
        let config: Config = toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| match path {
            Some(path) => ConfigError::Parse { path: path.into(), message: e.to_string() },
            None => ConfigError::Value { message: e.to_string() },
        })?;
        config.validate()?;
        Ok(config.with_absolute_paths())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, message: &str| Err(ConfigError::Invalid { key, message: message.into() });
        if self.max_upload_bytes == 0 || self.max_width == 0 || self.max_height == 0 || self.max_frames == 0 {
            return invalid("max_*", "input limits must be positive");
        }
        if !(self.max_duration_s > 0.0) {
            return invalid("max_duration_s", "must be positive");
        }
        let host_name = |name: &String| name == "*" || (!name.is_empty() && !name.contains([':', '/', ' ', '@']));
        if !self.allowed_hosts.iter().all(host_name) {
            return invalid("allowed_hosts", "host names only (no scheme, port or path), or \"*\"");
        }
        for (name, fields) in &self.presets {
            let plain = |v: &toml::Value| matches!(v, toml::Value::String(_) | toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_));
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return invalid("presets", "a preset's name is letters, digits, `-` and `_`");
            }
            if let Some((key, _)) = fields.iter().find(|(_, value)| !plain(value)) {
                return Err(ConfigError::Invalid { key: "presets", message: format!("presets.{name}.{key}: a job field's value is text, a number or true/false") });
            }
        }
        if self.chunk_frames == 0 || self.chunk_frames > 256 {
            return invalid("chunk_frames", "must be between 1 and 256");
        }
        if self.cpu_frame_workers > 256 {
            return invalid("cpu_frame_workers", "must be between 0 (as many as the threads) and 256");
        }
        if self.upscale_tile < 0 || (self.upscale_tile > 0 && self.upscale_tile < 16) {
            return invalid("upscale_tile", "must be 0 (whole frames) or at least 16");
        }
        if self.upscale_overlap < 0 {
            return invalid("upscale_overlap", "must not be negative");
        }
        if self.disk_reserve_mib > 1 << 20 {
            return invalid("disk_reserve_mib", "must be at most 1048576 (1 TiB)");
        }
        if self.output_format == OutputFormat::Safetensors {
            return invalid("output_format", "safetensors is for vae_decode jobs that ask for it, not a default");
        }
        if self.output_crf > 51 {
            return invalid("output_crf", "x264 CRF is 0..=51");
        }
        if !(self.short_job_s >= 0.0 && self.short_job_s <= 86400.0) {
            return invalid("short_job_s", "must be between 0 (synchronous calls only) and 86400 seconds");
        }
        if !(self.fair_wait_s >= 0.0 && self.fair_wait_s <= 86400.0) {
            return invalid("fair_wait_s", "must be between 0 (never) and 86400 seconds");
        }
        if !(self.checkpoint_s >= 0.0 && self.checkpoint_s <= 86400.0) {
            return invalid("checkpoint_s", "must be between 0 (a segment per batch or frame) and 86400 seconds");
        }
        if !(self.retention_hours >= 0.0 && self.retention_hours.is_finite()) {
            return invalid("retention_hours", "must be 0 (keep forever) or a positive number of hours");
        }
        if self.memory_budget_mib > MAX_MEMORY_BUDGET_MIB {
            return invalid("memory_budget_mib", "must be at most 4294967296 (4 PiB)");
        }
        if self.dit_memory_budget_mib > MAX_MEMORY_BUDGET_MIB {
            return invalid("dit_memory_budget_mib", "must be at most 4294967296 (4 PiB)");
        }
        let mut names = std::collections::BTreeSet::new();
        for token in &self.tokens {
            if token.name.trim().is_empty() || !names.insert(token.name.as_str()) {
                return invalid("tokens", "every token needs a name of its own");
            }
            if token.secret.chars().count() < MIN_SECRET_CHARS {
                return invalid("tokens", "secrets must be at least 12 characters");
            }
        }
        if self.lease_s < 3 {
            return invalid("lease_s", "must be at least 3 (heartbeats go every third of it)");
        }
        if self.max_attempts == 0 {
            return invalid("max_attempts", "must be at least 1");
        }
        if self.max_queued_jobs == 0 {
            return invalid("max_queued_jobs", "must be positive");
        }
        if let Err(why) = CallbackHosts::parse(&self.callback_hosts) {
            return Err(ConfigError::Invalid { key: "callback_hosts", message: why });
        }
        if self.callback_retry_first_s == 0 || self.callback_retry_first_s > 3600 {
            return invalid("callback_retry_first_s", "must be between 1 and 3600 seconds");
        }
        if !(0.1..=60.0).contains(&self.callback_timeout_s) {
            return invalid("callback_timeout_s", "must be between 0.1 and 60 seconds");
        }
        if !(self.watch_poll_s >= 0.1 && self.watch_poll_s <= 3600.0) {
            return invalid("watch_poll_s", "must be between 0.1 and 3600 seconds");
        }
        if !(self.watch_settle_s >= 0.0 && self.watch_settle_s <= 86400.0) {
            return invalid("watch_settle_s", "must be between 0 and 86400 seconds");
        }
        if !self.callback_secret.is_empty() && self.callback_secret.chars().count() < MIN_SECRET_CHARS {
            return invalid("callback_secret", "must be at least 12 characters (or empty: no webhooks)");
        }
        Ok(())
    }

    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    pub fn database_target(&self) -> DatabaseTarget {
        let text = self.database.to_string_lossy();
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return DatabaseTarget::Postgres(text.into_owned());
        }
        match text.strip_prefix("sqlite://") {
            Some(path) => DatabaseTarget::Sqlite(path.into()),
            None if text.is_empty() => DatabaseTarget::Sqlite(self.data_dir.join("vaebox.db")),
            None => DatabaseTarget::Sqlite(self.database.clone()),
        }
    }

    /// The name this process's worker claims and heartbeats under.
    pub fn worker_name(&self) -> String {
        if !self.worker_name.trim().is_empty() {
            return self.worker_name.trim().to_string();
        }
        let mut buf = [0u8; 256];
        // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer it is given.
        let host = match unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } {
            0 => String::from_utf8_lossy(&buf[..buf.iter().position(|&b| b == 0).unwrap_or(buf.len())]).into_owned(),
            _ => String::new(),
        };
        if host.is_empty() { "vaebox".into() } else { host }
    }

    /// The devices this process's workers run on: `devices`, else `device`.
    pub fn worker_devices(&self) -> Vec<DeviceChoice> {
        if self.devices.is_empty() {
            vec![self.device]
        } else {
            self.devices.iter().map(|entry| entry.0).collect()
        }
    }

    /// `callback_hosts`, read (checked by `validate`).
    pub fn callback_hosts(&self) -> CallbackHosts {
        CallbackHosts::parse(&self.callback_hosts).unwrap_or_default()
    }

    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_s)
    }

    pub fn media_limits(&self) -> MediaLimits {
        MediaLimits {
            max_bytes: self.max_upload_bytes,
            max_width: self.max_width,
            max_height: self.max_height,
            max_frames: self.max_frames,
            max_duration_s: self.max_duration_s,
        }
    }

    pub fn media_tools(&self) -> MediaTools {
        MediaTools {
            ffmpeg: self.ffmpeg.clone(),
            ffprobe: self.ffprobe.clone(),
            probe_timeout: Duration::from_secs(self.probe_timeout_s),
            stream_timeout: Duration::from_secs(self.job_timeout_s),
        }
    }
}

/// `VAEBOX_MAX_WIDTH=2048` overrides `max_width`; the value is read with the type of the default.
fn apply_env_overrides(
    table: &mut toml::Table,
    vars: impl Iterator<Item = (String, String)>,
) -> Result<(), ConfigError> {
    for (var, raw) in vars {
        let Some(key) = var.strip_prefix(ENV_PREFIX) else { continue };
        let key = key.to_ascii_lowercase();
        let Some(default) = Config::default_value(&key) else {
            if matches!(key.as_str(), "config" | "python" | "log" | "bench_python") {
                continue; // read elsewhere (CLI flag, tests, tracing filter, the benches' --python)
            }
            if CLIENT_VARIABLES.contains(&var.as_str()) {
                continue; // the Python client's (clients/python): a shell may hold them for both
            }
            return Err(ConfigError::Env { var, message: "no such config key".into() });
        };
        let parsed = match default {
            toml::Value::String(_) => Ok(toml::Value::String(raw.clone())),
            toml::Value::Integer(_) => raw.trim().parse().map(toml::Value::Integer).map_err(|e| e.to_string()),
            toml::Value::Float(_) => raw.trim().parse().map(toml::Value::Float).map_err(|e| e.to_string()),
            toml::Value::Boolean(_) => raw.trim().parse().map(toml::Value::Boolean).map_err(|e| e.to_string()),
            toml::Value::Array(_) if key == "tokens" => tokens_from_env(&raw),
            // Lists of text (`cors_origins`): comma-separated.
            toml::Value::Array(_) => Ok(toml::Value::Array(
                raw.split(',').map(str::trim).filter(|item| !item.is_empty()).map(|item| toml::Value::String(item.into())).collect(),
            )),
            _ => Err("unsupported type".into()),
        };
        let value = parsed.map_err(|message| ConfigError::Env { var: var.clone(), message })?;
        table.insert(key, value);
    }
    Ok(())
}

impl Config {
    fn default_value(key: &str) -> Option<toml::Value> {
        toml::Table::try_from(Config::default()).ok()?.remove(key)
    }
}

#[cfg(test)]
mod tests;
