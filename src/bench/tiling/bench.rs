//! `vaebox bench tiling`: for a few memory budgets, the plan the planner picks, then the decode run
//! with that plan, each in a fresh child process: peak working memory (RSS growth), time, and error
//! against the untiled decode. Rounds interleave the plans so machine load hits them alike.
use std::path::{Path, PathBuf};

use anyhow::Context;
use tch::{Device, Kind, Tensor};

use super::fixtures::{load_vae, parse_family, synthetic_video, usable_device};
use super::measure::{ChildRunner, ModelSpec, RunReport, RunSpec};
use crate::device::{kind_name, DtypeChoice};
use crate::models::nn::causal_cache::RowSplit;
use crate::tiling::memory::{MemoryModel, TiledOp};
use crate::tiling::planner::{plan, Plan, PlanRequest};

#[derive(Debug, Clone, clap::Args)]
pub struct TilingBenchArgs {
    /// VAE checkpoint; the default is the small random Wan 2.1 of the reference data.
    #[arg(long, default_value = "../shared/reference/wan21_original/weights.safetensors")]
    pub weights: PathBuf,
    #[arg(long, default_value = "wan21")]
    pub family: String,
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Pixel frames (1 + 4k) and size of the synthetic clip.
    #[arg(long, default_value_t = 17)]
    pub frames: i64,
    #[arg(long, default_value_t = 128)]
    pub height: i64,
    #[arg(long, default_value_t = 176)]
    pub width: i64,
    /// Comma list of working-memory budgets: `N%` of the untiled plan's estimate, or MiB.
    #[arg(long, default_value = "75%,50%,35%")]
    pub budgets: String,
    /// Comma list of row-band sizes in MiB: each adds an untiled run whose convolutions go in exact row
    /// bands of at most that many bytes (Wan), beside the budgets' plans. Empty for none.
    #[arg(long, default_value = "")]
    pub row_split_bands: String,
    /// Longest push the planner may choose, in latent frames (also the untiled run's push).
    #[arg(long, default_value_t = 2)]
    pub max_latent_frames_per_chunk: i64,
    /// Rounds over all plans; times and peaks are medians over rounds.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    #[arg(long, default_value_t = 2)]
    pub threads: i32,
    /// `cpu` (peak RSS growth) or `cuda`/`cuda:N` (the CUDA caching allocator's peak); the plans come
    /// from that device's memory model.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// `cpu_winograd` of every run (f32 on the CPU).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub cpu_winograd: bool,
}

/// A decode of the latent in `input` with `plan`'s pushes and tiles, as a child-process run spec.
pub fn decode_spec(model: &ModelSpec, input: &Path, latent_shape: [i64; 3], plan: &Plan, output: Option<PathBuf>) -> RunSpec {
    decode_spec_split(model, input, latent_shape, plan, output, None)
}

fn decode_spec_split(model: &ModelSpec, input: &Path, latent_shape: [i64; 3], plan: &Plan, output: Option<PathBuf>, row_split: Option<RowSplit>) -> RunSpec {
    let [latent_frames, latent_height, latent_width] = latent_shape;
    RunSpec {
        model: model.clone(),
        op: TiledOp::Decode,
        latent_frames,
        latent_height,
        latent_width,
        latent_frames_per_push: plan.latent_frames_per_chunk,
        tiles: plan.spatial,
        row_split,
        tile_major: plan.tile_major,
        // Measured as a job runs it, so against the plan's job estimate.
        checkpointed: true,
        input: Some(input.to_path_buf()),
        output,
    }
}

enum Budget {
    Share(f64),
    Mib(f64),
}

fn parse_budgets(text: &str) -> anyhow::Result<Vec<Budget>> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.strip_suffix('%') {
            Some(share) => share.trim().parse::<f64>().map(|p| Budget::Share(p / 100.0)),
            None => s.parse::<f64>().map(Budget::Mib),
        })
        .map(|parsed| parsed.context("a budget is `N%` or a number of MiB"))
        .collect()
}

