//! What enters and leaves the blocks: the patch embedding (a strided Conv3d), the text embedding, the
//! timestep embedding and its projection into the blocks' modulations, and the unpatchify.
use tch::{Device, Kind, TchError, Tensor};

use super::config::WanDitConfig;
use crate::models::nn::linear::Linear;
use crate::models::nn::weights::WeightPath;
use crate::models::ModelError;

/// `patch_embedding`: Conv3d(in → dim, kernel = stride = patch).
pub struct PatchEmbedding {
    weight: Tensor,
    bias: Tensor,
    patch: [i64; 3],
}

impl PatchEmbedding {
    pub fn new(vp: &WeightPath, cfg: &WanDitConfig) -> Result<Self, ModelError> {
        let [pt, ph, pw] = cfg.patch;
        Ok(Self { weight: vp.get("weight", &[cfg.dim, cfg.in_channels, pt, ph, pw])?, bias: vp.get("bias", &[cfg.dim])?, patch: cfg.patch })
    }

    /// `[1, C, F, H, W]` → tokens `[1, f·h·w, dim]` in `(f, h, w)` row-major order.
    pub fn forward(&self, latent: &Tensor) -> Result<Tensor, TchError> {
        let x = latent.f_conv3d(&self.weight, Some(&self.bias), self.patch, [0, 0, 0], [1, 1, 1], 1)?;
        x.f_flatten(2, 4)?.f_transpose(1, 2)
    }
}

/// `'b (f h w) (x y z c) -> b c (f x) (h y) (w z)'`: `[1, f·h·w, p·C]` → `[1, C, f·pt, h·ph, w·pw]`.
pub fn unpatchify(tokens: &Tensor, grid: [i64; 3], patch: [i64; 3], channels: i64) -> Result<Tensor, TchError> {
    let ([f, h, w], [pt, ph, pw]) = (grid, patch);
    tokens
        .f_view([f, h, w, pt, ph, pw, channels].as_slice())?
        .f_permute([6, 0, 3, 1, 4, 2, 5])?
        .f_reshape([1, channels, f * pt, h * ph, w * pw])
}

/// `text_embedding`: Linear(text_dim, dim), GELU(tanh), Linear(dim, dim).
pub struct TextEmbedding {
    first: Linear,
    second: Linear,
}

impl TextEmbedding {
    pub fn new(vp: &WeightPath, cfg: &WanDitConfig) -> Result<Self, ModelError> {
        Ok(Self { first: Linear::new(&vp.pp(0), cfg.text_dim, cfg.dim, true)?, second: Linear::new(&vp.pp(2), cfg.dim, cfg.dim, true)? })
    }

    pub fn forward(&self, context: &Tensor) -> Result<Tensor, TchError> {
        self.second.try_forward(&self.first.try_forward(context)?.f_gelu("tanh")?)
    }
}

/// `time_embedding` (Linear, SiLU, Linear) and `time_projection` (SiLU, Linear to 6·dim).
pub struct TimeEmbedding {
    embed_in: Linear,
    embed_out: Linear,
    projection: Linear,
    freq_dim: i64,
    dim: i64,
}

/// The timestep's conditioning: `t` `[1, dim]` (the head's modulation) and `t_mod` `[1, 6, dim]` (the
/// blocks').
pub struct TimeConditioning {
    pub t: Tensor,
    pub t_mod: Tensor,
}

impl TimeEmbedding {
    pub fn new(root: &WeightPath, cfg: &WanDitConfig) -> Result<Self, ModelError> {
        Ok(Self {
            embed_in: Linear::new(&root.pp("time_embedding").pp(0), cfg.freq_dim, cfg.dim, true)?,
            embed_out: Linear::new(&root.pp("time_embedding").pp(2), cfg.dim, cfg.dim, true)?,
            projection: Linear::new(&root.pp("time_projection").pp(1), cfg.dim, 6 * cfg.dim, true)?,
            freq_dim: cfg.freq_dim,
            dim: cfg.dim,
        })
    }

    pub fn forward(&self, timestep: f64, kind: Kind, device: Device) -> Result<TimeConditioning, TchError> {
        let sinusoid = sinusoid(self.freq_dim, timestep, device)?.f_to_kind(kind)?;
        let t = self.embed_out.try_forward(&self.embed_in.try_forward(&sinusoid)?.f_silu()?)?;
        let t_mod = self.projection.try_forward(&t.f_silu()?)?.f_unflatten(1, [6, self.dim])?;
        Ok(TimeConditioning { t, t_mod })
    }
}

/// `sinusoidal_embedding_1d`: `[cos(t·f_k), sin(t·f_k)]`, `f_k = 10000^(−k/half)`, in float64 (the
/// original's own operations, so the angles near 1000 round alike). `[1, freq_dim]`, float64.
fn sinusoid(freq_dim: i64, timestep: f64, device: Device) -> Result<Tensor, TchError> {
    let half = freq_dim / 2;
    let exponent = Tensor::f_arange(half, (Kind::Double, device))?.f_div_scalar(half as f64)?.f_neg()?;
    let frequencies = Tensor::f_pow_scalar(10000.0, &exponent)?;
    let position = Tensor::f_from_slice(&[timestep])?.f_to_device(device)?;
    let angles = position.f_outer(&frequencies)?;
    Tensor::f_cat(&[angles.f_cos()?, angles.f_sin()?], 1)
}
