//! What the VAE benches keep under their cache directory: the generated weights and inputs of one
//! configuration, made once by the reference script and reused (`wan`, and `taehv` for its Wan 2.1 side).
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::dtype::BenchDtype;
use super::script::PythonScript;
use super::vae_args::VaeBenchArgs;

/// Files of one bench configuration under the cache directory.
pub(super) struct CachePaths {
    pub(super) dir: PathBuf,
    pub(super) weights: PathBuf,
    pub(super) input: PathBuf,
}

impl CachePaths {
    pub(super) fn new(args: &VaeBenchArgs) -> Self {
        let dir = args.cache_dir.join(&args.preset);
        let weights = dir.join(format!("weights-seed{}.safetensors", args.seed));
        let input = dir.join(format!("input-seed{}-{}x{}x{}.safetensors", args.seed, args.frames, args.height, args.width));
        Self { dir, weights, input }
    }

    /// diffusers' outputs of the latest run at one dtype (overwritten by every run).
    pub(super) fn reference_outputs(&self, args: &VaeBenchArgs, dtype: BenchDtype) -> PathBuf {
        self.dir.join(format!("diffusers-out-{}-seed{}-{}x{}x{}.safetensors", dtype.name(), args.seed, args.frames, args.height, args.width))
    }
}

/// Arguments that pick the model shape and the input size, shared by every script call.
pub(super) fn shape_args(args: &VaeBenchArgs) -> Vec<String> {
    [
        ("--preset", args.preset.clone()),
        ("--seed", args.seed.to_string()),
        ("--frames", args.frames.to_string()),
        ("--height", args.height.to_string()),
        ("--width", args.width.to_string()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_string(), value])
    .collect()
}

/// Makes `path` with the script's `mode` unless it exists; written under a temporary name first so an
/// interrupted run never leaves a half-written file that later runs would trust.
pub(super) fn ensure_generated(script: &PythonScript, path: &Path, mode: &str, shape_args: &[String]) -> anyhow::Result<()> {
    if path.exists() {
        return Ok(());
    }
    eprintln!("creating {}", path.display());
    let partial = path.with_extension("partial.safetensors");
    script.run_json(&[vec![mode.into(), partial.display().to_string()], shape_args.to_vec()].concat())?;
    std::fs::rename(&partial, path).with_context(|| format!("cannot move {} into place", partial.display()))?;
    Ok(())
}
