//! `vaebox calibrate`: measures the peak working memory of the encoder and decoder streams for a few
//! chunk and frame sizes (peak RSS growth on CPU, one child process per run) and fits the
//! [`MemoryModel`] constants to them.
use std::path::PathBuf;

use anyhow::{bail, Context};
use tch::Device;

use super::fixtures::{load_vae, measured_device, parse_family};
use super::measure::{ChildRunner, ModelSpec, RunReport, RunSpec};
use crate::device::{kind_name, DtypeChoice};
use crate::tiling::grid::SpatialTiles;
use crate::tiling::memory::{model_width, MemoryModel, StreamCost, TiledOp};

#[derive(Debug, Clone, clap::Args)]
pub struct CalibrateArgs {
    /// VAE checkpoint (safetensors, any naming the loader reads).
    #[arg(long)]
    pub weights: PathBuf,
    /// wan21, wan22, seedvr2 or taehv.
    #[arg(long, default_value = "wan21")]
    pub family: String,
    /// f32 or bf16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Comma list of latent frame sizes `HxW` (latent cells) to measure.
    #[arg(long, default_value = "8x8,12x16,16x24")]
    pub sizes: String,
    /// Comma list of latent frames per push to measure (after the single first frame).
    #[arg(long, default_value = "1,2")]
    pub chunks: String,
    #[arg(long, default_value_t = 2)]
    pub threads: i32,
    /// `cpu` measures peak RSS growth; `cuda`/`cuda:N` the CUDA caching allocator's peak allocated
    /// bytes (needs a CUDA libtorch and a GPU).
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

/// One run: a stream's first push (one frame) then one push of `pixel_frames`, on tiles of `pixels`
/// whose areas sum to `covered_pixels` (equal to `pixels` untiled).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    pub pixel_frames: i64,
    pub pixels: i64,
    pub covered_pixels: i64,
    pub peak_bytes: f64,
}

pub fn run(args: &CalibrateArgs) -> anyhow::Result<()> {
    let family = parse_family(&args.family)?;
    let device = measured_device(&args.device)?;
    let kind = DtypeChoice::parse(&args.dtype).context("dtype must be f32 or bf16")?.resolve(device);
    let sizes = parse_list(&args.sizes, |s| {
        let (h, w) = s.split_once('x')?;
        Some((h.trim().parse().ok()?, w.trim().parse().ok()?))
    })?;
    let chunks = parse_list(&args.chunks, |s| s.trim().parse().ok())?;
    let model = ModelSpec {
        weights: args.weights.clone(),
        family: family.as_str().into(),
        dtype: kind_name(kind).into(),
        threads: args.threads,
        device: args.device.clone(),
        // The rows are what a job runs with by default.
        cpu_winograd: true,
    };
    let width = {
        // The width is a property of the checkpoint: read on the CPU whatever the measured device.
        let vae = load_vae(&args.weights, family, kind, Device::Cpu)?;
        model_width(&vae)
    };
    let mut measured = Vec::new();
    let fitted = calibrate(&ChildRunner::current()?, &model, &sizes, &chunks, |op, m| {
        println!("{op:6} {:3} frames × {:7} px (covering {:7} px): peak {:8.1} MiB", m.pixel_frames, m.pixels, m.covered_pixels, m.peak_bytes / 1048576.0);
        measured.push((op.to_string(), *m));
    })?;
    println!("\nFit (model − measured):");
    for (op, m) in &measured {
        let cost = if op == "encode" { fitted.encode } else { fitted.decode };
        let estimate = cost.working_bytes(m.pixel_frames, m.pixels, m.covered_pixels);
        println!(
            "{op:6} {:3} frames × {:7} px (covering {:7} px): model {:8.1} MiB, {:+5.1}%",
            m.pixel_frames,
            m.pixels,
            m.covered_pixels,
            estimate / 1048576.0,
            (estimate / m.peak_bytes - 1.0) * 100.0
        );
    }
    println!("\nRow for CALIBRATED in src/tiling/memory.rs:");
    println!(
        "CalibratedRow {{ device: \"{}\", family: \"{}\", dtype: \"{}\", width: {width}, model: {fitted:?} }}",
        crate::tiling::memory::device_class(device),
        family.as_str(),
        kind_name(kind)
    );
    println!("{}", serde_json::to_string(&fitted)?);
    Ok(())
}

