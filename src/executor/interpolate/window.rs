//! The input frames an interpolation still needs, read chunk by chunk as it asks for later ones: frames
//! are asked for in order (an output faster than the input never goes back), so everything before the
//! frame asked for is dropped and at most a chunk and a frame are held.
use std::collections::VecDeque;

use tch::{Device, Tensor};

use super::super::error::ExecError;
use super::super::frames;
use crate::media::FrameReader;

pub struct FrameWindow {
    reader: Option<FrameReader>,
    device: Device,
    /// `(index, [1, 3, H, W] Float in [0, 1])`, consecutive.
    held: VecDeque<(u64, Tensor)>,
    read: u64,
}

impl FrameWindow {
    pub fn new(reader: FrameReader, device: Device) -> FrameWindow {
        FrameWindow { reader: Some(reader), device, held: VecDeque::new(), read: 0 }
    }

    /// Input frame `index`; `None` once the input has ended before it.
    pub fn frame(&mut self, index: u64) -> Result<Option<Tensor>, ExecError> {
        while self.held.front().is_some_and(|(held, _)| *held < index) {
            self.held.pop_front();
        }
        while self.read <= index {
            let Some(reader) = self.reader.as_mut() else { return Ok(None) };
            let Some(chunk) = reader.next_chunk()? else {
                self.reader = None;
                return Ok(None);
            };
            let tensor = frames::to_tensor(&chunk, self.device);
            for offset in 0..chunk.count as i64 {
                let frame = self.read;
                self.read += 1;
                if frame >= index {
                    self.held.push_back((frame, tensor.narrow(0, offset, 1)));
                }
            }
        }
        Ok(self.held.front().filter(|(held, _)| *held == index).map(|(_, frame)| frame.shallow_clone()))
    }

    /// Frames decoded so far.
    pub fn frames_read(&self) -> u64 {
        self.read
    }
}
