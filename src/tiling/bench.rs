//! `vaebox bench tiling`: for a few memory budgets, the plan the planner picks, then the decode run
//! with that plan: peak working memory (RSS growth), time, and error against the untiled decode.
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use tch::{Device, Kind, Tensor};

use super::calibrate::{load_vae, measure_peak, parse_family};
use super::memory::{MemoryModel, TiledOp};
use super::planner::{plan, Plan, PlanRequest};
use super::vae_tiles::TiledDecoder;
use crate::device::DtypeChoice;
use crate::models::vae::VideoVae;
use crate::models::ModelError;

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
    #[arg(long, default_value_t = 9)]
    pub frames: i64,
    #[arg(long, default_value_t = 128)]
    pub height: i64,
    #[arg(long, default_value_t = 176)]
    pub width: i64,
    /// Comma list of working-memory budgets in MiB (the defaults suit the small model at 128×176:
    /// whole clip, shorter chunks, tiles).
    #[arg(long, default_value = "1024,200,110")]
    pub budgets_mib: String,
    /// Longest push the planner may choose, in latent frames.
    #[arg(long, default_value_t = 2)]
    pub max_latent_frames_per_chunk: i64,
    #[arg(long, default_value_t = 2)]
    pub threads: i32,
}

/// What one decode run cost.
pub struct RunCost {
    pub output: Tensor,
    pub seconds: f64,
    pub peak_bytes: f64,
}

/// Decodes `latent` with the plan's chunks and tiles (first push one latent frame, as the stream needs).
pub fn decode_with_plan(vae: &VideoVae, latent: &Tensor, plan: &Plan) -> Result<RunCost, ModelError> {
    let started = Instant::now();
    let (output, peak_bytes) = measure_peak(|| {
        tch::no_grad(|| -> Result<Tensor, ModelError> {
            let mut decoder = TiledDecoder::new(vae, plan.spatial);
            let total = latent.size()[2];
            let mut chunks = vec![decoder.push(&latent.narrow(2, 0, 1))?];
            let mut start = 1;
            while start < total {
                let count = plan.latent_frames_per_chunk.min(total - start);
                chunks.push(decoder.push(&latent.narrow(2, start, count))?.to_kind(Kind::Float));
                start += count;
            }
            Ok(Tensor::f_cat(&chunks, 2)?)
        })
    });
    Ok(RunCost { output: output?, seconds: started.elapsed().as_secs_f64(), peak_bytes })
}

/// A smooth moving pattern in [-1, 1], `[1, 3, frames, height, width]`.
pub fn synthetic_video(frames: i64, height: i64, width: i64) -> Tensor {
    let options = (Kind::Float, Device::Cpu);
    let t = Tensor::arange(frames, options).view([1, 1, frames, 1, 1]);
    let y = Tensor::arange(height, options).view([1, 1, 1, height, 1]);
    let x = Tensor::arange(width, options).view([1, 1, 1, 1, width]);
    let phase = Tensor::from_slice(&[0.0f32, 2.0, 4.0]).view([1, 3, 1, 1, 1]);
    let wave = (&x * 0.07 + &y * 0.05 + &t * 0.3 + &phase).sin() * 0.6 + ((&x - &y * 0.5) * 0.031 - &t * 0.2).cos() * 0.3;
    wave.clamp(-1.0, 1.0)
}

pub fn run(args: &TilingBenchArgs) -> anyhow::Result<()> {
    crate::device::init(crate::device::DeviceChoice::Cpu, args.threads);
    let family = parse_family(&args.family)?;
    let kind = DtypeChoice::parse(&args.dtype).context("dtype must be f32 or bf16")?.resolve(Device::Cpu);
    let vae = load_vae(&args.weights, family, kind)?;
    let memory = MemoryModel::for_vae(&vae, kind).context("no calibrated memory model for this family (run `vaebox calibrate`)")?;
    let video = synthetic_video(args.frames, args.height, args.width);
    let latent = tch::no_grad(|| vae.encoder().push(&video))?.context("the clip completes no latent frame")?;
    let (_, _, latent_frames, latent_h, latent_w) = latent.size5()?;
    let request = |budget_bytes: u64| PlanRequest {
        op: TiledOp::Decode,
        latent_frames,
        latent_height: latent_h,
        latent_width: latent_w,
        spatial_factor: vae.spatial_factor(),
        temporal_factor: vae.temporal_factor(),
        budget_bytes,
        max_latent_frames_per_chunk: args.max_latent_frames_per_chunk,
        memory,
    };
    let untiled_plan = plan(&request(u64::MAX / 4));
    let untiled = decode_with_plan(&vae, &latent, &untiled_plan)?;
    println!(
        "decode {}×{}×{} px ({} latent frames of {latent_h}×{latent_w}), {}:",
        args.frames, args.height, args.width, latent_frames, args.dtype
    );
    println!(
        "  untiled, {} latent frames/push: est {:.0} MiB, peak {:.0} MiB, {:.2} s",
        untiled_plan.latent_frames_per_chunk,
        untiled_plan.estimated_peak_bytes as f64 / 1048576.0,
        untiled.peak_bytes / 1048576.0,
        untiled.seconds
    );
    for budget_mib in args.budgets_mib.split(',').filter(|s| !s.trim().is_empty()) {
        let budget_mib: f64 = budget_mib.trim().parse().with_context(|| format!("budget `{budget_mib}`"))?;
        let budget = (budget_mib * 1048576.0) as u64;
        let chosen = plan(&request(budget));
        let run = decode_with_plan(&vae, &latent, &chosen)?;
        let error = (&run.output - &untiled.output).abs();
        let tiles = chosen.spatial.map_or("none".to_string(), |t| format!("{} overlap {} latent", t.tile_latent, t.overlap_latent));
        println!(
            "  budget {budget_mib:6.0} MiB: {} latent frames/push, tiles {tiles:24} est {:6.0} MiB{} | peak {:6.0} MiB ({:+.0}% of budget) | {:6.2} s ({:+.0}% vs untiled) | error max {:.3e} mean {:.3e}",
            chosen.latent_frames_per_chunk,
            chosen.estimated_peak_bytes as f64 / 1048576.0,
            if chosen.fits { "" } else { " (does not fit)" },
            run.peak_bytes / 1048576.0,
            (run.peak_bytes / budget as f64 - 1.0) * 100.0,
            run.seconds,
            (run.seconds / untiled.seconds - 1.0) * 100.0,
            error.max().double_value(&[]),
            error.mean(Kind::Double).double_value(&[]),
        );
    }
    Ok(())
}
