//! `vaebox bench vae`: our VAE and diffusers side by side on the same random weights, input, dtype and
//! thread count, in one run. diffusers runs as a command server (`--serve`) so each timed run of ours
//! alternates with one of theirs and both see the same machine load. Prints per (dtype, op) the median
//! and best times, our speed-up, our GFLOP/s against a measured matmul peak, and the max abs difference
//! between the two outputs (proof that both ran the same computation). FLOPs come from torch's
//! `FlopCounterMode` on the diffusers model.
use super::dtype::BenchDtype;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tch::{Device, Kind, Tensor};

use super::script::PythonScript;
pub use super::vae_args::{VaeBenchArgs, VaeFamily};
use super::vae_args::parse_list;
use super::vae_cache::{ensure_generated, shape_args, CachePaths};
use crate::device::HostAllocator;
use crate::models::wan::{WanLoadOptions, WanTuning, WanVae};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Encode,
    Decode,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Encode => "encode",
            Op::Decode => "decode",
        }
    }

    /// Name of the input tensor in the input file and of the output tensor in the reference outputs.
    fn tensor_names(self) -> (&'static str, &'static str) {
        match self {
            Op::Encode => ("video", "mu"),
            Op::Decode => ("latent", "sample"),
        }
    }
}

/// One row of the result table.
struct Row {
    dtype: BenchDtype,
    op: Op,
    /// `cpu_winograd` of our run; `None` where no Winograd path exists (bf16, CUDA).
    winograd: Option<bool>,
    /// TF32 of both sides (CUDA f32); `None` where it does not apply.
    tf32: Option<bool>,
    /// Peak bytes allocated on the device during the last timed run: diffusers', ours (CUDA only).
    peak_device_bytes: Option<(u64, u64)>,
    diffusers: Timings,
    ours: Timings,
    flops: f64,
    max_abs_diff: f64,
}

/// Seconds of the timed runs of one side.
#[derive(Default)]
struct Timings(Vec<f64>);

impl Timings {
    fn median(&self) -> f64 {
        let mut sorted = self.0.clone();
        sorted.sort_by(f64::total_cmp);
        let mid = sorted.len() / 2;
        if sorted.len() % 2 == 1 {
            sorted[mid]
        } else {
            (sorted[mid - 1] + sorted[mid]) / 2.0
        }
    }

    /// Median over rounds of `self[i] / other[i]`: each round's two runs saw about the same machine
    /// load, so this ratio drifts least when the load changes between rounds.
    fn paired_ratio_median(&self, other: &Timings) -> f64 {
        Timings(self.0.iter().zip(&other.0).map(|(a, b)| a / b).collect()).median()
    }

    fn best(&self) -> f64 {
        self.0.iter().copied().fold(f64::INFINITY, f64::min)
    }
}


/// Everything one bench run shares across dtypes.
struct Setup<'a> {
    args: &'a VaeBenchArgs,
    script: PythonScript,
    paths: CachePaths,
    /// Model shape and input size flags, passed to every script call.
    shape_args: Vec<String>,
    /// `video` and `latent` from the input file.
    inputs: Vec<(String, Tensor)>,
    ops: Vec<Op>,
    tuning: WanTuning,
    winograd: Vec<bool>,
    device: Device,
}

