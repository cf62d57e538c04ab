//! Between ffmpeg's packed RGB bytes and model tensors: `[n, 3, H, W]` floats in [0, 1].
//! On a GPU the conversions run on the device and only samples cross the bus (a 2560×1440 frame is
//! 11 MB of bytes against 44 MB of floats); on the CPU a frame at a time, so a chunk's output never
//! exists twice in host memory.
use std::collections::BTreeMap;
use std::path::Path;

use tch::{Device, Kind, Tensor};

use super::error::ExecError;
use crate::device::cuda;
use crate::media::latent::LatentError;
use crate::media::safetensors::{Dtype, TensorFileWriter};
use crate::media::{RgbFrames, SampleDepth};
use crate::models::{nn::host_buffer, ModelError};

pub fn to_tensor(chunk: &RgbFrames, device: Device) -> Tensor {
    samples_to_float(&upload(chunk, device))
}

/// The chunk's bytes on `device` as ffmpeg wrote them, `[n, H, W, 3]` u8. To a GPU from page-locked
/// memory without waiting: the copy is queued before the conversion that reads it, on the same stream.
pub fn upload(chunk: &RgbFrames, device: Device) -> Tensor {
    let (n, h, w) = (chunk.count as i64, chunk.height as i64, chunk.width as i64);
    let host = Tensor::from_slice(&chunk.data).view([n, h, w, 3]);
    if device == Device::Cpu {
        return host;
    }
    match cuda::pinned(&host) {
        Some(pinned) => pinned.to_device_(device, Kind::Uint8, true, false),
        None => host.to_device(device),
    }
}

/// `[n, H, W, 3]` u8 samples → `[n, 3, H, W]` floats in [0, 1], where the samples are.
pub fn samples_to_float(samples: &Tensor) -> Tensor {
    samples.permute([0, 3, 1, 2]).to_kind(Kind::Float) / 255.0
}

/// Frame `index` of `rgb` as written, `[1, 3, H, W]` floats in [0, 1] on the CPU, at either depth.
pub fn written_frame(rgb: &RgbFrames, index: usize) -> Tensor {
    let (h, w) = (rgb.height as i64, rgb.width as i64);
    let bytes = rgb.frame(index);
    let (samples, top) = match rgb.depth {
        SampleDepth::Eight => (Tensor::from_slice(bytes), 255.0),
        SampleDepth::Sixteen => {
            let values: Vec<i32> = bytes.chunks_exact(2).map(|pair| i32::from(u16::from_le_bytes([pair[0], pair[1]]))).collect();
            (Tensor::from_slice(&values), 65535.0)
        }
    };
    samples.view([1, h, w, 3]).permute([0, 3, 1, 2]).to_kind(Kind::Float) / top
}

/// 16-bit samples travel as i16 (torch has no unsigned 16-bit arithmetic): the sample less 32768, which
/// is the sample with its top bit flipped once read back as u16.
const SIXTEEN_BIT_OFFSET: f64 = 32768.0;

/// `[n, 3, H, W]` floats → the output's samples `[n, H, W, 3]` where the floats are: u8, or the i16 of
/// `SIXTEEN_BIT_OFFSET` at 16 bits (a 10-bit or lossless encoder gets what the model made).
pub fn to_samples(frames: &Tensor, depth: SampleDepth) -> Tensor {
    let top = depth_top(depth);
    let scaled = (frames * top).round_().clamp_(0.0, top).permute([0, 2, 3, 1]);
    match depth {
        SampleDepth::Eight => scaled.to_kind(Kind::Uint8),
        SampleDepth::Sixteen => (scaled - SIXTEEN_BIT_OFFSET).to_kind(Kind::Int16),
    }
    .contiguous()
}

