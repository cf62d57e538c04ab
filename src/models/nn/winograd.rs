//! Winograd F(m×m, 3×3) for the video VAEs' float32 3×3(×k_t) convolutions on the CPU.
//!
//! Why: our direct f32 convolutions already run at 85–99% of this CPU's f32 matmul peak
//! (docs/benchmarks.md), so going faster needs fewer multiplications. Winograd computes an m×m output
//! tile from an (m+2)² input tile with (m+2)² products per channel pair instead of 9m²: 2.25× fewer
//! for m = 2, 4× for m = 4. oneDNN's CPU builds no longer carry a Winograd convolution and libtorch
//! offers none, so the transforms are ours (one pass each, vectorised over channels in the
//! channels-last layout) and the products are libtorch batched matmuls, one per temporal tap.
//!
//! F(2×2, 3×3) is the one used: its results differ from the direct convolution's by about as much as
//! two direct implementations differ (1e-5 here); F(4×4, 3×3) saves more but costs accuracy (6–9e-5 on
//! the Wan VAE against diffusers), so it stays a measured alternative in the tests.
//!
//! Memory stays bounded: the transformed input and products live in one workspace of [`WORKSPACE_BYTES`]
//! that the calling thread keeps, filled band of tiles by band of tiles. Each convolution keeps its transformed
//! kernel (16/9 of its weight), since remaking it costs more than a one-frame call. It is made with the
//! weight at load ([`takes_weight`]), so it is the model's memory and not the first job's: the planner's
//! working-memory estimates (measured after a warm-up) never saw it.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tch::{Kind, Tensor};

use super::host_buffer;
use super::transform_pool;
use crate::models::ModelError;

/// `cpu_winograd`: process-wide, like libtorch's own switches; read on every eligible call.
static ENABLED: AtomicBool = AtomicBool::new(true);

pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Upper bound of the transformed input plus the products held at once, per convolution call.
const WORKSPACE_BYTES: i64 = 48 << 20;

/// Bytes of transformed kernels made by a call rather than at load (a model loaded while the switch was
/// off, or a convolution built outside a checkpoint load).
static MADE_ON_FIRST_USE: AtomicU64 = AtomicU64::new(0);

pub fn kernel_bytes_made_on_first_use() -> u64 {
    MADE_ON_FIRST_USE.load(Ordering::Relaxed)
}

pub fn note_made_on_first_use(kernel: &Tensor) {
    MADE_ON_FIRST_USE.fetch_add(crate::models::nn::weights::tensor_bytes(kernel), Ordering::Relaxed);
}

/// Whether a convolution with this weight will take this path on every call the VAEs make: a CPU f32
/// 3×3(×k_t) weight of at least [`MIN_CHANNELS`] inputs, stride 1, no temporal padding of its own, in a
/// model whose inputs are channels-last (the spatial padding of 1 is given per call).
pub fn takes_weight(weight: &Tensor, stride: [i64; 3], temporal_padding: i64, channels_last_inputs: bool) -> bool {
    weight_qualifies(weight, stride) && channels_last_inputs && temporal_padding == 0
}

/// What [`applies`] and [`takes_weight`] ask of the weight: the switch on, a CPU f32 3×3(×k_t) kernel of
/// at least [`MIN_CHANNELS`] inputs, stride 1.
fn weight_qualifies(weight: &Tensor, stride: [i64; 3]) -> bool {
    enabled()
        && weight.device() == tch::Device::Cpu
        && weight.kind() == Kind::Float
        && stride == [1, 1, 1]
        && matches!(weight.size5(), Ok((_, in_channels, _, 3, 3)) if in_channels >= MIN_CHANNELS)
}

/// Below this many input channels the transforms cost more than the products they save.
const MIN_CHANNELS: i64 = 16;

