//! Which (query window, key window) blocks the sparse attention computes (`generate_draft_block_mask`):
//! a local window neighbourhood tiled over all segment pairs, then per head a top-k over the softmaxed
//! scores of the windows' mean q and k. Built fresh on every call from the call's own grid and
//! `local_range` (the v1.1 fix: the v1.0 code reused a mask of another grid with the same window count).
use tch::{Device, Kind, TchError, Tensor};

use super::window::WindowGrid;

/// `build_local_block_mask_shifted_vec_normal_slide`: on the `rows × columns` window grid, window
/// `(r1, c1)` sees `(r2, c2)` iff `r1 − r/2 ≤ r2 ≤ r1 − r/2 + r − 1` (and the same for columns), with no
/// clamping at the borders. `[n_sp, n_sp]` bool, windows row-major.
pub fn local_window_mask(spatial: [i64; 2], local_range: i64, device: Device) -> Result<Tensor, TchError> {
    let [rows, columns] = spatial;
    let sees = |from: i64, to: i64| {
        let start = from - local_range / 2;
        start <= to && to <= start + local_range - 1
    };
    let n = rows * columns;
    let mut allowed = Vec::with_capacity((n * n) as usize);
    for query in 0..n {
        for key in 0..n {
            allowed.push(sees(query / columns, key / columns) && sees(query % columns, key % columns));
        }
    }
    Tensor::f_from_slice(&allowed)?.f_view([n, n])?.f_to_device(device)
}

/// `topk = int(n_sp² · topk_ratio) − 1` entries kept per (head, query segment), before the cap at the
/// entry count.
pub fn topk_entries(per_segment: i64, topk_ratio: f64) -> i64 {
    ((per_segment * per_segment) as f64 * topk_ratio) as i64 - 1
}

/// The block mask `[heads, n_qwin, n_kwin]` (bool) for query windows `q_windows` `[n_qwin, 128, dim]`
/// and key windows `k_windows` `[n_kwin, 128, dim]` (cache first), both after norm and RoPE.
pub fn draft_block_mask(q_windows: &Tensor, k_windows: &Tensor, grid: &WindowGrid, heads: i64, local: &Tensor, topk: i64) -> Result<Tensor, TchError> {
    let (n_q, n_k) = (q_windows.size()[0], k_windows.size()[0]);
    let n_sp = grid.per_segment();
    let pooled = |windows: &Tensor, count: i64| -> Result<Tensor, TchError> {
        windows.f_mean_dim(1, false, None::<Kind>)?.f_view([count, heads, -1])?.f_permute([1, 0, 2])
    };
    let (mean_q, mean_k) = (pooled(q_windows, n_q)?, pooled(k_windows, n_k)?);
    let head_dim = mean_q.size()[2];
    let scores = mean_q.f_matmul(&mean_k.f_transpose(1, 2)?)?.f_div_scalar((head_dim as f64).sqrt())?;
    // The local mask is a float32 tensor of 0 / −inf in the original, so the sum (and the softmax) is
    // float32 whatever the compute dtype.
    let tiled = local.f_repeat([n_q / n_sp, n_k / n_sp])?;
    let scores = scores.f_to_kind(Kind::Float)?.f_masked_fill(&tiled.f_logical_not()?, f64::NEG_INFINITY)?;
    let probabilities = scores.f_softmax(-1, Kind::Float)?;
    // Top-k per (head, query segment) over its [n_sp, n_kwin] probabilities, flattened.
    let query_segments = n_q / n_sp;
    let flat = probabilities.f_reshape([heads * query_segments, n_sp * n_k])?;
    let kept = topk.min(n_sp * n_k - 1);
    let (largest, _) = flat.f_topk(kept + 1, 1, true, true)?;
    let threshold = largest.f_narrow(1, kept, 1)?;
    flat.f_gt_tensor(&threshold)?.f_reshape([heads, n_q, n_k])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(mask: &Tensor) -> Vec<Vec<i64>> {
        Vec::<Vec<i64>>::try_from(mask.to_kind(Kind::Int64)).unwrap()
    }

    /// The reference's worked examples (README §2.3 and `info.json`): 2×3 with range 3, 1×3 with range 3.
    #[test]
    fn local_mask_slides_without_clamping() {
        let expected_2x3 = [[1, 1, 0, 1, 1, 0], [1, 1, 1, 1, 1, 1], [0, 1, 1, 0, 1, 1], [1, 1, 0, 1, 1, 0], [1, 1, 1, 1, 1, 1], [0, 1, 1, 0, 1, 1]];
        assert_eq!(rows(&local_window_mask([2, 3], 3, Device::Cpu).unwrap()), expected_2x3.map(Vec::from).to_vec());
        assert_eq!(rows(&local_window_mask([1, 3], 3, Device::Cpu).unwrap()), vec![vec![1, 1, 0], vec![1, 1, 1], vec![0, 1, 1]]);
        // An even range reaches one window further back than forward.
        assert_eq!(rows(&local_window_mask([1, 4], 2, Device::Cpu).unwrap())[1], vec![1, 1, 0, 0]);
    }

    #[test]
    fn topk_counts_follow_the_official_ratio() {
        assert_eq!(topk_entries(3, 0.5), 3);
        assert_eq!(topk_entries(2, 2.0 * 768.0 * 1280.0 / (128.0 * 256.0)), 239);
        assert_eq!(topk_entries(60, 2.0 * 768.0 * 1280.0 / (768.0 * 1280.0)), 7199);
    }
}
