//! `vaebox calibrate`: measures the peak working memory of the encoder and decoder streams for a few
//! chunk and frame sizes (peak RSS growth on CPU) and fits the [`MemoryModel`] constants to them.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use tch::{Device, Kind, Tensor};

use super::grid::{SpatialTiles, TileGrid};
use super::memory::{model_width, MemoryModel, StreamCost};
use super::vae_tiles::{TiledDecoder, TiledEncoder};
use crate::device::{kind_name, peak_host_bytes, reset_peak_host_bytes, DtypeChoice};
use crate::models::registry::Family;
use crate::models::seedvr2::{SeedVr2LoadOptions, SeedVr2Vae};
use crate::models::vae::VideoVae;
use crate::models::wan::{WanLoadOptions, WanVae};

#[derive(Debug, Clone, clap::Args)]
pub struct CalibrateArgs {
    /// VAE checkpoint (safetensors, any naming the loader reads).
    #[arg(long)]
    pub weights: PathBuf,
    /// wan21, wan22 or seedvr2.
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
    crate::device::init(crate::device::DeviceChoice::Cpu, args.threads);
    let family = parse_family(&args.family)?;
    let kind = DtypeChoice::parse(&args.dtype).context("dtype must be f32 or bf16")?.resolve(Device::Cpu);
    let vae = load_vae(&args.weights, family, kind)?;
    let sizes = parse_list(&args.sizes, |s| {
        let (h, w) = s.split_once('x')?;
        Some((h.trim().parse().ok()?, w.trim().parse().ok()?))
    })?;
    let chunks = parse_list(&args.chunks, |s| s.trim().parse().ok())?;
    let model = calibrate(&vae, &sizes, &chunks, |op, m| {
        println!("{op:6} {:3} frames × {:7} px (covering {:7} px): peak {:8.1} MiB", m.pixel_frames, m.pixels, m.covered_pixels, m.peak_bytes / 1048576.0);
    })?;
    println!("\nRow for CALIBRATED in src/tiling/memory.rs:");
    println!(
        "CalibratedRow {{ family: \"{}\", dtype: \"{}\", width: {}, model: {model:?} }}",
        family.as_str(),
        kind_name(kind),
        model_width(&vae)
    );
    println!("{}", serde_json::to_string(&model)?);
    Ok(())
}

/// Measures both streams at every (size, chunk) and fits each; `report` sees every measurement.
pub fn calibrate(
    vae: &VideoVae,
    latent_sizes: &[(i64, i64)],
    latent_chunks: &[i64],
    mut report: impl FnMut(&str, &Measurement),
) -> anyhow::Result<MemoryModel> {
    let (mut encode, mut decode) = (Vec::new(), Vec::new());
    // The first runs also pay one-time costs (kernel caches, thread pools) that are no chunk's.
    let &(h, w) = latent_sizes.first().context("no sizes to measure")?;
    measure_decode(vae, h, w, 1, None)?;
    measure_encode(vae, h, w, 1, None)?;
    let runs = latent_sizes.iter().flat_map(|&(h, w)| latent_chunks.iter().map(move |&k| (h, w, k, None)));
    // Tiled runs of the largest size tell the caches (all tiles hold one) from the working set.
    let &(h, w) = latent_sizes.last().expect("checked above");
    let tiled = [2, 3].map(|parts| (h, w, 1, Some(SpatialTiles { tile_latent: h.max(w) / parts + 2, overlap_latent: 2 })));
    for (h, w, k, tiles) in runs.chain(tiled) {
        let m = measure_decode(vae, h, w, k, tiles)?;
        report("decode", &m);
        decode.push(m);
        let m = measure_encode(vae, h, w, k, tiles)?;
        report("encode", &m);
        encode.push(m);
    }
    Ok(MemoryModel { encode: fit(&encode)?, decode: fit(&decode)? })
}

/// Tensors of 1 MiB and more get their own mappings, returned to the system when freed, so RSS
/// follows live tensors (glibc's default threshold adapts upwards to 32 MiB and keeps freed tensors
/// in its heap, where peak RSS sees them only once and in no useful order). Process-wide, once.
pub fn track_allocations_in_rss() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    });
}

/// Runs `work` and returns its result with the growth of peak RSS over the RSS it started from.
pub fn measure_peak<T>(work: impl FnOnce() -> T) -> (T, f64) {
    track_allocations_in_rss();
    // Freed heap pages that glibc keeps would be reused unseen and hide part of the peak.
    unsafe {
        libc::malloc_trim(0);
    }
    reset_peak_host_bytes();
    let baseline = peak_host_bytes().unwrap_or(0);
    let out = work();
    let peak = peak_host_bytes().unwrap_or(0);
    (out, peak.saturating_sub(baseline) as f64)
}