pub fn run(args: &VaeBenchArgs) -> anyhow::Result<()> {
    match args.family {
        VaeFamily::Seedvr2 => return super::seedvr2::run(args),
        VaeFamily::Taehv => return super::taehv::run(args),
        VaeFamily::Wan => {}
    }
    let dtypes = parse_list(&args.dtypes, "dtype", BenchDtype::parse)?;
    let ops = parse_list(&args.ops, "op", |s| match s {
        "encode" => Some(Op::Encode),
        "decode" => Some(Op::Decode),
        _ => None,
    })?;
    let winograd = parse_list(&args.cpu_winograd, "cpu_winograd value", |s| s.parse::<bool>().ok())?;
    let device = super::tiling::usable_device(&args.device)?;
    let tf32 = parse_list(&args.tf32, "tf32 value", |s| s.parse::<bool>().ok())?;
    if !device.is_cuda() && tf32.contains(&true) {
        bail!("--tf32 true needs a CUDA device");
    }
    if args.threads == 0 || args.repeats == 0 {
        bail!("--threads and --repeats must be at least 1");
    }
    let load_before = load_average();
    let script = PythonScript {
        python: args.python.clone(),
        script: args.script.clone(),
        timeout: Duration::from_secs(args.timeout_secs),
        threads: args.threads,
        env: match args.allocator {
            // glibc reads it at start-up; the fixed threshold is what `HostAllocator::Bounded` sets.
            HostAllocator::Bounded => vec![("MALLOC_MMAP_THRESHOLD_".into(), crate::device::BOUNDED_MMAP_THRESHOLD.to_string())],
            HostAllocator::Fast => Vec::new(),
        },
    };
    let paths = CachePaths::new(args);
    std::fs::create_dir_all(&paths.dir).with_context(|| format!("cannot create {}", paths.dir.display()))?;
    let shape_args = shape_args(args);
    ensure_generated(&script, &paths.weights, "--make-weights", &shape_args)?;
    ensure_generated(&script, &paths.input, "--make-input", &shape_args)?;
    let inputs = Tensor::read_safetensors(&paths.input)?;

    tch::set_num_threads(args.threads as i32);
    args.allocator.apply();
    let peak_before = measure_matmul_peak(&script, args)?;

    let setup = Setup { args, script, paths, shape_args, inputs, ops, tuning: WanTuning { channels_last: args.channels_last }, winograd, device };
    let mut rows = Vec::new();
    for &dtype in &dtypes {
        // TF32 changes f32 on CUDA only; elsewhere one run with it off.
        let tf32_settings: Vec<Option<bool>> = match dtype {
            BenchDtype::F32 if device.is_cuda() => tf32.iter().copied().map(Some).collect(),
            _ => vec![None],
        };
        for tf32 in tf32_settings {
            rows.extend(bench_dtype(&setup, dtype, tf32)?);
        }
    }
    let load_after = load_average();
    // Other load only ever lowers a peak, so the better of two measurements is the fairer one.
    let peak_after = measure_matmul_peak(&setup.script, args)?;
    let peak = MatmulPeak { f32_gflops: peak_before.f32_gflops.max(peak_after.f32_gflops), bf16_gflops: peak_before.bf16_gflops.max(peak_after.bf16_gflops), ..peak_before };
    print_report(&setup, &peak, &rows, (load_before, load_after))
}

/// Best GFLOP/s of a square matmul at the bench's thread count, from the reference script (same libtorch build).
struct MatmulPeak {
    size: i64,
    f32_gflops: f64,
    bf16_gflops: f64,
}

impl MatmulPeak {
    fn of(&self, dtype: BenchDtype) -> f64 {
        match dtype {
            BenchDtype::F32 => self.f32_gflops,
            BenchDtype::Bf16 => self.bf16_gflops,
        }
    }
}

fn measure_matmul_peak(script: &PythonScript, args: &VaeBenchArgs) -> anyhow::Result<MatmulPeak> {
    eprintln!("measuring the matmul peak at {} threads on {}", args.threads, args.device);
    let mut request = vec!["--matmul-peak".into(), "--threads".into(), args.threads.to_string()];
    if args.device != "cpu" {
        request.extend(["--device".into(), args.device.clone()]);
    }
    let reply = script.run_json(&request)?;
    let field = |name: &str| reply[name].as_f64().with_context(|| format!("matmul-peak reply has no `{name}`: {reply}"));
    Ok(MatmulPeak { size: field("size")? as i64, f32_gflops: field("f32_gflops")?, bf16_gflops: field("bf16_gflops")? })
}

