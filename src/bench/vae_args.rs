//! The arguments of `vaebox bench vae`, shared by the Wan bench (`vae`) and the SeedVR2 one
//! (`seedvr2`) it hands over to.
use std::path::PathBuf;

use anyhow::{bail, Context};

use crate::device::HostAllocator;
use crate::models::wan::WanTuning;

/// Model families the bench knows: Wan against diffusers; SeedVR2 alone (no diffusers port exists);
/// TAEHV's `taew2_1` beside the Wan 2.1 VAE on the same latent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VaeFamily {
    Wan,
    Seedvr2,
    Taehv,
}

#[derive(Debug, Clone, clap::Args)]
pub struct VaeBenchArgs {
    #[arg(long, value_enum, default_value = "wan")]
    pub family: VaeFamily,
    /// Model shape, as the reference script names it: wan2.1 (full size), wan2.2, wan2.1-tiny (smoke test).
    #[arg(long, default_value = "wan2.1")]
    pub preset: String,
    /// Pixel frames of the encode input (1 + 4k); the decode input has the matching latent frames.
    #[arg(long, default_value_t = 9)]
    pub frames: i64,
    #[arg(long, default_value_t = 128)]
    pub height: i64,
    #[arg(long, default_value_t = 128)]
    pub width: i64,
    /// Comma list of f32, bf16.
    #[arg(long, default_value = "f32,bf16")]
    pub dtypes: String,
    /// Comma list of encode, decode.
    #[arg(long, default_value = "encode,decode")]
    pub ops: String,
    /// CPU threads for both sides.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Timed runs per (dtype, op) after one warm-up; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Seed of the random weights and input.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Generated weights, inputs and reference outputs live here (created once, then reused).
    #[arg(long, default_value = ".cache/bench")]
    pub cache_dir: PathBuf,
    #[arg(long, default_value = ".venv/bin/python", env = "VAEBOX_BENCH_PYTHON")]
    pub python: PathBuf,
    #[arg(long, default_value = "scripts/bench/diffusers_vae.py")]
    pub script: PathBuf,
    /// Limit for each reference-script call or command (one model run).
    #[arg(long, default_value_t = 900)]
    pub timeout_secs: u64,
    /// Our Wan model with channels-last-3d weights and activations (`false` to measure without).
    #[arg(long, default_value_t = WanTuning::default().channels_last, action = clap::ArgAction::Set)]
    pub channels_last: bool,
    /// `cpu_winograd` values our f32 model runs with, each timed in every round (bf16 has no Winograd path).
    #[arg(long, default_value = "true,false")]
    pub cpu_winograd: String,
    /// Host allocator of both sides: `bounded` (the server's default `cpu_allocator`: tensors of
    /// 64 KiB and more in their own mappings; diffusers gets the same through MALLOC_MMAP_THRESHOLD_)
    /// or `fast` (glibc's default on both sides).
    #[arg(long, default_value = "bounded", value_parser = parse_allocator)]
    pub allocator: HostAllocator,
    /// Where both sides run: cpu, cuda or cuda:N (the GPU kit runs `--device cuda`).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// CUDA, f32 only: TF32 settings to run side by side, both sides alike (`true,false`); bf16 ignores TF32.
    #[arg(long, default_value = "false")]
    pub tf32: String,
    /// SeedVR2: the released checkpoint's key list (default: ../shared/reference/seedvr2/full_keys.txt).
    #[arg(long)]
    pub seedvr2_keys: Option<PathBuf>,
    /// TAEHV: the released `taew2_1` key list (default: ../shared/reference/taehv/keys_taew2_1.txt).
    #[arg(long)]
    pub taehv_keys: Option<PathBuf>,
    /// TAEHV: comma list of latent frames per push of its chunked rows (each a row).
    #[arg(long, default_value = "1,4")]
    pub taehv_pushes: String,
}

fn parse_allocator(s: &str) -> Result<HostAllocator, String> {
    HostAllocator::parse(s).ok_or_else(|| "expected bounded or fast".to_string())
}

/// A comma-separated list of `what`s (`vae` and `seedvr2` both read theirs this way); empty is an error.
pub(super) fn parse_list<T>(list: &str, what: &str, parse: impl Fn(&str) -> Option<T>) -> anyhow::Result<Vec<T>> {
    let items = list.split(',').map(str::trim).filter(|s| !s.is_empty());
    let parsed = items.map(|s| parse(s).with_context(|| format!("unknown {what} `{s}`"))).collect::<anyhow::Result<Vec<_>>>()?;
    if parsed.is_empty() {
        bail!("no {what} given");
    }
    Ok(parsed)
}