struct Row {
    label: String,
    budget_bytes: Option<u64>,
    row_split: Option<RowSplit>,
    plan: Plan,
    output: PathBuf,
    runs: Vec<RunReport>,
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

fn range(values: &[f64]) -> (f64, f64) {
    values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), &v| (low.min(v), high.max(v)))
}

/// The 1-minute load average, so a reader can tell a quiet machine from a busy one.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

pub fn run(args: &TilingBenchArgs) -> anyhow::Result<()> {
    // This process only encodes the clip and plans, on the CPU; the measured runs are children on `device`.
    crate::device::init(crate::device::DeviceChoice::Cpu, args.threads, crate::device::HostAllocator::Bounded);
    let device = usable_device(&args.device)?;
    let family = parse_family(&args.family)?;
    let kind = DtypeChoice::parse(&args.dtype).context("dtype must be f32 or bf16")?.resolve(device);
    let model = ModelSpec {
        weights: args.weights.clone(),
        family: family.as_str().into(),
        dtype: kind_name(kind).into(),
        threads: args.threads,
        device: args.device.clone(),
        cpu_winograd: args.cpu_winograd,
    };
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("latent.safetensors");
    let (latent_shape, request) = {
        let vae = load_vae(&args.weights, family, kind, Device::Cpu)?;
        let memory = MemoryModel::for_vae(&vae, kind, device).context("no calibrated memory model for this family (run `vaebox calibrate`)")?;
        let video = synthetic_video(args.frames, args.height, args.width);
        let latent = tch::no_grad(|| vae.encoder().push(&video))?.context("the clip completes no latent frame")?;
        Tensor::write_safetensors(&[("input", latent.to_kind(Kind::Float))], &input)?;
        let (_, _, frames, height, width) = latent.size5()?;
        let request = PlanRequest {
            op: TiledOp::Decode,
            latent_frames: frames,
            latent_height: height,
            latent_width: width,
            spatial_factor: vae.spatial_factor(),
            temporal_factor: vae.temporal_factor(),
            budget_bytes: u64::MAX / 4,
            max_latent_frames_per_chunk: args.max_latent_frames_per_chunk,
            memory,
            // The bench measures tilings; its child runs push whole chunks.
            frame_by_frame: false,
        };
        ([frames, height, width], request)
    };
    let untiled = plan(&request);
    let mut rows = vec![Row { label: "untiled".into(), budget_bytes: None, row_split: None, plan: untiled.clone(), output: dir.path().join("out-untiled.safetensors"), runs: Vec::new() }];
    for (i, budget) in parse_budgets(&args.budgets)?.into_iter().enumerate() {
        let (label, bytes) = match budget {
            Budget::Share(share) => (format!("{:.0}%", share * 100.0), (untiled.estimated_peak_bytes as f64 * share) as u64),
            Budget::Mib(mib) => (format!("{mib:.0} MiB"), (mib * 1048576.0) as u64),
        };
        let chosen = plan(&PlanRequest { budget_bytes: bytes, ..request.clone() });
        rows.push(Row { label, budget_bytes: Some(bytes), row_split: None, plan: chosen, output: dir.path().join(format!("out-{i}.safetensors")), runs: Vec::new() });
    }
    for (i, mib) in super::calibrate::parse_list(&args.row_split_bands, |s| s.trim().parse::<f64>().ok())?.into_iter().enumerate() {
        let row_split = Some(RowSplit { max_band_bytes: (mib * 1048576.0) as i64 });
        let output = dir.path().join(format!("out-rows-{i}.safetensors"));
        rows.push(Row { label: format!("row bands ≤ {mib} MiB"), budget_bytes: None, row_split, plan: untiled.clone(), output, runs: Vec::new() });
    }

    let runner = ChildRunner::current()?;
    let load_before = load_average();
    for round in 0..args.repeats.max(1) {
        for row in &mut rows {
            // Outputs are compared once; later rounds only time and measure.
            let output = (round == 0).then(|| row.output.clone());
            let run = runner.run(&decode_spec_split(&model, &input, latent_shape, &row.plan, output, row.row_split))?;
            eprintln!("round {}: {} ({} tiles): peak {:.1} MiB, {:.2} s", round + 1, row.label, run.tile_count, run.peak_bytes / 1048576.0, run.seconds);
            row.runs.push(run);
        }
    }
    let load_after = load_average();
    print_table(args, latent_shape, &rows, (load_before, load_after))
}

