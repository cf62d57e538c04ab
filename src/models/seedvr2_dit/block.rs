//! One MM-DiT block: per stream, modulated RMS → window attention → gated residual, then modulated
//! RMS → MLP → gated residual. Video and text keep separate weights (`.vid.`/`.txt.`) or share one set
//! (`.all.`, the 3B's blocks from `mm_layers` on).
use tch::{Kind, Tensor};

use super::attention::{SampleLayout, WindowAttention};
use super::config::{DitConfig, DitVariant, MlpKind};
use super::layers::{AdaVectors, EmbeddingSlice, Linear, RmsNorm, Streams};
use super::trace::Trace;
use crate::models::nn::weights::WeightPath;
use crate::models::ModelError;

pub enum Mlp {
    SwiGlu { gate: Linear, up: Linear, down: Linear },
    GeluTanh { up: Linear, down: Linear },
}

impl Mlp {
    fn new(vp: &WeightPath, cfg: &DitConfig) -> Result<Self, ModelError> {
        let (dim, hidden) = (cfg.dim, cfg.mlp_hidden);
        Ok(match cfg.mlp {
            MlpKind::SwiGlu => Mlp::SwiGlu {
                gate: Linear::new(&vp.pp("proj_in_gate"), dim, hidden, false)?,
                up: Linear::new(&vp.pp("proj_in"), dim, hidden, false)?,
                down: Linear::new(&vp.pp("proj_out"), hidden, dim, false)?,
            },
            MlpKind::GeluTanh => {
                Mlp::GeluTanh { up: Linear::new(&vp.pp("proj_in"), dim, hidden, true)?, down: Linear::new(&vp.pp("proj_out"), hidden, dim, true)? }
            }
        })
    }

    /// The activations are the largest tensors of a block; they are changed in place rather than copied.
    fn forward(&self, x: &Tensor) -> Tensor {
        match self {
            Mlp::SwiGlu { gate, up, down } => {
                let mut hidden = gate.forward(x);
                let _ = hidden.silu_();
                hidden *= up.forward(x);
                down.forward(&hidden)
            }
            Mlp::GeluTanh { up, down } => {
                let mut hidden = up.forward(x);
                let _ = hidden.gelu_("tanh");
                down.forward(&hidden)
            }
        }
    }
}

/// A stream's `ada.S.{attn,mlp}_{shift,scale,gate}`.
struct Ada {
    attn: AdaVectors,
    mlp: AdaVectors,
}

impl Ada {
    fn new(vp: &WeightPath, dim: i64) -> Result<Self, ModelError> {
        Ok(Self { attn: AdaVectors::new(vp, "attn", dim, true)?, mlp: AdaVectors::new(vp, "mlp", dim, true)? })
    }
}

/// The sample's time embedding split into the attention and MLP layers' (shift, scale, gate).
pub struct BlockEmbedding {
    pub attn: EmbeddingSlice,
    pub mlp: EmbeddingSlice,
}

impl BlockEmbedding {
    pub fn of(emb: &Tensor, dim: i64) -> Self {
        Self { attn: EmbeddingSlice::of(emb, dim, 0), mlp: EmbeddingSlice::of(emb, dim, 1) }
    }
}

pub struct Block {
    index: i64,
    attn: WindowAttention,
    mlp: Streams<Mlp>,
    ada: Streams<Ada>,
    /// False in the 3B's last block, which builds its MLP and ada for video only: its text enters
    /// attention as plain RMS(txt) (keys and values only) and is not updated.
    text_modulated: bool,
    /// The text after the last block is never read, so its update is skipped.
    text_continues: bool,
}

/// One sample's streams between blocks.
pub struct Tokens {
    pub vid: Tensor,
    pub txt: Tensor,
}

impl Block {
    pub fn new(vp: &WeightPath, cfg: &DitConfig, index: i64, qkv_cast: Option<Kind>) -> Result<Self, ModelError> {
        let separate = cfg.separate_streams(index);
        let last_3b = cfg.is_last_block(index) && cfg.variant == DitVariant::ThreeB;
        Ok(Self {
            index,
            attn: WindowAttention::new(&vp.pp("attn"), cfg, index, qkv_cast)?,
            mlp: Streams::build(separate, |s| Mlp::new(&vp.pp("mlp").pp(s), cfg))?,
            ada: Streams::build(separate, |s| Ada::new(&vp.pp("ada").pp(s), cfg.dim))?,
            text_modulated: !last_3b,
            text_continues: !cfg.is_last_block(index),
        })
    }

    pub fn forward(&self, x: Tokens, emb: &BlockEmbedding, layout: &SampleLayout, cfg: &DitConfig, trace: &mut Option<&mut Trace>) -> Tokens {
        let norm = RmsNorm::plain();
        let (vid_attn, vid_mlp) = (self.ada.vid().attn.with(&emb.attn), self.ada.vid().mlp.with(&emb.mlp));
        let (txt_attn, txt_mlp) = (self.ada.txt().attn.with(&emb.attn), self.ada.txt().mlp.with(&emb.mlp));
        let vid_in = vid_attn.modulate(&norm.forward(&x.vid));
        let txt_in = if self.text_modulated { txt_attn.modulate(&norm.forward(&x.txt)) } else { norm.forward(&x.txt) };
        let out = self.attn.forward(&vid_in, &txt_in, layout, cfg);
        record(trace, || format!("blocks.{}.attn.vid", self.index), &out.vid);
        record(trace, || format!("blocks.{}.attn.txt", self.index), &out.txt);
        let vid = vid_attn.gated_add(&x.vid, &out.vid);
        let vid = vid_mlp.gated_add(&vid, &self.mlp.vid().forward(&vid_mlp.modulate(&norm.forward(&vid))));
        record(trace, || format!("blocks.{}.vid", self.index), &vid);
        if !self.text_continues {
            return Tokens { vid, txt: x.txt };
        }
        let txt = txt_attn.gated_add(&x.txt, &out.txt);
        let txt = txt_mlp.gated_add(&txt, &self.mlp.txt().forward(&txt_mlp.modulate(&norm.forward(&txt))));
        record(trace, || format!("blocks.{}.txt", self.index), &txt);
        Tokens { vid, txt }
    }
}

fn record(trace: &mut Option<&mut Trace>, name: impl FnOnce() -> String, tensor: &Tensor) {
    if let Some(trace) = trace {
        trace.record(name(), tensor);
    }
}
