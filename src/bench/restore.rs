//! `vaebox bench restore`: SeedVR2 one-step restoration (VAE encode, one DiT call, decode, colour fix)
//! on a synthetic clip, with a DiT of random weights in the real key layout at a chosen width and a
//! VAE that is the released layout (random weights) or the small reference one. Per dtype, after a
//! warm-up: seconds per output frame of each stage, the DiT's GFLOP/s (FLOPs counted analytically)
//! against a matmul peak measured in-process at the same dtype, the DiT's weight bytes and each run's
//! peak host memory (RSS high-water growth). Prints a table and one JSON line.
mod breakdown;
mod flops;
mod layout;

use super::dtype::BenchDtype;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::json;
use tch::{Device, Kind, Tensor};

pub use flops::{AttentionOp, DitWork, LinearOp};
pub use layout::{DitShape, TXT_IN_DIM};

use super::peak::matmul_gflops;
use crate::device::{peak_host_bytes, reset_peak_host_bytes, HostAllocator};
use crate::stats::median;
use crate::models::restore::colorfix::ColorFix;
use crate::models::restore::noise_augment::NoiseScales;
use crate::models::restore::one_step::{restore, Noise, RestoreModels, RestoreStep, StageSeconds, WholeBatches};
use crate::models::seedvr2::{SeedVr2LoadOptions, SeedVr2Vae};
use crate::models::seedvr2_dit::config::PATCH;
use crate::models::seedvr2_dit::{BlockPlacement, DitLoadOptions, DitVariant, SeedVr2Dit};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VariantArg {
    #[value(name = "3b")]
    ThreeB,
    #[value(name = "7b")]
    SevenB,
}

