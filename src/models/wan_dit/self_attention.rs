//! Windowed self-attention with the KV cache (`SelfAttention.forward` of FlashVSR's `wan_video_dit.py`):
//! q and k RMS-normed and rotated, all three cut into 128-token windows, the cached key and value
//! windows put FIRST, the block mask drawn from the windows' mean q and k, then block-sparse attention
//! and the windows put back in token order. The keys and values seen, less the oldest segment once
//! there are more than `kv_len` segments, are the block's next cache.
use tch::{Kind, TchError, Tensor};

use super::block_mask::draft_block_mask;
use super::config::WanDitConfig;
use super::layers::Projections;
use super::rope::Rotation;
use super::sparse_attention::{block_sparse, block_sparse_gathered, dense, AttentionMode};
use super::trace::{records_intermediates, Trace};
use super::window::{WindowGrid, WINDOW_TOKENS};
use crate::models::nn::weights::WeightPath;
use crate::models::ModelError;

/// One block's cached key and value windows `[windows, 128, dim]`, after norm and RoPE.
pub struct KvWindows {
    pub k: Tensor,
    pub v: Tensor,
}

/// What every block of one step shares.
pub struct StepLayout {
    pub grid: WindowGrid,
    pub rotation: Rotation,
    /// `[n_sp, n_sp]` bool: the local window neighbourhood.
    pub local: Tensor,
    /// Entries kept per (head, query segment), before the cap at the entry count.
    pub topk: i64,
    /// Segments kept in the cache (`int(kv_ratio)`).
    pub kv_segments: i64,
    pub mode: AttentionMode,
}

pub struct SelfAttention(Projections);

impl SelfAttention {
    pub fn new(vp: &WeightPath, cfg: &WanDitConfig) -> Result<Self, ModelError> {
        Ok(Self(Projections::new(vp, cfg)?))
    }

    /// `x` `[1, L, dim]` (normed and modulated) → the attention output `[1, L, dim]` and the next cache.
    pub fn forward(&self, x: &Tensor, layout: &StepLayout, cache: Option<&KvWindows>, block: usize, trace: &mut Option<&mut Trace>) -> Result<(Tensor, KvWindows), TchError> {
        let rotation = &layout.rotation;
        let q = rotation.apply(&self.0.norm_q.forward(&self.0.q.try_forward(x)?)?, self.0.heads)?;
        let k = rotation.apply(&self.0.norm_k.forward(&self.0.k.try_forward(x)?)?, self.0.heads)?;
        let v = self.0.v.try_forward(x)?;
        let grid = &layout.grid;
        let q_windows = grid.partition(&q)?;
        let (mut k_windows, mut v_windows) = (grid.partition(&k)?, grid.partition(&v)?);
        if let Some(cache) = cache {
            k_windows = Tensor::f_cat(&[&cache.k, &k_windows], 0)?;
            v_windows = Tensor::f_cat(&[&cache.v, &v_windows], 0)?;
        }
        let mask = draft_block_mask(&q_windows, &k_windows, grid, self.0.heads, &layout.local, layout.topk)?;
        let as_heads = |windows: &Tensor| -> Result<Tensor, TchError> { windows.f_view([-1, self.0.heads, x.size()[2] / self.0.heads])?.f_transpose(0, 1) };
        let (kernel_q, kernel_k, kernel_v) = (as_heads(&q_windows)?, as_heads(&k_windows)?, as_heads(&v_windows)?);
        let out = match layout.mode {
            AttentionMode::BlockSparse => block_sparse(&kernel_q, &kernel_k, &kernel_v, &mask)?,
            AttentionMode::BlockSparseGathered => block_sparse_gathered(&kernel_q, &kernel_k, &kernel_v, &mask)?,
            AttentionMode::Dense => dense(&kernel_q, &kernel_k, &kernel_v)?,
        };
        if let Some(trace) = trace.as_deref_mut() {
            trace.record(format!("block{block}.block_mask_u8"), &mask.f_to_kind(Kind::Uint8)?);
            if records_intermediates(block) {
                for (name, tensor) in [("q", &kernel_q), ("k", &kernel_k), ("v", &kernel_v), ("out", &out)] {
                    trace.record(format!("block{block}.kernel_{name}"), &tensor.f_transpose(0, 1)?);
                }
            }
        }
        let windows = out.f_transpose(0, 1)?.f_reshape([-1, WINDOW_TOKENS, x.size()[2]])?;
        let attended = self.0.o.try_forward(&grid.reverse(&windows)?)?;
        Ok((attended, next_cache(k_windows, v_windows, grid.per_segment(), layout.kv_segments)?))
    }
}

/// The original drops ONE segment, the oldest, when the keys seen span more than `kv_segments`.
fn next_cache(k: Tensor, v: Tensor, per_segment: i64, kv_segments: i64) -> Result<KvWindows, TchError> {
    let windows = k.size()[0];
    if windows / per_segment > kv_segments {
        let kept = windows - per_segment;
        // Copied out so the dropped segment's memory goes with the concatenation.
        return Ok(KvWindows { k: k.f_narrow(0, per_segment, kept)?.f_contiguous()?, v: v.f_narrow(0, per_segment, kept)?.f_contiguous()? });
    }
    Ok(KvWindows { k, v })
}
