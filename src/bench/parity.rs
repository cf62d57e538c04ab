//! `vaebox bench parity`: the same weights run on the CPU in f32 and on a device (the GPU kit runs it
//! with `--device cuda`), compared output by output: every VAE family's encode and decode at f32 and
//! bf16, the device's streamed pushes against its own whole clip, and the SeedVR2 DiT at the released
//! widths with its blocks resident and swapped. The CPU side is the one the reference tests check
//! against the original code; this says whether the device computes the same thing. Prints one line
//! per check and, with `--json`, writes them all; exits non-zero when a check is outside its bound.
use std::path::PathBuf;

use anyhow::{bail, Context};
use serde_json::json;
use tch::{Device, Kind, Tensor};

use super::restore::{DitShape, TXT_IN_DIM};
use super::tiling::{load_vae, parse_family, synthetic_video, usable_device};
use crate::models::seedvr2_dit::{BlockPlacement, DitInput, DitLoadOptions, DitVariant, SeedVr2Dit};
use crate::models::vae::VideoVae;

/// Relative bounds: max |device − CPU| over max |CPU|. f32 on the device (TF32 off) differs from the
/// CPU only by summation order and the convolution algorithms cuDNN picks.
const F32_BOUND: f64 = 1e-3;
/// bf16 keeps 8 bits of mantissa through dozens of layers, and how far that carries an output from
/// f32 depends on the weights (random ones amplify it: 0.5–9% of the output's largest value on the
/// CPU itself, 13–20% for the full-size VAE decoders on the H100). So a VAE's bf16 on the device is
/// held to the CPU's own bf16 on the same weights and input: at most this many times its distance
/// from f32 (and never more than [`BF16_CEILING`]).
const BF16_FACTOR: f64 = 3.0;
const BF16_CEILING: f64 = 0.5;
/// The DiT's bf16 against f32 (its residual stream stays close: 0.5–1% on the H100).
const DIT_BF16_BOUND: f64 = 5e-2;
/// Chunked pushes against the whole clip on one device: summation order of differently sized calls.
const STREAM_BOUND: f64 = 1e-4;
/// Swapping a block to the device for its forward must not change what it computes.
const SWAP_BOUND: f64 = 1e-6;

#[derive(Debug, Clone, clap::Args)]
pub struct ParityArgs {
    /// The device compared with the CPU: cuda, cuda:N (or cpu, which checks the command itself).
    #[arg(long, default_value = "cuda")]
    pub device: String,
    /// VAE checkpoints to compare, as FAMILY=PATH (families: wan21, wan22, seedvr2); repeatable.
    #[arg(long = "vae", value_name = "FAMILY=PATH")]
    pub vaes: Vec<String>,
    /// Frames (1 + 4k), height and width of the synthetic clip the VAEs encode.
    #[arg(long, default_value_t = 9)]
    pub frames: i64,
    #[arg(long, default_value_t = 64)]
    pub height: i64,
    #[arg(long, default_value_t = 64)]
    pub width: i64,
    /// DiT variants to compare (3b, 7b), at the released width with `--dit-blocks` blocks of random weights.
    #[arg(long, default_value = "3b,7b")]
    pub dit: String,
    #[arg(long, default_value_t = 2)]
    pub dit_blocks: i64,
    /// DiT width; 0 means the released one (2560 for 3B, 3072 for 7B).
    #[arg(long, default_value_t = 0)]
    pub dit_dim: i64,
    /// Latent grid `T,H,W` of the DiT input (H and W even).
    #[arg(long, default_value = "2,16,16")]
    pub dit_grid: String,
    /// Intra-op threads of the CPU side.
    #[arg(long, default_value_t = 2)]
    pub threads: i32,
    /// Where to write every check as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One comparison and whether it is inside its bound.
struct Check {
    name: String,
    relative_error: f64,
    bound: f64,
}

impl Check {
    fn passed(&self) -> bool {
        self.relative_error <= self.bound
    }
}

fn relative_error(actual: &Tensor, expected: &Tensor) -> anyhow::Result<f64> {
    let (actual, expected) = (actual.to_device(Device::Cpu).to_kind(Kind::Double), expected.to_device(Device::Cpu).to_kind(Kind::Double));
    if actual.size() != expected.size() {
        bail!("shapes differ: {:?} against {:?}", actual.size(), expected.size());
    }
    let scale = expected.abs().max().double_value(&[]).max(f64::MIN_POSITIVE);
    Ok((actual - expected).abs().max().double_value(&[]) / scale)
}

pub fn run(args: &ParityArgs) -> anyhow::Result<()> {
    crate::device::init(crate::device::DeviceChoice::Cpu, args.threads, crate::device::HostAllocator::Fast);
    let device = usable_device(&args.device)?;
    // TF32 would round f32 matmuls and convolutions to 10 mantissa bits: f32 parity means TF32 off.
    crate::device::cuda::set_tf32(false);
    let mut checks = Vec::new();
    for spec in &args.vaes {
        let (family, path) = spec.split_once('=').with_context(|| format!("--vae {spec}: expected FAMILY=PATH"))?;
        vae_checks(args, family, PathBuf::from(path), device, &mut checks)?;
    }
    for variant in args.dit.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let variant = match variant {
            "3b" => DitVariant::ThreeB,
            "7b" => DitVariant::SevenB,
            other => bail!("--dit: unknown variant `{other}` (3b, 7b)"),
        };
        dit_checks(args, variant, device, &mut checks)?;
    }
    let failed = checks.iter().filter(|c| !c.passed()).count();
    if let Some(path) = &args.json {
        let rows: Vec<_> = checks.iter().map(|c| json!({"check": c.name, "relative_error": c.relative_error, "bound": c.bound, "passed": c.passed()})).collect();
        let report = json!({"device": crate::device::device_name(device), "checks": rows, "failed": failed});
        std::fs::write(path, serde_json::to_string_pretty(&report)?).with_context(|| format!("writing {}", path.display()))?;
    }
    println!("parity on {}: {} checks, {failed} outside their bounds", crate::device::device_name(device), checks.len());
    if failed > 0 {
        bail!("{failed} parity checks outside their bounds");
    }
    Ok(())
}

