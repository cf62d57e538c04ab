//! Our upscaler against the real ncnn engine (PyPI `ncnn`, fp32 on the CPU) running the same ncnn files on
//! the same frame at the same thread count, in one run: the last table of `vaebox bench upscale`. Each
//! family's files run through the script that reproduces its tool around the graph: scripts/ncnn_reference.py
//! for Real-ESRGAN (the graph is the whole model), scripts/realcugan_reference.py for Real-CUGAN
//! (realcugan-ncnn-vulkan's reflection padding, crop and 4x residual). The engines alternate round by round,
//! so that load from other processes on a shared machine hits them alike.
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use tch::{Device, Kind, Tensor};

use super::dtype::BenchDtype;
use super::timing::{seconds, Seconds};
use super::{clip, PythonScript};
use crate::device::HeapReuse;
use crate::executor::ExecutorConfig;
use crate::models::family::upscaler::UpscalerLoadOptions;
use crate::models::family::Family;
use crate::models::registry::{self, ModelEntry};

/// The reference script that runs a family's ncnn files as its tool does, and the arguments it needs
/// beyond the common ones (ncnn_reference.py's `common_parser`).
#[derive(Debug, PartialEq)]
pub struct NcnnScript {
    pub script: PathBuf,
    pub args: Vec<String>,
}

/// `native_scale`: the scale the family's ncnn graph (with its tool's steps around it) produces.
pub fn ncnn_script(family: Family, native_scale: i64) -> anyhow::Result<NcnnScript> {
    match family {
        Family::Realesrgan => Ok(NcnnScript { script: PathBuf::from("scripts/ncnn_reference.py"), args: vec![] }),
        Family::Realcugan => Ok(NcnnScript { script: PathBuf::from("scripts/realcugan_reference.py"), args: vec!["--scale".into(), native_scale.to_string()] }),
        Family::Wan21 | Family::Wan22 | Family::Seedvr2 | Family::Seedvr2Dit | Family::Rife | Family::Taehv | Family::FlashVsr => {
            bail!("{} has no ncnn files to run in the ncnn engine", family.as_str())
        }
    }
}

/// The scale an upscaler's ncnn files compute: its largest (Real-ESRGAN serves 2x by resizing the 4x output;
/// a Real-CUGAN model has one scale).
pub fn native_scale(entry: &ModelEntry) -> anyhow::Result<i64> {
    entry.scales.iter().copied().max().with_context(|| format!("{} has no scales: not an upscaler", entry.name))
}

pub struct EnginesRequest<'a> {
    pub config: &'a ExecutorConfig,
    /// The clip whose first frame both sides upscale.
    pub input: &'a Path,
    pub model: &'a str,
    /// Python with PyPI `ncnn` (the project's venv).
    pub python: PathBuf,
    pub threads: usize,
    /// Our model's dtypes (channels-last, as the executor loads it).
    pub dtypes: &'a [BenchDtype],
    /// Timed runs per engine and round, after one untimed run.
    pub repeat: u32,
    pub rounds: u32,
}

/// One engine's seconds per frame in one round.
#[derive(Debug)]
pub struct EngineRun {
    pub round: u32,
    pub engine: String,
    pub seconds: Seconds,
}

enum Engine {
    Ncnn { packing: bool },
    Ours { dtype: BenchDtype },
}

impl Engine {
    fn label(&self) -> String {
        match self {
            Engine::Ncnn { packing: false } => "ncnn engine fp32, plain layout (as the parity tests)".into(),
            Engine::Ncnn { packing: true } => "ncnn engine fp32, pack4/pack8 layouts".into(),
            Engine::Ours { dtype } => format!("vaebox {}, channels-last", dtype.name()),
        }
    }
}

