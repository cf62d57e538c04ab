//! `vaebox bench vae --family seedvr2`: our SeedVR2 VAE at each dtype on the full-size layout of
//! `full_keys.txt` with random weights. There is no diffusers implementation of this model to run
//! beside it, so the table has our times only (median and best after a warm-up).
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use tch::{Device, Kind, Tensor};

use super::vae_args::VaeBenchArgs;
use crate::models::seedvr2::{SeedVr2LoadOptions, SeedVr2Vae};

/// The released checkpoint's tensor names and shapes, one `name<TAB>[shape]<TAB>count` per line.
pub(super) fn full_size_tensors(keys: &Path, seed: u64) -> anyhow::Result<Vec<(String, Tensor)>> {
    let text = std::fs::read_to_string(keys).with_context(|| format!("reading {}", keys.display()))?;
    tch::manual_seed(seed as i64);
    let mut tensors = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let mut fields = line.split('\t');
        let (Some(name), Some(shape)) = (fields.next(), fields.next()) else { bail!("bad line in {}: {line}", keys.display()) };
        let shape: Vec<i64> = shape.trim_matches(['[', ']']).split(',').map(|d| d.trim().parse()).collect::<Result<_, _>>()?;
        let fan_in: i64 = shape.iter().skip(1).product();
        // Weights scaled by 1/√fan_in keep activations in range through ≈250M parameters; norms start at 1.
        let tensor = match (name.ends_with("weight"), shape.len()) {
            (true, n) if n > 1 => (Tensor::rand(&shape, (Kind::Float, Device::Cpu)) * 2.0 - 1.0) / (fan_in as f64).sqrt(),
            (true, _) => Tensor::ones(&shape, (Kind::Float, Device::Cpu)),
            _ => Tensor::zeros(&shape, (Kind::Float, Device::Cpu)),
        };
        tensors.push((name.to_string(), tensor));
    }
    Ok(tensors)
}

/// On CUDA the clock stops when the device has finished.
fn timed<T>(device: Device, work: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<(T, f64)> {
    let started = Instant::now();
    let out = work()?;
    crate::device::cuda::synchronize(device);
    Ok((out, started.elapsed().as_secs_f64()))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub fn run(args: &VaeBenchArgs) -> anyhow::Result<()> {
    tch::set_num_threads(args.threads as i32);
    let device = super::tiling::usable_device(&args.device)?;
    crate::device::cuda::set_tf32(false);
    let keys = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/seedvr2/full_keys.txt");
    let keys = args.seedvr2_keys.clone().unwrap_or(keys);
    tch::manual_seed(args.seed as i64 + 1);
    let video = (Tensor::rand([1, 3, args.frames, args.height, args.width], (Kind::Float, Device::Cpu)) * 2.0 - 1.0).to_device(device);
    println!(
        "VAE bench: SeedVR2 full-size layout ({}) with random weights | input {} frames {}×{} | device {} (TF32 off) | {} threads | {} timed runs after 1 warm-up",
        keys.display(),
        args.frames,
        args.height,
        args.width,
        args.device,
        args.threads,
        args.repeats
    );
    let winograd = super::vae_args::parse_list(&args.cpu_winograd, "cpu_winograd value", |s| s.parse::<bool>().ok())?;
    println!("| dtype | op | cpu_winograd | ours median s | ours best s | peak device MiB |\n|---|---|---|---:|---:|---:|");
    for dtype in args.dtypes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let kind = match dtype {
            "f32" => Kind::Float,
            "bf16" => Kind::BFloat16,
            other => bail!("unknown dtype {other}"),
        };
        // Only f32 has a Winograd path; the switch is read at load (kernels) and at every call.
        let settings: Vec<Option<bool>> = if kind == Kind::Float && !device.is_cuda() { winograd.iter().copied().map(Some).collect() } else { vec![None] };
        for setting in settings {
            crate::models::nn::winograd::set_enabled(setting.unwrap_or(false));
            let shown = setting.map_or("—".to_string(), |on| on.to_string());
            for (op, times, peak) in timed_ops(args, &keys, &video, kind, device)? {
                let best = times.iter().copied().fold(f64::INFINITY, f64::min);
                let peak = peak.map_or("—".to_string(), |bytes| format!("{:.0}", bytes as f64 / 1048576.0));
                println!("| {dtype} | {op} | {shown} | {:.2} | {:.2} | {peak} |", median(times), best);
            }
        }
    }
    crate::models::nn::winograd::set_enabled(true);
    Ok(())
}

/// Loads the model at `kind`, warms up, and times each op `repeats` times; with the peak bytes
/// allocated on a CUDA device during the last run.
fn timed_ops(args: &VaeBenchArgs, keys: &Path, video: &Tensor, kind: Kind, device: Device) -> anyhow::Result<Vec<(&'static str, Vec<f64>, Option<u64>)>> {
    let vae = SeedVr2Vae::from_tensors(&keys.display().to_string(), full_size_tensors(keys, args.seed)?, &SeedVr2LoadOptions { device, kind })?;
    let video = video.to_kind(kind);
    let video = &video;
    let encode = || -> anyhow::Result<Tensor> { Ok(tch::no_grad(|| vae.encode(video))?.mean) };
    let latent = encode()?;
    let decode = || -> anyhow::Result<Tensor> { Ok(tch::no_grad(|| vae.decode(&latent))?) };
    let _warm_up = decode()?;
    let mut rows = Vec::new();
    for (op, run) in [("encode", &encode as &dyn Fn() -> anyhow::Result<Tensor>), ("decode", &decode)] {
        let mut times = Vec::new();
        for _ in 0..args.repeats.max(1) {
            crate::device::cuda::reset_peak(device);
            times.push(timed(device, run)?.1);
        }
        rows.push((op, times, crate::device::cuda::peak_allocated_bytes(device)));
    }
    Ok(rows)
}