/// `tiles: None` measures the untiled stream.
pub fn measure_decode(vae: &VideoVae, latent_h: i64, latent_w: i64, latent_frames: i64, tiles: Option<SpatialTiles>) -> anyhow::Result<Measurement> {
    let latent = Tensor::randn([1, vae.latent_channels(), 1 + latent_frames, latent_h, latent_w], (Kind::Float, Device::Cpu));
    let (result, peak_bytes) = measure_peak(|| {
        tch::no_grad(|| -> anyhow::Result<()> {
            let mut stream = TiledDecoder::new(vae, tiles);
            let _ = stream.push(&latent.narrow(2, 0, 1))?;
            let _ = stream.push(&latent.narrow(2, 1, latent_frames))?;
            Ok(())
        })
    });
    result?;
    Ok(measurement(vae, latent_h, latent_w, latent_frames, tiles.as_ref(), peak_bytes))
}

pub fn measure_encode(vae: &VideoVae, latent_h: i64, latent_w: i64, latent_frames: i64, tiles: Option<SpatialTiles>) -> anyhow::Result<Measurement> {
    let f = vae.spatial_factor();
    let frames = latent_frames * vae.temporal_factor();
    let video = Tensor::rand([1, 3, 1 + frames, latent_h * f, latent_w * f], (Kind::Float, Device::Cpu)) * 2.0 - 1.0;
    let (result, peak_bytes) = measure_peak(|| {
        tch::no_grad(|| -> anyhow::Result<()> {
            let mut stream = TiledEncoder::new(vae, tiles);
            let _ = stream.push(&video.narrow(2, 0, 1))?;
            let _ = stream.push(&video.narrow(2, 1, frames))?;
            Ok(())
        })
    });
    result?;
    Ok(measurement(vae, latent_h, latent_w, latent_frames, tiles.as_ref(), peak_bytes))
}

fn measurement(vae: &VideoVae, latent_h: i64, latent_w: i64, latent_frames: i64, tiles: Option<&SpatialTiles>, peak_bytes: f64) -> Measurement {
    let f = vae.spatial_factor();
    let grid = TileGrid::new(latent_h, latent_w, tiles);
    Measurement {
        pixel_frames: latent_frames * vae.temporal_factor(),
        pixels: grid.rows[0].len() * grid.cols[0].len() * f * f,
        covered_pixels: grid.tiles().map(|(r, c)| r.len() * c.len() * f * f).sum(),
        peak_bytes,
    }
}

/// Least squares of `peak = fixed + a · frames · pixels + b · covered_pixels`. Negative terms are
/// noise and clamp to 0.
pub fn fit(measurements: &[Measurement]) -> anyhow::Result<StreamCost> {
    if measurements.len() < 3 {
        bail!("need at least 3 measurements to fit 3 constants, got {}", measurements.len());
    }
    let rows: Vec<[f64; 3]> = measurements.iter().map(|m| [1.0, (m.pixel_frames * m.pixels) as f64, m.covered_pixels as f64]).collect();
    let mut normal = [[0.0f64; 3]; 3];
    let mut rhs = [0.0f64; 3];
    for (row, m) in rows.iter().zip(measurements) {
        for i in 0..3 {
            rhs[i] += row[i] * m.peak_bytes;
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

pub fn parse_family(name: &str) -> anyhow::Result<Family> {
    match name {
        "wan21" => Ok(Family::Wan21),
        "wan22" => Ok(Family::Wan22),
        "seedvr2" => Ok(Family::Seedvr2),
        other => bail!("unknown VAE family `{other}` (wan21, wan22, seedvr2)"),
    }
}

pub fn load_vae(weights: &Path, family: Family, kind: Kind) -> anyhow::Result<VideoVae> {
    let device = Device::Cpu;
    Ok(match family {
        Family::Seedvr2 => VideoVae::SeedVr2(SeedVr2Vae::load(weights, &SeedVr2LoadOptions { device, kind })?),
        _ => VideoVae::Wan { family, model: WanVae::load(weights, &WanLoadOptions { device, kind })? },
    })
}

fn parse_list<T>(text: &str, parse: impl Fn(&str) -> Option<T>) -> anyhow::Result<Vec<T>> {
    text.split(',').filter(|s| !s.trim().is_empty()).map(|s| parse(s).with_context(|| format!("cannot parse `{s}`"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_exact_constants() {
        let truth = StreamCost { fixed_bytes: 5e6, bytes_per_voxel: 1200.0, bytes_per_pixel: 300.0 };
        let measurements: Vec<Measurement> = [(4, 4096), (8, 4096), (4, 16384), (8, 24576)]
            .iter()
            .map(|&(f, p)| Measurement { pixel_frames: f, pixels: p, covered_pixels: p, peak_bytes: truth.working_bytes(f, p, p) })
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
