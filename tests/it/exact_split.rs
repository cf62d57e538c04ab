//! Exact spatial splitting: the Wan streams with every large convolution run in row bands equal the
//! unsplit streams (the issue allows 1e-4; the arithmetic per output is the same, so it is ~1e-6),
//! and a split stream carries its causal cache across chunks like an unsplit one.
use std::path::Path;

use tch::{Device, Kind, Tensor};
use vaebox::models::family::Family;
use vaebox::models::vae::VideoVae;
use vaebox::models::nn::causal_cache::RowSplit;
use vaebox::models::wan::{WanLoadOptions, WanTuning, WanVae, WanVideoVae};
use vaebox::bench::tiling::synthetic_video;

const WEIGHTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/wan21_original/weights.safetensors");
const EXACT_ATOL: f64 = 1e-4;

fn load(channels_last: bool) -> VideoVae {
    let options = WanLoadOptions { device: Device::Cpu, kind: Kind::Float };
    let model = WanVae::load_tuned(Path::new(WEIGHTS), &options, &WanTuning { channels_last }).expect("reference weights");
    VideoVae::new(WanVideoVae::new(Family::Wan21, model))
}

fn max_abs(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size());
    (a - b).abs().max().double_value(&[])
}

/// Bands small enough that every convolution of the 128×176 clip (down to the 16×22 latent) splits.
fn bands(bytes: i64) -> Option<RowSplit> {
    Some(RowSplit { max_band_bytes: bytes })
}

fn decode(vae: &VideoVae, latent: &Tensor, split: Option<RowSplit>, pushes: &[i64]) -> Tensor {
    let mut decoder = vae.decoder();
    assert!(decoder.set_row_split(split));
    let mut start = 0;
    let mut out = Vec::new();
    for &n in pushes {
        out.push(decoder.push_some(&latent.narrow(2, start, n)).expect("decode"));
        start += n;
    }
    Tensor::cat(&out, 2)
}

#[test]
fn row_split_decode_and_encode_equal_unsplit() {
    tch::no_grad(|| {
        for channels_last in [true, false] {
            let vae = load(channels_last);
            let video = synthetic_video(9, 128, 176);
            let mut encoder = vae.encoder();
            let latent = encoder.push(&video).expect("encode").expect("3 latent frames");
            for band_bytes in [1, 64 << 10, 1 << 20] {
                let mut split_encoder = vae.encoder();
                assert!(split_encoder.set_row_split(bands(band_bytes)));
                let split_latent = split_encoder.push(&video).expect("encode").expect("3 latent frames");
                let encode_error = max_abs(&split_latent, &latent);
                let whole = decode(&vae, &latent, None, &[3]);
                let split = decode(&vae, &latent, bands(band_bytes), &[3]);
                let decode_error = max_abs(&split, &whole);
                println!("channels_last {channels_last}, bands ≤ {band_bytes} B: encode {encode_error:e}, decode {decode_error:e}");
                assert!(encode_error <= EXACT_ATOL && decode_error <= EXACT_ATOL);
            }
        }
    });
}

#[test]
fn row_split_streams_across_chunks_and_can_start_mid_stream() {
    tch::no_grad(|| {
        let vae = load(true);
        let latent = Tensor::randn([1, 16, 4, 12, 20], (Kind::Float, Device::Cpu));
        let whole = decode(&vae, &latent, None, &[4]);
        let chunked_split = decode(&vae, &latent, bands(32 << 10), &[1, 2, 1]);
        println!("chunked split vs whole: {:e}", max_abs(&chunked_split, &whole));
        assert!(max_abs(&chunked_split, &whole) <= EXACT_ATOL);
        // Switching the split on after some chunks (what the out-of-memory retry does) is exact too.
        let mut decoder = vae.decoder();
        let first = decoder.push_some(&latent.narrow(2, 0, 2)).unwrap();
        assert!(decoder.set_row_split(bands(16 << 10)));
        let rest = decoder.push_some(&latent.narrow(2, 2, 2)).unwrap();
        let switched = Tensor::cat(&[first, rest], 2);
        println!("split switched on mid-stream vs whole: {:e}", max_abs(&switched, &whole));
        assert!(max_abs(&switched, &whole) <= EXACT_ATOL);
    });
}