fn record(checks: &mut Vec<Check>, name: String, relative_error: f64, bound: f64) {
    let check = Check { name, relative_error, bound };
    println!("{} {:<58} relative error {:.2e} (bound {:.2e})", if check.passed() { "ok  " } else { "FAIL" }, check.name, check.relative_error, check.bound);
    checks.push(check);
}

fn whole(vae: &VideoVae, encode: bool, input: &Tensor) -> anyhow::Result<Tensor> {
    let mut stream = if encode { vae.encoder() } else { vae.decoder() };
    Ok(tch::no_grad(|| stream.push_some(input))?)
}

/// Pushes `input` in pieces of `lengths` frames along time and joins what comes out.
fn streamed(vae: &VideoVae, encode: bool, input: &Tensor, lengths: &[i64]) -> anyhow::Result<Tensor> {
    let mut stream = if encode { vae.encoder() } else { vae.decoder() };
    let (mut parts, mut start) = (Vec::new(), 0);
    for &length in lengths {
        if let Some(part) = tch::no_grad(|| stream.push(&input.narrow(2, start, length)))? {
            parts.push(part);
        }
        start += length;
    }
    Ok(Tensor::cat(&parts, 2))
}

fn vae_checks(args: &ParityArgs, family: &str, weights: PathBuf, device: Device, checks: &mut Vec<Check>) -> anyhow::Result<()> {
    let parsed = parse_family(family)?;
    if (args.frames - 1) % 4 != 0 || args.frames < 5 {
        bail!("--frames must be 1 + 4k with k ≥ 1, got {}", args.frames);
    }
    eprintln!("{family}: CPU f32 reference run");
    let video = synthetic_video(args.frames, args.height, args.width);
    let cpu = load_vae(&weights, parsed, Kind::Float, Device::Cpu)?;
    let cpu_latent = whole(&cpu, true, &video)?;
    let cpu_frames = whole(&cpu, false, &cpu_latent)?;
    drop(cpu);
    eprintln!("{family}: CPU bf16, the yardstick of the device's bf16");
    let cpu_bf16 = load_vae(&weights, parsed, Kind::BFloat16, Device::Cpu)?;
    let bf16_bound = |gap: f64| (BF16_FACTOR * gap).min(BF16_CEILING);
    let encode_bound = bf16_bound(relative_error(&whole(&cpu_bf16, true, &video.to_kind(Kind::BFloat16))?, &cpu_latent)?);
    let decode_bound = bf16_bound(relative_error(&whole(&cpu_bf16, false, &cpu_latent.to_kind(Kind::BFloat16))?, &cpu_frames)?);
    drop(cpu_bf16);
    for kind in [Kind::Float, Kind::BFloat16] {
        let dtype = crate::device::kind_name(kind);
        eprintln!("{family}: {dtype} on {device:?}");
        let vae = load_vae(&weights, parsed, kind, device)?;
        let latent = whole(&vae, true, &video.to_device(device).to_kind(kind))?;
        let (encode_bound, decode_bound) = if kind == Kind::Float { (F32_BOUND, F32_BOUND) } else { (encode_bound, decode_bound) };
        record(checks, format!("{family} {dtype} encode vs cpu f32"), relative_error(&latent, &cpu_latent)?, encode_bound);
        let device_latent = cpu_latent.to_device(device).to_kind(kind);
        let frames = whole(&vae, false, &device_latent)?;
        record(checks, format!("{family} {dtype} decode vs cpu f32"), relative_error(&frames, &cpu_frames)?, decode_bound);
        if kind == Kind::Float {
            // 1 + 4 + 4 frames in uneven pushes; latent frames one at a time after a first pair.
            let rest = args.frames - 1;
            let pushes = [1, 4.min(rest), rest - 4.min(rest)];
            let pushes: Vec<i64> = pushes.into_iter().filter(|&n| n > 0).collect();
            let streamed_latent = streamed(&vae, true, &video.to_device(device), &pushes)?;
            record(checks, format!("{family} f32 streamed encode vs whole"), relative_error(&streamed_latent, &latent)?, STREAM_BOUND);
            let t = device_latent.size()[2];
            let pushes: Vec<i64> = std::iter::once(2.min(t)).chain(std::iter::repeat_n(1, (t - 2.min(t)) as usize)).collect();
            let streamed_frames = streamed(&vae, false, &device_latent, &pushes)?;
            record(checks, format!("{family} f32 streamed decode vs whole"), relative_error(&streamed_frames, &frames)?, STREAM_BOUND);
        }
    }
    Ok(())
}

