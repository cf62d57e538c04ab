//! `block_sparse_attn_func` as FlashVSR calls it (128 × 128 blocks, head h uses mask h, no dropout,
//! scale 1/√hd), emulated with a token mask: masked scores get −inf before the softmax, and a query
//! window with no active key block outputs 0 (the CUDA kernel's "empty line"). `BlockSparseGathered`
//! computes the same from each query window's active key blocks alone, gathered, as the kernel skips the
//! others: slower on this CPU at 512×512, where the masks keep most blocks and the gathering copies the
//! keys once per query window (docs/benchmarks.md), kept to be measured where masks are sparser (the GPU
//! kit's `flashvsr` step at 768×1408). `Dense` attends to every key (what third-party ports do): a
//! different result whenever a mask entry is 0, kept for comparison.
use tch::{TchError, Tensor};

use super::window::WINDOW_TOKENS;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttentionMode {
    /// The original's block-sparse kernel, emulated exactly with a token mask over every key.
    #[default]
    BlockSparse,
    /// The same result from the active key blocks alone, gathered per query window.
    BlockSparseGathered,
    /// Every query attends to every key; not the original's computation.
    Dense,
}

/// Scores held at once by one chunk of query windows (all heads), in elements: bounds the emulation's
/// memory at real sizes (768×1280 steady state: 12 heads × 7,680 queries × 30,720 keys in one go would
/// be 11 GB of fp32 scores).
const CHUNK_SCORES: i64 = 1 << 26;

