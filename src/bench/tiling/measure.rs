//! One measured encode or decode run in a fresh child process (`vaebox measure-run`, hidden). The child
//! loads the model, warms up, and reports the growth of its peak RSS over the RSS it had just before
//! the run, as one JSON line. In one long-lived process the allocator state left by earlier runs moved
//! the readings by ±7% from run to run; a fresh process per run starts from the same state every time.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::fixtures::{load_vae, parse_family, synthetic_video};
use crate::device::{peak_host_bytes, reset_peak_host_bytes, DtypeChoice};
use crate::executor::tiled::streams::{TiledDecoder, TiledEncoder};
use crate::executor::tiled::tile_major::{no_checkpoints, plain_push, TileMajorDecode, TileMajorHooks};
use crate::models::family::vae::StreamOutput;
use crate::models::vae::VideoVae;
use crate::models::nn::causal_cache::RowSplit;
use crate::tiling::grid::{SpatialTiles, TileGrid};
use crate::tiling::memory::TiledOp;

/// A whole-model run on the full-size layout takes minutes on 2 cores; a stuck child must not hang a
/// calibration or a test forever.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// Which checkpoint the child loads, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    pub weights: PathBuf,
    /// wan21, wan22, seedvr2 or taehv.
    pub family: String,
    /// f32 or bf16.
    pub dtype: String,
    pub threads: i32,
    /// `cpu` (peak RSS growth) or `cuda`/`cuda:N` (the caching allocator's peak allocated bytes).
    #[serde(default = "cpu")]
    pub device: String,
    /// `cpu_winograd` of the run (f32 on the CPU only).
    #[serde(default = "on")]
    pub cpu_winograd: bool,
}

fn cpu() -> String {
    "cpu".into()
}

fn on() -> bool {
    true
}

/// One stream run: a first push of one latent frame (one pixel frame for encode), then pushes of
/// `latent_frames_per_push` latent frames until `latent_frames` are done, on `tiles`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    pub model: ModelSpec,
    /// Encode or Decode (a reconstruction is measured as its two streams).
    pub op: TiledOp,
    pub latent_frames: i64,
    pub latent_height: i64,
    pub latent_width: i64,
    pub latent_frames_per_push: i64,
    pub tiles: Option<SpatialTiles>,
    /// Exact row-split convolutions (Wan), instead of or on top of tiles.
    #[serde(default)]
    pub row_split: Option<RowSplit>,
    /// Decode tile-major (`tiles` required): one tile over the whole clip at a time, spooled to disk.
    #[serde(default)]
    pub tile_major: bool,
    /// Hold a checkpoint of the streams through each push, as a job's out-of-memory retry does (the
    /// planner's job estimates count it); false for calibration, whose rows are the bare streams'.
    #[serde(default)]
    pub checkpointed: bool,
    /// safetensors file whose `input` tensor is the latent (decode) or the video (encode); without
    /// it a seeded random latent or a synthetic video of the given size.
    pub input: Option<PathBuf>,
    /// Where to save the output (`output`, float32). It is held in a buffer filled before the baseline,
    /// as the executor hands every chunk on to the writer instead of keeping it.
    pub output: Option<PathBuf>,
}

/// What the child reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Growth of peak RSS (CPU) or of peak allocated device bytes (CUDA) during the measured run,
    /// over the amount just before it.
    pub peak_bytes: f64,
    /// RSS (CPU) or allocated device bytes (CUDA) before the measured run (weights, input, output
    /// buffer, warm-up leftovers).
    pub baseline_bytes: u64,
    /// Wall time of the measured run.
    pub seconds: f64,
    pub tile_count: usize,
    /// Pixel frames of one push after the first (the memory model's frame count).
    pub pixel_frames: i64,
    /// Pixels of one tile, and of all tiles together.
    pub tile_pixels: i64,
    pub covered_pixels: i64,
}

/// Starts measured runs as children of `exe` (a `vaebox` binary).
#[derive(Debug, Clone)]
pub struct ChildRunner {
    pub exe: PathBuf,
    pub timeout: Duration,
}

impl ChildRunner {
    /// This very binary (for `vaebox calibrate` and `vaebox bench tiling`).
    pub fn current() -> anyhow::Result<ChildRunner> {
        let exe = std::env::current_exe().context("cannot locate the running vaebox binary")?;
        Ok(ChildRunner { exe, timeout: DEFAULT_TIMEOUT })
    }

    pub fn new(exe: impl AsRef<Path>) -> ChildRunner {
        ChildRunner { exe: exe.as_ref().to_path_buf(), timeout: DEFAULT_TIMEOUT }
    }

    pub fn run(&self, spec: &RunSpec) -> anyhow::Result<RunReport> {
        let spec_json = serde_json::to_string(spec)?;
        let mut command = Command::new(&self.exe);
        // Logs go to stderr, which the runner echoes; the run itself has nothing to say below warn.
        command.args(["measure-run", "--spec", &spec_json]).env("VAEBOX_LOG", "warn");
        let label = format!("{} measure-run ({:?} {}×{}×{} latent)", self.exe.display(), spec.op, spec.latent_frames, spec.latent_height, spec.latent_width);
        let reply = crate::bench::run_json(command, label, self.timeout)?;
        serde_json::from_value(reply).context("the measured run's report")
    }
}

