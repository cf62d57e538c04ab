//! `vaebox serve` (default), `vaebox run` (one job, no server) and `vaebox bench`.
mod run_args;
mod run_stop;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use tokio::sync::watch;

use vaebox::config::{absolute_path, Config};
use vaebox::media::ProcessPriority;
use vaebox::device::{DeviceChoice, DtypeChoice};
use vaebox::executor::{ExecutorConfig, ExecutorHandle, JobHooks, JobSpec};
use vaebox::jobs::{JobOutcome, JobParams, JobPlan, OutputFormat, Progress, Timings};
use vaebox::models::{Op, Writes};
use vaebox::models::registry;
use run_args::RunArgs;
use vaebox::queue::{self, InputKind, JobOptions, JobRequest, Probed, QueueError};

#[derive(Parser)]
#[command(name = "vaebox", version, about = "A LAN-shared GPU box for video VAEs and upscaling")]
struct Cli {
    /// Config file (default: ./config.toml when present, else built-in defaults). Keys can be
    /// overridden by VAEBOX_<KEY> environment variables.
    #[arg(long, global = true, env = "VAEBOX_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP server and the executor (the default), or one of them (`--role`).
    Serve(ServeArgs),
    /// Run one job from the command line through the same pipeline, without a server.
    Run(RunArgs),
    /// Measure throughput and pipeline overhead.
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
    /// Re-measure a VAE's working memory per chunk and tile (the planner's memory model).
    Calibrate(vaebox::bench::tiling::calibrate::CalibrateArgs),
    /// One measured encode/decode run, reported as a JSON line (the child process of `calibrate` and
    /// `bench tiling`, so every memory reading starts from a fresh process).
    #[command(hide = true)]
    MeasureRun {
        /// A `bench::tiling::measure::RunSpec` as JSON.
        #[arg(long)]
        spec: String,
    },
}

#[derive(clap::Args, Default)]
struct ServeArgs {
    /// `all`: API and executor in one process (one box); `api`: uploads, results and the page, no device;
    /// `worker`: runs jobs claimed from the shared database, no HTTP [default: the config's `role`].
    #[arg(long, value_enum)]
    role: Option<vaebox::config::Role>,
}