/// `samples` from `to_samples` (on any device) into `out`, as ffmpeg reads them: packed, little endian.
pub fn download_into(samples: &Tensor, depth: SampleDepth, out: &mut [u8]) -> Result<(), ModelError> {
    let numel = samples.numel();
    samples.to_device(Device::Cpu).f_copy_data_u8(out, numel)?;
    if depth == SampleDepth::Sixteen {
        for pair in out.chunks_exact_mut(2) {
            let value = i16::from_ne_bytes([pair[0], pair[1]]) as u16 ^ 0x8000;
            pair.copy_from_slice(&value.to_le_bytes());
        }
    }
    Ok(())
}

fn depth_top(depth: SampleDepth) -> f64 {
    match depth {
        SampleDepth::Eight => 255.0,
        SampleDepth::Sixteen => 65535.0,
    }
}

/// The frames as the output's samples on the host. On the CPU frame by frame, so the conversion never
/// holds more than one float frame beyond its input; on a GPU the whole chunk in one conversion and one
/// copy (its samples are a quarter of the floats already there, or half at 16 bits).
pub fn to_rgb(frames: &Tensor, depth: SampleDepth) -> Result<RgbFrames, ModelError> {
    let (n, _, h, w) = frames.size4().expect("frames are [n, 3, H, W]");
    let frame_bytes = (3 * h * w) as usize * depth.bytes();
    let mut data = host_buffer::zeroed::<u8>(n as usize * frame_bytes)?;
    if frames.device() == Device::Cpu {
        for (i, out) in data.chunks_exact_mut(frame_bytes).enumerate() {
            download_into(&to_samples(&frames.narrow(0, i as i64, 1), depth), depth, out)?;
        }
    } else {
        download_into(&to_samples(frames, depth), depth, &mut data)?;
    }
    Ok(RgbFrames { width: w as u32, height: h as u32, count: n as usize, depth, data })
}

/// A `[1, C, T, H, W]` float32 safetensors file filled chunk by chunk along T. Each channel's frames
/// are contiguous in that layout, so a chunk is C runs; nothing ever holds the whole clip or latent.
pub struct VideoTensorWriter {
    file: TensorFileWriter,
    frames: u64,
    plane: u64,
    written: u64,
}

impl VideoTensorWriter {
    pub fn create(path: &Path, name: &str, shape: [i64; 5], metadata: &BTreeMap<String, String>) -> Result<Self, ExecError> {
        let file = TensorFileWriter::create(path, name, Dtype::F32, &shape, metadata).map_err(io_error)?;
        Ok(VideoTensorWriter { file, frames: shape[2] as u64, plane: (shape[3] * shape[4]) as u64, written: 0 })
    }

    /// Writes on in the partial file a stopped writer of the same tensor left, after its first `written`
    /// frames (true), or in a new one (false: no `written`, or no such file). With `keep_partial` the
    /// partial file stays if this writer stops too, for a checkpoint to name.
    pub fn resume_or_create(path: &Path, name: &str, shape: [i64; 5], metadata: &BTreeMap<String, String>, written: Option<u64>, keep_partial: bool) -> Result<(Self, bool), ExecError> {
        let frames = shape[2] as u64;
        let plane = (shape[3] * shape[4]) as u64;
        if let Some(written) = written {
            if let Some(file) = TensorFileWriter::continue_partial(path, name, Dtype::F32, &shape, metadata).map_err(io_error)? {
                return Ok((VideoTensorWriter { file, frames, plane, written }, true));
            }
        }
        let mut writer = Self::create(path, name, shape, metadata)?;
        if keep_partial {
            writer.file.keep_partial();
        }
        Ok((writer, false))
    }

    /// Frames written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// What is written so far is on the disk when this returns (before a checkpoint names it).
    pub fn sync(&self) -> Result<(), ExecError> {
        self.file.sync().map_err(io_error)
    }

