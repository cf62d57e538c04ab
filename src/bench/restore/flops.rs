//! The DiT's work for one sample, counted analytically from its configuration: every linear map over
//! the tokens it sees (video and text), and the attention matmuls per window. Windows come from the
//! model's own plan on the patched grid, grouped by shape as the model runs them.
use std::collections::BTreeMap;

use crate::models::seedvr2_dit::config::{MlpKind, PATCH, TIME_SINUSOID_DIM};
use crate::models::seedvr2_dit::window::windows;
use crate::models::seedvr2_dit::DitConfig;

/// One linear map applied to `tokens` rows: `2 · tokens · in · out` FLOPs (biases not counted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinearOp {
    pub name: String,
    pub tokens: i64,
    pub in_dim: i64,
    pub out_dim: i64,
    pub bias: bool,
}

impl LinearOp {
    pub fn flops(&self) -> f64 {
        2.0 * (self.tokens * self.in_dim * self.out_dim) as f64
    }
}

/// `windows` windows of one shape in one block: each attends over its `window_tokens` video tokens
/// followed by the sample's `text_len` text tokens, `q·kᵀ` and `p·v` both `2 · s² · head_dim` per head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttentionOp {
    pub block: i64,
    pub windows: i64,
    pub window_tokens: i64,
    pub text_len: i64,
    pub heads: i64,
    pub head_dim: i64,
}

impl AttentionOp {
    pub fn flops(&self) -> f64 {
        let s = (self.window_tokens + self.text_len) as f64;
        self.windows as f64 * 4.0 * s * s * (self.heads * self.head_dim) as f64
    }
}

/// Everything the DiT multiplies for one sample, in the order the model runs it.
#[derive(Debug, Clone, Default)]
pub struct DitWork {
    pub linears: Vec<LinearOp>,
    pub attention: Vec<AttentionOp>,
}

impl DitWork {
    /// `latent_grid`: `(T, H, W)` of the latent before patching; `text_len`: text tokens.
    pub fn of(cfg: &DitConfig, latent_grid: [i64; 3], text_len: i64) -> Self {
        let patched = [latent_grid[0] / PATCH[0], latent_grid[1] / PATCH[1], latent_grid[2] / PATCH[2]];
        let vid: i64 = patched.iter().product();
        let (dim, inner) = (cfg.dim, cfg.heads * cfg.head_dim);
        let mut work = DitWork::default();
        let mlp_bias = cfg.mlp == MlpKind::GeluTanh;
        let mut linear = |name: String, tokens: i64, in_dim: i64, out_dim: i64, bias: bool| {
            work.linears.push(LinearOp { name, tokens, in_dim, out_dim, bias });
        };
        linear("vid_in".into(), vid, cfg.patch_channels_in(), dim, true);
        linear("txt_in".into(), text_len, cfg.txt_in_dim, dim, true);
        linear("emb_in.proj_in".into(), 1, TIME_SINUSOID_DIM, cfg.emb_hidden, true);
        linear("emb_in.proj_hid".into(), 1, cfg.emb_hidden, cfg.emb_hidden, true);
        linear("emb_in.proj_out".into(), 1, cfg.emb_hidden, 6 * dim, true);
        for block in 0..cfg.num_blocks {
            // The text after the last block is never read, so the model skips its residual and MLP
            // (its attention output projection still runs).
            let streams: &[(&str, i64)] = if cfg.is_last_block(block) { &[("vid", vid)] } else { &[("vid", vid), ("txt", text_len)] };
            for (s, tokens) in [("vid", vid), ("txt", text_len)] {
                linear(format!("blocks.{block}.attn.proj_qkv.{s}"), tokens, dim, 3 * inner, false);
            }
            for (s, tokens) in [("vid", vid), ("txt", text_len)] {
                linear(format!("blocks.{block}.attn.proj_out.{s}"), tokens, inner, dim, true);
            }
            for &(s, tokens) in streams {
                let hidden = cfg.mlp_hidden;
                match cfg.mlp {
                    MlpKind::SwiGlu => {
                        linear(format!("blocks.{block}.mlp.{s}.proj_in_gate"), tokens, dim, hidden, false);
                        linear(format!("blocks.{block}.mlp.{s}.proj_in"), tokens, dim, hidden, false);
                    }
                    MlpKind::GeluTanh => linear(format!("blocks.{block}.mlp.{s}.proj_in"), tokens, dim, hidden, true),
                }
                linear(format!("blocks.{block}.mlp.{s}.proj_out"), tokens, hidden, dim, mlp_bias);
            }
        }
        linear("vid_out.proj".into(), vid, dim, cfg.patch_channels_out(), true);
        for (block, &(count, shifted)) in cfg.windows.iter().enumerate() {
            let mut by_tokens: BTreeMap<[i64; 3], i64> = BTreeMap::new();
            for window in windows(patched, count, shifted) {
                *by_tokens.entry(window.shape()).or_default() += 1;
            }
            for (shape, n) in by_tokens {
                work.attention.push(AttentionOp {
                    block: block as i64,
                    windows: n,
                    window_tokens: shape.iter().product(),
                    text_len,
                    heads: cfg.heads,
                    head_dim: cfg.head_dim,
                });
            }
        }
        work
    }