impl VariantArg {
    fn variant(self) -> DitVariant {
        match self {
            VariantArg::ThreeB => DitVariant::ThreeB,
            VariantArg::SevenB => DitVariant::SevenB,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VaeSize {
    /// The released layout (`full_keys.txt`, ≈250M parameters) with random weights.
    Full,
    /// The reference's small VAE (channels 32, 64, 64, 64), loaded from its file.
    Small,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RestoreBenchArgs {
    /// DiT structure: 3b (SwiGLU, shared `.all.` blocks from --mm-layers on, text RoPE) or 7b (GELU, separate streams).
    #[arg(long, value_enum, default_value = "3b")]
    pub variant: VariantArg,
    /// DiT width (the released models: 2560 / 3072).
    #[arg(long, default_value_t = 1024)]
    pub dim: i64,
    /// Attention heads; head_dim = dim / heads (the released models: 128).
    #[arg(long, default_value_t = 8)]
    pub heads: i64,
    /// Transformer blocks (the released models: 32 / 36); windows alternate regular and shifted.
    #[arg(long, default_value_t = 4)]
    pub blocks: i64,
    /// 3B: blocks with separate video/text weights (default: half of --blocks; released 10 of 32).
    #[arg(long)]
    pub mm_layers: Option<i64>,
    /// Frames of the clip (4n + 1).
    #[arg(long, default_value_t = 5)]
    pub frames: i64,
    /// Output size in pixels (multiples of 16); the input is given at this size, as after the pipeline's resize.
    #[arg(long, default_value_t = 256)]
    pub height: i64,
    #[arg(long, default_value_t = 256)]
    pub width: i64,
    /// Text tokens (the shipped `pos_emb` has 58).
    #[arg(long, default_value_t = 58)]
    pub text_len: i64,
    /// Comma list of f32, bf16.
    #[arg(long, default_value = "f32,bf16")]
    pub dtypes: String,
    #[arg(long, value_enum, default_value = "small")]
    pub vae: VaeSize,
    /// Timed runs per dtype after one warm-up; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Seed of the random weights, clip, text and noise.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also time the DiT's parts separately (linears, attention kernels, the ops between them).
    #[arg(long)]
    pub breakdown: bool,
    /// Host allocator: `bounded` (the server's default: tensors of 64 KiB and more in their own
    /// mappings, so RSS follows live tensors) or `fast` (glibc's default).
    #[arg(long, default_value = "bounded", value_parser = parse_allocator)]
    pub allocator: HostAllocator,
    /// Seconds per dtype of the matmul-peak measurement (run before and after; the better is used).
    #[arg(long, default_value_t = 2.0)]
    pub peak_seconds: f64,
    /// Side of the square matmul of the peak measurement.
    #[arg(long, default_value_t = 2048)]
    pub peak_size: i64,
    /// --vae full: the released key list (default ../shared/reference/seedvr2/full_keys.txt).
    #[arg(long)]
    pub vae_keys: Option<PathBuf>,
    /// --vae small: the weights (default ../shared/reference/seedvr2/small_weights.safetensors).
    #[arg(long)]
    pub small_vae: Option<PathBuf>,
    /// Where the models run: cpu, cuda or cuda:N. On CUDA the peak is the device's allocated bytes.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// The DiT's blocks kept on the host and moved to the device one at a time (CUDA).
    #[arg(long)]
    pub block_swap: bool,
}

fn parse_allocator(s: &str) -> Result<HostAllocator, String> {
    HostAllocator::parse(s).ok_or_else(|| "expected bounded or fast".to_string())
}

fn reference_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference").join(relative)
}

/// What the bench runs, checked once from the arguments.
struct Plan {
    shape: DitShape,
    dtypes: Vec<BenchDtype>,
    /// `(T, H, W)` of the latent the DiT sees.
    latent_grid: [i64; 3],
}

impl Plan {
    fn of(args: &RestoreBenchArgs) -> anyhow::Result<Self> {
        if args.frames < 1 || (args.frames - 1) % 4 != 0 {
            bail!("--frames must be 4n + 1, got {}", args.frames);
        }
        if args.height < 16 || args.width < 16 || args.height % 16 != 0 || args.width % 16 != 0 {
            bail!("--height and --width must be positive multiples of 16, got {}×{}", args.height, args.width);
        }
        if args.heads < 1 || args.dim % args.heads != 0 {
            bail!("--dim {} is not a multiple of --heads {}", args.dim, args.heads);
        }
        if args.blocks < 1 || args.repeats == 0 || args.threads == 0 || args.text_len < 1 {
            bail!("--blocks, --repeats, --threads and --text-len must be at least 1");
        }
        let variant = args.variant.variant();
        let mm_layers = match variant {
            DitVariant::ThreeB => args.mm_layers.unwrap_or(args.blocks / 2).clamp(0, args.blocks),
            DitVariant::SevenB => args.blocks,
        };
        let shape = DitShape { variant, dim: args.dim, heads: args.heads, head_dim: args.dim / args.heads, blocks: args.blocks, mm_layers };
        if 6 * shape.rope_freqs().len() as i64 > shape.head_dim || shape.rope_freqs().is_empty() {
            bail!("head_dim {} leaves no room for the RoPE channels", shape.head_dim);
        }
        let dtypes = args.dtypes.split(',').map(str::trim).filter(|s| !s.is_empty());
        let dtypes = dtypes
            .map(|s| BenchDtype::parse(s).with_context(|| format!("unknown dtype `{s}` (f32, bf16)")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        if dtypes.is_empty() {
            bail!("no dtype given");
        }
        // The SeedVR2 VAE: 8× spatially, 4× in time with the first frame on its own.
        let latent_grid = [1 + (args.frames - 1) / 4, args.height / 8, args.width / 8];
        Ok(Self { shape, dtypes, latent_grid })
    }
}

/// One dtype's measurements.
struct Row {
    dtype: BenchDtype,
    runs: Vec<StageSeconds>,
    /// RSS high-water growth of each timed run.
    peak_growth: Vec<u64>,
    /// The same for the warm-up, the first run on fresh models: with glibc's default allocator the
    /// timed runs reuse the heap it grew, and only this one shows the working memory.
    warm_up_growth: u64,
    weight_bytes: u64,
    vae_weight_bytes: u64,
    breakdown: Option<breakdown::Breakdown>,
}

impl Row {
    fn median(&self, stage: impl Fn(&StageSeconds) -> f64) -> f64 {
        median(self.runs.iter().map(stage).collect())
    }
}

pub fn run(args: &RestoreBenchArgs) -> anyhow::Result<()> {
    let plan = Plan::of(args)?;
    tch::set_num_threads(args.threads as i32);
    let device = super::tiling::usable_device(&args.device)?;
    if !device.is_cuda() {
        args.allocator.apply();
    }
    crate::device::cuda::set_tf32(false);
    let load_before = load_average();
    let peak_budget = Duration::from_secs_f64(args.peak_seconds);
    eprintln!("measuring the matmul peak at {} threads on {}", args.threads, args.device);
    let measure_peak = |dtype: &BenchDtype| matmul_gflops(dtype.kind(), args.peak_size, peak_budget, device);
    let peak_before: Vec<f64> = plan.dtypes.iter().map(measure_peak).collect();
    // Counted from the loaded model's own configuration (windows included); the same at every dtype.
    let mut work = None;
    let mut rows = Vec::new();
    for &dtype in &plan.dtypes {
        let (row, dit_work) = bench_dtype(args, &plan, dtype, device)?;
        work.get_or_insert(dit_work);
        rows.push(row);
    }
    let work = work.expect("at least one dtype");
    // Other load only ever lowers a peak, so the better of two measurements is the fairer one.
    let peak: Vec<f64> = plan.dtypes.iter().zip(&peak_before).map(|(d, before)| before.max(measure_peak(d))).collect();
    let load = (load_before, load_average());
    print_report(args, &plan, &work, &rows, &peak, load);
    Ok(())
}

/// The peak memory of one run: RSS high-water growth on the CPU, allocated bytes on CUDA.
pub(super) struct PeakMeter(pub(super) Device);

impl PeakMeter {
    pub(super) fn start(&self) -> u64 {
        if self.0.is_cuda() {
            crate::device::cuda::reset_peak(self.0);
            return crate::device::cuda::peak_allocated_bytes(self.0).unwrap_or(0);
        }
        reset_peak_host_bytes();
        peak_host_bytes().unwrap_or(0)
    }

    pub(super) fn growth_since(&self, before: u64) -> u64 {
        let now = if self.0.is_cuda() { crate::device::cuda::peak_allocated_bytes(self.0) } else { peak_host_bytes() };
        now.unwrap_or(0).saturating_sub(before)
    }
}

fn bench_dtype(args: &RestoreBenchArgs, plan: &Plan, dtype: BenchDtype, device: Device) -> anyhow::Result<(Row, DitWork)> {
    let kind = dtype.kind();
    eprintln!("{}: building the DiT ({:?}) and the {:?} VAE", dtype.name(), plan.shape, args.vae);
    let tensors = plan.shape.random_tensors(args.seed as i64);
    let source = PathBuf::from(format!("random-{}-dim{}", plan.shape.variant.as_str(), plan.shape.dim));
    let placement = if args.block_swap { BlockPlacement::Swapped } else { BlockPlacement::Resident };
    let dit = SeedVr2Dit::from_tensors(&source, tensors, None, &DitLoadOptions { device, kind, placement, ..DitLoadOptions::default() })?;
    let vae_opts = SeedVr2LoadOptions { device, kind };
    let vae = match args.vae {
        VaeSize::Small => {
            let path = args.small_vae.clone().unwrap_or_else(|| reference_file("seedvr2/small_weights.safetensors"));
            SeedVr2Vae::load(&path, &vae_opts)?
        }
        VaeSize::Full => {
            let keys = args.vae_keys.clone().unwrap_or_else(|| reference_file("seedvr2/full_keys.txt"));
            SeedVr2Vae::from_tensors(&keys.display().to_string(), super::seedvr2::full_size_tensors(&keys, args.seed)?, &vae_opts)?
        }
    };
    let vae_weight_bytes = vae_parameter_bytes(args, kind)?;
    tch::manual_seed(args.seed as i64 + 1);
    let text = Tensor::randn([args.text_len, TXT_IN_DIM], (Kind::Float, Device::Cpu)).to_device(device).to_kind(kind);
    let clip = super::tiling::synthetic_video(args.frames, args.height, args.width).squeeze_dim(0);
    let models = RestoreModels { dit: &dit, text: &text };
    let work = DitWork::of(dit.config(), plan.latent_grid, args.text_len);
    let run = || {
        let step = RestoreStep {
            input: &clip,
            keep: args.frames,
            keep_size: None,
            color_fix: ColorFix::Wavelet,
            noise: Noise::Seeded(args.seed as i64 + 2),
            noise_scales: NoiseScales::default(),
        };
        restore(&mut WholeBatches(&vae), &models, step)
    };
    eprintln!("{}: warm-up", dtype.name());
    let meter = PeakMeter(device);
    let before = meter.start();
    let warm = run()?;
    let warm_up_growth = meter.growth_since(before);
    if warm.frames.size() != [args.frames, 3, args.height, args.width] {
        bail!("restored frames have shape {:?}", warm.frames.size());
    }
    drop(warm);
    let (mut runs, mut peak_growth) = (Vec::new(), Vec::new());
    for round in 1..=args.repeats {
        let before = meter.start();
        let out = run()?;
        peak_growth.push(meter.growth_since(before));
        let s = out.seconds;
        eprintln!(
            "{} run {round}/{}: encode {:.2} s, DiT {:.2} s, decode {:.2} s, colour fix {:.3} s",
            dtype.name(),
            args.repeats,
            s.encode,
            s.dit,
            s.decode,
            s.color_fix
        );
        runs.push(s);
    }
    let breakdown = if args.breakdown {
        eprintln!("{}: per-op breakdown of the DiT", dtype.name());
        let bounded = args.allocator == HostAllocator::Bounded && std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none();
        Some(breakdown::measure(&dit, &work, plan.latent_grid, &text, args.seed as i64, bounded))
    } else {
        None
    };
    Ok((Row { dtype, runs, peak_growth, warm_up_growth, weight_bytes: dit.weight_bytes(), vae_weight_bytes, breakdown }, work))
}

/// The VAE's parameters at `kind` (the model does not count its own bytes).
fn vae_parameter_bytes(args: &RestoreBenchArgs, kind: Kind) -> anyhow::Result<u64> {
    let elements: i64 = match args.vae {
        VaeSize::Small => {
            let path = args.small_vae.clone().unwrap_or_else(|| reference_file("seedvr2/small_weights.safetensors"));
            Tensor::read_safetensors(&path)?.iter().map(|(_, t)| t.numel() as i64).sum()
        }
        VaeSize::Full => {
            let keys = args.vae_keys.clone().unwrap_or_else(|| reference_file("seedvr2/full_keys.txt"));
            let text = std::fs::read_to_string(&keys).with_context(|| format!("reading {}", keys.display()))?;
            text.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split('\t').nth(2)?.trim().parse::<i64>().ok()).sum()
        }
    };
    Ok(elements as u64 * kind.elt_size_in_bytes() as u64)
}

/// The 1-minute load average, so a reader can tell a quiet machine from a busy one.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

const MIB: f64 = 1024.0 * 1024.0;

fn print_report(args: &RestoreBenchArgs, plan: &Plan, work: &DitWork, rows: &[Row], peak: &[f64], load: (Option<f64>, Option<f64>)) {
    let shape = &plan.shape;
    let [t, h, w] = plan.latent_grid;
    let patched = [t / PATCH[0], h / PATCH[1], w / PATCH[2]];
    let vid_tokens: i64 = patched.iter().product();
    let show_load = |l: Option<f64>| l.map_or("?".into(), |l| format!("{l:.2}"));
    let window_summary: Vec<String> = [false, true]
        .iter()
        .filter_map(|&shifted| {
            let ops: Vec<&AttentionOp> = work.attention.iter().filter(|op| op.block == i64::from(shifted)).collect();
            (!ops.is_empty()).then(|| {
                let groups: Vec<String> = ops.iter().map(|op| format!("{}×{}", op.windows, op.window_tokens)).collect();
                format!("{} {}", if shifted { "shifted" } else { "regular" }, groups.join(" + "))
            })
        })
        .collect();
    println!();
    println!(
        "Restore bench: SeedVR2 {} DiT (random weights) dim {} | {} heads × {} | {} blocks ({} separate) | MLP {} | {:?} VAE | device {}{} | {} threads | allocator {}",
        shape.variant.as_str(),
        shape.dim,
        shape.heads,
        shape.head_dim,
        shape.blocks,
        shape.mm_layers,
        shape.mlp_hidden(),
        args.vae,
        args.device,
        if args.block_swap { ", blocks swapped" } else { "" },
        args.threads,
        match args.allocator {
            HostAllocator::Bounded => "bounded",
            HostAllocator::Fast => "fast",
        },
    );
    println!(
        "clip {} frames {}×{} → latent {t}×{h}×{w} → {vid_tokens} video tokens ({}×{}×{}) + {} text tokens | windows (tokens each): {} | {} timed runs after 1 warm-up, medians",
        args.frames,
        args.height,
        args.width,
        patched[0],
        patched[1],
        patched[2],
        args.text_len,
        window_summary.join(", "),
        args.repeats
    );
    let peaks: Vec<String> = plan.dtypes.iter().zip(peak).map(|(d, p)| format!("{} {p:.0} GFLOP/s", d.name())).collect();
    println!(
        "DiT work: {:.1} GFLOP ({:.1} in linears, {:.2} in attention) | matmul peak ({}² mm, best of before/after): {} | load average before {}, after {}",
        work.total_flops() / 1e9,
        work.linear_flops() / 1e9,
        work.attention_flops() / 1e9,
        args.peak_size,
        peaks.join(", "),
        show_load(load.0),
        show_load(load.1)
    );
    println!();
    println!("| dtype | encode s/frame | DiT s/frame | decode s/frame | colour fix s/frame | total s/frame | DiT s median (best) | DiT GFLOP/s (best) | % of matmul peak (best) | DiT weights MiB | VAE weights MiB | peak growth MiB, timed (warm-up): RSS on the CPU, allocated bytes on CUDA |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let frames = args.frames as f64;
    let mut json_rows = Vec::new();
    for (row, &peak) in rows.iter().zip(peak) {
        let dit = row.median(|s| s.dit);
        let best = row.runs.iter().map(|s| s.dit).fold(f64::INFINITY, f64::min);
        let gflops = work.total_flops() / 1e9 / dit;
        let best_gflops = work.total_flops() / 1e9 / best;
        let peak_growth = *row.peak_growth.iter().max().unwrap_or(&0) as f64 / MIB;
        let per_frame = |stage: &dyn Fn(&StageSeconds) -> f64| row.median(stage) / frames;
        println!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.4} | {:.3} | {:.2} ({:.2}) | {:.0} ({:.0}) | {:.0}% ({:.0}%) | {:.0} | {:.1} | {:.0} ({:.0}) |",
            row.dtype.name(),
            per_frame(&|s| s.encode),
            per_frame(&|s| s.dit),
            per_frame(&|s| s.decode),
            per_frame(&|s| s.color_fix),
            per_frame(&|s| s.total()),
            dit,
            best,
            gflops,
            best_gflops,
            100.0 * gflops / peak,
            100.0 * best_gflops / peak,
            row.weight_bytes as f64 / MIB,
            row.vae_weight_bytes as f64 / MIB,
            peak_growth,
            row.warm_up_growth as f64 / MIB
        );
        json_rows.push(json!({
            "dtype": row.dtype.name(),
            "seconds_per_frame": {
                "encode": per_frame(&|s| s.encode),
                "dit": per_frame(&|s| s.dit),
                "decode": per_frame(&|s| s.decode),
                "color_fix": per_frame(&|s| s.color_fix),
                "total": per_frame(&|s| s.total()),
            },
            "dit_seconds_runs": row.runs.iter().map(|s| s.dit).collect::<Vec<_>>(),
            "dit_gflops_per_s": gflops,
            "matmul_peak_gflops_per_s": peak,
            "percent_of_peak": 100.0 * gflops / peak,
            "dit_weight_bytes": row.weight_bytes,
            "vae_weight_bytes": row.vae_weight_bytes,
            "peak_rss_growth_bytes": row.peak_growth,
            "warm_up_peak_rss_growth_bytes": row.warm_up_growth,
            "breakdown": row.breakdown.as_ref().map(breakdown::Breakdown::to_json),
        }));
    }
    for row in rows {
        if let Some(b) = &row.breakdown {
            println!();
            b.print(row.dtype.name());
        }
    }
    println!();
    let summary = json!({
        "bench": "restore",
        "variant": shape.variant.as_str(),
        "dim": shape.dim,
        "heads": shape.heads,
        "head_dim": shape.head_dim,
        "blocks": shape.blocks,
        "mm_layers": shape.mm_layers,
        "mlp_hidden": shape.mlp_hidden(),
        "vae": format!("{:?}", args.vae).to_lowercase(),
        "frames": args.frames,
        "height": args.height,
        "width": args.width,
        "latent_grid": plan.latent_grid,
        "video_tokens": vid_tokens,
        "text_tokens": args.text_len,
        "threads": args.threads,
        "device": args.device,
        "block_swap": args.block_swap,
        "dit_gflop": work.total_flops() / 1e9,
        "dit_linear_gflop": work.linear_flops() / 1e9,
        "dit_attention_gflop": work.attention_flops() / 1e9,
        "load_average": [load.0, load.1],
        "rows": json_rows,
    });
    println!("{summary}");
}
