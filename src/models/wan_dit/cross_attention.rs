//! Cross-attention to the text: its keys and values are computed ONCE from the embedded context
//! (`init_cross_kv`) and reused by every step; plain multi-head attention, no mask, no gate.
use tch::{TchError, Tensor};

use super::config::WanDitConfig;
use super::layers::RmsNorm;
use crate::models::nn::linear::Linear;
use crate::models::nn::weights::WeightPath;
use crate::models::ModelError;

pub struct CrossAttention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    norm_q: RmsNorm,
    norm_k: RmsNorm,
    heads: i64,
}

/// One block's text keys and values, `[1, heads, text tokens, hd]`.
pub struct TextKv {
    k: Tensor,
    v: Tensor,
}

impl CrossAttention {
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

    /// `text` `[1, tokens, dim]`, already through `text_embedding`.
    pub fn text_kv(&self, text: &Tensor) -> Result<TextKv, TchError> {
        Ok(TextKv { k: self.split_heads(&self.norm_k.forward(&self.k.try_forward(text)?)?)?, v: self.split_heads(&self.v.try_forward(text)?)? })
    }

    /// `x` `[1, L, dim]` (after `norm3`) → `[1, L, dim]`.
    pub fn forward(&self, x: &Tensor, text: &TextKv) -> Result<Tensor, TchError> {
        let q = self.split_heads(&self.norm_q.forward(&self.q.try_forward(x)?)?)?;
        let out = Tensor::f_scaled_dot_product_attention::<Tensor>(&q, &text.k, &text.v, None, 0.0, false, None, false)?;
        self.o.try_forward(&out.f_transpose(1, 2)?.f_flatten(2, 3)?)
    }

    /// `[1, n, dim]` → `[1, heads, n, hd]`.
    fn split_heads(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let size = x.size();
        x.f_view([size[0], size[1], self.heads, -1])?.f_transpose(1, 2)
    }
}
