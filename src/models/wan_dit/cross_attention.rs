//! Cross-attention to the text: its keys and values are computed ONCE from the embedded context
//! (`init_cross_kv`) and reused by every step; plain multi-head attention, no mask, no gate.
use tch::{TchError, Tensor};

use super::config::WanDitConfig;
use super::layers::Projections;
use crate::models::nn::weights::WeightPath;
use crate::models::ModelError;

pub struct CrossAttention(Projections);

/// One block's text keys and values, `[1, heads, text tokens, hd]`.
pub struct TextKv {
    k: Tensor,
    v: Tensor,
}

impl CrossAttention {
    pub fn new(vp: &WeightPath, cfg: &WanDitConfig) -> Result<Self, ModelError> {
        Ok(Self(Projections::new(vp, cfg)?))
    }

    /// `text` `[1, tokens, dim]`, already through `text_embedding`.
    pub fn text_kv(&self, text: &Tensor) -> Result<TextKv, TchError> {
        Ok(TextKv { k: self.split_heads(&self.0.norm_k.forward(&self.0.k.try_forward(text)?)?)?, v: self.split_heads(&self.0.v.try_forward(text)?)? })
    }

    /// `x` `[1, L, dim]` (after `norm3`) → `[1, L, dim]`.
    pub fn forward(&self, x: &Tensor, text: &TextKv) -> Result<Tensor, TchError> {
        let q = self.split_heads(&self.0.norm_q.forward(&self.0.q.try_forward(x)?)?)?;
        let out = Tensor::f_scaled_dot_product_attention::<Tensor>(&q, &text.k, &text.v, None, 0.0, false, None, false)?;
        self.0.o.try_forward(&out.f_transpose(1, 2)?.f_flatten(2, 3)?)
    }

    /// `[1, n, dim]` → `[1, heads, n, hd]`.
    fn split_heads(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let size = x.size();
        x.f_view([size[0], size[1], self.0.heads, -1])?.f_transpose(1, 2)
    }
}
