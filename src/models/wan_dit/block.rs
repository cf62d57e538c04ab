//! One DiT block (`DiTBlock`): with `(shift1, scale1, gate1, shift2, scale2, gate2)` = `modulation` +
//! `t_mod`, x += gate1·SelfAttn(LN(x)·(1+scale1)+shift1); x += CrossAttn(norm3(x)), ungated;
//! x += gate2·FFN(LN(x)·(1+scale2)+shift2), FFN = Linear, GELU(tanh), Linear.
use tch::{TchError, Tensor};

use super::config::WanDitConfig;
use super::cross_attention::{CrossAttention, TextKv};
use super::layers::{chunk, modulate, LayerNorm};
use super::self_attention::{KvWindows, SelfAttention, StepLayout};
use super::trace::Trace;
use crate::models::nn::linear::Linear;
use crate::models::nn::weights::WeightPath;
use crate::models::ModelError;

pub struct Block {
    modulation: Tensor,
    norm: LayerNorm,
    self_attn: SelfAttention,
    norm3: LayerNorm,
    cross_attn: CrossAttention,
    ffn_in: Linear,
    ffn_out: Linear,
}

impl Block {
    pub fn new(vp: &WeightPath, cfg: &WanDitConfig) -> Result<Self, ModelError> {
        Ok(Self {
            modulation: vp.get("modulation", &[1, 6, cfg.dim])?,
            norm: LayerNorm::plain(cfg.dim),
            self_attn: SelfAttention::new(&vp.pp("self_attn"), cfg)?,
            norm3: LayerNorm::affine(&vp.pp("norm3"), cfg.dim)?,
            cross_attn: CrossAttention::new(&vp.pp("cross_attn"), cfg)?,
            ffn_in: Linear::new(&vp.pp("ffn").pp(0), cfg.dim, cfg.ffn_dim, true)?,
            ffn_out: Linear::new(&vp.pp("ffn").pp(2), cfg.ffn_dim, cfg.dim, true)?,
        })
    }

    pub fn text_kv(&self, text: &Tensor) -> Result<TextKv, TchError> {
        self.cross_attn.text_kv(text)
    }

    /// `x` `[1, L, dim]` → the block's output and its next KV cache.
    pub fn forward(&self, x: &Tensor, step: &BlockStep, block: usize, trace: &mut Option<&mut Trace>) -> Result<(Tensor, KvWindows), TchError> {
        let modulation = self.modulation.f_add(step.t_mod)?;
        let part = |index: i64| chunk(&modulation, index);
        let attention_in = modulate(&self.norm.forward(x)?, &part(0)?, &part(1)?)?;
        let (attended, cache) = self.self_attn.forward(&attention_in, step.layout, step.cache, block, trace)?;
        let x = x.f_add(&part(2)?.f_mul(&attended)?)?;
        let x = x.f_add(&self.cross_attn.forward(&self.norm3.forward(&x)?, step.text)?)?;
        let ffn_in = modulate(&self.norm.forward(&x)?, &part(3)?, &part(4)?)?;
        let ffn = self.ffn_out.try_forward(&self.ffn_in.try_forward(&ffn_in)?.f_gelu("tanh")?)?;
        Ok((x.f_add(&part(5)?.f_mul(&ffn)?)?, cache))
    }
}

/// What one block needs of its step: the step's layout and time modulation, and its own text K/V and
/// cache.
pub struct BlockStep<'a> {
    pub layout: &'a StepLayout,
    pub t_mod: &'a Tensor,
    pub text: &'a TextKv,
    pub cache: Option<&'a KvWindows>,
}