#[derive(Subcommand)]
enum BenchCommand {
    /// Our VAE side by side with diffusers (same weights, input, dtype, threads), with speed ratio and GFLOP/s.
    Vae(vaebox::bench::vae::VaeBenchArgs),
    /// SeedVR2 one-step restoration with a random DiT at a chosen width: s/frame per stage, DiT GFLOP/s against the matmul peak.
    Restore(vaebox::bench::restore::RestoreBenchArgs),
    /// FlashVSR-Tiny at full size with random weights, streamed as a job runs it: s/frame per step, memory on a clip and one 4× as long; optionally SeedVR2 3B on the same clip size.
    Flashvsr(vaebox::bench::flashvsr::FlashVsrBenchArgs),
    /// Many pollers on `GET /v1/jobs/{id}` while a job runs on a server on loopback: poll latency p50/p99 and the job's slowdown.
    Load(vaebox::bench::load::LoadBenchArgs),
    /// Host memory a checkpoint load takes above the runtime's base, against the file's size (run in a fresh process).
    LoadWeights(vaebox::bench::weights_load::LoadWeightsArgs),
    /// For a few memory budgets: the plan chosen, peak memory, time, and error against untiled.
    Tiling(vaebox::bench::tiling::bench::TilingBenchArgs),
    /// The same weights on the CPU and on a device (the GPU kit: `--device cuda`): every VAE family and the SeedVR2 DiT, output against output.
    Parity(vaebox::bench::parity::ParityArgs),
    /// The CPU Winograd convolution against the direct one on the VAE decoder's layer shapes: time and error.
    Winograd(vaebox::bench::winograd::WinogradBenchArgs),
    /// Upscale a real clip end to end for each dtype (model-only fps, end-to-end fps, total/compute), then our
    /// model against the ncnn engine on the clip's first frame (Real-ESRGAN and Real-CUGAN models).
    Upscale {
        #[arg(long, default_value = "tests/media/carphone_pristine.mp4")]
        input: PathBuf,
        #[arg(long, default_value = registry::DEFAULT_UPSCALE_MODEL)]
        model: String,
        #[arg(long, default_value = "f32,bf16")]
        dtypes: String,
        /// The pipeline's scale [default: the model's largest, the one its ncnn files compute].
        #[arg(long)]
        scale: Option<i64>,
        /// `media_priority` values to run the pipeline with, side by side.
        #[arg(long, default_value = "normal,idle")]
        media_priorities: String,
        /// `cpu_frame_workers` values to run the pipeline with, side by side (default: 1 and the thread count).
        #[arg(long)]
        frame_workers: Option<String>,
        /// Only the last table: our model against the ncnn engine (no pipeline runs, no step timings).
        #[arg(long)]
        engines_only: bool,
        /// Without the last table (the GPU kit's job step wants the pipeline and the steps only).
        #[arg(long, conflicts_with = "engines_only")]
        no_engines: bool,
        /// Rounds of the engines' table; each round runs every engine in turn.
        #[arg(long, default_value_t = 2)]
        rounds: u32,
        /// Timed runs per engine and round (after one untimed run): median and best.
        #[arg(long, default_value_t = 5)]
        repeat: u32,
        /// Python with PyPI `ncnn` (the project's venv), for the ncnn engine's timing.
        #[arg(long, default_value = ".venv/bin/python", env = "VAEBOX_BENCH_PYTHON")]
        python: PathBuf,
        /// `cpu`, `cuda` or `cuda:N`: the pipeline and the steps run there (on a GPU with one frame worker
        /// and without the engines' table, which is the ncnn engine on the CPU).
        #[arg(long, default_value = "cpu", value_parser = parse_device_arg)]
        device: DeviceChoice,
    },
    /// RIFE frames per second and peak host memory at a 256×256 crop and a 1280×720 frame pair, f32 (both
    /// layouts) and bf16, next to ECCV2022-RIFE's own PyTorch code on the same pair.
    Interpolate(vaebox::bench::interpolate::InterpolateBenchArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run_command(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) if error.is::<run_stop::Stopped>() => {
            eprintln!("{error}");
            std::process::ExitCode::from(run_stop::STOPPED_EXIT)
        }
        Err(error) => {
            // The causes on one line, without a backtrace (RUST_BACKTRACE is for panics, not for "the
            // output folder does not exist").
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run_command(cli: Cli) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VAEBOX_LOG").unwrap_or_else(|_| "info,tower_http=warn,sqlx=warn".into()),
        )
        .with_writer(std::io::stderr)
        // Colour codes are for a person at a terminal; in a log file or a pipe they are noise.
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .init();
    // libtorch errors surface as panics carrying a whole C++ backtrace; the executor recovers from
    // them (see executor/mod.rs), so the log gets one line instead of a page.
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("panic");
        let short: String = message.split("\\nframe #0").next().unwrap_or(message).chars().take(300).collect();
        let thread = std::thread::current().name().unwrap_or("unnamed").to_string();
        tracing::error!(thread, location = %info.location().map(|l| l.to_string()).unwrap_or_default(), "panic: {short}");
    }));
    let mut config = Config::load(cli.config.as_deref()).context("invalid configuration")?;
    let runtime = vaebox::server::runtime::build()?;
    match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
        Command::Serve(args) => {
            config.role = args.role.unwrap_or(config.role);
            runtime.block_on(vaebox::server::serve(config))
        }
        Command::Run(args) => runtime.block_on(run_once(&config, args)),
        Command::Bench { what: BenchCommand::Upscale { input, model, dtypes, scale, media_priorities, frame_workers, engines_only, no_engines, rounds, repeat, python, device } } => {
            config.device = device;
            runtime.block_on(bench_upscale(&config, BenchUpscale { python, input, model, dtypes, scale, media_priorities, frame_workers, engines_only, no_engines, rounds, repeat }))
        }
        Command::Bench { what: BenchCommand::Vae(args) } => vaebox::bench::vae::run(&args),
        Command::Bench { what: BenchCommand::Restore(args) } => vaebox::bench::restore::run(&args),
        Command::Bench { what: BenchCommand::Flashvsr(args) } => vaebox::bench::flashvsr::run(&args),
        Command::Bench { what: BenchCommand::Load(args) } => runtime.block_on(vaebox::bench::load::run(&args)),
        Command::Bench { what: BenchCommand::LoadWeights(args) } => vaebox::bench::weights_load::run(&args),
        Command::Bench { what: BenchCommand::Parity(args) } => vaebox::bench::parity::run(&args),
        Command::Bench { what: BenchCommand::Tiling(args) } => vaebox::bench::tiling::bench::run(&args),
        Command::Bench { what: BenchCommand::Winograd(args) } => vaebox::bench::winograd::run(&args),
        Command::Bench { what: BenchCommand::Interpolate(args) } => vaebox::bench::interpolate::run(&ExecutorConfig::from_config(&config), &args),
        Command::Calibrate(args) => vaebox::bench::tiling::calibrate::run(&args),
        Command::MeasureRun { spec } => vaebox::bench::tiling::measure::child_main(&spec),
    }
}

