//! The DiT's configuration, read from the checkpoint's shapes (Wan 2.1 T2V key names, no prefix): width,
//! blocks, FFN width, latent channels in and out, text width, sinusoid width and patch. The head count is
//! not in any shape (the q/k norms span the whole width): it comes from the file's `config` metadata
//! (`num_heads`, the reference files carry it), else from the released models' head width of 128.
use serde_json::Value;

use crate::models::nn::weights::Weights;
use crate::models::ModelError;

/// Head width of every released Wan 2.1 / 2.2 DiT; the fallback when the file does not name its heads.
pub const RELEASED_HEAD_DIM: i64 = 128;
/// Every norm of the model (LayerNorms and the q/k RMS norms).
pub const NORM_EPS: f64 = 1e-6;
/// The one timestep FlashVSR's one-step DiT runs at (`init_cross_kv`).
pub const FLASHVSR_TIMESTEP: f64 = 1000.0;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WanDitConfig {
    pub dim: i64,
    pub heads: i64,
    pub head_dim: i64,
    pub num_layers: i64,
    pub ffn_dim: i64,
    pub in_channels: i64,
    pub out_channels: i64,
    pub text_dim: i64,
    /// Width of the sinusoidal timestep embedding (256 in every release).
    pub freq_dim: i64,
    /// `(t, h, w)` of one patch (`(1, 2, 2)` in every release).
    pub patch: [i64; 3],
    /// Where the head count came from.
    pub heads_from: HeadsFrom,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadsFrom {
    /// The file's `config` metadata (`num_heads`).
    Metadata,
    /// `dim / 128`, the released models' head width.
    ReleasedHeadDim,
}

impl WanDitConfig {
    pub fn patch_volume(&self) -> i64 {
        self.patch.iter().product()
    }

    /// Channels of each RoPE part `[f, h, w]` of a head: `hd − 2·(hd/3)`, `hd/3`, `hd/3`.
    pub fn rope_split(&self) -> [i64; 3] {
        let third = self.head_dim / 3;
        [self.head_dim - 2 * third, third, third]
    }

    /// Reads the configuration from the tensor names and shapes; `metadata_config` is the file's `config`
    /// metadata (JSON) when there is one.
    pub fn detect(weights: &Weights, metadata_config: Option<&Value>) -> Result<Self, ModelError> {
        let shape = |key: &str| weights.shape(key).ok_or_else(|| weights.format_error(format!("missing tensor `{key}`: not a Wan 2.1 DiT checkpoint")));
        if weights.first_key_under("img_emb.").is_some() {
            return Err(weights.format_error("`img_emb.*` tensors: an image-to-video Wan DiT, which is not supported (only the text-to-video layout FlashVSR uses)"));
        }
        let patch_weight = shape("patch_embedding.weight")?;
        let [dim, in_channels, pt, ph, pw] = five_dims(weights, "patch_embedding.weight", &patch_weight)?;
        let patch = [pt, ph, pw];
        let text_dim = shape("text_embedding.0.weight")?.get(1).copied().unwrap_or(0);
        let freq_dim = shape("time_embedding.0.weight")?.get(1).copied().unwrap_or(0);
        let head_out = shape("head.head.weight")?.first().copied().unwrap_or(0);
        let num_layers = (0..).take_while(|i| weights.first_key_under(&format!("blocks.{i}.")).is_some()).count() as i64;
        if num_layers == 0 {
            return Err(weights.format_error("no `blocks.0.*` tensors: not a Wan 2.1 DiT checkpoint"));
        }
        let ffn_dim = shape("blocks.0.ffn.0.weight")?.first().copied().unwrap_or(0);
        let (heads, heads_from) = match metadata_heads(metadata_config) {
            Some(heads) => (heads, HeadsFrom::Metadata),
            None => (dim / RELEASED_HEAD_DIM, HeadsFrom::ReleasedHeadDim),
        };
        let patch_volume: i64 = patch.iter().product();
        if patch_volume <= 0 || head_out % patch_volume != 0 {
            return Err(weights.format_error(format!("`head.head.weight` has {head_out} outputs, not a multiple of the patch {patch:?}")));
        }
        if heads <= 0 || dim % heads != 0 {
            return Err(weights.format_error(format!("width {dim} does not split into {heads} heads")));
        }
        let head_dim = dim / heads;
        let config = WanDitConfig { dim, heads, head_dim, num_layers, ffn_dim, in_channels, out_channels: head_out / patch_volume, text_dim, freq_dim, patch, heads_from };
        // RoPE pairs adjacent channels inside each of the three parts (`hd/3` must be even, §2.1).
        if (head_dim / 3) % 2 != 0 || head_dim % 2 != 0 || freq_dim % 2 != 0 {
            return Err(weights.format_error(format!("head width {head_dim} (or sinusoid width {freq_dim}) does not fit the 3-D RoPE of a Wan DiT")));
        }
        Ok(config)
    }
}

fn metadata_heads(config: Option<&Value>) -> Option<i64> {
    config?.get("num_heads")?.as_i64()
}

fn five_dims(weights: &Weights, key: &str, shape: &[i64]) -> Result<[i64; 5], ModelError> {
    match shape {
        [a, b, c, d, e] => Ok([*a, *b, *c, *d, *e]),
        _ => Err(weights.format_error(format!("tensor `{key}` has shape {shape:?}, expected five dimensions"))),
    }
}