fn dit_checks(args: &ParityArgs, variant: DitVariant, device: Device, checks: &mut Vec<Check>) -> anyhow::Result<()> {
    let released = DitShape::released(variant);
    let dim = if args.dit_dim > 0 { args.dit_dim } else { released.dim };
    let heads = (dim / released.head_dim).max(1);
    let blocks = args.dit_blocks.max(1);
    let mm_layers = match variant {
        DitVariant::ThreeB => blocks / 2,
        DitVariant::SevenB => blocks,
    };
    let shape = DitShape { variant, dim, heads, head_dim: dim / heads, blocks, mm_layers };
    let grid: Vec<i64> = args.dit_grid.split(',').map(|s| s.trim().parse::<i64>()).collect::<Result<_, _>>().context("--dit-grid: expected T,H,W")?;
    let [t, h, w] = grid[..] else { bail!("--dit-grid: expected T,H,W") };
    let name = variant.as_str();
    eprintln!("DiT {name}: dim {dim}, {blocks} blocks, grid {t}×{h}×{w}");
    tch::manual_seed(5);
    let vid = Tensor::randn([t * h * w, 33], (Kind::Float, Device::Cpu));
    let txt = Tensor::randn([58, TXT_IN_DIM], (Kind::Float, Device::Cpu));
    let forward = |kind: Kind, on: Device, placement: BlockPlacement| -> anyhow::Result<Tensor> {
        let source = PathBuf::from(format!("random-{name}-dim{dim}"));
        let opts = DitLoadOptions { device: on, kind, placement, ..DitLoadOptions::default() };
        let dit = SeedVr2Dit::from_tensors(&source, shape.random_tensors(1), None, &opts)?;
        let (vid, txt) = (vid.to_device(on).to_kind(kind), txt.to_device(on).to_kind(kind));
        let input = DitInput { vid: &vid, grid: [t, h, w], txt: &txt, timestep: 1000.0 };
        Ok(tch::no_grad(|| dit.forward(&input))?.to_device(Device::Cpu).to_kind(Kind::Float))
    };
    let cpu = forward(Kind::Float, Device::Cpu, BlockPlacement::Resident)?;
    let resident = forward(Kind::Float, device, BlockPlacement::Resident)?;
    record(checks, format!("DiT {name} f32 vs cpu f32"), relative_error(&resident, &cpu)?, F32_BOUND);
    let bf16 = forward(Kind::BFloat16, device, BlockPlacement::Resident)?;
    record(checks, format!("DiT {name} bf16 vs cpu f32"), relative_error(&bf16, &cpu)?, DIT_BF16_BOUND);
    let swapped = forward(Kind::BFloat16, device, BlockPlacement::Swapped)?;
    record(checks, format!("DiT {name} bf16 blocks swapped vs resident"), relative_error(&swapped, &bf16)?, SWAP_BOUND);
    Ok(())
}