/// The child's side: `vaebox measure-run --spec <json>`.
pub fn child_main(spec_json: &str) -> anyhow::Result<()> {
    let spec: RunSpec = serde_json::from_str(spec_json).context("measure-run spec")?;
    // A parent that dies without dropping its runner (killed) must not leave a whole-model run behind.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    let report = run_measured(&spec)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

fn run_measured(spec: &RunSpec) -> anyhow::Result<RunReport> {
    if spec.op == TiledOp::Reconstruct {
        bail!("measure a reconstruction as its encode and decode streams");
    }
    let choice = crate::device::parse_device(&spec.model.device).context("device must be cpu, cuda or cuda:N")?;
    // First: it sets the allocation policy the executor runs with by default (see `device::init`).
    let device = crate::device::init(choice, spec.model.threads, crate::device::HostAllocator::Bounded);
    crate::models::nn::winograd::set_enabled(spec.model.cpu_winograd);
    if device.is_cuda() && crate::device::cuda::peak_allocated_bytes(device).is_none() {
        bail!("no CUDA allocator statistics on {device:?} (libtorch without CUDA, or built without the shim)");
    }
    let family = parse_family(&spec.model.family)?;
    let kind = DtypeChoice::parse(&spec.model.dtype).context("dtype must be f32 or bf16")?.resolve(device);
    let vae = load_vae(&spec.model.weights, family, kind, device)?;
    let input = match &spec.input {
        Some(path) => read_input(path)?,
        None => synthetic_input(&vae, spec),
    }
    .to_device(device);
    // The first run in a process also pays one-time costs (kernel caches, thread pools) that belong to
    // no job; its output sizes the buffer the measured run writes into.
    let mut warmup = if spec.output.is_some() { Sink::Collect(Vec::new()) } else { Sink::Drop };
    tch::no_grad(|| run_stream(&vae, spec, &input, &mut warmup))?;
    let mut buffer = warmup.into_buffer(device);
    let mut sink = match &mut buffer {
        Some(buffer) => Sink::Fill { buffer, offset: 0 },
        None => Sink::Drop,
    };
    let started = Instant::now();
    let run = || {
        let tiles = tch::no_grad(|| run_stream(&vae, spec, &input, &mut sink));
        // Kernels run asynchronously; the time is the device's.
        crate::device::cuda::synchronize(device);
        tiles
    };
    let (result, peak_bytes, baseline_bytes) = match device {
        Device::Cuda(_) => measure_device_peak_with_baseline(device, run),
        _ => measure_peak_with_baseline(run),
    };
    let seconds = started.elapsed().as_secs_f64();
    let tile_count = result?;
    if let (Some(path), Some(buffer)) = (&spec.output, &buffer) {
        Tensor::write_safetensors(&[("output", buffer.to_device(Device::Cpu))], path).with_context(|| format!("writing {}", path.display()))?;
    }
    let f = vae.spatial_factor();
    let grid = TileGrid::new(spec.latent_height, spec.latent_width, spec.tiles.as_ref());
    Ok(RunReport {
        peak_bytes,
        baseline_bytes,
        seconds,
        tile_count,
        pixel_frames: spec.latent_frames_per_push * vae.temporal_factor(),
        tile_pixels: grid.rows[0].len() * grid.cols[0].len() * f * f,
        covered_pixels: grid.covered_cells() * f * f,
    })
}

/// Where a run's output chunks go.
enum Sink<'a> {
    Collect(Vec<Tensor>),
    Fill { buffer: &'a mut Tensor, offset: i64 },
    Drop,
}

impl Sink<'_> {
    fn take(&mut self, chunk: Tensor) {
        match self {
            Sink::Collect(chunks) => chunks.push(chunk.to_kind(Kind::Float).to_device(Device::Cpu)),
            Sink::Fill { buffer, offset } => {
                let frames = chunk.size()[2];
                buffer.narrow(2, *offset, frames).copy_(&chunk);
                *offset += frames;
            }
            Sink::Drop => {}
        }
    }

    /// The buffer stays on the device the run computes on, so filling it moves nothing to the host.
    fn into_buffer(self, device: Device) -> Option<Tensor> {
        match self {
            Sink::Collect(chunks) => Some(Tensor::cat(&chunks, 2).to_device(device)),
            _ => None,
        }
    }
}