/// Every engine, `request.rounds` times in turn; the first frame of the clip at the model's native scale.
pub fn run(request: &EnginesRequest) -> anyhow::Result<Vec<EngineRun>> {
    let entry = registry::find(&request.config.models_dir, request.model).with_context(|| format!("no model {}", request.model))?;
    let scale = native_scale(&entry)?;
    let script = ncnn_script(entry.family, scale)?;
    let family = registry::upscaler_family(entry.family).with_context(|| format!("{} is not an upscaler", entry.name))?;
    let frame = clip::frame(request.config, request.input, 0)?;
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("frame.f32");
    write_f32(&input, &frame)?;
    let models = request
        .dtypes
        .iter()
        .map(|&dtype| Ok((dtype, (family.load)(&entry.files, &UpscalerLoadOptions { device: Device::Cpu, kind: dtype.kind() })?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let engines: Vec<Engine> = [Engine::Ncnn { packing: false }, Engine::Ncnn { packing: true }].into_iter().chain(request.dtypes.iter().map(|&dtype| Engine::Ours { dtype })).collect();
    let _heap = HeapReuse::for_call();
    let _guard = tch::no_grad_guard();
    let mut runs = Vec::new();
    for round in 1..=request.rounds {
        for engine in &engines {
            let seconds = match engine {
                Engine::Ncnn { packing } => ncnn_seconds(request, &entry, &script, &input, &frame, *packing, dir.path())?,
                Engine::Ours { dtype } => {
                    let (_, model) = models.iter().find(|(d, _)| d == dtype).context("every dtype is loaded")?;
                    let upscale = || model.upscale(&frame, scale).map(drop);
                    upscale()?;
                    let samples = (0..request.repeat.max(1)).map(|_| {
                        let mut result = Ok(());
                        let took = seconds(|| result = upscale());
                        result.map(|()| took)
                    });
                    Seconds::of(&samples.collect::<Result<Vec<f64>, _>>()?).context("no runs")?
                }
            };
            runs.push(EngineRun { round, engine: engine.label(), seconds });
        }
    }
    Ok(runs)
}

fn write_f32(path: &Path, frame: &Tensor) -> anyhow::Result<()> {
    let values = Vec::<f32>::try_from(frame.flatten(0, -1).to_kind(Kind::Float))?;
    std::fs::write(path, values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())?;
    Ok(())
}

fn ncnn_seconds(request: &EnginesRequest, entry: &ModelEntry, script: &NcnnScript, input: &Path, frame: &Tensor, packing: bool, scratch: &Path) -> anyhow::Result<Seconds> {
    let [_, channels, height, width] = frame.size()[..] else { bail!("the frame is not [1,3,H,W]") };
    let [param, bin] = &entry.files[..] else { bail!("{} is not one .param and one .bin", entry.name) };
    let runner = PythonScript { python: request.python.clone(), script: script.script.clone(), timeout: Duration::from_secs(600), threads: request.threads, env: Vec::new() };
    let path = |p: &Path| p.display().to_string();
    let mut args = vec![
        "--param".into(), path(param), "--bin".into(), path(bin),
        "--input-raw".into(), path(input), "--shape".into(), format!("{channels},{height},{width}"),
        "--output-out".into(), path(&scratch.join("out.f32")),
        "--warmup".into(), "1".into(), "--repeat".into(), request.repeat.max(1).to_string(), "--threads".into(), request.threads.to_string(),
    ];
    args.extend(script.args.iter().cloned());
    if packing {
        args.push("--packing".into());
    }
    let report = runner.run_json(&args)?;
    let value = |key: &str| report[key].as_f64().with_context(|| format!("{}: no {key} in {report}", script.script.display()));
    Ok(Seconds { median: value("median_seconds")?, best: value("min_seconds")? })
}

/// The runs as a markdown table, each engine's median against the packed ncnn engine's in the same round.
pub fn table(runs: &[EngineRun]) -> String {
    let mut lines = vec!["| round | engine | median s/frame | best s/frame | median / ncnn packed |".to_string(), "|---:|---|---:|---:|---:|".to_string()];
    for run in runs {
        let packed = runs.iter().find(|r| r.round == run.round && r.engine == Engine::Ncnn { packing: true }.label());
        let ratio = packed.map_or(f64::NAN, |p| run.seconds.median / p.seconds.median);
        lines.push(format!("| {} | {} | {:.4} | {:.4} | {ratio:.2} |", run.round, run.engine, run.seconds.median, run.seconds.best));
    }
    lines.join("\n")
}