/// Both models at one dtype (and TF32 setting); per op a warm-up each, then `repeats` rounds of
/// (diffusers run, our run).
fn bench_dtype(setup: &Setup, dtype: BenchDtype, tf32: Option<bool>) -> anyhow::Result<Vec<Row>> {
    let Setup { args, script, paths, shape_args, inputs, device, .. } = setup;
    let device = *device;
    let mut device_args: Vec<String> = Vec::new();
    if device.is_cuda() {
        let tf32_on = tf32.unwrap_or(false);
        device_args = vec!["--device".into(), args.device.clone(), "--tf32".into(), if tf32_on { "on" } else { "off" }.into()];
        crate::device::cuda::set_tf32(tf32_on);
    }
    let serve_args = [
        vec![
            "--serve".into(),
            "--weights".into(),
            paths.weights.display().to_string(),
            "--input".into(),
            paths.input.display().to_string(),
            "--dtype".into(),
            dtype.name().into(),
            "--threads".into(),
            args.threads.to_string(),
        ],
        shape_args.to_vec(),
        device_args,
    ]
    .concat();
    eprintln!("diffusers {}: starting", dtype.name());
    let (mut diffusers, _ready) = script.start_session(&serve_args)?;
    eprintln!("ours {}: loading {}", dtype.name(), paths.weights.display());
    let vae = WanVae::load_tuned(&paths.weights, &WanLoadOptions { device, kind: dtype.kind() }, &setup.tuning)?;
    let mut rows = Vec::new();
    let mut our_outputs = Vec::new();
    let settings: Vec<Option<bool>> = match dtype {
        BenchDtype::F32 if !device.is_cuda() => setup.winograd.iter().copied().map(Some).collect(),
        _ => vec![None],
    };
    let set = |setting: Option<bool>| crate::models::nn::winograd::set_enabled(setting.unwrap_or(false));
    for &op in &setup.ops {
        let input = named(inputs, op.tensor_names().0, &paths.input)?.to_device(device).to_kind(dtype.kind());
        let flops = diffusers.request(&format!("warmup {}", op.name()))?["flops"].as_f64().context("warmup reply has no flops")?;
        for &setting in &settings {
            eprintln!("ours {} {} (winograd {setting:?}): warm-up", op.name(), dtype.name());
            set(setting);
            let _warm_up_output = run_ours(&vae, op, &input, device)?;
        }
        let mut theirs = Timings::default();
        let mut ours: Vec<Timings> = settings.iter().map(|_| Timings::default()).collect();
        let mut outputs: Vec<Option<Tensor>> = settings.iter().map(|_| None).collect();
        let (mut their_peak, mut our_peak) = (None, None);
        for round in 1..=args.repeats {
            let reply = diffusers.request(&format!("time {}", op.name()))?;
            theirs.0.push(reply["seconds"].as_f64().context("time reply has no seconds")?);
            their_peak = reply["peak_device_bytes"].as_u64();
            for (index, &setting) in settings.iter().enumerate() {
                set(setting);
                crate::device::cuda::reset_peak(device);
                let started = Instant::now();
                outputs[index] = Some(run_ours(&vae, op, &input, device)?);
                ours[index].0.push(started.elapsed().as_secs_f64());
                our_peak = crate::device::cuda::peak_allocated_bytes(device);
                eprintln!("{} {} round {round}/{} (winograd {setting:?}): diffusers {:.3} s, ours {:.3} s", op.name(), dtype.name(), args.repeats, theirs.0[round - 1], ours[index].0[round - 1]);
            }
        }
        for ((setting, timings), output) in settings.iter().zip(ours).zip(outputs) {
            our_outputs.push((op, output.expect("repeats >= 1").to_device(Device::Cpu).to_kind(Kind::Float)));
            let peak_device_bytes = their_peak.zip(our_peak);
            rows.push(Row { dtype, op, winograd: *setting, tf32, peak_device_bytes, diffusers: Timings(theirs.0.clone()), ours: timings, flops, max_abs_diff: f64::NAN });
        }
    }
    crate::models::nn::winograd::set_enabled(true);
    let reference_path = paths.reference_outputs(args, dtype);
    diffusers.request(&format!("save {}", reference_path.display()))?;
    let _ = diffusers.request("quit");
    let reference: Vec<(String, Tensor)> = Tensor::read_safetensors(&reference_path)?;
    for (row, (op, output)) in rows.iter_mut().zip(&our_outputs) {
        row.max_abs_diff = max_abs_diff(output, &named(&reference, op.tensor_names().1, &reference_path)?)?;
    }
    Ok(rows)
}

/// One run of ours; on CUDA it ends when the device has finished, so the clock around it is honest.
fn run_ours(vae: &WanVae, op: Op, input: &Tensor, device: Device) -> anyhow::Result<Tensor> {
    let output = match op {
        Op::Encode => vae.encode(input)?,
        Op::Decode => vae.decode(input)?,
    };
    crate::device::cuda::synchronize(device);
    Ok(output)
}