/// One F(m×m, 3×3) algorithm: its three transform matrices, row-major.
#[derive(Debug)]
pub struct Transform {
    /// Output tile side m.
    pub m: usize,
    /// Input tile side m + 2.
    pub a: usize,
    /// Bᵀ, a×a: input tile → transformed tile.
    bt: &'static [f32],
    /// G, a×3: kernel → transformed kernel.
    g: &'static [f32],
    /// Aᵀ, m×a: transformed product → output tile.
    at: &'static [f32],
}

/// F(2×2, 3×3) (Lavin & Gray, 2015): 16 products per tile instead of 36.
pub const F2X2: Transform = Transform {
    m: 2,
    a: 4,
    #[rustfmt::skip]
    bt: &[
        1.0, 0.0, -1.0, 0.0,
        0.0, 1.0, 1.0, 0.0,
        0.0, -1.0, 1.0, 0.0,
        0.0, 1.0, 0.0, -1.0,
    ],
    #[rustfmt::skip]
    g: &[
        1.0, 0.0, 0.0,
        0.5, 0.5, 0.5,
        0.5, -0.5, 0.5,
        0.0, 0.0, 1.0,
    ],
    #[rustfmt::skip]
    at: &[
        1.0, 1.0, 1.0, 0.0,
        0.0, 1.0, -1.0, -1.0,
    ],
};

/// F(4×4, 3×3) with interpolation points 0, ±1, ±2 (Lavin & Gray, 2015): 36 products per tile instead of 144.
/// The models use F(2×2), whose error is the smaller; `vaebox bench winograd` times and checks both.
pub const F4X4: Transform = Transform {
    m: 4,
    a: 6,
    #[rustfmt::skip]
    bt: &[
        4.0, 0.0, -5.0, 0.0, 1.0, 0.0,
        0.0, -4.0, -4.0, 1.0, 1.0, 0.0,
        0.0, 4.0, -4.0, -1.0, 1.0, 0.0,
        0.0, -2.0, -1.0, 2.0, 1.0, 0.0,
        0.0, 2.0, -1.0, -2.0, 1.0, 0.0,
        0.0, 4.0, 0.0, -5.0, 0.0, 1.0,
    ],
    #[rustfmt::skip]
    g: &[
        1.0 / 4.0, 0.0, 0.0,
        -1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0,
        -1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0,
        1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0,
        1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0,
        0.0, 0.0, 1.0,
    ],
    #[rustfmt::skip]
    at: &[
        1.0, 1.0, 1.0, 1.0, 1.0, 0.0,
        0.0, 1.0, -1.0, 2.0, -2.0, 0.0,
        0.0, 1.0, 1.0, 4.0, 4.0, 0.0,
        0.0, 1.0, -1.0, 8.0, -8.0, 1.0,
    ],
};

/// Whether [`conv3d`] takes this call (when [`enabled`]): CPU float32 in the channels-last-3d layout, a 3×3 spatial
/// kernel with stride 1, spatial padding 1 and none in time, and enough channels to pay.
pub fn applies(x: &Tensor, weight: &Tensor, stride: [i64; 3], padding: [i64; 3]) -> bool {
    if !weight_qualifies(weight, stride) {
        return false;
    }
    let (Ok((_, channels, frames, height, width)), Ok((_, in_channels, kernel_frames, _, _))) = (x.size5(), weight.size5()) else {
        return false;
    };
    x.device() == tch::Device::Cpu
        && x.kind() == Kind::Float
        && padding == [0, 1, 1]
        && channels == in_channels
        && frames >= kernel_frames
        && height > 0
        && width > 0
        && is_channels_last(x)
}

/// `[N, C, T, H, W]` stored as `[N, T, H, W, C]` with no gaps (the stride of a dimension of size 1 is
/// never used, and libtorch leaves it free).
fn is_channels_last(x: &Tensor) -> bool {
    let size = x.size();
    let (c, t, h, w) = (size[1], size[2], size[3], size[4]);
    let expected = [t * h * w * c, 1, h * w * c, w * c, c];
    x.stride().iter().zip(expected).zip(&size).all(|((&stride, wanted), &len)| len == 1 || stride == wanted)
}