/// Runs the stream over `input` with the spec's pushes and tiles; returns the tile count.
fn run_stream(vae: &VideoVae, spec: &RunSpec, input: &Tensor, sink: &mut Sink) -> anyhow::Result<usize> {
    let total = input.size()[2];
    let (first, per_push) = match spec.op {
        TiledOp::Decode => (1, spec.latent_frames_per_push),
        _ => (1, spec.latent_frames_per_push * vae.temporal_factor()),
    };
    let pushes = std::iter::once((0, first.min(total))).chain((first..total).step_by(per_push.max(1) as usize).map(|start| (start, per_push.min(total - start))));
    match spec.op {
        TiledOp::Decode if spec.tile_major => {
            let tiles = spec.tiles.context("a tile-major run needs tiles")?;
            let spool = tempfile::tempdir().context("spool directory")?;
            let decode = TileMajorDecode { vae, tiles, latent_frames_per_push: spec.latent_frames_per_push, output: StreamOutput::Pipeline, checkpoint_frames: 0 };
            // The executor's pushes: the first one starts at latent frame 0 and is a whole chunk.
            let hooks = TileMajorHooks {
                step: &mut |_, _| Ok(()),
                push: &mut |decoder, latent| {
                    let _checkpoint = spec.checkpointed.then(|| decoder.checkpoint());
                    plain_push::<anyhow::Error>(decoder, latent)
                },
                emit: &mut |chunk, _| {
                    sink.take(chunk);
                    Ok(())
                },
                checkpoint: &mut no_checkpoints,
            };
            Ok(decode.run(input, spool.path(), None, hooks)?.0)
        }
        TiledOp::Decode => {
            let mut stream = TiledDecoder::new(vae, spec.tiles);
            if spec.row_split.is_some() && !stream.set_row_split(spec.row_split) {
                bail!("this model has no exact row split");
            }
            for (start, count) in pushes {
                let _checkpoint = spec.checkpointed.then(|| stream.checkpoint());
                sink.take(stream.push(&input.narrow(2, start, count))?);
            }
            Ok(stream.tile_count())
        }
        _ => {
            let mut stream = TiledEncoder::new(vae, spec.tiles);
            if spec.row_split.is_some() && !stream.set_row_split(spec.row_split) {
                bail!("this model has no exact row split");
            }
            for (start, count) in pushes {
                let _checkpoint = spec.checkpointed.then(|| stream.checkpoint());
                if let Some(latent) = stream.push(&input.narrow(2, start, count))? {
                    sink.take(latent);
                }
            }
            Ok(stream.tile_count())
        }
    }
}

fn read_input(path: &Path) -> anyhow::Result<Tensor> {
    let tensors = Tensor::read_safetensors(path).with_context(|| format!("reading {}", path.display()))?;
    let (_, input) = tensors.into_iter().find(|(name, _)| name == "input").with_context(|| format!("{} has no `input` tensor", path.display()))?;
    Ok(input.to_kind(Kind::Float).contiguous())
}

fn synthetic_input(vae: &VideoVae, spec: &RunSpec) -> Tensor {
    match spec.op {
        TiledOp::Decode => {
            tch::manual_seed(0);
            Tensor::randn([1, vae.latent_channels(), spec.latent_frames, spec.latent_height, spec.latent_width], (Kind::Float, Device::Cpu))
        }
        _ => {
            let f = vae.spatial_factor();
            let frames = 1 + (spec.latent_frames - 1) * vae.temporal_factor();
            synthetic_video(frames, spec.latent_height * f, spec.latent_width * f)
        }
    }
}

/// Runs `work` and returns its result, the growth of peak RSS over the RSS it started from, and that RSS.
/// The process must have been set up by `device::init` (CPU), so RSS follows live tensors.
pub fn measure_peak_with_baseline<T>(work: impl FnOnce() -> T) -> (T, f64, u64) {
    // Freed heap pages that glibc keeps would be reused unseen and hide part of the peak.
    unsafe {
        libc::malloc_trim(0);
    }
    reset_peak_host_bytes();
    let baseline = peak_host_bytes().unwrap_or(0);
    let out = work();
    let peak = peak_host_bytes().unwrap_or(0);
    (out, peak.saturating_sub(baseline) as f64, baseline)
}

/// The CUDA side of [`measure_peak_with_baseline`]: the caching allocator's peak allocated bytes
/// (what tensors hold, not what the allocator has reserved around them).
fn measure_device_peak_with_baseline<T>(device: Device, work: impl FnOnce() -> T) -> (T, f64, u64) {
    crate::device::cuda::empty_cache(device);
    crate::device::cuda::reset_peak(device);
    let baseline = crate::device::cuda::peak_allocated_bytes(device).unwrap_or(0);
    let out = work();
    let peak = crate::device::cuda::peak_allocated_bytes(device).unwrap_or(0);
    (out, peak.saturating_sub(baseline) as f64, baseline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_round_trips_through_json() {
        let spec = RunSpec {
            model: ModelSpec { weights: "w.safetensors".into(), family: "wan21".into(), dtype: "f32".into(), threads: 2, device: "cpu".into(), cpu_winograd: true },
            op: TiledOp::Decode,
            latent_frames: 3,
            latent_height: 16,
            latent_width: 22,
            latent_frames_per_push: 2,
            tiles: Some(SpatialTiles::square(10, 4)),
            row_split: None,
            tile_major: false,
            checkpointed: false,
            input: None,
            output: Some("out.safetensors".into()),
        };
        let back: RunSpec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(back, spec);
        // Specs written before the device key run on the CPU.
        let old = serde_json::to_string(&spec).unwrap().replace(r#","device":"cpu""#, "");
        assert_eq!(serde_json::from_str::<RunSpec>(&old).unwrap(), spec);
    }
}
