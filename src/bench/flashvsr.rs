//! `vaebox bench flashvsr`: FlashVSR-Tiny at full size with random weights in the released layouts (the
//! 1.3 B Wan 2.1 DiT, the 288 M LQ projection, the 45 M TCDecoder, from the reference's key lists) on a
//! synthetic clip at the output size, after a one-step warm-up, streamed a DiT step at a time as a job runs it: the LQ frames each
//! step reads sliced out of the clip, each step's frames made into bytes and dropped. Reports the first
//! step (21 frames) and the later ones (8 frames each) per output frame, and the run's peak memory above
//! the loaded models on the clip and on one four times as long: the streaming's memory should not grow
//! with the clip. `--beside-seedvr2` then runs `bench restore` (SeedVR2 3B at the released width, the
//! released VAE layout) on the same clip size in the same process.
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use tch::{Device, Kind, Tensor};

use super::dtype::BenchDtype;
use super::taehv::key_list;
use super::restore::{PeakMeter, RestoreBenchArgs, VaeSize, VariantArg};
use crate::device::HostAllocator;
use crate::models::flashvsr::folder::{DIT_FILE, LQ_PROJ_FILE, TC_DECODER_FILE};
use crate::models::flashvsr::frames::FramePlan;
use crate::models::flashvsr::pipeline::{Decoder, FlashVsrParts};
use crate::models::flashvsr::schedule::Step;
use crate::models::flashvsr::{to_u8_thwc, FlashVsrVersion, LqProjLoadOptions, LqProjection};
use crate::models::taehv::{TcDecoder, TcDecoderLoadOptions};
use crate::models::wan_dit::{AttentionMode, StreamSettings, WanDit, WanDitLoadOptions};

#[derive(Debug, Clone, clap::Args)]
pub struct FlashVsrBenchArgs {
    /// Output frames of the clip; the memory row runs one four times as long.
    #[arg(long, default_value_t = 41)]
    pub frames: u64,
    /// Output size in pixels (multiples of 128, the model's).
    #[arg(long, default_value_t = 256)]
    pub height: i64,
    #[arg(long, default_value_t = 256)]
    pub width: i64,
    /// f32 or bf16.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Seed of the random weights, clip and noise.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The folder of the key lists (`full_keys_dit.txt`, `full_keys_LQ_proj_in.txt`, `full_keys_TCDecoder.txt`).
    #[arg(long)]
    pub keys: Option<PathBuf>,
    /// Without the clip four times as long (its memory row).
    #[arg(long)]
    pub no_long_clip: bool,
    /// Comma list of the attention paths to run the clip with, side by side: `block-sparse` (a token mask over
    /// every key, what jobs run), `block-sparse-gathered` (the same result from the active key blocks alone),
    /// `dense` (every key: another result). The long clip runs with the first.
    #[arg(long, default_value = "block-sparse")]
    pub attention: String,
    /// Where the models run: cpu, cuda or cuda:N (the GPU kit's `flashvsr` step). On CUDA the peak is the
    /// device's allocated bytes.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Also write the random weights as a model folder (the authors' file names, safetensors inside; the
    /// kit's job step adds `posi_prompt.pth`), for a job on the same weights.
    #[arg(long)]
    pub save_folder: Option<PathBuf>,
    /// Then SeedVR2 3B (`bench restore`, width 2560, 20 heads, the released VAE layout) on the same clip size,
    /// with this many of its 32 blocks (its DiT seconds ×32/N are the released model's: every block does the
    /// same work on the same tokens).
    #[arg(long)]
    pub beside_seedvr2: Option<i64>,
}

/// Random weights of a listed layout, made in `kind`: matrices and kernels scaled by 1/√fan_in (activations
/// stay in range through 30 blocks), vectors small.
fn random_weights(keys: &[(String, Vec<i64>)], kind: Kind) -> Vec<(String, Tensor)> {
    let tensor = |shape: &[i64]| {
        let fan_in: i64 = shape.iter().skip(1).product::<i64>().max(1);
        let scale = if shape.len() == 1 { 0.02 } else { 1.0 / (fan_in as f64).sqrt() };
        (Tensor::rand(shape, (kind, Device::Cpu)) * 2.0 - 1.0) * scale
    };
    keys.iter().map(|(name, shape)| (name.clone(), tensor(shape))).collect()
}

struct Models {
    dit: WanDit,
    lq: LqProjection,
    decoder: TcDecoder,
    load_s: f64,
}