    /// `chunk`: `[1, C, n, H, W]`, the next `n` frames.
    pub fn append(&mut self, chunk: &Tensor) -> Result<(), ExecError> {
        let (_, channels, n, _, _) = chunk.size5().expect("[1, C, n, H, W]");
        if self.written + n as u64 > self.frames {
            return Err(ExecError::Invalid(format!("more frames than the {} announced", self.frames)));
        }
        for channel in 0..channels {
            let values = chunk.get(0).get(channel).to_kind(Kind::Float).contiguous().to_device(Device::Cpu);
            let numel = values.numel();
            let mut bytes = host_buffer::zeroed::<u8>(numel * 4)?;
            values.f_copy_data_u8(&mut bytes, numel)?;
            if cfg!(target_endian = "big") {
                bytes.chunks_exact_mut(4).for_each(<[u8]>::reverse);
            }
            let offset = (channel as u64 * self.frames + self.written) * self.plane * 4;
            self.file.write_at(offset, &bytes).map_err(io_error)?;
        }
        self.written += n as u64;
        Ok(())
    }

    pub fn finish(self) -> Result<(), ExecError> {
        if self.written != self.frames {
            return Err(ExecError::Invalid(format!("{} frames were produced, {} were announced", self.written, self.frames)));
        }
        self.file.finish().map_err(io_error)
    }
}

fn io_error(e: std::io::Error) -> ExecError {
    ExecError::Latent(LatentError::Io(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_frames_read_back_within_half_a_step_at_either_depth() {
        let frames = Tensor::rand([2, 3, 5, 7], (Kind::Float, Device::Cpu));
        for (depth, top) in [(SampleDepth::Eight, 255.0), (SampleDepth::Sixteen, 65535.0)] {
            let rgb = to_rgb(&frames, depth).unwrap();
            for index in 0..2 {
                let read = written_frame(&rgb, index);
                assert_eq!(read.size(), [1, 3, 5, 7]);
                let error = f64::try_from((read - frames.narrow(0, index as i64, 1)).abs().max()).unwrap();
                assert!(error <= 0.5 / top + 1e-7, "{depth:?}: {error}");
            }
        }
    }

    /// The bytes ffmpeg gets, computed without `to_samples`: round half to even (torch's `round`), clamp, pack.
    fn expected_bytes(frames: &Tensor, depth: SampleDepth) -> Vec<u8> {
        let (n, _, h, w) = frames.size4().unwrap();
        let values = Vec::<f32>::try_from(frames.permute([0, 2, 3, 1]).contiguous().view([-1])).unwrap();
        assert_eq!(values.len() as i64, n * h * w * 3);
        let top = depth_top(depth) as f32;
        let sample = |v: f32| (v * top).round_ties_even().clamp(0.0, top) as u32;
        match depth {
            SampleDepth::Eight => values.iter().map(|&v| sample(v) as u8).collect(),
            SampleDepth::Sixteen => values.iter().flat_map(|&v| (sample(v) as u16).to_le_bytes()).collect(),
        }
    }

    #[test]
    fn samples_are_rounded_clamped_and_packed_at_either_depth_whole_or_frame_by_frame() {
        // Past both ends and at the half steps, where a wrong offset or a lost top bit shows.
        let edges = Tensor::from_slice(&[-0.5f32, 0.0, 0.5 / 255.0, 0.5, 32767.5 / 65535.0, 32768.0 / 65535.0, 1.0, 1.5]);
        let frames = Tensor::cat(&[Tensor::rand([88], (Kind::Float, Device::Cpu)), edges], 0).view([2, 3, 4, 4]);
        for depth in [SampleDepth::Eight, SampleDepth::Sixteen] {
            let expected = expected_bytes(&frames, depth);
            // Frame by frame (`to_rgb` on the CPU), and the whole chunk in one conversion (on a GPU).
            assert_eq!(to_rgb(&frames, depth).unwrap().data, expected, "{depth:?} frame by frame");
            let mut whole = vec![0u8; expected.len()];
            download_into(&to_samples(&frames, depth), depth, &mut whole).unwrap();
            assert_eq!(whole, expected, "{depth:?} whole chunk");
            let uploaded = samples_to_float(&upload(&to_rgb(&frames, SampleDepth::Eight).unwrap(), Device::Cpu));
            assert_eq!(uploaded.size(), [2, 3, 4, 4]);
        }
    }
}