    pub fn linear_flops(&self) -> f64 {
        self.linears.iter().map(LinearOp::flops).sum()
    }

    pub fn attention_flops(&self) -> f64 {
        self.attention.iter().map(AttentionOp::flops).sum()
    }

    pub fn total_flops(&self) -> f64 {
        self.linear_flops() + self.attention_flops()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::seedvr2_dit::{DitVariant, MlpKind};

    /// A 7B-style model (GELU MLP) of width 8, 2 heads of 4, MLP 32, text input 16, 2 blocks.
    fn tiny(windows: Vec<([i64; 3], bool)>) -> DitConfig {
        DitConfig {
            variant: DitVariant::SevenB,
            mlp: MlpKind::GeluTanh,
            vid_in_channels: 33,
            vid_out_channels: 16,
            dim: 8,
            txt_in_dim: 16,
            emb_hidden: 8,
            heads: 2,
            head_dim: 4,
            mlp_hidden: 32,
            num_blocks: 2,
            mm_layers: 2,
            rope_freqs: 0,
            windows,
        }
    }

    /// Latent grid 2×4×4 → patched 2×2×2 = 8 video tokens, 3 text tokens. Block 0: count (2,1,1)
    /// regular → two windows of 1×2×2 = 4 tokens; block 1: count (1,1,1) shifted → one window of 8.
    #[test]
    fn tiny_case_by_hand() {
        let work = DitWork::of(&tiny(vec![([2, 1, 1], false), ([1, 1, 1], true)]), [2, 4, 4], 3);
        let vid_in = 2 * 8 * 132 * 8; // 16896
        let txt_in = 2 * 3 * 16 * 8; // 768
        let emb = 2 * (256 * 8 + 8 * 8 + 8 * 48); // 4992
        let qkv = 2 * (8 + 3) * 8 * 24; // 4224, both streams
        let out = 2 * (8 + 3) * 8 * 8; // 1408, both streams
        let mlp_per_token = 2 * (8 * 32 + 32 * 8); // 1024
        let block0 = qkv + out + mlp_per_token * (8 + 3); // text MLP runs: 16896
        let block1 = qkv + out + mlp_per_token * 8; // last block: no text MLP: 13824
        let head = 2 * 8 * 8 * 64; // 8192
        assert_eq!(work.linear_flops(), (vid_in + txt_in + emb + block0 + block1 + head) as f64);
        assert_eq!(work.linear_flops(), 61568.0);
        let attention0 = 2 * 4 * (4 + 3) * (4 + 3) * 2 * 4; // 3136
        let attention1 = 4 * (8 + 3) * (8 + 3) * 2 * 4; // 3872
        assert_eq!(work.attention_flops(), (attention0 + attention1) as f64);
        assert_eq!(work.attention.len(), 2);
        assert_eq!((work.attention[0].windows, work.attention[0].window_tokens), (2, 4));
        assert_eq!((work.attention[1].windows, work.attention[1].window_tokens), (1, 8));
    }

    /// The 3B's SwiGLU has three matrices; a partial edge window forms its own shape group.
    #[test]
    fn swiglu_and_partial_windows() {
        let mut cfg = tiny(vec![([2, 1, 1], false), ([2, 1, 1], false)]);
        (cfg.variant, cfg.mlp) = (DitVariant::ThreeB, MlpKind::SwiGlu);
        // Patched 3×2×3: time windows ceil(3/2) = 2 → [0,2) and [2,3); one tile in h and w.
        let work = DitWork::of(&cfg, [3, 4, 6], 3);
        let mlp0 = work.linears.iter().filter(|l| l.name.starts_with("blocks.0.mlp.")).count();
        assert_eq!(mlp0, 6);
        let op = |windows, window_tokens| AttentionOp { block: 0, windows, window_tokens, text_len: 3, heads: 2, head_dim: 4 };
        assert_eq!(work.attention[..2], [op(1, 6), op(1, 12)]);
        assert_eq!(work.attention_flops(), 2.0 * (4 * (6 + 3) * (6 + 3) * 8 + 4 * (12 + 3) * (12 + 3) * 8) as f64);
    }
}
