//! Between ffmpeg's packed RGB bytes and model tensors: `[n, 3, H, W]` floats in [0, 1].
use tch::{Device, Kind, Tensor};

use crate::media::RgbFrames;

pub fn to_tensor(chunk: &RgbFrames, device: Device) -> Tensor {
    let (n, h, w) = (chunk.count as i64, chunk.height as i64, chunk.width as i64);
    Tensor::from_slice(&chunk.data).view([n, h, w, 3]).to_device(device).permute([0, 3, 1, 2]).to_kind(Kind::Float) / 255.0
}

pub fn to_rgb(frames: &Tensor) -> RgbFrames {
    let (n, _, h, w) = frames.size4().expect("frames are [n, 3, H, W]");
    let pixels = (frames * 255.0)
        .round()
        .clamp(0.0, 255.0)
        .to_kind(Kind::Uint8)
        .permute([0, 2, 3, 1])
        .contiguous()
        .to_device(Device::Cpu);
    let len = pixels.numel();
    let mut data = vec![0u8; len];
    pixels.copy_data_u8(&mut data, len);
    RgbFrames { width: w as u32, height: h as u32, count: n as usize, data }
}
