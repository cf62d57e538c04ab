//! What enters and leaves the blocks: 1×2×2 patches of the latent grid, the text projection and the
//! timestep embedding.
use tch::{Device, Kind, Tensor};

use super::config::{DitConfig, PATCH, TIME_SINUSOID_DIM};
use super::layers::Linear;
use crate::models::nn::weights::WeightPath;
use crate::models::ModelError;

/// `[T·H·W, C]` tokens of a `(T, H, W)` grid → `[T·H/2·W/2, 4C]`, each token ordered `(dh, dw, c)`.
pub fn patchify(tokens: &Tensor, grid: [i64; 3]) -> Tensor {
    let [t, h, w] = grid;
    let [_, ph, pw] = PATCH;
    let c = tokens.size()[1];
    tokens.view([t, h / ph, ph, w / pw, pw, c]).permute([0, 1, 3, 2, 4, 5]).reshape([t * (h / ph) * (w / pw), ph * pw * c])
}

/// The inverse for the output channels: `[T·h·w, 4C]` → `[T·2h·2w, C]` in `(t, h, w)` order.
pub fn unpatchify(tokens: &Tensor, patched: [i64; 3], channels: i64) -> Tensor {
    let [t, h, w] = patched;
    let [_, ph, pw] = PATCH;
    tokens.view([t, h, w, ph, pw, channels]).permute([0, 1, 3, 2, 4, 5]).reshape([t * h * ph * w * pw, channels])
}

pub struct PatchIn {
    proj: Linear,
}

impl PatchIn {
    pub fn new(vp: &WeightPath, cfg: &DitConfig) -> Result<Self, ModelError> {
        Ok(Self { proj: Linear::new(&vp.pp("proj"), cfg.patch_channels_in(), cfg.dim, true)? })
    }

    pub fn forward(&self, vid: &Tensor, grid: [i64; 3]) -> Tensor {
        self.proj.forward(&patchify(vid, grid))
    }
}

/// Sinusoid → Linear → SiLU → Linear → SiLU → Linear, one `6·dim` vector per timestep.
pub struct TimeEmbedding {
    proj_in: Linear,
    proj_hid: Linear,
    proj_out: Linear,
}

impl TimeEmbedding {
    pub fn new(vp: &WeightPath, cfg: &DitConfig) -> Result<Self, ModelError> {
        Ok(Self {
            proj_in: Linear::new(&vp.pp("proj_in"), TIME_SINUSOID_DIM, cfg.emb_hidden, true)?,
            proj_hid: Linear::new(&vp.pp("proj_hid"), cfg.emb_hidden, cfg.emb_hidden, true)?,
            proj_out: Linear::new(&vp.pp("proj_out"), cfg.emb_hidden, 6 * cfg.dim, true)?,
        })
    }

    /// `timestep` in the sampler's units (1000 for the one step); returns `[6·dim]`.
    pub fn forward(&self, timestep: f64, kind: Kind, device: Device) -> Tensor {
        let x = sinusoid(timestep, device).to_kind(kind);
        let x = self.proj_in.forward(&x).silu();
        let x = self.proj_hid.forward(&x).silu();
        self.proj_out.forward(&x)
    }
}

/// diffusers' `get_timestep_embedding` with `flip_sin_to_cos=False`, shift 0: `[sin(t·f), cos(t·f)]`,
/// `f_k = 10000^(-k/half)`, in fp32.
fn sinusoid(timestep: f64, device: Device) -> Tensor {
    let half = TIME_SINUSOID_DIM / 2;
    // The same operations in the same order as diffusers, so the fp32 roundings match: at t = 1000
    // an angle is ~1e3 and a different rounding of its frequency moves it by ~1e-4.
    let exponent = Tensor::arange(half, (Kind::Float, device)) * -(10000f64.ln()) / half as f64;
    let angles = Tensor::from_slice(&[timestep as f32]).to_device(device) * exponent.exp();
    Tensor::cat(&[angles.sin(), angles.cos()], 0)
}