struct OneJob<'a> {
    request: JobRequest,
    probed: Probed,
    input: &'a Path,
    output: &'a Path,
    show_progress: bool,
    /// The job's cancel (`run`: Ctrl-C).
    cancel: Arc<AtomicBool>,
}

/// The server's checks at submission, on the options and then on the input, before a model is loaded.
async fn prepare(config: &Config, options: &JobOptions, input: &Path) -> anyhow::Result<(JobRequest, Probed)> {
    fn refusal(e: QueueError) -> anyhow::Error {
        anyhow::anyhow!("{e} ({})", e.code())
    }
    let mut request = queue::check(options, config).map_err(refusal)?;
    let probed = queue::inspect_input(config, &mut request, input, InputKind::File).await.map_err(refusal)?;
    Ok((request, probed))
}

/// Runs one job on a private executor, exactly as the server would; with the job's last progress.
async fn run_job(executor: &ExecutorHandle, job: OneJob<'_>) -> (anyhow::Result<JobOutcome>, Progress) {
    let spec = JobSpec {
        id: uuid::Uuid::new_v4(),
        op: job.request.op,
        model: job.request.model,
        params: job.request.params,
        input_path: job.input.to_path_buf(),
        input_media: job.probed.media,
        output_path: job.output.to_path_buf(),
        timings: Timings { probe: job.probed.seconds, ..Timings::default() },
        shared_checkpoints: None,
        portion: vaebox::executor::Portion::Whole,
    };
    let (progress, mut progress_rx) = watch::channel(Progress::default());
    let last = progress_rx.clone();
    let printer = job.show_progress.then(|| {
        tokio::spawn(async move {
            let mut shown = ProgressDisplay::new();
            while progress_rx.changed().await.is_ok() {
                let p = progress_rx.borrow_and_update().clone();
                shown.update(&p);
            }
            shown.finish();
        })
    });
    let hooks = JobHooks::new(progress, job.cancel, Arc::new(AtomicBool::new(false)));
    let (result, _timings) = executor.run(spec, hooks).await;
    if let Some(printer) = printer {
        let _ = printer.await;
    }
    let last = last.borrow().clone();
    (result.map_err(|e| anyhow::anyhow!("{} ({})", e, e.code())), last)
}

/// A plain progress line in a log at most this often (the bar on a terminal redraws freely).
const PROGRESS_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// `run`'s progress: a bar redrawn in place on a terminal; elsewhere (a pipe, a log file) a line now
/// and then and the last state, since carriage-return redraws would pile up there.
enum ProgressDisplay {
    Bar(indicatif::ProgressBar),
    Lines { last_logged: Option<Instant>, last: Option<Progress> },
}

impl ProgressDisplay {
    fn new() -> ProgressDisplay {
        if !std::io::stderr().is_terminal() {
            return ProgressDisplay::Lines { last_logged: None, last: None };
        }
        let bar = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        let style = indicatif::ProgressStyle::with_template("[{bar:30}] {msg}").expect("a valid template").progress_chars("#>-");
        bar.set_style(style);
        ProgressDisplay::Bar(bar)
    }

    fn update(&mut self, p: &Progress) {
        match self {
            ProgressDisplay::Bar(bar) => {
                // The bar follows the fraction, which moves within stages (a restore batch's encode, DiT,
                // decode) where the frame count stands still.
                bar.set_length(BAR_STEPS);
                bar.set_message(progress_line(p));
                bar.set_position((p.fraction * BAR_STEPS as f64).round() as u64);
            }
            ProgressDisplay::Lines { last_logged, last } => {
                if last_logged.is_none_or(|at| at.elapsed() >= PROGRESS_LOG_INTERVAL) {
                    eprintln!("{}", progress_line(p));
                    *last_logged = Some(Instant::now());
                    *last = None;
                } else {
                    *last = Some(p.clone());
                }
            }
        }
    }

    fn finish(self) {
        match self {
            ProgressDisplay::Bar(bar) => {
                bar.finish();
                // indicatif leaves the cursor at the end of the bar; what follows starts on its own line.
                eprintln!();
            }
            ProgressDisplay::Lines { last: Some(p), .. } => eprintln!("{}", progress_line(&p)),
            ProgressDisplay::Lines { last: None, .. } => {}
        }
    }
}

