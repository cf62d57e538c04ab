//! The prepared LQ frames a FlashVSR job's coming steps read: each input frame upscaled ×4 as the original
//! does (Pillow's bicubic on bytes) and fitted to the model's sides, held only while a step still reads it.
//! A job going on from a checkpoint passes over the frames before its next step without preparing them.
use tch::{Device, Tensor};

use super::geometry::FlashVsrGeometry;
use crate::executor::error::ExecError;
use crate::executor::frames;
use crate::media::{RgbFrames, SampleDepth};
use crate::models::flashvsr::resize::resize_rgb8;
use crate::models::flashvsr::schedule::Step;
use crate::models::stop::StopFlag;

/// `[3, H, W]` each, in [-1, 1], from frame `first` on.
pub struct LqWindow {
    frames: Vec<Tensor>,
    first: i64,
    /// Input frames read so far (passed over or prepared).
    read: i64,
    /// The last input frame passed over, as bytes `[h, w, 3]`: a run going on past the input's end pads
    /// with copies of it.
    last_passed: Option<Tensor>,
    pub input_ended: bool,
    geometry: FlashVsrGeometry,
    device: Device,
}

impl LqWindow {
    /// A window for a run whose next step is `step`: the frames before the first it reads are passed over.
    pub fn for_step(step: &Step, geometry: FlashVsrGeometry, device: Device) -> LqWindow {
        LqWindow { frames: Vec::new(), first: step.lq_reads().start, read: 0, last_passed: None, input_ended: false, geometry, device }
    }

    pub fn first(&self) -> i64 {
        self.first
    }

    pub fn end(&self) -> i64 {
        self.first + self.frames.len() as i64
    }

    /// Prepares the chunk's frames from the window's first on; `stop` is asked before each (Pillow's bicubic
    /// ×4 on the CPU takes tens of milliseconds a frame at large sizes).
    pub fn push_chunk(&mut self, chunk: &RgbFrames, stop: &StopFlag) -> Result<(), ExecError> {
        if chunk.count == 0 {
            self.input_ended = true;
            return Ok(());
        }
        // The frame reader hands out rgb24, which is what Pillow's bicubic (the original's) resizes.
        if chunk.depth != SampleDepth::Eight {
            return Err(ExecError::Invalid("FlashVSR prepares 8-bit frames; the reader gave 16-bit ones".into()));
        }
        let bytes = frames::upload(chunk, Device::Cpu);
        for i in 0..chunk.count as i64 {
            stop.check()?;
            let frame = bytes.get(i);
            if self.read < self.first {
                self.last_passed = Some(frame);
            } else {
                self.frames.push(self.prepare(&frame)?);
            }
            self.read += 1;
        }
        Ok(())
    }

    /// The input has ended: its last frame again (the original pads the clip with copies of it).
    pub fn repeat_last(&mut self) -> Result<(), ExecError> {
        self.input_ended = true;
        let last = match (self.frames.last(), &self.last_passed) {
            (Some(last), _) => last.shallow_clone(),
            (None, Some(bytes)) => self.prepare(&bytes.shallow_clone())?,
            (None, None) => return Err(ExecError::Invalid("the input has no frames".into())),
        };
        self.frames.push(last);
        Ok(())
    }

    /// Lets go of the frames before the first `step` reads.
    pub fn keep_from(&mut self, step: &Step) {
        let drop = (step.lq_reads().start - self.first).clamp(0, self.frames.len() as i64);
        self.frames.drain(..drop as usize);
        self.first += drop;
    }

    /// `[1, 3, n, H, W]`.
    pub fn clip(&self) -> Result<Tensor, ExecError> {
        Ok(Tensor::f_stack(&self.frames, 1)?.f_unsqueeze(0)?)
    }

    /// Bytes `[h, w, 3]` upscaled ×4 and fitted, on the device.
    fn prepare(&self, frame: &Tensor) -> Result<Tensor, ExecError> {
        let [h, w, _] = frame.size()[..] else { return Err(ExecError::Invalid(format!("a frame of shape {:?}", frame.size()))) };
        let bytes = Vec::<u8>::try_from(frame.flatten(0, -1)).map_err(|e| ExecError::Invalid(e.to_string()))?;
        let upscaled = resize_rgb8(&bytes, h as usize, w as usize, 4 * h as usize, 4 * w as usize);
        let upscaled = Tensor::from_slice(&upscaled).view([4 * h, 4 * w, 3]);
        Ok(self.geometry.fit(&upscaled)?.to_device(self.device))
    }
}
