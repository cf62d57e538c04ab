//! Peak working memory of a VAE stream as a function of chunk frames and tile pixels, with the
//! constants measured by `vaebox calibrate` kept here as data (one row per family, dtype and width).
use serde::{Deserialize, Serialize};
use tch::{Device, Kind};

use crate::device::kind_name;
use crate::models::family::Family;
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

impl TiledOp {
    pub fn as_str(self) -> &'static str {
        match self {
            TiledOp::Encode => "encode",
            TiledOp::Decode => "decode",
            TiledOp::Reconstruct => "reconstruct",
        }
    }
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
    /// Estimated peak working bytes of `op` in a job, for pushes of `pixel_frames` frames on tiles of
    /// `tile_pixels`, with caches over `covered_pixels` (the summed area of all tiles). The executor's
    /// out-of-memory retry keeps a snapshot of the pushed streams (`snapshot_pixels`: every tile's, or
    /// one tile's when tile-major; 0 for a bare stream) through each push, so that a push that fails can
    /// be undone, and their previous causal caches stay alive beside the new ones. The calibrated rows
    /// are measured on bare streams (calibrate's runs push without it). Wan 2.1 f32 at 256×256: 1288 MiB
    /// per push bare, 1754 MiB in a job, 1283 MiB there with the snapshot skipped.
    pub fn peak_bytes(&self, op: TiledOp, pixel_frames: i64, tile_pixels: i64, covered_pixels: i64, snapshot_pixels: i64) -> f64 {
        let pushing = |cost: &StreamCost| cost.working_bytes(pixel_frames, tile_pixels, covered_pixels) + cost.bytes_per_pixel * snapshot_pixels as f64;
        let cache = |cost: &StreamCost| cost.bytes_per_pixel * covered_pixels as f64;
        match op {
            TiledOp::Encode => pushing(&self.encode),
            TiledOp::Decode => pushing(&self.decode),
            // One stream computes while the other only holds its cache.
            TiledOp::Reconstruct => (pushing(&self.encode) + cache(&self.decode)).max(pushing(&self.decode) + cache(&self.encode)),
        }
    }

    /// The calibrated row of the nearest width for this family (of this device and dtype when there
    /// is one), scaled linearly to the model's width and element size: a rough guess between measured
    /// widths. Without a row for the device, CPU rows stand in (cuDNN's workspaces are not in them:
    /// `device_memory_margin_mib` and the out-of-memory retry cover the difference).
    pub fn lookup(device: Device, family: Family, kind: Kind, width: i64) -> Option<MemoryModel> {
        let dtype = kind_name(kind);
        let device = device_class(device);
        let row = CALIBRATED
            .iter()
            .filter(|row| row.family == family.as_str())
            .min_by_key(|row| (row.device != device, (row.width - width).abs(), row.dtype != dtype))?;
        // Width matters more than the element size (activations do not scale with the width; bf16 is
        // half of f32 at the measured width), so a row of another dtype scales with the element size.
        let element = |name: &str| if name == "f32" { 4.0 } else { 2.0 };
        let factor = width as f64 / row.width as f64 * element(dtype) / element(row.dtype);
        Some(MemoryModel { encode: row.model.encode.scaled(factor), decode: row.model.decode.scaled(factor) })
    }

    pub fn for_vae(vae: &VideoVae, kind: Kind, device: Device) -> Option<MemoryModel> {
        Self::lookup(device, vae.family(), kind, model_width(vae))
    }
}

/// The `device` key of calibration rows.
pub fn device_class(device: Device) -> &'static str {
    if device.is_cuda() {
        "cuda"
    } else {
        "cpu"
    }
}

/// The width a calibration row is keyed by: the decoder's full-resolution channel count.
pub fn model_width(vae: &VideoVae) -> i64 {
    vae.memory_width()
}

/// One measured row (`vaebox calibrate` prints rows in this form).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CalibratedRow {
    /// `cpu` (peak RSS growth) or `cuda` (the caching allocator's peak allocated bytes).
    pub device: &'static str,
    pub family: &'static str,
    pub dtype: &'static str,
    pub width: i64,
    pub model: MemoryModel,
}