/// The convolution of `x` (`[N, C, T, H, W]`, channels-last) with a kernel transformed by
/// [`transformed_kernel`] (`[a², k_t·C, C_out]`, any consecutive taps of it) and `bias`, stride 1,
/// spatial padding 1, no temporal padding; the output is channels-last too. Callers check [`applies`].
pub fn conv3d(x: &Tensor, kernel: &Tensor, bias: &Tensor, transform: &Transform) -> Result<Tensor, ModelError> {
    let (batch, channels, frames, height, width) = x.size5()?;
    let (_, taps_channels, out_channels) = kernel.size3()?;
    let kernel_frames = taps_channels / channels;
    let out_frames = frames - kernel_frames + 1;
    let (m, a) = (transform.m as i64, transform.a as i64);
    let tiles_w = (width + m - 1) / m;
    let tiles_h = (height + m - 1) / m;
    let cpu = (Kind::Float, tch::Device::Cpu);

    let u = kernel.f_contiguous()?;
    let bias = bias.f_to_kind(Kind::Float)?.f_contiguous()?;
    // SAFETY: a contiguous f32 tensor of `out_channels` values, alive until the end of this function.
    let bias_values = unsafe { std::slice::from_raw_parts(bias.data_ptr() as *const f32, out_channels as usize) };

    let out = Tensor::f_empty([batch, out_frames, height, width, out_channels], cpu)?.f_permute([0, 4, 1, 2, 3])?;
    let per_tile = a * a * (frames * channels + out_frames * out_channels) * 4;
    let tiles = tiles_w * tiles_h;
    let band_tiles_max = (WORKSPACE_BYTES / per_tile).clamp(1, tiles);
    let (v_len, m_len) = (a * a * band_tiles_max * frames * channels, out_frames * a * a * band_tiles_max * out_channels);
    let workspace = workspace(v_len + m_len)?;
    let v_all = workspace.f_narrow(0, 0, v_len)?;
    let m_all = workspace.f_narrow(0, v_len, m_len)?;
    let geometry = Geometry { channels, out_channels, frames, height, width, tiles_w };
    // Per thread: a tile after its first transform pass, and one channel vector.
    let scratch_len = (a * a * channels.max(out_channels) + channels.max(out_channels)) as usize;

    for b in 0..batch {
        let x_frames = x.f_select(0, b)?;
        let out_frames_b = out.f_select(0, b)?;
        let mut first_tile = 0;
        while first_tile < tiles {
            let band = Band { first_tile, tiles: band_tiles_max.min(tiles - first_tile) };
            // SAFETY: `x_frames` is a channels-last [C, T, H, W] f32 view (checked by `applies`) and
            // `v_all` a contiguous buffer larger than the band's [a², tiles, T, C]; both outlive the call.
            unsafe {
                let input = Shared(x_frames.data_ptr() as *mut f32);
                let dest = Shared(v_all.data_ptr() as *mut f32);
                parallel((band.tiles * frames) as usize, scratch_len, |items, scratch| input_transform(transform, &geometry, &band, input, dest, items, scratch))?;
            }
            // Per output frame, one batched matmul over all taps: for a tile, its k_t frames' transformed
            // values lie next to each other, so each matrix row is (k_t · C) contiguous values.
            for t in 0..out_frames {
                let rows_of_frame = v_all.f_as_strided([a * a, band.tiles, kernel_frames * channels], [band.tiles * frames * channels, frames * channels, 1], t * channels)?;
                let products = m_all.f_narrow(0, t * a * a * band.tiles * out_channels, a * a * band.tiles * out_channels)?.f_view([a * a, band.tiles, out_channels])?;
                let _ = rows_of_frame.f_bmm_out(&products, &u)?;
            }
            // SAFETY: `m_all` holds the band's [T_out, a², tiles, C_out] products; `out_frames_b` is a
            // channels-last [C_out, T_out, H, W] view of a fresh buffer; bands write disjoint rows.
            unsafe {
                let source = Shared(m_all.data_ptr() as *mut f32);
                let output = Shared(out_frames_b.data_ptr() as *mut f32);
                parallel((out_frames * band.tiles) as usize, scratch_len, |items, scratch| output_transform(transform, &geometry, &band, bias_values, source, output, items, scratch))?;
            }
            first_tile += band.tiles;
        }
    }
    Ok(out)
}