fn load(args: &FlashVsrBenchArgs, kind: Kind, device: Device) -> anyhow::Result<Models> {
    let keys = args.keys.clone().unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/flashvsr"));
    let started = Instant::now();
    tch::manual_seed(args.seed as i64);
    let made = |file: &str, saved_as: &str| -> anyhow::Result<(PathBuf, Vec<(String, Tensor)>)> {
        let path = keys.join(file);
        let tensors = random_weights(&key_list(&path)?, kind);
        if let Some(folder) = &args.save_folder {
            std::fs::create_dir_all(folder).with_context(|| format!("making {}", folder.display()))?;
            Tensor::write_safetensors(&tensors, folder.join(saved_as)).with_context(|| format!("writing {saved_as}"))?;
        }
        Ok((path.clone(), tensors))
    };
    let (path, tensors) = made("full_keys_dit.txt", DIT_FILE)?;
    let dit = WanDit::from_tensors(&path, tensors, None, &WanDitLoadOptions { device, kind })?;
    let (path, tensors) = made("full_keys_LQ_proj_in.txt", LQ_PROJ_FILE)?;
    let lq = LqProjection::from_tensors(&path, tensors, &LqProjLoadOptions { device, kind, version: FlashVsrVersion::V1_1 })?;
    let (path, tensors) = made("full_keys_TCDecoder.txt", TC_DECODER_FILE)?;
    let decoder = TcDecoder::from_tensors(&path, tensors, &TcDecoderLoadOptions { device, kind })?;
    Ok(Models { dit, lq, decoder, load_s: started.elapsed().as_secs_f64() })
}

/// One streamed run's figures.
struct RunFigures {
    attention: &'static str,
    frames: u64,
    first_step_s: f64,
    /// Seconds of each later step (8 frames each).
    later_steps_s: Vec<f64>,
    peak_growth: u64,
}

impl RunFigures {
    fn later_s_per_frame(&self) -> f64 {
        self.later_steps_s.iter().sum::<f64>() / (8 * self.later_steps_s.len()).max(1) as f64
    }

    fn total_s(&self) -> f64 {
        self.first_step_s + self.later_steps_s.iter().sum::<f64>()
    }
}

