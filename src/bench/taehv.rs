//! `vaebox bench vae --family taehv`: the tiny decoder `taew2_1` beside the Wan 2.1 VAE whose latents it
//! takes, both at full size with random weights (the Wan file is the `wan` bench's, made by diffusers; the
//! TAEHV one from the released key list), decoding one latent in one process, one run each. Each row
//! streams the latent in pushes as a job does, dropping each push's frames as a job writes them out, and
//! reports its time and its peak memory above the loaded models (`VmHWM` reset before each row; the
//! bounded allocator hands freed buffers back, so rows do not inherit each other's peaks). Frame-by-frame
//! decoding runs again on a clip four times as long: its memory should not grow with the clip.
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use tch::{Device, Kind, Tensor};

use super::script::PythonScript;
use super::vae_args::{parse_list, VaeBenchArgs};
use crate::device::{peak_host_bytes, reset_peak_host_bytes};
use crate::models::family::vae::{BoxedStream, LoadOptions};
use crate::models::family::Family;
use crate::models::taehv::{TaehvLoadOptions, TaehvVideoVae};
use crate::models::vae::{full_vae_latent, VideoVae};
use crate::models::wan::{WAN21_LATENTS_MEAN, WAN21_LATENTS_STD};

/// A key listing of the reference data: `key<TAB>shape<TAB>dtype<TAB>numel`, `#` comments, the shape as
/// `64x12x3x3` (TAEHV's `keys_*.txt`) or `[64, 12, 3, 3]` (FlashVSR's `full_keys_*.txt`).
pub fn key_list(keys: &Path) -> anyhow::Result<Vec<(String, Vec<i64>)>> {
    let text = std::fs::read_to_string(keys).with_context(|| format!("reading {}", keys.display()))?;
    let entry = |line: &str| -> anyhow::Result<(String, Vec<i64>)> {
        let fields: Vec<&str> = line.split('\t').collect();
        let [name, shape, _dtype, count] = fields[..] else { bail!("expected 4 tab-separated fields") };
        let shape: Vec<i64> = shape.trim_matches(['[', ']']).split(['x', ',']).map(|d| d.trim().parse()).collect::<Result<_, _>>()?;
        if shape.iter().product::<i64>() != count.trim().parse::<i64>()? {
            bail!("the shape does not have {count} elements");
        }
        Ok((name.to_string(), shape))
    };
    let lines = text.lines().filter(|line| !line.starts_with('#') && !line.trim().is_empty());
    lines.map(|line| entry(line).with_context(|| format!("{}: `{line}`", keys.display()))).collect()
}

/// Random weights of a listed layout: convolutions scaled by 1/√fan_in (activations stay in range through
/// the decoder's depth), biases zero.
pub fn random_weights(keys: &[(String, Vec<i64>)], seed: u64) -> Vec<(String, Tensor)> {
    tch::manual_seed(seed as i64);
    let tensor = |shape: &[i64]| {
        let fan_in: i64 = shape.iter().skip(1).product();
        match shape.len() {
            1 => Tensor::zeros(shape, (Kind::Float, Device::Cpu)),
            _ => (Tensor::rand(shape, (Kind::Float, Device::Cpu)) * 2.0 - 1.0) / (fan_in as f64).sqrt(),
        }
    };
    keys.iter().map(|(name, shape)| (name.clone(), tensor(shape))).collect()
}

/// How one row pushes the latent.
#[derive(Debug, Clone, Copy)]
struct Row {
    model: &'static str,
    /// Latent frames per push.
    push: i64,
    parallel: bool,
    latent_frames: i64,
    /// TAEHV's convs in NHWC (as the box runs it) or, for comparison, NCHW.
    channels_last: bool,
}

struct Measured {
    seconds: f64,
    peak_bytes: u64,
    frames: i64,
}

