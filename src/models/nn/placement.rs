//! Where a 2-D model's weights and activations live: device, element kind, and whether in channels-last
//! strides (oneDNN's fast path for 2-D convolutions on the CPU; measured in `bench upscale`).
use tch::{Device, Kind, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement2d {
    pub device: Device,
    /// `Float`, `BFloat16` or `Half`: the weights' and activations' kind.
    pub kind: Kind,
    /// NHWC strides for weights and activations.
    pub channels_last: bool,
}

impl Default for Placement2d {
    fn default() -> Self {
        Self { device: Device::Cpu, kind: Kind::Float, channels_last: false }
    }
}

impl Placement2d {
    /// `tensor` on the device, in the kind, and (4-D ones) in channels-last strides when asked.
    pub fn place(&self, tensor: &Tensor) -> Tensor {
        let placed = tensor.to_device(self.device).to_kind(self.kind);
        if self.channels_last && placed.dim() == 4 {
            // tch has no memory-format API; an NHWC-contiguous tensor viewed as NCHW is exactly what
            // `torch.channels_last` is, and libtorch picks the format up from the strides.
            placed.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2])
        } else {
            placed
        }
    }
}