/// Steps of the terminal bar.
const BAR_STEPS: u64 = 1000;

/// `8/17 frames · dit batch 2/3 · 42.0% · ETA 12s` (`ETA 2h 17m`, as the page writes it): what is written, the stage, and the executor's own
/// fraction and ETA (which know about stages the frame count does not).
fn progress_line(p: &Progress) -> String {
    let mut parts = vec![if p.total > 0 { format!("{}/{} {}", p.done, p.total, p.unit) } else { format!("{} {}", p.done, p.unit) }];
    parts.extend(p.stage.clone());
    parts.push(format!("{:.1}%", p.fraction * 100.0));
    parts.extend(p.eta_s.map(|s| format!("ETA {}", vaebox::stats::duration_words(s))));
    parts.join(" · ")
}

async fn run_once(config: &Config, args: RunArgs) -> anyhow::Result<()> {
    check_output_folder(&args.output)?;
    if args.output.exists() && !args.overwrite {
        bail!("{} exists; pass --overwrite to replace it", args.output.display());
    }
    // `--preset NAME` as `preset=NAME` over HTTP: the flags given win over the preset's fields.
    let fields = args.job.0.with_preset(&config.presets)?;
    let options = queue::parameters::read(&fields, &config.models_dir)?;
    // The job's files are named absolutely: they reach ffmpeg, and its concat lists read relative paths
    // against their own folder. The person still reads the output's name as they typed it.
    let (input, output) = (absolute_path(&args.input), absolute_path(&args.output));
    // One run at a time writes an output and its checkpoints; taken before the input is probed.
    let _lock = run_stop::RunLock::take(&output)?;
    let interrupt = run_stop::Interrupt::listen();
    let (request, probed) = prepare(config, &options, &input).await?;
    let still = probed.media.as_ref().is_some_and(|media| media.still);
    check_output_extension(&args.output, request.op, request.params.output_format, still)?;
    let executor = ExecutorHandle::spawn(ExecutorConfig::from_config(config));
    let job = OneJob { request, probed, input: &input, output: &output, show_progress: true, cancel: interrupt.flag() };
    let (outcome, last) = run_job(&executor, job).await;
    if interrupt.raised() {
        return Err(run_stop::Stopped::of(&output, &last).into());
    }
    let outcome = outcome?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({
            "output": outcome.output_path,
            "bytes": outcome.output_bytes,
            "timings": outcome.timings,
            "plan": outcome.plan,
            "metrics": outcome.metrics,
        }))?);
    } else {
        println!("{}", summary(&args.output, &outcome));
    }
    Ok(())
}

/// `wrote out.mp4: 704×576, 40 frames, 1.2 MiB` and the time it took, for a person (`--json` for tools).
fn summary(output: &Path, outcome: &JobOutcome) -> String {
    let mib = |bytes: u64| bytes as f64 / (1u64 << 20) as f64;
    let what = match &outcome.output_media {
        Some(media) if media.still => format!("{}×{} picture, ", media.width, media.height),
        Some(media) => format!("{}×{}, {} frames, ", media.width, media.height, media.frames),
        None => String::new(),
    };
    let t = &outcome.timings;
    let seconds = |v: Option<f64>| v.map(|s| format!("{s:.1} s")).unwrap_or_else(|| "-".into());
    let mut lines = vec![format!("wrote {}: {what}{:.1} MiB", output.display(), mib(outcome.output_bytes))];
    lines.push(format!(
        "took {} (load {}, compute {}){}{}",
        seconds(t.total),
        seconds(t.load_model),
        seconds(t.compute),
        t.fps.map(|fps| format!(", {fps:.2} frames/s")).unwrap_or_default(),
        t.peak_host_bytes.map(|b| format!(", peak memory {:.0} MiB", mib(b))).unwrap_or_default(),
    ));
    if let Some(metrics) = &outcome.metrics {
        lines.push(format!("metrics: {}", serde_json::to_string(metrics).unwrap_or_default()));
    }
    lines.join("\n")
}

