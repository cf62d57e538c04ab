//! The DiT's small layers: linear maps (shared, [`Linear`]: fp8 weights up-cast per call), RMS norms
//! computed in fp32 as apex's `FusedRMSNorm` does, the "single ada" modulation, and a submodule per
//! stream (or one shared).
use tch::Tensor;

use super::config::NORM_EPS;
pub use crate::models::nn::linear::Linear;
use crate::models::nn::weights::WeightPath;
use crate::models::ModelError;

/// `x · rsqrt(mean(x²) + eps)` over the last dim with the mean in fp32, times a learned weight if any.
pub struct RmsNorm {
    weight: Option<Tensor>,
}

impl RmsNorm {
    pub fn new(vp: &WeightPath, dim: i64) -> Result<Self, ModelError> {
        Ok(Self { weight: Some(vp.get("weight", &[dim])?) })
    }

    pub fn plain() -> Self {
        Self { weight: None }
    }

    /// libtorch's own `rms_norm` (statistics in fp32 for bf16/fp16 inputs, like apex): one fused pass
    /// instead of five fresh tensors, which page faults made costly.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let dim = *x.size().last().expect("a last dimension");
        x.rms_norm([dim], self.weight.as_ref(), NORM_EPS)
    }
}

/// One modulated layer's learned vectors (`attn_*` or `mlp_*`, or the output head's `out_*`).
pub struct AdaVectors {
    shift: Tensor,
    scale: Tensor,
    gate: Option<Tensor>,
}

impl AdaVectors {
    pub fn new(vp: &WeightPath, layer: &str, dim: i64, with_gate: bool) -> Result<Self, ModelError> {
        Ok(Self {
            shift: vp.get(&format!("{layer}_shift"), &[dim])?,
            scale: vp.get(&format!("{layer}_scale"), &[dim])?,
            gate: if with_gate { Some(vp.get(&format!("{layer}_gate"), &[dim])?) } else { None },
        })
    }

    /// The sample's modulation for this layer: the embedding's (shift, scale, gate) plus the learned ones.
    pub fn with(&self, emb: &EmbeddingSlice) -> Modulation {
        Modulation {
            shift: &emb.shift + &self.shift,
            scale: &emb.scale + &self.scale,
            gate: self.gate.as_ref().map(|gate| &emb.gate + gate),
        }
    }
}

/// One layer's (shift, scale, gate) out of the sample's time embedding `e`, read as `[dim, 2, 3]`
/// (layer 0 = attention, 1 = MLP; 0 = shift, 1 = scale, 2 = gate).
pub struct EmbeddingSlice {
    shift: Tensor,
    scale: Tensor,
    gate: Tensor,
}

impl EmbeddingSlice {
    pub fn of(emb: &Tensor, dim: i64, layer: i64) -> Self {
        let e = emb.view([dim, 2, 3]).select(1, layer);
        Self { shift: e.select(1, 0), scale: e.select(1, 1), gate: e.select(1, 2) }
    }
}

pub struct Modulation {
    shift: Tensor,
    scale: Tensor,
    gate: Option<Tensor>,
}

impl Modulation {
    /// "in" mode: `x · scale + shift`, with no implicit `1 +` (the learned scales start at 1).
    pub fn modulate(&self, x: &Tensor) -> Tensor {
        self.shift.addcmul(x, &self.scale)
    }

    /// "out" mode added to the residual stream: `residual + x · gate`, in one pass.
    pub fn gated_add(&self, residual: &Tensor, x: &Tensor) -> Tensor {
        match &self.gate {
            Some(gate) => residual.addcmul(x, gate),
            None => residual + x,
        }
    }
}

/// A submodule per stream, or one shared by both.
pub enum Streams<T> {
    Separate { vid: T, txt: T },
    Shared(T),
}

impl<T> Streams<T> {
    pub fn build(separate: bool, mut make: impl FnMut(&str) -> Result<T, ModelError>) -> Result<Self, ModelError> {
        Ok(if separate { Streams::Separate { vid: make("vid")?, txt: make("txt")? } } else { Streams::Shared(make("all")?) })
    }

    pub fn vid(&self) -> &T {
        match self {
            Streams::Separate { vid, .. } | Streams::Shared(vid) => vid,
        }
    }

    pub fn txt(&self) -> &T {
        match self {
            Streams::Separate { txt, .. } | Streams::Shared(txt) => txt,
        }
    }
}
