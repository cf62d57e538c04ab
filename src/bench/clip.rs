//! Frames of a real clip for the benches, decoded as a job decodes them (the pipeline's ffmpeg reader, the
//! clip's own colour matrix and range).
use std::path::Path;

use anyhow::Context;
use tch::{Device, Tensor};

use crate::executor::frames;
use crate::executor::ExecutorConfig;
use crate::media::{self, FrameReader, ReadConfig, RgbFrames};

/// The clip's first chunks of `chunk_frames` frames, until they hold `frames` frames or the clip ends.
pub fn read_chunks(config: &ExecutorConfig, input: &Path, chunk_frames: usize, frames: usize) -> anyhow::Result<Vec<RgbFrames>> {
    let info = media::probe(&config.tools, input, &media::MediaLimits::unlimited())?;
    let read = ReadConfig { input: input.to_path_buf(), width: info.width, height: info.height, chunk_frames, queue_chunks: 2, colour: info.colour.clone(), priority: Default::default(), span: None };
    let mut reader = FrameReader::spawn(&config.tools, read)?;
    let mut chunks = Vec::new();
    while chunks.len() * chunk_frames < frames {
        match reader.next_chunk()? {
            Some(chunk) => chunks.push(chunk),
            None => break,
        }
    }
    anyhow::ensure!(!chunks.is_empty(), "{}: no frames", input.display());
    Ok(chunks)
}

/// Frame `index` (from 0) of the clip, `[1,3,H,W]` Float in [0,1] on the CPU.
pub fn frame(config: &ExecutorConfig, input: &Path, index: usize) -> anyhow::Result<Tensor> {
    let mut chunks = read_chunks(config, input, 1, index + 1)?;
    anyhow::ensure!(chunks.len() > index, "{} has {} frames, fewer than {}", input.display(), chunks.len(), index + 1);
    let chunk = chunks.pop().context("no frames")?;
    Ok(frames::to_tensor(&chunk, Device::Cpu).contiguous())
}
