//! What the tiling tools share: the VAE named on their command line, loaded on an explicitly named
//! device, and the synthetic clip they measure on.
use std::path::Path;

use anyhow::{bail, Context};
use tch::{Device, Kind, Tensor};

use crate::models::family::Family;
use crate::models::family::vae::LoadOptions;
use crate::models::vae::VideoVae;

/// A smooth moving pattern in [-1, 1], `[1, 3, frames, height, width]`.
pub fn synthetic_video(frames: i64, height: i64, width: i64) -> Tensor {
    let options = (Kind::Float, Device::Cpu);
    let t = Tensor::arange(frames, options).view([1, 1, frames, 1, 1]);
    let y = Tensor::arange(height, options).view([1, 1, 1, height, 1]);
    let x = Tensor::arange(width, options).view([1, 1, 1, 1, width]);
    let phase = Tensor::from_slice(&[0.0f32, 2.0, 4.0]).view([1, 3, 1, 1, 1]);
    let wave = (&x * 0.07 + &y * 0.05 + &t * 0.3 + &phase).sin() * 0.6 + ((&x - &y * 0.5) * 0.031 - &t * 0.2).cos() * 0.3;
    wave.clamp(-1.0, 1.0)
}

pub fn parse_family(name: &str) -> anyhow::Result<Family> {
    match name {
        "wan21" => Ok(Family::Wan21),
        "wan22" => Ok(Family::Wan22),
        "seedvr2" => Ok(Family::Seedvr2),
        "taehv" => Ok(Family::Taehv),
        other => bail!("unknown VAE family `{other}` (wan21, wan22, seedvr2, taehv)"),
    }
}

/// The device a measurement runs on: named explicitly, so a table never mixes devices.
pub fn measured_device(name: &str) -> anyhow::Result<Device> {
    match crate::device::parse_device(name).context("device must be cpu, cuda or cuda:N")? {
        crate::device::DeviceChoice::Cuda(index) => Ok(Device::Cuda(index)),
        crate::device::DeviceChoice::Cpu => Ok(Device::Cpu),
        crate::device::DeviceChoice::Auto => bail!("measure on an explicit device: cpu, cuda or cuda:N"),
    }
}

/// [`measured_device`], refused at once when it is a CUDA device libtorch does not see (before any
/// model is loaded or clip made).
pub fn usable_device(name: &str) -> anyhow::Result<Device> {
    let device = measured_device(name)?;
    if device.is_cuda() && !tch::Cuda::is_available() {
        bail!("--device {name}: libtorch sees no CUDA device on this machine");
    }
    Ok(device)
}

pub fn load_vae(weights: &Path, family: Family, kind: Kind, device: Device) -> anyhow::Result<VideoVae> {
    Ok(VideoVae::load_file(weights, family, &LoadOptions { device, kind })?)
}
