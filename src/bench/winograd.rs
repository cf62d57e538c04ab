//! The CPU Winograd convolution against oneDNN's direct one on the VAE decoder's layer shapes: time and
//! error per shape, for F(2×2) and F(4×4). What `cpu_winograd` and its minimum channel count were chosen by.
use tch::{Device, Kind, Tensor};

use crate::models::nn::winograd::{conv3d, transformed_kernel, F2X2, F4X4};

#[derive(Debug, clap::Args)]
pub struct WinogradBenchArgs {
    /// Intra-op threads.
    #[arg(long, default_value_t = 2)]
    pub threads: i32,
    /// Timed calls per shape; the best is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
}

/// `(channels, height, width, output frames)`: small shapes, then the decoder's levels at 480×832 (384
/// channels at 120×208, 192 at 240×416, 96 at 480×832).
const SHAPES: [(i64, i64, i64, i64); 10] = [
    (96, 128, 128, 4),
    (192, 64, 64, 4),
    (384, 32, 32, 4),
    (384, 16, 16, 9),
    (384, 16, 16, 1),
    (96, 256, 256, 2),
    (384, 120, 208, 2),
    (192, 240, 416, 2),
    (96, 480, 832, 2),
    (192, 128, 128, 4),
];

pub fn run(args: &WinogradBenchArgs) -> anyhow::Result<()> {
    tch::set_num_threads(args.threads);
    let opts = (Kind::Float, Device::Cpu);
    println!("| channels | h×w | frames | direct ms | F(2×2) ms | speed-up | max err | F(4×4) ms | speed-up | max err |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (c, h, w, out_frames) in SHAPES {
        // Channels-last inputs and weights, as the VAEs hold them.
        let x = Tensor::randn([1, c, out_frames + 2, h, w], opts).permute([0, 2, 3, 4, 1]).contiguous().permute([0, 4, 1, 2, 3]);
        let weight = (Tensor::randn([c, c, 3, 3, 3], opts) / ((c * 27) as f64).sqrt()).permute([0, 2, 3, 4, 1]).contiguous().permute([0, 4, 1, 2, 3]);
        let bias = Tensor::randn([c], opts);
        let direct = || x.mkldnn_convolution(&weight, Some(&bias), [0, 1, 1], [1, 1, 1], [1, 1, 1], 1);
        let direct_ms = best_ms(args.repeat, &|| drop(direct()));
        let reference = direct();
        let mut row = format!("| {c} | {h}×{w} | {out_frames} | {direct_ms:.1} |");
        for transform in [&F2X2, &F4X4] {
            let kernel = transformed_kernel(&weight, transform)?;
            let ours = || conv3d(&x, &kernel, &bias, transform);
            let error = (ours()? - &reference).abs().max().double_value(&[]);
            let ms = best_ms(args.repeat, &|| drop(ours()));
            row += &format!(" {ms:.1} | {:.2}× | {error:.1e} |", direct_ms / ms);
        }
        println!("{row}");
    }
    Ok(())
}

/// The best of `repeat` timed calls after one warm-up, in milliseconds.
fn best_ms(repeat: usize, call: &dyn Fn()) -> f64 {
    call();
    (0..repeat.max(1))
        .map(|_| {
            let started = std::time::Instant::now();
            call();
            started.elapsed().as_secs_f64() * 1000.0
        })
        .fold(f64::MAX, f64::min)
}