/// The output's extension is the format's: safetensors in a `.mp4` plays nowhere.
fn check_output_extension(output: &Path, op: Op, format: Option<OutputFormat>, still: bool) -> anyhow::Result<()> {
    let (expected, what) = match op.spec().writes {
        Writes::Latent => ("safetensors", "a latent".to_string()),
        Writes::Video { .. } => {
            let format = format.unwrap_or(OutputFormat::H264);
            (format.extension_for(still), format!("output format {}", format.as_str()))
        }
    };
    let actual = output.extension().and_then(|e| e.to_str()).unwrap_or("");
    if !actual.eq_ignore_ascii_case(expected) {
        bail!("{} does not end in .{expected}, the extension of {what}; name the output with it (or pick another --output-format)", output.display());
    }
    Ok(())
}

/// A job can run for hours; an output it cannot write should stop it before it starts, not at the end.
fn check_output_folder(output: &Path) -> anyhow::Result<()> {
    let folder = match output.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    if !folder.is_dir() {
        let what = if folder.exists() { "is not a folder" } else { "does not exist" };
        bail!("the output's folder {} {what}; create it first", folder.display());
    }
    tempfile::NamedTempFile::new_in(folder).with_context(|| format!("cannot write in the output's folder {}", folder.display()))?;
    Ok(())
}

struct BenchUpscale {
    python: PathBuf,
    input: PathBuf,
    model: String,
    dtypes: String,
    scale: Option<i64>,
    media_priorities: String,
    frame_workers: Option<String>,
    engines_only: bool,
    no_engines: bool,
    rounds: u32,
    repeat: u32,
}

