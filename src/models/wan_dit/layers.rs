//! The DiT's small layers: the q/k RMS norms (statistics in fp32, as the original), LayerNorms with and
//! without affine parameters, and the shift/scale/gate modulation.
use tch::{Kind, TchError, Tensor};

use super::config::{WanDitConfig, NORM_EPS};
use crate::models::nn::linear::Linear;
use crate::models::nn::weights::WeightPath;
use crate::models::ModelError;

/// `x · rsqrt(mean(x²) + eps)` over the whole width, computed in fp32 and cast back, THEN times the
/// weight (the original's order: the product is in the compute dtype).
pub struct RmsNorm {
    weight: Tensor,
}

impl RmsNorm {
    pub fn new(vp: &WeightPath, dim: i64) -> Result<Self, ModelError> {
        Ok(Self { weight: vp.get("weight", &[dim])? })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let x32 = x.f_to_kind(Kind::Float)?;
        let mean_square = x32.f_square()?.f_mean_dim(-1, true, Kind::Float)?;
        let normed = x32.f_mul(&mean_square.f_add_scalar(NORM_EPS)?.f_rsqrt()?)?;
        normed.f_to_kind(x.kind())?.f_mul(&self.weight)
    }
}

/// An attention's projections, the same in self- and cross-attention: q, k, v, o (`dim → dim`, with bias) and
/// the RMS norms of q and k.
pub struct Projections {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub norm_q: RmsNorm,
    pub norm_k: RmsNorm,
    pub heads: i64,
}

impl Projections {
    pub fn new(vp: &WeightPath, cfg: &WanDitConfig) -> Result<Self, ModelError> {
        let linear = |name: &str| Linear::new(&vp.pp(name), cfg.dim, cfg.dim, true);
        Ok(Self {
            q: linear("q")?,
            k: linear("k")?,
            v: linear("v")?,
            o: linear("o")?,
            norm_q: RmsNorm::new(&vp.pp("norm_q"), cfg.dim)?,
            norm_k: RmsNorm::new(&vp.pp("norm_k"), cfg.dim)?,
            heads: cfg.heads,
        })
    }
}

/// LayerNorm over the width, eps 1e-6; `norm3` has a weight and a bias, the others none.
pub struct LayerNorm {
    affine: Option<(Tensor, Tensor)>,
    dim: i64,
}

impl LayerNorm {
    pub fn plain(dim: i64) -> Self {
        Self { affine: None, dim }
    }

    pub fn affine(vp: &WeightPath, dim: i64) -> Result<Self, ModelError> {
        Ok(Self { affine: Some((vp.get("weight", &[dim])?, vp.get("bias", &[dim])?)), dim })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let (weight, bias) = match &self.affine {
            Some((weight, bias)) => (Some(weight), Some(bias)),
            None => (None, None),
        };
        x.f_layer_norm([self.dim], weight, bias, NORM_EPS, true)
    }
}

/// `x · (1 + scale) + shift`, the original's `modulate`.
pub fn modulate(x: &Tensor, shift: &Tensor, scale: &Tensor) -> Result<Tensor, TchError> {
    x.f_mul(&scale.f_add_scalar(1.0)?)?.f_add(shift)
}

/// One of the `n` vectors of a `[1, n, dim]` modulation, as `[1, 1, dim]` (broadcast over tokens).
pub fn chunk(modulation: &Tensor, index: i64) -> Result<Tensor, TchError> {
    modulation.f_narrow(1, index, 1)
}