fn print_table(args: &TilingBenchArgs, [frames, height, width]: [i64; 3], rows: &[Row], load: (Option<f64>, Option<f64>)) -> anyhow::Result<()> {
    let read = |path: &Path| -> anyhow::Result<Tensor> {
        let tensors = Tensor::read_safetensors(path)?;
        Ok(tensors.into_iter().next().context("empty output file")?.1)
    };
    let reference = read(&rows[0].output)?;
    let untiled_seconds: Vec<f64> = rows[0].runs.iter().map(|r| r.seconds).collect();
    let show = |l: Option<f64>| l.map_or("?".into(), |l| format!("{l:.2}"));
    println!(
        "bench tiling: decode {} frames {}×{} ({frames} latent frames of {height}×{width}), {} {} on {}, {} threads, {} rounds (medians), load {} → {}",
        args.frames,
        args.height,
        args.width,
        args.family,
        args.dtype,
        args.device,
        args.threads,
        args.repeats.max(1),
        show(load.0),
        show(load.1)
    );
    println!();
    println!("| budget | latent frames/push | tiles (latent h×w, overlap) | estimate MiB | peak MiB (min–max) | peak / budget | time s (min–max) | cells computed vs untiled | time vs untiled | error max | error mean |");
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    // The untiled run computes each cell of the frame once; overlapping tiles compute shared cells twice.
    let frame_pixels = rows[0].runs[0].covered_pixels as f64;
    for row in rows {
        let mut peaks: Vec<f64> = row.runs.iter().map(|r| r.peak_bytes / 1048576.0).collect();
        let (low, high) = range(&peaks);
        let peak = median(&mut peaks);
        let mut seconds: Vec<f64> = row.runs.iter().map(|r| r.seconds).collect();
        let (fastest, slowest) = range(&seconds);
        // Paired per round, so a load spike during one round does not read as a cost of tiling.
        let mut ratios: Vec<f64> = row.runs.iter().zip(&untiled_seconds).map(|(r, u)| r.seconds / u - 1.0).collect();
        let error = (read(&row.output)? - &reference).abs();
        let order = if row.plan.tile_major { ", tile-major" } else { "" };
        let tiles = row.plan.spatial.map_or("none".to_string(), |t| format!("{}×{}, {} ({} tiles{order})", t.tile_height_latent, t.tile_width_latent, t.overlap_latent, row.runs[0].tile_count));
        let budget = match (row.budget_bytes, row.row_split) {
            (Some(b), _) => format!("{} = {:.0} MiB", row.label, b as f64 / 1048576.0),
            (None, Some(_)) => format!("— ({})", row.label),
            (None, None) => "—".to_string(),
        };
        let over = row.budget_bytes.map_or("—".to_string(), |b| format!("{:.2}", peak * 1048576.0 / b as f64));
        println!(
            "| {budget} | {} | {tiles} | {:.0}{} | {peak:.1} ({low:.1}–{high:.1}) | {over} | {:.2} ({fastest:.2}–{slowest:.2}) | {:+.1}% | {:+.1}% | {:.2e} | {:.2e} |",
            row.plan.latent_frames_per_chunk,
            row.plan.estimated_peak_bytes as f64 / 1048576.0,
            if row.plan.fits { "" } else { " (does not fit)" },
            median(&mut seconds),
            (row.runs[0].covered_pixels as f64 / frame_pixels - 1.0) * 100.0,
            median(&mut ratios) * 100.0,
            error.max().double_value(&[]),
            error.mean(Kind::Double).double_value(&[]),
        );
    }
    Ok(())
}