/// Measured on this CPU box (2 cores, AVX-512 BF16, libtorch 2.13, channels-last) by `vaebox
/// calibrate`: peak RSS growth of a fresh child process per run, tensors ≥ 64 KiB mapped on their own
/// (`device::init`), 3 frame sizes × 1 and 2 latent frames per push plus 2×2, 2×3 and 3×4 tilings of
/// the largest size. Widths: 12 is the small random Wan 2.1 of the reference data, 96 the released
/// layout (random weights: memory does not depend on the values). Activations do not scale linearly
/// with the width (96 costs 8.3× the voxel bytes of 12 and 7.5× the cache bytes, not 8×), so only a
/// calibrated width is trustworthy; bf16 costs half of f32 at width 96 (within 3%). Re-measured in
/// session 3: the rows before it predated the direct oneDNN convolutions (the width-12 row then
/// overstated the voxel bytes 4.7×). Session 4 added the released layouts of Wan 2.2 (decoder width
/// 256) and SeedVR2 (width 128), both dtypes, at smaller frame sizes (those models are slower here).
pub const CALIBRATED: &[CalibratedRow] = &[
    // vaebox calibrate --weights ../shared/reference/wan21_original/weights.safetensors --sizes 8x8,12x16,16x22
    // (session 3, after the direct oneDNN convolutions; every run within 1.9% of the row)
    CalibratedRow {
        device: "cpu",
        family: "wan21",
        dtype: "f32",
        width: 12,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 124_164.0, bytes_per_voxel: 286.5, bytes_per_pixel: 752.9 },
            decode: StreamCost { fixed_bytes: 331_887.0, bytes_per_voxel: 331.5, bytes_per_pixel: 1275.7 },
        },
    },
    // vaebox calibrate --weights .cache/bench/wan2.1/weights-seed0.safetensors --dtype f32
    // (session 3; sizes 8×8, 12×16, 16×24; every run within 1.2% of the row)
    CalibratedRow {
        device: "cpu",
        family: "wan21",
        dtype: "f32",
        width: 96,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 2247.8, bytes_per_pixel: 5605.0 },
            decode: StreamCost { fixed_bytes: 386_697.0, bytes_per_voxel: 2739.6, bytes_per_pixel: 9529.4 },
        },
    },
    // vaebox calibrate --weights .cache/bench/wan2.1/weights-seed0.safetensors --dtype bf16
    // (session 3; every run within 2.0% of the row)
    CalibratedRow {
        device: "cpu",
        family: "wan21",
        dtype: "bf16",
        width: 96,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 16_793.0, bytes_per_voxel: 1123.2, bytes_per_pixel: 2841.6 },
            decode: StreamCost { fixed_bytes: 514_428.0, bytes_per_voxel: 1357.4, bytes_per_pixel: 4832.2 },
        },
    },
    // vaebox calibrate --weights ../shared/reference/seedvr2/small_weights.safetensors --family seedvr2 --dtype f32
    //   --sizes 8x8,12x16,16x24 (session 21: the reference's small config, for tests/it/budget.rs; every run
    //   within 2.8% of the row. The width-128 row scaled to 32 overstates it by 4-11%)
    CalibratedRow {
        device: "cpu",
        family: "seedvr2",
        dtype: "f32",
        width: 32,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 534_572.0, bytes_per_voxel: 1092.1, bytes_per_pixel: 1863.3 },
            decode: StreamCost { fixed_bytes: 1_818_657.0, bytes_per_voxel: 1531.5, bytes_per_pixel: 3950.1 },
        },
    },
    // python scripts/bench/seedvr2_full_weights.py ../shared/reference/seedvr2/full_keys.txt .cache/bench/seedvr2/weights-seed0.safetensors
    // vaebox calibrate --weights .cache/bench/seedvr2/weights-seed0.safetensors --family seedvr2 --dtype bf16 --sizes 6x8,8x12,12x16
    // (session 4; the released layout with random weights; every run within 3.0% of the row)
    CalibratedRow {
        device: "cpu",
        family: "seedvr2",
        dtype: "bf16",
        width: 128,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 2_911_424.0, bytes_per_voxel: 2155.0, bytes_per_pixel: 4030.8 },
            decode: StreamCost { fixed_bytes: 6_569_242.0, bytes_per_voxel: 3163.2, bytes_per_pixel: 8924.4 },
        },
    },
    // The same with --dtype f32 (session 4; every run within 3.2% of the row)
    CalibratedRow {
        device: "cpu",
        family: "seedvr2",
        dtype: "f32",
        width: 128,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 4_263_917.0, bytes_per_voxel: 4345.0, bytes_per_pixel: 7921.4 },
            decode: StreamCost { fixed_bytes: 12_310_339.0, bytes_per_voxel: 6383.3, bytes_per_pixel: 17556.7 },
        },
    },
    // .venv/bin/python scripts/bench/diffusers_vae.py --preset wan2.2 --make-weights .cache/bench/wan2.2/weights-seed0.safetensors
    // vaebox calibrate --weights .cache/bench/wan2.2/weights-seed0.safetensors --family wan22 --dtype bf16 --sizes 8x12,12x16
    // (session 4; every run within −0.2% … +8.6% of the row. At 4×4–8×12 latent cells the peaks did not
    // follow the linear form, ±17%: a floor of ≈ 80 MiB whatever the push, so the row is fitted above it.)
    CalibratedRow {
        device: "cpu",
        family: "wan22",
        dtype: "bf16",
        width: 256,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 554.0, bytes_per_pixel: 1325.6 },
            decode: StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 1116.0, bytes_per_pixel: 3823.1 },
        },
    },
    // The same with --dtype f32 (session 4; every run within −0.3% … +6.9% of the row)
    CalibratedRow {
        device: "cpu",
        family: "wan22",
        dtype: "f32",
        width: 256,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 1101.6, bytes_per_pixel: 2582.4 },
            decode: StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 2234.1, bytes_per_pixel: 7577.9 },
        },
    },
    // CUDA rows: the GPU kit on an H100 80GB (session 20, torch 2.11.0+cu130, cuDNN benchmark mode on):
    // vaebox calibrate --device cuda --family F --dtype D --sizes 16x16,32x48 --chunks 1,2 --threads 1
    // on full-size random weights (docs/gpu.md, step calibrate); peak bytes of the CUDA caching allocator
    // in a fresh process per run; every run within −2.8% … +2.0% of its row.
    CalibratedRow {
        device: "cuda",
        family: "wan21",
        dtype: "f32",
        width: 96,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 2240.2, bytes_per_pixel: 5651.6 },
            decode: StreamCost { fixed_bytes: 1447760.0, bytes_per_voxel: 2726.3, bytes_per_pixel: 9609.8 },
        },
    },
    CalibratedRow {
        device: "cuda",
        family: "wan21",
        dtype: "bf16",
        width: 96,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 23292.0, bytes_per_voxel: 1130.6, bytes_per_pixel: 2827.4 },
            decode: StreamCost { fixed_bytes: 2303047.3, bytes_per_voxel: 1356.8, bytes_per_pixel: 4856.6 },
        },
    },
    CalibratedRow {
        device: "cuda",
        family: "wan22",
        dtype: "f32",
        width: 256,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 1101.5, bytes_per_pixel: 2366.8 },
            decode: StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 2219.2, bytes_per_pixel: 7227.0 },
        },
    },
    CalibratedRow {
        device: "cuda",
        family: "wan22",
        dtype: "bf16",
        width: 256,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 2674109.5, bytes_per_voxel: 551.3, bytes_per_pixel: 1204.0 },
            decode: StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 1107.9, bytes_per_pixel: 3643.6 },
        },
    },
    CalibratedRow {
        device: "cuda",
        family: "seedvr2",
        dtype: "f32",
        width: 128,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 10336842.3, bytes_per_voxel: 4894.3, bytes_per_pixel: 7977.1 },
            decode: StreamCost { fixed_bytes: 22591204.8, bytes_per_voxel: 7459.9, bytes_per_pixel: 17699.0 },
        },
    },
    CalibratedRow {
        device: "cuda",
        family: "seedvr2",
        dtype: "bf16",
        width: 128,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 5275230.8, bytes_per_voxel: 2439.6, bytes_per_pixel: 4047.3 },
            decode: StreamCost { fixed_bytes: 11405566.5, bytes_per_voxel: 3719.1, bytes_per_pixel: 8931.6 },
        },
    },
    // vaebox bench vae --family taehv … (makes .cache/bench/taehv/taew2_1-seed0.safetensors, the released
    // taew2_1 layout with random weights), then
    // vaebox calibrate --weights .cache/bench/taehv/taew2_1-seed0.safetensors --family taehv --dtype f32
    // (session 36, channels-last convs and the fused up-sampling; every run within -2.1%..+2.1% of the row)
    CalibratedRow {
        device: "cpu",
        family: "taehv",
        dtype: "f32",
        width: 64,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 896.5, bytes_per_pixel: 583.9 },
            decode: StreamCost { fixed_bytes: 465583.0, bytes_per_voxel: 567.2, bytes_per_pixel: 405.2 },
        },
    },
    // The same with --dtype bf16 (session 36; every run within -4.2%..+2.4% of the row)
    CalibratedRow {
        device: "cpu",
        family: "taehv",
        dtype: "bf16",
        width: 64,
        model: MemoryModel {
            encode: StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 459.5, bytes_per_pixel: 308.3 },
            decode: StreamCost { fixed_bytes: 223093.3, bytes_per_voxel: 280.2, bytes_per_pixel: 246.2 },
        },
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn row(width: i64, dtype: &str) -> MemoryModel {
        CALIBRATED.iter().find(|r| r.family == "wan21" && r.width == width && r.dtype == dtype).expect("calibrated row").model
    }

    /// A CUDA job plans with the rows measured on a GPU (the kit's), not the CPU's.
    #[test]
    fn cuda_lookup_uses_the_cuda_rows() {
        for family in [Family::Wan21, Family::Wan22, Family::Seedvr2] {
            for kind in [Kind::Float, Kind::BFloat16] {
                let cuda = CALIBRATED.iter().find(|r| r.device == "cuda" && r.family == family.as_str() && r.dtype == kind_name(kind)).expect("a CUDA row");
                assert_eq!(MemoryModel::lookup(Device::Cuda(0), family, kind, cuda.width), Some(cuda.model), "{family:?} {kind:?}");
                assert_ne!(MemoryModel::lookup(Device::Cpu, family, kind, cuda.width), Some(cuda.model), "{family:?} {kind:?}");
            }
        }
    }

    #[test]
    fn lookup_prefers_the_calibrated_width_then_scales() {
        assert_eq!(MemoryModel::lookup(Device::Cpu, Family::Wan21, Kind::Float, 96), Some(row(96, "f32")));
        assert_eq!(MemoryModel::lookup(Device::Cpu, Family::Wan21, Kind::BFloat16, 96), Some(row(96, "bf16")));
        // No bf16 row at width 12: the f32 row of that width at half the element size, not the
        // bf16 row of another width.
        let half = MemoryModel::lookup(Device::Cpu, Family::Wan21, Kind::BFloat16, 12).unwrap();
        assert!((half.decode.bytes_per_voxel * 2.0 - row(12, "f32").decode.bytes_per_voxel).abs() < 1e-9);
        // Between rows, the nearest width scales linearly.
        let between = MemoryModel::lookup(Device::Cpu, Family::Wan21, Kind::Float, 48).unwrap();
        assert!((between.decode.bytes_per_pixel - row(12, "f32").decode.bytes_per_pixel * 4.0).abs() < 1e-6);
        assert!(MemoryModel::lookup(Device::Cpu, Family::Realesrgan, Kind::Float, 64).is_none());
        // Every VAE family has measured rows of its released width at both CPU dtypes.
        for family in [Family::Wan21, Family::Wan22, Family::Seedvr2] {
            for dtype in ["f32", "bf16"] {
                assert!(CALIBRATED.iter().any(|r| r.family == family.as_str() && r.dtype == dtype && r.device == "cpu"), "{family:?} {dtype}");
            }
        }
    }

    #[test]
    fn reconstruct_holds_both_caches() {
        let cost = StreamCost { fixed_bytes: 0.0, bytes_per_voxel: 10.0, bytes_per_pixel: 1.0 };
        let model = MemoryModel { encode: cost, decode: cost };
        assert_eq!(model.peak_bytes(TiledOp::Decode, 4, 100, 100, 0), 4100.0);
        assert_eq!(model.peak_bytes(TiledOp::Reconstruct, 4, 100, 100, 0), 4200.0);
    }
}