pub fn run(args: &VaeBenchArgs) -> anyhow::Result<()> {
    tch::set_num_threads(args.threads as i32);
    args.allocator.apply();
    let device = super::tiling::usable_device(&args.device)?;
    crate::device::cuda::set_tf32(false);
    if device.is_cuda() {
        bail!("the TAEHV bench measures host memory: run it with --device cpu");
    }
    if (args.frames - 1) % 4 != 0 {
        bail!("--frames must be 1 + 4k (a Wan clip)");
    }
    let kind = match args.dtypes.as_str() {
        "f32" => Kind::Float,
        "bf16" => Kind::BFloat16,
        other => bail!("the TAEHV bench runs one dtype (f32 or bf16), not `{other}`"),
    };
    let pushes = parse_list(&args.taehv_pushes, "push", |s| s.parse::<i64>().ok().filter(|&k| k > 0))?;
    // Both models as a job runs them: Winograd on (the box's `cpu_winograd`) unless `--cpu-winograd false`.
    let winograd = parse_list(&args.cpu_winograd, "cpu_winograd value", |s| s.parse::<bool>().ok())?[0];
    crate::models::nn::winograd::set_enabled(winograd);
    let wan_weights = wan_weights(args)?;
    let taehv_weights = taehv_weights(args)?;
    let options = LoadOptions { device, kind };
    let wan = VideoVae::load_file(&wan_weights, Family::Wan21, &options)?;
    let taehv = TaehvVideoVae::load(&taehv_weights, &options, full_vae_latent(&taehv_weights))?;
    let nchw = TaehvLoadOptions { device, kind, channels_last: false, ..TaehvLoadOptions::default() };
    let taehv_nchw = TaehvVideoVae::load_with(&taehv_weights, &nchw, full_vae_latent(&taehv_weights))?;
    let latent_frames = 1 + (args.frames - 1) / 4;
    let (latent_h, latent_w) = (args.height / 8, args.width / 8);
    println!(
        "TAEHV bench: {} ({:.1} M parameters) beside the Wan 2.1 VAE ({}), random weights | latent {latent_frames}×{latent_h}×{latent_w} → {} frames {}×{} | {} | {} threads | CPU, bounded allocator, cpu_winograd {winograd}",
        taehv_weights.display(),
        taehv.model().parameter_count() as f64 / 1e6,
        wan_weights.display(),
        args.frames,
        args.height,
        args.width,
        args.dtypes,
        args.threads,
    );
    let taehv_row = |push, parallel, latent_frames, channels_last| Row { model: "taew2_1", push, parallel, latent_frames, channels_last };
    let mut rows = vec![Row { model: "wan_2.1_vae", push: 1, parallel: true, latent_frames, channels_last: true }];
    rows.push(taehv_row(1, true, latent_frames, false));
    rows.extend(pushes.iter().map(|&push| taehv_row(push, true, latent_frames, true)));
    rows.push(taehv_row(1, false, latent_frames, true));
    rows.push(taehv_row(1, false, 4 * latent_frames, true));
    println!("| model | layout | mode | latent frames per push | frames | seconds | frames/s | peak MiB above the models | speed vs Wan | memory vs Wan |");
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|");
    warm_up(&wan, &[&taehv, &taehv_nchw], kind, latent_h, latent_w)?;
    let mut wan_figures = None;
    for row in rows {
        let latent = raw_wan_latent(args.seed, row.latent_frames, latent_h, latent_w).to_kind(kind);
        let stream: BoxedStream = match row.model {
            "wan_2.1_vae" => wan.decoder(),
            _ if row.channels_last => Box::new(taehv.pipeline_decoder(row.parallel)),
            _ => Box::new(taehv_nchw.pipeline_decoder(row.parallel)),
        };
        let measured = decode(stream, &latent, row.push)?;
        let speed = measured.frames as f64 / measured.seconds;
        let (wan_speed, wan_bytes) = *wan_figures.get_or_insert((speed, measured.peak_bytes));
        println!(
            "| {} | {} | {} | {} | {} | {:.2} | {speed:.2} | {:.0} | ×{:.1} | 1/{:.1} |",
            row.model,
            if row.channels_last { "channels-last" } else { "NCHW" },
            if row.parallel { "chunk" } else { "frame by frame" },
            row.push,
            measured.frames,
            measured.seconds,
            measured.peak_bytes as f64 / 1048576.0,
            speed / wan_speed,
            wan_bytes as f64 / measured.peak_bytes.max(1) as f64,
        );
    }
    Ok(())
}

