//! Between ffmpeg's packed RGB bytes and model tensors: `[n, 3, H, W]` floats in [0, 1].
use tch::{Device, Kind, Tensor};

use crate::media::RgbFrames;

pub fn to_tensor(chunk: &RgbFrames, device: Device) -> Tensor {
    let (n, h, w) = (chunk.count as i64, chunk.height as i64, chunk.width as i64);
    Tensor::from_slice(&chunk.data).view([n, h, w, 3]).to_device(device).permute([0, 3, 1, 2]).to_kind(Kind::Float) / 255.0
}

/// Frame by frame, so the conversion never holds more than one float frame beyond its input.
pub fn to_rgb(frames: &Tensor) -> RgbFrames {
    let (n, _, h, w) = frames.size4().expect("frames are [n, 3, H, W]");
    let frame_bytes = (3 * h * w) as usize;
    let mut data = vec![0u8; n as usize * frame_bytes];
    for (i, out) in data.chunks_exact_mut(frame_bytes).enumerate() {
        let pixels = (frames.get(i as i64) * 255.0)
            .round_()
            .clamp_(0.0, 255.0)
            .to_kind(Kind::Uint8)
            .permute([1, 2, 0])
            .contiguous()
            .to_device(Device::Cpu);
        pixels.copy_data_u8(out, frame_bytes);
    }
    RgbFrames { width: w as u32, height: h as u32, count: n as usize, data }
}