/// Streams a clip of `frames` output frames through the models as a job does.
fn stream(args: &FlashVsrBenchArgs, models: &Models, kind: Kind, device: Device, frames: u64, attention: (&'static str, AttentionMode)) -> anyhow::Result<RunFigures> {
    let plan = FramePlan::keeping_every_frame(frames);
    let (height, width) = (args.height, args.width);
    let clip = super::tiling::synthetic_video(plan.padded as i64, height, width).to_kind(kind).to_device(device);
    tch::manual_seed(args.seed as i64 + 1);
    let noise = Tensor::randn([1, 16, plan.latent_frames() as i64, height / 8, width / 8], (Kind::Float, Device::Cpu)).to_kind(kind).to_device(device);
    tch::manual_seed(args.seed as i64 + 2);
    let context = Tensor::randn([1, 512, 4096], (Kind::Float, Device::Cpu)).to_kind(kind).to_device(device);
    let parts = FlashVsrParts { dit: &models.dit, lq: &models.lq, decoder: Decoder::Tiny { model: &models.decoder, parallel: true } };
    let meter = PeakMeter(device);
    let before = meter.start();
    let (mut first_step_s, mut later_steps_s) = (0.0, Vec::new());
    tch::no_grad(|| -> anyhow::Result<()> {
        let mut run = parts.start(&context, StreamSettings { attention: attention.1, ..StreamSettings::official([height, width]) })?;
        for index in 0..plan.steps() as i64 {
            let step = Step::new(index);
            // The frames a job's window holds for this step.
            let reads = step.lq_reads();
            let (first, window) = (reads.start, clip.narrow(2, reads.start, reads.end - reads.start).contiguous());
            let started = Instant::now();
            let out = run.step_from(&window, first, &noise.narrow(2, step.latents.start, step.latents.end - step.latents.start))?;
            let bytes = to_u8_thwc(&out)?.to_device(Device::Cpu);
            let seconds = started.elapsed().as_secs_f64();
            drop(bytes);
            eprintln!("{} {frames} frames: step {}/{} in {seconds:.2} s", attention.0, index + 1, plan.steps());
            if index == 0 {
                first_step_s = seconds;
            } else {
                later_steps_s.push(seconds);
            }
        }
        Ok(())
    })?;
    let peak_growth = meter.growth_since(before);
    Ok(RunFigures { attention: attention.0, frames, first_step_s, later_steps_s, peak_growth })
}

pub fn run(args: &FlashVsrBenchArgs) -> anyhow::Result<()> {
    if args.height % 128 != 0 || args.width % 128 != 0 || args.height == 0 || args.width == 0 {
        bail!("--height and --width must be positive multiples of 128, got {}×{}", args.height, args.width);
    }
    let dtype = BenchDtype::parse(&args.dtype).with_context(|| format!("unknown dtype `{}` (f32, bf16)", args.dtype))?;
    tch::set_num_threads(args.threads as i32);
    let device = super::tiling::usable_device(&args.device)?;
    if !device.is_cuda() {
        HostAllocator::Bounded.apply();
    }
    let kind = dtype.kind();
    eprintln!("building FlashVSR-Tiny at full size ({}), random weights", dtype.name());
    let models = load(args, kind, device)?;
    let weight_mib = (models.dit.weight_bytes() + models.lq.held_bytes().weights + models.decoder.held_bytes().weights) as f64 / (1 << 20) as f64;
    // The first step a process runs also sets up its kernels (oneDNN primitives, cuDNN plans): a job's
    // model is warm from the jobs before it, so the figures are taken after one step's warm-up.
    let attentions = args.attention.split(',').map(|name| attention_mode(name.trim())).collect::<anyhow::Result<Vec<_>>>()?;
    eprintln!("warm-up: one step");
    stream(args, &models, kind, device, 1, attentions[0])?;
    let mut runs = Vec::new();
    for attention in &attentions {
        runs.push(stream(args, &models, kind, device, args.frames, *attention)?);
    }
    if !args.no_long_clip {
        runs.push(stream(args, &models, kind, device, 4 * args.frames, attentions[0])?);
    }
    println!("\nFlashVSR-Tiny, full size, random weights, {}, {} ({} threads), output {}×{}; models built in {:.1} s, {weight_mib:.0} MiB", dtype.name(), args.device, args.threads, args.width, args.height, models.load_s);
    println!("| attention | frames | steps | first step (21 frames) s | later steps s/frame | whole run s/frame | frames/s | peak MiB above the models |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for run in &runs {
        let per_frame = run.total_s() / run.frames as f64;
        println!(
            "| {} | {} | {} | {:.2} | {:.3} | {:.3} | {:.3} | {:.0} |",
            run.attention,
            run.frames,
            1 + run.later_steps_s.len(),
            run.first_step_s,
            run.later_s_per_frame(),
            per_frame,
            1.0 / per_frame,
            run.peak_growth as f64 / (1 << 20) as f64
        );
    }
    if let (false, Some(short), Some(long)) = (args.no_long_clip, runs.first(), runs.last()) {
        println!("memory at 4× the frames: ×{:.3}", long.peak_growth as f64 / short.peak_growth.max(1) as f64);
    }
    let json = serde_json::json!({
        "bench": "flashvsr", "dtype": dtype.name(), "device": args.device, "threads": args.threads, "height": args.height, "width": args.width,
        "runs": runs.iter().map(|r| serde_json::json!({"attention": r.attention, "frames": r.frames, "first_step_s": r.first_step_s, "later_s_per_frame": r.later_s_per_frame(), "total_s": r.total_s(), "peak_growth_bytes": r.peak_growth})).collect::<Vec<_>>(),
    });
    println!("{json}");
    drop(models);
    if let Some(blocks) = args.beside_seedvr2 {
        println!("\nSeedVR2 3B on the same clip size ({} frames of {}×{}), {blocks} of its 32 blocks (its DiT seconds ×{:.2} for all 32):", seedvr2_frames(args.frames), args.width, args.height, 32.0 / blocks as f64);
        super::restore::run(&seedvr2_args(args, blocks))?;
    }
    Ok(())
}

fn attention_mode(name: &str) -> anyhow::Result<(&'static str, AttentionMode)> {
    match name {
        "block-sparse" => Ok(("block-sparse", AttentionMode::BlockSparse)),
        "block-sparse-gathered" => Ok(("block-sparse-gathered", AttentionMode::BlockSparseGathered)),
        "dense" => Ok(("dense", AttentionMode::Dense)),
        other => bail!("unknown attention `{other}` (block-sparse, block-sparse-gathered, dense)"),
    }
}

/// SeedVR2's clips are 4n + 1 frames: the FlashVSR clip's count, rounded up.
fn seedvr2_frames(frames: u64) -> i64 {
    ((frames as i64 - 1 + 3) / 4) * 4 + 1
}

fn seedvr2_args(args: &FlashVsrBenchArgs, blocks: i64) -> RestoreBenchArgs {
    RestoreBenchArgs {
        variant: VariantArg::ThreeB,
        dim: 2560,
        heads: 20,
        blocks,
        // The released 3B: 10 of its 32 blocks keep separate text weights.
        mm_layers: Some((10 * blocks + 16) / 32),
        frames: seedvr2_frames(args.frames),
        height: args.height,
        width: args.width,
        text_len: 58,
        dtypes: args.dtype.clone(),
        vae: VaeSize::Full,
        repeats: 1,
        threads: args.threads,
        seed: args.seed,
        breakdown: false,
        allocator: HostAllocator::Bounded,
        peak_seconds: 2.0,
        peak_size: 2048,
        vae_keys: None,
        small_vae: None,
        device: args.device.clone(),
        block_swap: false,
    }
}