/// One latent frame through each model at the measured size, so no row pays for first-call set-up.
fn warm_up(wan: &VideoVae, taehv: &[&TaehvVideoVae], kind: Kind, height: i64, width: i64) -> anyhow::Result<()> {
    let latent = raw_wan_latent(0, 1, height, width).to_kind(kind);
    decode(wan.decoder(), &latent, 1)?;
    for model in taehv {
        decode(Box::new(model.pipeline_decoder(true)), &latent, 1)?;
        decode(Box::new(model.pipeline_decoder(false)), &latent, 1)?;
    }
    Ok(())
}

/// The latent pushed `push` latent frames at a time; each push's frames dropped once made.
fn decode(mut stream: BoxedStream, latent: &Tensor, push: i64) -> anyhow::Result<Measured> {
    let _guard = tch::no_grad_guard();
    reset_peak_host_bytes();
    let baseline = peak_host_bytes().context("reading VmHWM")?;
    let started = Instant::now();
    let (total, mut start, mut frames) = (latent.size()[2], 0, 0);
    while start < total {
        let length = push.min(total - start);
        if let Some(out) = stream.push(&latent.narrow(2, start, length))? {
            frames += out.size()[2];
        }
        start += length;
    }
    let seconds = started.elapsed().as_secs_f64();
    let peak_bytes = peak_host_bytes().context("reading VmHWM")?.saturating_sub(baseline);
    Ok(Measured { seconds, peak_bytes, frames })
}

/// A raw Wan 2.1 latent `[1, 16, t, h, w]` whose normalised values are standard normal (what a diffusion
/// model hands its VAE).
fn raw_wan_latent(seed: u64, frames: i64, height: i64, width: i64) -> Tensor {
    tch::manual_seed(seed as i64 + 1);
    let column = |values: &[f64]| Tensor::from_slice(values).to_kind(Kind::Float).view([1, -1, 1, 1, 1]);
    Tensor::randn([1, 16, frames, height, width], (Kind::Float, Device::Cpu)) * column(&WAN21_LATENTS_STD) + column(&WAN21_LATENTS_MEAN)
}

/// The `wan` bench's full-size Wan 2.1 weights (made by its diffusers script once, then reused).
fn wan_weights(args: &VaeBenchArgs) -> anyhow::Result<PathBuf> {
    let script = PythonScript { python: args.python.clone(), script: args.script.clone(), timeout: std::time::Duration::from_secs(args.timeout_secs), threads: args.threads, env: Vec::new() };
    let wan_args = VaeBenchArgs { preset: "wan2.1".into(), ..args.clone() };
    let paths = super::vae_cache::CachePaths::new(&wan_args);
    std::fs::create_dir_all(&paths.dir).with_context(|| format!("cannot create {}", paths.dir.display()))?;
    super::vae_cache::ensure_generated(&script, &paths.weights, "--make-weights", &super::vae_cache::shape_args(&wan_args))?;
    Ok(paths.weights)
}

/// Full-size `taew2_1` weights from the released key list, written once under the cache directory (the
/// file name gives the model its latent space, as a user's `taew2_1.safetensors` does).
fn taehv_weights(args: &VaeBenchArgs) -> anyhow::Result<PathBuf> {
    let default_keys = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/taehv/keys_taew2_1.txt");
    let keys = args.taehv_keys.clone().unwrap_or(default_keys);
    let dir = args.cache_dir.join("taehv");
    let path = dir.join(format!("taew2_1-seed{}.safetensors", args.seed));
    if !path.exists() {
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let partial = path.with_extension("partial.safetensors");
        Tensor::write_safetensors(&random_weights(&key_list(&keys)?, args.seed), &partial)?;
        std::fs::rename(&partial, &path).with_context(|| format!("cannot move {} into place", partial.display()))?;
    }
    Ok(path)
}