async fn bench_upscale(config: &Config, bench: BenchUpscale) -> anyhow::Result<()> {
    use vaebox::bench::upscale::{ended_children_cpu_seconds, measure, StepRequest};
    use vaebox::bench::upscale_engines::{self, EnginesRequest};
    use vaebox::bench::BenchDtype;
    let entry = registry::find(&config.models_dir, &bench.model).with_context(|| format!("no model {}", bench.model))?;
    let scale = match bench.scale {
        Some(scale) => scale,
        None => upscale_engines::native_scale(&entry)?,
    };
    let dtype_names: Vec<&str> = bench.dtypes.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    // Checked before the pipeline's runs, which take minutes.
    let dtypes = dtype_names
        .iter()
        .map(|&name| BenchDtype::parse(name).with_context(|| format!("the engines' table runs f32 and bf16, not {name}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let pipeline_dtypes: &[&str] = if bench.engines_only { &[] } else { &dtype_names };
    let priorities = bench
        .media_priorities
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|name| serde_json::from_value::<ProcessPriority>(serde_json::json!(name)).map(|p| (name, p)).map_err(|_| anyhow::anyhow!("unknown media priority {name}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let out_dir = tempfile_dir()?;
    let threads = tch::get_num_threads().max(1) as usize;
    let device = match config.device {
        DeviceChoice::Cuda(index) => tch::Device::Cuda(index),
        DeviceChoice::Cpu | DeviceChoice::Auto => tch::Device::Cpu,
    };
    let frame_workers = match &bench.frame_workers {
        // The executor runs one call at a time on a GPU, whatever cpu_frame_workers says.
        _ if device.is_cuda() => vec![1],
        Some(list) => list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|n| n.parse::<usize>().ok().filter(|&n| n > 0).with_context(|| format!("--frame-workers: {n} is not a positive count"))).collect::<anyhow::Result<Vec<_>>>()?,
        None if threads > 1 => vec![1, threads],
        None => vec![1],
    };
    println!("bench upscale: model {} x{scale} on {} ({} threads, device {})", bench.model, bench.input.display(), tch::get_num_threads(), vaebox::device::device_name(device));
    if !pipeline_dtypes.is_empty() {
        println!("pipeline: the job's stages at each media_priority; steps: the compute stage's parts timed one by one on the clip's frames (up to 120, best of 2 passes), and the bare model on the same chunks");
        println!(
            "| dtype | chunk | media priority | frame workers | frames | read s | compute s | write s | total s | e2e fps | compute s/frame | upload | to float | model (tiled) | to samples | download | bare model s/frame | bare, frames on workers | compute / bare | media CPU s/frame | bound |"
        );
        println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    }
    for &dtype_name in pipeline_dtypes {
        let Some(dtype) = DtypeChoice::parse(dtype_name) else { bail!("unknown dtype {dtype_name}") };
        // A GPU wants more frames per call than a CPU, where 4 already fill the cores.
        let chunk_sizes: &[usize] = if device.is_cuda() { &[4, 16] } else { &[1, 4] };
        for &chunk_frames in chunk_sizes {
            // The steps do not depend on the media processes' priority: measured once per dtype and chunk.
            let mut measured_steps = None;
            for (&(priority_name, media_priority), &cpu_frame_workers) in priorities.iter().flat_map(|p| frame_workers.iter().map(move |w| (p, w))) {
                let config = Config { chunk_frames, media_priority, cpu_frame_workers, ..config.clone() };
                let executor_config = ExecutorConfig::from_config(&config);
                let executor = ExecutorHandle::spawn(executor_config.clone());
                let output = out_dir.join(format!("bench_{dtype_name}_{chunk_frames}.mp4"));
                let params = JobParams { scale: Some(scale), ..JobParams::new(dtype) };
                let options = JobOptions { model: Some(bench.model.clone()), params, ..JobOptions::new(Op::Upscale) };
                // The first run loads the model; the measured run finds it resident, as a busy server would.
                let (request, probed) = prepare(&config, &options, &bench.input).await?;
                run_job(&executor, OneJob { request, probed, input: &bench.input, output: &output, show_progress: false, cancel: Default::default() }).await.0?;
                let (request, probed) = prepare(&config, &options, &bench.input).await?;
                let children_before = ended_children_cpu_seconds();
                let outcome = run_job(&executor, OneJob { request, probed, input: &bench.input, output: &output, show_progress: false, cancel: Default::default() }).await.0?;
                let media_cpu = ended_children_cpu_seconds() - children_before;
                drop(executor);
                let t = &outcome.timings;
                let steps = match measured_steps {
                    Some(steps) => steps,
                    None => {
                        let kind = match t.dtype.as_deref() {
                            Some("bf16") => tch::Kind::BFloat16,
                            Some("f16") => tch::Kind::Half,
                            _ => tch::Kind::Float,
                        };
                        let request = StepRequest { config: &executor_config, input: &bench.input, model: &bench.model, kind, scale, chunk_frames, device };
                        *measured_steps.insert(tokio::task::block_in_place(|| measure(&request))?)
                    }
                };
                let frames = outcome.plan.as_ref().and_then(JobPlan::frames).unwrap_or(0) as f64;
                let compute = t.compute.unwrap_or(f64::NAN);
                // The pipeline is everything after the model is resident: probe is the server's upload step.
                let pipeline = t.total.unwrap_or(f64::NAN) - t.load_model.unwrap_or(0.0);
                println!(
                    "| {} | {chunk_frames} | {priority_name} | {cpu_frame_workers} | {frames} | {:.3} | {compute:.3} | {:.3} | {pipeline:.3} | {:.2} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {} | {:.3} | {:.4} | {:.3} |",
                    t.dtype.as_deref().unwrap_or("?"),
                    t.read.unwrap_or(f64::NAN),
                    t.write.unwrap_or(f64::NAN),
                    frames / pipeline,
                    compute / frames,
                    steps.upload,
                    steps.to_float,
                    steps.model_tiled,
                    steps.to_samples,
                    steps.download,
                    steps.bare_model,
                    steps.bare_on_workers.map(|s| format!("{s:.4}")).unwrap_or_else(|| "-".into()),
                    (compute / frames) / steps.bare_model,
                    media_cpu / frames,
                    1.0 + media_cpu / frames / (threads as f64 * steps.bare_model),
                );
            }
        }
    }
    if bench.no_engines || device.is_cuda() {
        if device.is_cuda() {
            println!("engines: not run on {}: the ncnn engine's table runs on the CPU (--device cpu)", vaebox::device::device_name(device));
        }
        let _ = std::fs::remove_dir_all(&out_dir);
        return Ok(());
    }
    let request = EnginesRequest {
        config: &ExecutorConfig::from_config(config),
        input: &bench.input,
        model: &bench.model,
        python: bench.python.clone(),
        threads,
        dtypes: &dtypes,
        repeat: bench.repeat,
        rounds: bench.rounds,
    };
    let runs = tokio::task::block_in_place(|| upscale_engines::run(&request))?;
    println!(
        "engines: the clip's first frame at the model's native scale x{}, {threads} threads each side, seconds per frame over {} runs after an untimed one, rounds in turn",
        upscale_engines::native_scale(&entry)?,
        bench.repeat
    );
    println!("{}", upscale_engines::table(&runs));
    let _ = std::fs::remove_dir_all(&out_dir);
    Ok(())
}

fn parse_device_arg(s: &str) -> Result<DeviceChoice, String> {
    vaebox::device::parse_device(s).filter(|d| *d != DeviceChoice::Auto).ok_or_else(|| format!("{s}: expected cpu, cuda or cuda:N"))
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("vaebox-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