/// U[ξν, (k_t, C), C_out] = (G w Gᵀ)[ξ][ν] for each temporal tap and channel pair: one matmul of the
/// a²×9 matrix G⊗G with the weight laid out as [3·3, k_t·C·C_out] (faster here than a loop of ours,
/// whose writes scatter).
pub fn transformed_kernel(weight: &Tensor, transform: &Transform) -> Result<Tensor, ModelError> {
    let (out_channels, channels, kernel_frames, _, _) = weight.size5()?;
    let a = transform.a as i64;
    let g = Tensor::from_slice(transform.g).f_view([a, 3])?;
    let g_kron_g = Tensor::f_einsum("ik,jl->ijkl", &[&g, &g], None::<&[i64]>)?.f_reshape([a * a, 9])?;
    let taps = weight.f_to_kind(Kind::Float)?.f_permute([3, 4, 2, 1, 0])?.f_contiguous()?.f_view([9, kernel_frames * channels * out_channels])?;
    Ok(g_kron_g.f_matmul(&taps)?.f_view([a * a, kernel_frames * channels, out_channels])?)
}

thread_local! {
    /// The workspace, kept by the thread between calls: made afresh for every call it would be new
    /// mappings faulted in page by page each time (the bounded allocator maps every tensor over 64 KiB,
    /// glibc's every one over 32 MiB), which cost the decode all of Winograd's gain.
    static WORKSPACE: std::cell::RefCell<Option<Tensor>> = const { std::cell::RefCell::new(None) };
}

/// This thread's workspace, made now rather than at the first call, and written through: an empty
/// tensor's pages become resident only as a large call first fills them, which put up to 48 MiB on the
/// first big job's working memory, outside the planner's estimate (a job under a budget of half its
/// untiled memory peaked 14% over the estimate at 192×256, `tests/it/budget.rs`).
pub fn reserve_workspace() -> Result<(), ModelError> {
    let _zeroed = workspace(WORKSPACE_BYTES / 4)?.f_zero_()?;
    Ok(())
}

/// At least `floats` floats of this thread's workspace; [`WORKSPACE_BYTES`] unless one tile needs more.
fn workspace(floats: i64) -> Result<Tensor, ModelError> {
    WORKSPACE.with(|cell| {
        let mut kept = cell.borrow_mut();
        if kept.as_ref().is_none_or(|tensor| (tensor.numel() as i64) < floats) {
            *kept = None;
            *kept = Some(Tensor::f_empty([floats.max(WORKSPACE_BYTES / 4)], (Kind::Float, tch::Device::Cpu))?);
        }
        Ok(kept.as_ref().expect("set above").shallow_clone())
    })
}

/// Sizes of one call.
struct Geometry {
    channels: i64,
    out_channels: i64,
    frames: i64,
    height: i64,
    width: i64,
    tiles_w: i64,
}

/// The tiles (row-major over the frame) held in the workspace at once.
struct Band {
    first_tile: i64,
    tiles: i64,
}