fn named(tensors: &[(String, Tensor)], name: &str, file: &Path) -> anyhow::Result<Tensor> {
    tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t.shallow_clone()).with_context(|| format!("{} has no tensor `{name}`", file.display()))
}

fn max_abs_diff(actual: &Tensor, expected: &Tensor) -> anyhow::Result<f64> {
    if actual.size() != expected.size() {
        bail!("our output has shape {:?}, diffusers' {:?}", actual.size(), expected.size());
    }
    Ok((actual.to_kind(Kind::Double) - expected.to_kind(Kind::Double)).abs().max().double_value(&[]))
}

/// The 1-minute load average, so a reader can tell a quiet machine from a busy one.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

fn print_report(setup: &Setup, peak: &MatmulPeak, rows: &[Row], load: (Option<f64>, Option<f64>)) -> anyhow::Result<()> {
    let Setup { args, paths, tuning, .. } = setup;
    let show_load = |l: Option<f64>| l.map_or("?".into(), |l| format!("{l:.2}"));
    println!();
    println!(
        "VAE bench: {:?} preset {} | input {} frames {}×{} | device {} | {} threads | {} interleaved rounds after 1 warm-up each",
        args.family, args.preset, args.frames, args.height, args.width, args.device, args.threads, args.repeats
    );
    println!(
        "ours: {tuning:?} | host allocator (both sides): {} | weights {} | input {}",
        match args.allocator {
            HostAllocator::Bounded => "bounded (64 KiB mmap threshold)",
            HostAllocator::Fast => "fast (glibc default)",
        },
        paths.weights.display(),
        paths.input.display()
    );
    println!(
        "matmul peak (best {}×{} run, before and after): f32 {:.0} GFLOP/s, bf16 {:.0} GFLOP/s | load average (1 min) before {}, after {}",
        peak.size,
        peak.size,
        peak.f32_gflops,
        peak.bf16_gflops,
        show_load(load.0),
        show_load(load.1)
    );
    println!("FLOPs: torch.utils.flop_counter.FlopCounterMode on the diffusers model (convs, matmuls, attention)");
    println!("speed-up = median over rounds of diffusers s / ours s in the same round (ratio of best runs in brackets); GFLOP/s and % of peak from the medians");
    println!("ours is rated on diffusers' FLOP count: above 100% of peak means we skip work diffusers does (zero causal history, fused up-sampling)");
    println!();
    println!("| dtype | op | ours cpu_winograd | TF32 | diffusers median s (best) | ours median s (best) | speed-up | GFLOP (diffusers) | diffusers GFLOP/s (% of peak) | ours effective GFLOP/s (% of peak) | peak device MiB diffusers / ours | max abs diff |");
    println!("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let gflops = row.flops / 1e9;
        let ours_rate = gflops / row.ours.median();
        let diffusers_rate = gflops / row.diffusers.median();
        let peak_rate = peak.of(row.dtype);
        println!(
            "| {} | {} | {} | {} | {:.2} ({:.2}) | {:.2} ({:.2}) | {:.2}× ({:.2}×) | {:.0} | {:.0} ({:.0}%) | {:.0} ({:.0}%) | {} | {:.2e} |",
            row.dtype.name(),
            row.op.name(),
            row.winograd.map_or("—", |on| if on { "true" } else { "false" }),
            row.tf32.map_or("—", |on| if on { "on" } else { "off" }),
            row.diffusers.median(),
            row.diffusers.best(),
            row.ours.median(),
            row.ours.best(),
            row.diffusers.paired_ratio_median(&row.ours),
            row.diffusers.best() / row.ours.best(),
            gflops,
            diffusers_rate,
            100.0 * diffusers_rate / peak_rate,
            ours_rate,
            100.0 * ours_rate / peak_rate,
            row.peak_device_bytes.map_or("—".to_string(), |(theirs, ours)| format!("{:.0} / {:.0}", theirs as f64 / 1048576.0, ours as f64 / 1048576.0)),
            row.max_abs_diff
        );
    }
    Ok(())
}
