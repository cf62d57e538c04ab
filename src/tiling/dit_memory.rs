//! Working memory of one restoration batch: the SeedVR2 VAE's encode and decode of the batch (what the
//! VAE plans for them estimate) and the DiT's activations, which sit between them in time, so the batch
//! needs the largest of the three. The DiT's figure is an estimate from the tensors alive at a block's peak, not a
//! calibration: the out-of-memory retry (batches split in halves) is the last word.
use serde::{Deserialize, Serialize};


/// What the DiT's activations depend on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DitShape {
    pub dim: i64,
    /// Heads × head dimension.
    pub inner: i64,
    pub mlp_hidden: i64,
    pub text_len: i64,
    pub element_bytes: i64,
}

impl DitShape {
    /// Peak bytes of one block over `tokens` video tokens. The residual stream and its normed and
    /// modulated copies (4 × dim) are alive throughout; beside them either the attention's tensors
    /// (q/k/v, their windowed copies and the output, 7 × inner, and RoPE's fp32 copies of q and k) or the
    /// MLP's hidden activations (3 × hidden), never both: the larger is the peak. (Summing the two
    /// overstated a measured forward 1.3-1.8×, `tests/it/dit_memory.rs`.)
    pub fn block_peak_bytes(&self, tokens: i64) -> f64 {
        let rows = (tokens + self.text_len) as f64;
        let attention = 7 * self.inner * self.element_bytes + 2 * self.inner * 4;
        let mlp = 3 * self.mlp_hidden * self.element_bytes;
        let per_row = 4 * self.dim * self.element_bytes + attention.max(mlp);
        rows * per_row as f64
    }
}

/// One batch's estimated peak working memory, by stage (whole bytes in JSON, as every other byte count).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchMemory {
    #[serde(serialize_with = "whole_bytes")]
    #[schema(value_type = u64)]
    pub encode_bytes: f64,
    #[serde(serialize_with = "whole_bytes")]
    #[schema(value_type = u64)]
    pub dit_bytes: f64,
    #[serde(serialize_with = "whole_bytes")]
    #[schema(value_type = u64)]
    pub decode_bytes: f64,
}

fn whole_bytes<S: serde::Serializer>(bytes: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(bytes.max(0.0).round() as u64)
}

impl BatchMemory {
    pub fn peak_bytes(&self) -> f64 {
        self.encode_bytes.max(self.dit_bytes).max(self.decode_bytes)
    }
}

/// The VAE stages' estimated peaks for one batch (0 where there is no memory model).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct VaeStageBytes {
    pub encode: f64,
    pub decode: f64,
}

/// A batch of `frames` (4n + 1) output frames of `height` × `width` pixels: the DiT works on 2×2 patches
/// of the latent (16× down in all).
pub fn batch_memory(vae: VaeStageBytes, dit: &DitShape, frames: i64, height: i64, width: i64) -> BatchMemory {
    let latent_frames = (frames - 1) / 4 + 1;
    let tokens = latent_frames * (height / 16) * (width / 16);
    BatchMemory { encode_bytes: vae.encode, dit_bytes: dit.block_peak_bytes(tokens), decode_bytes: vae.decode }
}

/// The longest batch (`4n + 1` frames, at most `max_frames`) whose estimate fits `budget_bytes`; one frame
/// when none does (`false`: it does not fit either, and the out-of-memory retry decides).
pub fn longest_fitting_batch(max_frames: i64, budget_bytes: u64, estimate: impl Fn(i64) -> BatchMemory) -> (i64, bool) {
    let mut frames = (max_frames - 1) / 4 * 4 + 1;
    while frames > 1 && estimate(frames).peak_bytes() > budget_bytes as f64 {
        frames -= 4;
    }
    (frames, estimate(frames).peak_bytes() <= budget_bytes as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREE_B_BF16: DitShape = DitShape { dim: 2560, inner: 2560, mlp_hidden: 6912, text_len: 58, element_bytes: 2 };

    #[test]
    fn the_dit_grows_with_tokens_and_fits_the_longest_batch_the_budget_allows() {
        // 720p, 21 frames: 6 × 45 × 80 tokens at ~77 KB per row in bf16 (the attention's side is the
        // larger): ~1.7 GB at a block peak.
        let m = batch_memory(VaeStageBytes::default(), &THREE_B_BF16, 21, 720, 1280);
        assert!((1.5e9..1.9e9).contains(&m.dit_bytes), "{m:?}");
        assert!(batch_memory(VaeStageBytes::default(), &THREE_B_BF16, 9, 720, 1280).dit_bytes < m.dit_bytes);
        let estimate = |frames| batch_memory(VaeStageBytes::default(), &THREE_B_BF16, frames, 720, 1280);
        assert_eq!(longest_fitting_batch(21, 4 << 30, estimate), (21, true));
        let (frames, fits) = longest_fitting_batch(21, 1 << 30, estimate);
        assert!(fits && frames < 21 && (frames - 1) % 4 == 0 && estimate(frames + 4).peak_bytes() > (1u64 << 30) as f64, "{frames}");
        assert_eq!(longest_fitting_batch(21, 1 << 20, estimate), (1, false));
        assert_eq!(longest_fitting_batch(7, 4 << 30, estimate).0, 5, "batches are 4n + 1 frames");
    }
}