/// A raw pointer the transform threads write through; each thread writes a disjoint range.
#[derive(Clone, Copy)]
struct Shared(*mut f32);
// SAFETY: used only inside `parallel`'s scope, and every thread reads shared input and writes its own items.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    /// A method, so that closures capture the whole `Shared` (which is `Sync`), not its field.
    fn at(&self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

/// Runs `work` over `0..items` split into contiguous ranges, one per thread (the transform pool's
/// helpers and this one), each with its own `scratch_len` floats from one fallible allocation: under a
/// memory limit this fails as an error, never as an abort.
fn parallel(items: usize, scratch_len: usize, work: impl Fn(std::ops::Range<usize>, &mut [f32]) + Sync) -> Result<(), ModelError> {
    let parts = transform_pool::parts().min(items).max(1);
    let mut scratch = host_buffer::zeroed::<f32>(parts * scratch_len)?;
    let base = Shared(scratch.as_mut_ptr());
    let per = items.div_ceil(parts);
    transform_pool::run_parts(parts, &|part| {
        let range = (part * per).min(items)..((part + 1) * per).min(items);
        // SAFETY: each part owns its slice of `scratch`, which outlives `run_parts`.
        let own = unsafe { std::slice::from_raw_parts_mut(base.at(part * scratch_len), scratch_len) };
        work(range, own);
    });
    Ok(())
}

/// V[ξν][tile][t][c] = (Bᵀ d B)[ξ][ν] for items `(tile, t)` numbered `tile · T + t`.
unsafe fn input_transform(transform: &Transform, geo: &Geometry, band: &Band, input: Shared, dest: Shared, items: std::ops::Range<usize>, scratch: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        return input_transform_avx512(transform, geo, band, input, dest, items, scratch);
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        return input_transform_avx2(transform, geo, band, input, dest, items, scratch);
    }
    input_transform_body(transform, geo, band, input, dest, items, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn input_transform_avx512(transform: &Transform, geo: &Geometry, band: &Band, input: Shared, dest: Shared, items: std::ops::Range<usize>, scratch: &mut [f32]) {
    input_transform_body(transform, geo, band, input, dest, items, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn input_transform_avx2(transform: &Transform, geo: &Geometry, band: &Band, input: Shared, dest: Shared, items: std::ops::Range<usize>, scratch: &mut [f32]) {
    input_transform_body(transform, geo, band, input, dest, items, scratch)
}

#[inline(always)]
unsafe fn input_transform_body(transform: &Transform, geo: &Geometry, band: &Band, input: Shared, dest: Shared, items: std::ops::Range<usize>, scratch: &mut [f32]) {
    let (a, m) = (transform.a, transform.m as i64);
    let c = geo.channels as usize;
    let (rows_done, zeros) = scratch.split_at_mut(a * a * c);
    zeros[..c].fill(0.0);
    let zeros = &zeros[..c];
    let plane = (geo.frames * band.tiles) as usize * c;
    for item in items {
        let (tile, frame) = (item as i64 / geo.frames, item as i64 % geo.frames);
        let global = band.first_tile + tile;
        let (y0, x0) = ((global / geo.tiles_w) * m - 1, (global % geo.tiles_w) * m - 1);
        let pixel = |i: usize, j: usize| -> &[f32] {
            let (y, x) = (y0 + i as i64, x0 + j as i64);
            if y < 0 || y >= geo.height || x < 0 || x >= geo.width {
                return zeros;
            }
            let offset = ((frame * geo.height + y) * geo.width + x) as usize * c;
            std::slice::from_raw_parts(input.0.add(offset), c)
        };
        // Bᵀ d: rows_done[ξ][j] = Σ_i Bᵀ[ξ][i] d[i][j].
        for xi in 0..a {
            for j in 0..a {
                let out = &mut rows_done[(xi * a + j) * c..(xi * a + j + 1) * c];
                combine(out, transform.bt[xi * a..(xi + 1) * a].iter().enumerate().map(|(i, &coef)| (coef, pixel(i, j))));
            }
        }
        // (Bᵀ d) B: V[ξ][ν] = Σ_j rows_done[ξ][j] Bᵀ[ν][j].
        for xi in 0..a {
            for nu in 0..a {
                let offset = (xi * a + nu) * plane + item * c;
                let out = std::slice::from_raw_parts_mut(dest.0.add(offset), c);
                let row = &rows_done[xi * a * c..(xi + 1) * a * c];
                combine(out, transform.bt[nu * a..(nu + 1) * a].iter().enumerate().map(|(j, &coef)| (coef, &row[j * c..(j + 1) * c])));
            }
        }
    }
}

/// Y = Aᵀ M A + bias from M[t][ξν][tile][c], for items `(t, tile)` numbered `t · tiles + tile`, written where the tile lies in the output (clipped at the edges).
unsafe fn output_transform(transform: &Transform, geo: &Geometry, band: &Band, bias: &[f32], source: Shared, output: Shared, items: std::ops::Range<usize>, scratch: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        return output_transform_avx512(transform, geo, band, bias, source, output, items, scratch);
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        return output_transform_avx2(transform, geo, band, bias, source, output, items, scratch);
    }
    output_transform_body(transform, geo, band, bias, source, output, items, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn output_transform_avx512(transform: &Transform, geo: &Geometry, band: &Band, bias: &[f32], source: Shared, output: Shared, items: std::ops::Range<usize>, scratch: &mut [f32]) {
    output_transform_body(transform, geo, band, bias, source, output, items, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn output_transform_avx2(transform: &Transform, geo: &Geometry, band: &Band, bias: &[f32], source: Shared, output: Shared, items: std::ops::Range<usize>, scratch: &mut [f32]) {
    output_transform_body(transform, geo, band, bias, source, output, items, scratch)
}

#[inline(always)]
unsafe fn output_transform_body(transform: &Transform, geo: &Geometry, band: &Band, bias: &[f32], source: Shared, output: Shared, items: std::ops::Range<usize>, scratch: &mut [f32]) {
    let (a, m) = (transform.a, transform.m);
    let c = geo.out_channels as usize;
    let (rows_done, tile_out) = scratch.split_at_mut(a * a * c);
    let tile_out = &mut tile_out[..c];
    let tiles = band.tiles as usize;
    for item in items {
        let (frame, tile) = (item / tiles, item % tiles);
        let global = band.first_tile + tile as i64;
        let (y0, x0) = ((global / geo.tiles_w) * m as i64, (global % geo.tiles_w) * m as i64);
        let frame_products = frame * a * a * tiles;
        let product = |xi: usize, nu: usize| std::slice::from_raw_parts(source.0.add((frame_products + (xi * a + nu) * tiles + tile) * c), c);
        let frame = frame as i64;
        // Aᵀ M: rows_done[i][ν] = Σ_ξ Aᵀ[i][ξ] M[ξ][ν].
        for i in 0..m {
            for nu in 0..a {
                let out = &mut rows_done[(i * a + nu) * c..(i * a + nu + 1) * c];
                combine(out, transform.at[i * a..(i + 1) * a].iter().enumerate().map(|(xi, &coef)| (coef, product(xi, nu))));
            }
        }
        for i in 0..m {
            let y = y0 + i as i64;
            if y >= geo.height {
                break;
            }
            for j in 0..m {
                let x = x0 + j as i64;
                if x >= geo.width {
                    break;
                }
                let row = &rows_done[i * a * c..(i + 1) * a * c];
                combine(tile_out, transform.at[j * a..(j + 1) * a].iter().enumerate().map(|(nu, &coef)| (coef, &row[nu * c..(nu + 1) * c])));
                let offset = ((frame * geo.height + y) * geo.width + x) as usize * c;
                let out = std::slice::from_raw_parts_mut(output.0.add(offset), c);
                for ((o, t), b) in out.iter_mut().zip(&*tile_out).zip(bias) {
                    *o = t + b;
                }
            }
        }
    }
}

/// out = Σ coef · term over the terms whose coefficient is not zero (all of them equal length).
#[inline(always)]
fn combine<'t>(out: &mut [f32], terms: impl Iterator<Item = (f32, &'t [f32])>) {
    let mut first = true;
    for (coef, term) in terms {
        if coef == 0.0 {
            continue;
        }
        if first {
            for (o, t) in out.iter_mut().zip(term) {
                *o = coef * t;
            }
            first = false;
        } else {
            for (o, t) in out.iter_mut().zip(term) {
                *o += coef * t;
            }
        }
    }
    if first {
        out.fill(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    fn channels_last(x: Tensor) -> Tensor {
        x.permute([0, 2, 3, 4, 1]).contiguous().permute([0, 4, 1, 2, 3])
    }

    #[test]
    fn winograd_equals_the_direct_convolution() {
        tch::manual_seed(7);
        let opts = (Kind::Float, Device::Cpu);
        // Odd sizes leave partial tiles at the right and bottom edges; k_t 1 and 3, batch 2.
        for (batch, c, co, frames, kt, h, w) in [(1, 16, 24, 3, 3, 9, 7), (2, 32, 16, 4, 1, 5, 13), (1, 16, 16, 5, 3, 1, 1)] {
            let x = channels_last(Tensor::randn([batch, c, frames, h, w], opts));
            let weight = Tensor::randn([co, c, kt, 3, 3], opts) / ((c * kt * 9) as f64).sqrt();
            let bias = Tensor::randn([co], opts);
            assert!(applies(&x, &weight, [1, 1, 1], [0, 1, 1]));
            let direct = x.conv3d(&weight, Some(&bias), [1, 1, 1], [0, 1, 1], [1, 1, 1], 1);
            for transform in [&F2X2, &F4X4] {
                let ours = conv3d(&x, &transformed_kernel(&weight, transform).unwrap(), &bias, transform).unwrap();
                assert_eq!(ours.size(), direct.size());
                let error = (&ours - &direct).abs().max().double_value(&[]);
                assert!(error < 1e-4, "F({m}x{m}) on {:?}: {error:e}", x.size(), m = transform.m);
            }
        }
    }

    #[test]
    fn the_later_taps_of_a_kernel_convolve_like_the_later_taps_of_its_weight() {
        tch::manual_seed(8);
        let opts = (Kind::Float, Device::Cpu);
        let (c, co) = (16, 16);
        let weight = Tensor::randn([co, c, 3, 3, 3], opts) / ((c * 27) as f64).sqrt();
        let bias = Tensor::randn([co], opts);
        let kernel = transformed_kernel(&weight, &F2X2).unwrap();
        for (first, taps) in [(1, 2), (2, 1)] {
            let x = channels_last(Tensor::randn([1, c, taps + 1, 6, 10], opts));
            let direct = x.conv3d(&weight.narrow(2, first, taps), Some(&bias), [1, 1, 1], [0, 1, 1], [1, 1, 1], 1);
            let ours = conv3d(&x, &kernel.narrow(1, first * c, taps * c), &bias, &F2X2).unwrap();
            let error = (&ours - &direct).abs().max().double_value(&[]);
            assert!(error < 1e-4, "taps {first}..{}: {error:e}", first + taps);
        }
    }

    #[test]
    fn it_declines_what_it_does_not_compute() {
        let opts = (Kind::Float, Device::Cpu);
        let x = channels_last(Tensor::randn([1, 16, 3, 8, 8], opts));
        let weight = Tensor::randn([16, 16, 3, 3, 3], opts);
        assert!(!applies(&x, &weight, [1, 2, 2], [0, 1, 1]));
        assert!(!applies(&x, &weight, [1, 1, 1], [1, 1, 1]));
        assert!(!applies(&x.contiguous(), &weight, [1, 1, 1], [0, 1, 1]));
        assert!(!applies(&x.to_kind(Kind::BFloat16), &weight, [1, 1, 1], [0, 1, 1]));
        let small = channels_last(Tensor::randn([1, 3, 3, 8, 8], opts));
        assert!(!applies(&small, &Tensor::randn([16, 3, 3, 3, 3], opts), [1, 1, 1], [0, 1, 1]));
    }
}