/// Measures both streams at every (size, chunk), each run in its own child process, and fits each;
/// `report` sees every measurement.
pub fn calibrate(
    runner: &ChildRunner,
    model: &ModelSpec,
    latent_sizes: &[(i64, i64)],
    latent_chunks: &[i64],
    mut report: impl FnMut(&str, &Measurement),
) -> anyhow::Result<MemoryModel> {
    let (mut encode, mut decode) = (Vec::new(), Vec::new());
    let runs = latent_sizes.iter().flat_map(|&(h, w)| latent_chunks.iter().map(move |&k| (h, w, k, None)));
    // Tiled runs of the largest size tell the caches (all tiles hold one) from the working set.
    let &(h, w) = latent_sizes.last().context("no sizes to measure")?;
    let tiled = [2, 3, 4].map(|parts| (h, w, 1, Some(SpatialTiles::square(h.max(w) / parts + 2, 2))));
    for (h, w, k, tiles) in runs.chain(tiled) {
        for (op, name, into) in [(TiledOp::Decode, "decode", &mut decode), (TiledOp::Encode, "encode", &mut encode)] {
            let spec = RunSpec {
                model: model.clone(),
                op,
                latent_frames: 1 + k,
                latent_height: h,
                latent_width: w,
                latent_frames_per_push: k,
                tiles,
                row_split: None,
                tile_major: false,
                checkpointed: false,
                input: None,
                output: None,
            };
            let m = Measurement::from(&runner.run(&spec)?);
            report(name, &m);
            into.push(m);
        }
    }
    Ok(MemoryModel { encode: fit(&encode)?, decode: fit(&decode)? })
}

impl From<&RunReport> for Measurement {
    fn from(run: &RunReport) -> Measurement {
        Measurement {
            pixel_frames: run.pixel_frames,
            pixels: run.tile_pixels,
            covered_pixels: run.covered_pixels,
            peak_bytes: run.peak_bytes,
        }
    }
}

/// Least squares of `peak = fixed + a · frames · pixels + b · covered_pixels` in relative terms (a
/// budget is missed by a share, not by bytes, so small runs count as much as large ones). Negative
/// terms are noise and clamp to 0.
pub fn fit(measurements: &[Measurement]) -> anyhow::Result<StreamCost> {
    if measurements.len() < 3 {
        bail!("need at least 3 measurements to fit 3 constants, got {}", measurements.len());
    }
    let mut normal = [[0.0f64; 3]; 3];
    let mut rhs = [0.0f64; 3];
    for m in measurements {
        let weight = 1.0 / m.peak_bytes.max(1.0);
        let row = [1.0, (m.pixel_frames * m.pixels) as f64, m.covered_pixels as f64].map(|x| x * weight);
        for i in 0..3 {
            rhs[i] += row[i] * m.peak_bytes * weight;
            for j in 0..3 {
                normal[i][j] += row[i] * row[j];
            }
        }
    }
    let [fixed, per_voxel, per_pixel] = solve3(normal, rhs).context("measurements do not separate frames from pixels (vary both)")?;
    Ok(StreamCost { fixed_bytes: fixed.max(0.0), bytes_per_voxel: per_voxel.max(0.0), bytes_per_pixel: per_pixel.max(0.0) })
}

/// Gaussian elimination with partial pivoting; `None` when singular. Columns are scaled first: the
/// voxel column is ~10⁵ times the constant one.
fn solve3(mut a: [[f64; 3]; 3], mut b: [f64; 3]) -> Option<[f64; 3]> {
    let scale: Vec<f64> = (0..3).map(|j| a[j][j].sqrt().max(f64::MIN_POSITIVE)).collect();
    for i in 0..3 {
        for j in 0..3 {
            a[i][j] /= scale[i] * scale[j];
        }
        b[i] /= scale[i];
    }
    for col in 0..3 {
        let pivot = (col..3).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..3 {
            let factor = a[row][col] / a[col][col];
            for k in col..3 {
                a[row][k] -= factor * a[col][k];
            }
            b[row] -= factor * b[col];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let tail: f64 = (row + 1..3).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - tail) / a[row][row];
    }
    Some([x[0] / scale[0], x[1] / scale[1], x[2] / scale[2]])
}

pub(super) fn parse_list<T>(text: &str, parse: impl Fn(&str) -> Option<T>) -> anyhow::Result<Vec<T>> {
    text.split(',').filter(|s| !s.trim().is_empty()).map(|s| parse(s).with_context(|| format!("cannot parse `{s}`"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_exact_constants() {
        let truth = StreamCost { fixed_bytes: 5e6, bytes_per_voxel: 1200.0, bytes_per_pixel: 300.0 };
        let runs = [(4, 4096, 4096), (8, 4096, 4096), (4, 16384, 16384), (8, 24576, 24576), (4, 10816, 43264)];
        let measurements: Vec<Measurement> = runs
            .iter()
            .map(|&(f, p, c)| Measurement { pixel_frames: f, pixels: p, covered_pixels: c, peak_bytes: truth.working_bytes(f, p, c) })
            .collect();
        let fitted = fit(&measurements).unwrap();
        assert!((fitted.fixed_bytes - truth.fixed_bytes).abs() < 1.0, "{fitted:?}");
        assert!((fitted.bytes_per_voxel - truth.bytes_per_voxel).abs() < 1e-6, "{fitted:?}");
        assert!((fitted.bytes_per_pixel - truth.bytes_per_pixel).abs() < 1e-4, "{fitted:?}");
    }

    #[test]
    fn one_frame_count_cannot_separate_the_terms() {
        let measurements: Vec<Measurement> = [4096, 8192, 16384].iter().map(|&p| Measurement { pixel_frames: 4, pixels: p, covered_pixels: p, peak_bytes: p as f64 }).collect();
        assert!(fit(&measurements).is_err());
    }
}
