//! Between ffmpeg's packed RGB bytes and model tensors: `[n, 3, H, W]` floats in [0, 1].
use std::collections::BTreeMap;
use std::path::Path;

use tch::{Device, Kind, Tensor};

use super::ExecError;
use crate::media::latent::LatentError;
use crate::media::safetensors::{Dtype, TensorFileWriter};
use crate::media::{RgbFrames, SampleDepth};
use crate::models::{nn::host_buffer, ModelError};

pub fn to_tensor(chunk: &RgbFrames, device: Device) -> Tensor {
    let (n, h, w) = (chunk.count as i64, chunk.height as i64, chunk.width as i64);
    Tensor::from_slice(&chunk.data).view([n, h, w, 3]).to_device(device).permute([0, 3, 1, 2]).to_kind(Kind::Float) / 255.0
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

/// Frame by frame, so the conversion never holds more than one float frame beyond its input; at
/// 16 bits straight from the floats (a 10-bit or lossless encoder gets what the model made).
pub fn to_rgb(frames: &Tensor, depth: SampleDepth) -> Result<RgbFrames, ModelError> {
    let (n, _, h, w) = frames.size4().expect("frames are [n, 3, H, W]");
    let samples = (3 * h * w) as usize;
    let frame_bytes = samples * depth.bytes();
    let mut data = host_buffer::zeroed::<u8>(n as usize * frame_bytes)?;
    for (i, out) in data.chunks_exact_mut(frame_bytes).enumerate() {
        let top = match depth {
            SampleDepth::Eight => 255.0,
            SampleDepth::Sixteen => 65535.0,
        };
        let pixels = (frames.get(i as i64) * top).round_().clamp_(0.0, top).permute([1, 2, 0]).contiguous().to_device(Device::Cpu);
        match depth {
            SampleDepth::Eight => pixels.to_kind(Kind::Uint8).copy_data_u8(out, frame_bytes),
            SampleDepth::Sixteen => {
                let mut values = host_buffer::zeroed::<i32>(samples)?;
                pixels.to_kind(Kind::Int).copy_data(&mut values, samples);
                for (bytes, value) in out.chunks_exact_mut(2).zip(values) {
                    bytes.copy_from_slice(&(value as u16).to_le_bytes());
                }
            }
        }
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
}
