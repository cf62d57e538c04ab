//! Peak working memory of a VAE stream as a function of chunk frames and tile pixels, with the
//! constants measured by `vaebox calibrate` kept here as data (one row per family, dtype and width).
use serde::{Deserialize, Serialize};
use tch::Kind;

use crate::device::kind_name;
use crate::models::registry::Family;
use crate::models::vae::VideoVae;

/// Which streams a job keeps alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TiledOp {
    Encode,
    Decode,
    /// Encoder and decoder streams side by side (both caches live, one push at a time).
    Reconstruct,
}

/// Working memory on top of the loaded weights, in bytes:
/// `fixed + bytes_per_voxel · pixel_frames · tile_pixels + bytes_per_pixel · covered_pixels`,
/// where a chunk's activations scale with the voxels of one tile and push, and the causal caches
/// (a few frames per convolution, kept between pushes) with the frame area of all tiles together.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StreamCost {
    pub fixed_bytes: f64,
    pub bytes_per_voxel: f64,
    pub bytes_per_pixel: f64,
}

impl StreamCost {
    pub fn working_bytes(&self, pixel_frames: i64, tile_pixels: i64, covered_pixels: i64) -> f64 {
        self.fixed_bytes + self.bytes_per_voxel * (pixel_frames * tile_pixels) as f64 + self.bytes_per_pixel * covered_pixels as f64
    }

    fn scaled(&self, factor: f64) -> StreamCost {
        StreamCost { fixed_bytes: self.fixed_bytes, bytes_per_voxel: self.bytes_per_voxel * factor, bytes_per_pixel: self.bytes_per_pixel * factor }
    }
}

/// Encoder and decoder costs of one model at one dtype (pixel units on both sides: the encoder's
/// voxels are its input frames, the decoder's its output frames).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MemoryModel {
    pub encode: StreamCost,
    pub decode: StreamCost,
}

impl MemoryModel {
    /// Estimated peak working bytes of `op` for pushes of `pixel_frames` frames on tiles of
    /// `tile_pixels`, with caches over `covered_pixels` (the summed area of all tiles).
    pub fn peak_bytes(&self, op: TiledOp, pixel_frames: i64, tile_pixels: i64, covered_pixels: i64) -> f64 {
        let encode = self.encode.working_bytes(pixel_frames, tile_pixels, covered_pixels);
        let decode = self.decode.working_bytes(pixel_frames, tile_pixels, covered_pixels);
        match op {
            TiledOp::Encode => encode,
            TiledOp::Decode => decode,
            // One stream computes while the other only holds its cache.
            TiledOp::Reconstruct => {
                let encode_cache = self.encode.bytes_per_pixel * covered_pixels as f64;
                let decode_cache = self.decode.bytes_per_pixel * covered_pixels as f64;
                (encode + decode_cache).max(decode + encode_cache)
            }
        }
    }

    /// The calibrated row for this family and dtype, scaled linearly to the model's width (activation
    /// bytes are proportional to channels; measured rows exist for the released widths).
    pub fn lookup(family: Family, kind: Kind, width: i64) -> Option<MemoryModel> {
        let dtype = kind_name(kind);
        let row = CALIBRATED
            .iter()
            .filter(|row| row.family == family.as_str())
            .min_by_key(|row| (row.dtype != dtype, (row.width - width).abs()))?;
        // A row of another dtype scales with the element size.
        let element = |name: &str| if name == "f32" { 4.0 } else { 2.0 };
        let factor = width as f64 / row.width as f64 * element(dtype) / element(row.dtype);
        Some(MemoryModel { encode: row.model.encode.scaled(factor), decode: row.model.decode.scaled(factor) })
    }

    pub fn for_vae(vae: &VideoVae, kind: Kind) -> Option<MemoryModel> {
        Self::lookup(vae.family(), kind, model_width(vae))
    }
}

/// The width a calibration row is keyed by: the decoder's full-resolution channel count.
pub fn model_width(vae: &VideoVae) -> i64 {
    match vae {
        VideoVae::Wan { model, .. } => model.config().decoder_base_dim,
        VideoVae::SeedVr2(model) => model.config().block_out_channels.first().copied().unwrap_or(128),
    }
}

/// One measured row (`vaebox calibrate` prints rows in this form).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CalibratedRow {
    pub family: &'static str,
    pub dtype: &'static str,
    pub width: i64,
    pub model: MemoryModel,
}

/// Measured on this CPU box (2 cores, libtorch 2.13, channels-last) by `vaebox calibrate`: peak RSS
/// growth of a fresh child process per run, tensors ≥ 64 KiB mapped on their own (`device::init`),
/// sizes 8×8, 12×16, 16×22 latent cells × 1 and 2 latent frames per push plus 2×2, 2×3 and 3×4
/// tilings of 16×22; every run within 1.2% of its row. Only the small random Wan 2.1 (width 12) is
/// measured so far; the released width 96 is scaled from it until `vaebox calibrate --weights
/// <Wan2.1_VAE>` adds its own row.
pub const CALIBRATED: &[CalibratedRow] = &[
    // vaebox calibrate --weights ../shared/reference/wan21_original/weights.safetensors --sizes 8x8,12x16,16x22
    CalibratedRow {
        family: "wan21",
        dtype: "f32",
        width: 12,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 643_508.0, bytes_per_voxel: 1547.3, bytes_per_pixel: 812.5 },
            decode: StreamCost { fixed_bytes: 454_858.0, bytes_per_voxel: 1574.3, bytes_per_pixel: 1355.9 },
        },
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_scales_with_width_and_element_size() {
        let base = MemoryModel::lookup(Family::Wan21, Kind::Float, 12).unwrap();
        let wide = MemoryModel::lookup(Family::Wan21, Kind::Float, 96).unwrap();
        assert!((wide.decode.bytes_per_voxel / base.decode.bytes_per_voxel - 8.0).abs() < 1e-9 || CALIBRATED.iter().any(|r| r.width == 96));
        let half = MemoryModel::lookup(Family::Wan21, Kind::BFloat16, 12).unwrap();
        if !CALIBRATED.iter().any(|r| r.family == "wan21" && r.dtype == "bf16") {
            assert!((half.decode.bytes_per_voxel * 2.0 - base.decode.bytes_per_voxel).abs() < 1e-9);
        }
        assert!(MemoryModel::lookup(Family::Realesrgan, Kind::Float, 64).is_none());
    }

    #[test]
    fn reconstruct_holds_both_caches() {
        let cost = StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 10.0, bytes_per_pixel: 1.0 };
        let model = MemoryModel { encode: cost, decode: cost };
        assert_eq!(model.peak_bytes(TiledOp::Decode, 4, 100, 100), 4100.0);
        assert_eq!(model.peak_bytes(TiledOp::Reconstruct, 4, 100, 100), 4200.0);
    }
}