/// [`block_sparse`] from each query window's active key blocks only.
pub fn block_sparse_gathered(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> Result<Tensor, TchError> {
    let [heads, q_len, _] = three(q);
    let q_windows = q_len / WINDOW_TOKENS;
    let most_active = mask.f_sum_dim_intlist(-1, false, tch::Kind::Int64)?.f_max()?.f_int64_value(&[])?.max(1);
    let chunk = (CHUNK_SCORES / (heads * WINDOW_TOKENS * most_active * WINDOW_TOKENS)).clamp(1, q_windows.max(1));
    gathered_in_chunks(q, k, v, mask, chunk)
}

/// [`block_sparse_gathered`], `chunk` query windows at a time: each (head, window)'s active key blocks gathered in
/// key order, padded to the chunk's most with blocks masked out, and attended to as one batch.
fn gathered_in_chunks(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, chunk: i64) -> Result<Tensor, TchError> {
    let [heads, q_len, head_dim] = three(q);
    let (q_windows, k_blocks) = (q_len / WINDOW_TOKENS, k.size()[1] / WINDOW_TOKENS);
    let blocks_of = |x: &Tensor| x.f_reshape([heads * k_blocks, WINDOW_TOKENS, head_dim]);
    let (k_blocks_all, v_blocks_all) = (blocks_of(k)?, blocks_of(v)?);
    let mut outputs = Vec::new();
    for first in (0..q_windows).step_by(chunk as usize) {
        let count = chunk.min(q_windows - first);
        let blocks = mask.f_narrow(1, first, count)?;
        let active = blocks.f_sum_dim_intlist(-1, false, tch::Kind::Int64)?.f_max()?.f_int64_value(&[])?;
        let queries = q.f_narrow(1, first * WINDOW_TOKENS, count * WINDOW_TOKENS)?;
        if active == 0 {
            outputs.push(queries.f_zeros_like()?);
            continue;
        }
        // Active blocks first, in key order (a stable sort of the flags), then padding.
        let (flags, order) = blocks.f_to_kind(tch::Kind::Uint8)?.f_sort_stable(true, -1, true)?;
        let (flags, order) = (flags.f_narrow(-1, 0, active)?.f_to_kind(tch::Kind::Bool)?, order.f_narrow(-1, 0, active)?);
        let head_offset = Tensor::f_arange(heads, (tch::Kind::Int64, q.device()))?.f_mul_scalar(k_blocks)?.f_view([heads, 1, 1])?;
        let picked = order.f_add(&head_offset)?.f_flatten(0, -1)?;
        let batch = heads * count;
        let gather = |all: &Tensor| -> Result<Tensor, TchError> { all.f_index_select(0, &picked)?.f_view([batch, 1, active * WINDOW_TOKENS, head_dim]) };
        let (keys, values) = (gather(&k_blocks_all)?, gather(&v_blocks_all)?);
        let key_mask = flags.f_repeat_interleave_self_int(WINDOW_TOKENS, -1, None)?.f_view([batch, 1, 1, active * WINDOW_TOKENS])?;
        let windows = queries.f_reshape([batch, 1, WINDOW_TOKENS, head_dim])?;
        let out = Tensor::f_scaled_dot_product_attention(&windows, &keys, &values, Some(key_mask), 0.0, false, None, false)?;
        let out = out.f_view([heads, count * WINDOW_TOKENS, head_dim])?;
        // Rows with no active block are 0 (the backends differ: NaN or 0 from an all −inf softmax).
        let any = blocks.f_any_dim(2, true)?.f_repeat_interleave_self_int(WINDOW_TOKENS, 1, None)?;
        let zeros = Tensor::f_zeros([1], (out.kind(), out.device()))?;
        outputs.push(out.f_where_self(&any, &zeros)?);
    }
    Tensor::f_cat(&outputs, 1)
}

/// `q` `[heads, Lq, hd]`, `k` and `v` `[heads, Lk, hd]` (window order), `mask` `[heads, Lq/128, Lk/128]`
/// bool → `[heads, Lq, hd]`.
pub fn block_sparse(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> Result<Tensor, TchError> {
    let [heads, q_len, _] = three(q);
    let k_len = k.size()[1];
    let q_windows = q_len / WINDOW_TOKENS;
    let chunk = (CHUNK_SCORES / (heads * WINDOW_TOKENS * k_len).max(1)).clamp(1, q_windows.max(1));
    in_chunks(q, k, v, mask, chunk)
}

/// [`block_sparse`], `chunk` query windows at a time.
fn in_chunks(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, chunk: i64) -> Result<Tensor, TchError> {
    let q_windows = q.size()[1] / WINDOW_TOKENS;
    let mut outputs = Vec::new();
    for first in (0..q_windows).step_by(chunk as usize) {
        let count = chunk.min(q_windows - first);
        let blocks = mask.f_narrow(1, first, count)?;
        let token_mask = blocks.f_repeat_interleave_self_int(WINDOW_TOKENS, 1, None)?.f_repeat_interleave_self_int(WINDOW_TOKENS, 2, None)?;
        let queries = q.f_narrow(1, first * WINDOW_TOKENS, count * WINDOW_TOKENS)?;
        let out = Tensor::f_scaled_dot_product_attention(&queries.f_unsqueeze(0)?, &k.f_unsqueeze(0)?, &v.f_unsqueeze(0)?, Some(token_mask.f_unsqueeze(0)?), 0.0, false, None, false)?
            .f_squeeze_dim(0)?;
        // Rows with no active block are 0 (the backends differ: NaN or 0 from an all −inf softmax).
        let active = blocks.f_any_dim(2, true)?.f_repeat_interleave_self_int(WINDOW_TOKENS, 1, None)?;
        let zeros = Tensor::f_zeros([1], (out.kind(), out.device()))?;
        outputs.push(out.f_where_self(&active, &zeros)?);
    }
    Tensor::f_cat(&outputs, 1)
}

/// Plain attention over every key.
pub fn dense(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor, TchError> {
    Tensor::f_scaled_dot_product_attention::<Tensor>(&q.f_unsqueeze(0)?, &k.f_unsqueeze(0)?, &v.f_unsqueeze(0)?, None, 0.0, false, None, false)?.f_squeeze_dim(0)
}

fn three(x: &Tensor) -> [i64; 3] {
    let size = x.size();
    [size[0], size[1], size[2]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// Straight from the kernel's pure-torch reference: token mask, −inf, softmax, masked probabilities 0.
    fn reference(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> Tensor {
        let token_mask = mask.repeat_interleave_self_int(WINDOW_TOKENS, 1, None).repeat_interleave_self_int(WINDOW_TOKENS, 2, None);
        let scores = q.matmul(&k.transpose(1, 2)) / (q.size()[2] as f64).sqrt();
        let probabilities = scores.masked_fill(&token_mask.logical_not(), f64::NEG_INFINITY).softmax(-1, Kind::Double).nan_to_num(0.0, None, None);
        probabilities.masked_fill(&token_mask.logical_not(), 0.0).matmul(v)
    }

    #[test]
    fn emulation_matches_the_kernel_reference_and_empty_rows_are_zero() {
        tch::manual_seed(3);
        let (heads, hd) = (2, 8);
        let q = Tensor::randn([heads, 3 * 128, hd], (Kind::Double, Device::Cpu));
        let k = Tensor::randn([heads, 4 * 128, hd], (Kind::Double, Device::Cpu));
        let v = Tensor::randn([heads, 4 * 128, hd], (Kind::Double, Device::Cpu));
        let mask = Tensor::rand([heads, 3, 4], (Kind::Float, Device::Cpu)).gt(0.5);
        let _ = mask.get(1).get(1).fill_(0);
        let out = block_sparse(&q, &k, &v, &mask).unwrap();
        let expected = reference(&q, &k, &v, &mask);
        assert!((&out - &expected).abs().max().double_value(&[]) < 1e-12);
        let gathered = block_sparse_gathered(&q, &k, &v, &mask).unwrap();
        assert!((&gathered - &expected).abs().max().double_value(&[]) < 1e-12);
        assert_eq!(out.get(1).narrow(0, 128, 128).abs().max().double_value(&[]), 0.0);
        let all = Tensor::ones([heads, 3, 4], (Kind::Bool, Device::Cpu));
        assert!((block_sparse(&q, &k, &v, &all).unwrap() - dense(&q, &k, &v).unwrap()).abs().max().double_value(&[]) < 1e-12);
        // Memory-bounded chunks of query windows compute the same thing (one chunk here by default).
        for chunk in [1, 2] {
            assert!((in_chunks(&q, &k, &v, &mask, chunk).unwrap() - &out).abs().max().double_value(&[]) < 1e-12, "chunk {chunk}");
            assert!((gathered_in_chunks(&q, &k, &v, &mask, chunk).unwrap() - &out).abs().max().double_value(&[]) < 1e-12, "chunk {chunk}");
        }
        // A chunk whose every window is empty.
        let none = Tensor::zeros([heads, 3, 4], (Kind::Bool, Device::Cpu));
        assert_eq!(block_sparse_gathered(&q, &k, &v, &none).unwrap().abs().max().double_value(&[]), 0.0);
        assert_eq!(block_sparse(&q, &k, &v, &none).unwrap().abs().max().double_value(&[]), 0.0);
    }
}
