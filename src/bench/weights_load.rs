//! `vaebox bench load-weights`: the host memory a checkpoint load takes above the runtime's base, against
//! the file's size. Run it in a fresh process (the test does): the peak is the process's `VmHWM`, reset
//! after libtorch has started and run a first op, so the base includes the runtime but no weights. Also
//! reported: the bytes the model's tensors hold, the floor of any load (above the file when it widens), and
//! what the model made from them at load and keeps (Winograd kernels at CPU f32, with `cpu_winograd` on), and
//! how long the load took (the file's GB/s).
use std::path::PathBuf;

use anyhow::Context;
use serde_json::json;
use tch::{Device, Kind, Tensor};

use crate::device::{self, DeviceChoice, HostAllocator};
use crate::models::seedvr2::{SeedVr2LoadOptions, SeedVr2Vae};
use crate::models::nn::weights::HeldBytes;
use crate::models::seedvr2_dit::{DitLoadOptions, SeedVr2Dit};
use crate::models::wan::{WanLoadOptions, WanVae};

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Family {
    Wan,
    Seedvr2,
    Dit,
}

#[derive(clap::Args, Debug)]
pub struct LoadWeightsArgs {
    /// Which model the file holds.
    #[arg(long, value_enum)]
    pub family: Family,
    /// The checkpoint (safetensors or GGUF).
    #[arg(long)]
    pub weights: PathBuf,
    /// Compute dtype the weights are held at: f32, bf16 or f16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// `bounded` (the server's default) or `fast`.
    #[arg(long, default_value = "bounded")]
    pub allocator: String,
    /// `cpu_winograd`: whether an f32 VAE makes its Winograd kernels at load.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub cpu_winograd: bool,
}

/// Loads the model and returns the bytes its tensors hold.
fn load(args: &LoadWeightsArgs, kind: Kind) -> anyhow::Result<HeldBytes> {
    let device = Device::Cpu;
    Ok(match args.family {
        Family::Wan => WanVae::load(&args.weights, &WanLoadOptions { device, kind })?.held_bytes(),
        Family::Seedvr2 => SeedVr2Vae::load(&args.weights, &SeedVr2LoadOptions { device, kind })?.held_bytes(),
        Family::Dit => HeldBytes { weights: SeedVr2Dit::load(&args.weights, &DitLoadOptions { device, kind, ..DitLoadOptions::default() })?.weight_bytes(), derived: 0 },
    })
}

pub fn run(args: &LoadWeightsArgs) -> anyhow::Result<()> {
    let kind = device::DtypeChoice::parse(&args.dtype).context("--dtype: f32, bf16 or f16")?.resolve(Device::Cpu);
    let allocator = HostAllocator::parse(&args.allocator).context("--allocator: bounded or fast")?;
    device::init(DeviceChoice::Cpu, 1, allocator);
    crate::models::nn::winograd::set_enabled(args.cpu_winograd);
    let file_bytes = std::fs::metadata(&args.weights).with_context(|| format!("{}", args.weights.display()))?.len();
    // The runtime's own start-up (kernels, thread pools) belongs to the base, not to the load.
    let warm = Tensor::ones([64, 64], (Kind::Float, Device::Cpu)).matmul(&Tensor::ones([64, 64], (Kind::Float, Device::Cpu)));
    let _ = warm.to_kind(kind).sum(kind).double_value(&[]);
    device::reset_peak_host_bytes();
    let base = device::resident_host_bytes().context("reading VmRSS")?;
    let started = std::time::Instant::now();
    let held = load(args, kind)?;
    let load_s = started.elapsed().as_secs_f64();
    let peak = device::peak_host_bytes().context("reading VmHWM")?;
    let growth = peak.saturating_sub(base);
    println!(
        "{}",
        json!({
            "bench": "load-weights",
            "weights": args.weights.display().to_string(),
            "dtype": device::kind_name(kind),
            "allocator": args.allocator,
            "file_bytes": file_bytes,
            // From the page cache when the file was read just before (as a second load of the same model is).
            "load_s": load_s,
            "file_gb_per_s": file_bytes as f64 / load_s / 1e9,
            "base_rss_bytes": base,
            "peak_growth_bytes": growth,
            "held_bytes": held.weights,
            "derived_bytes": held.derived,
            "peak_growth_per_file_byte": growth as f64 / file_bytes as f64,
            // What a load cannot go below: the model's own tensors (more than the file when it widens them).
            "peak_growth_per_held_byte": growth as f64 / held.weights as f64,
            // The load itself, without what the model keeps beside its weights by choice.
            "peak_growth_less_derived_per_file_byte": growth.saturating_sub(held.derived) as f64 / file_bytes as f64,
        })
    );
    Ok(())
}
