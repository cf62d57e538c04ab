//! The DiT's configuration, read from the checkpoint: which variant (3B: SwiGLU, shared `.all.` blocks,
//! output norm and text RoPE; 7B: GELU, separate streams, video-only pixel RoPE), widths, heads, blocks.
//! The attention windows are not in the weights: they come from the file's `config` metadata when the
//! file has one (the reference files do), else the released models' `(4, 3, 3)` with regular and shifted
//! windows alternating.
use serde::Serialize;
use serde_json::Value;

use crate::models::nn::weights::Weights;
use crate::models::ModelError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DitVariant {
    #[serde(rename = "3b")]
    ThreeB,
    #[serde(rename = "7b")]
    SevenB,
}

impl DitVariant {
    pub fn as_str(self) -> &'static str {
        match self {
            DitVariant::ThreeB => "3b",
            DitVariant::SevenB => "7b",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlpKind {
    /// `proj_out(silu(proj_in_gate(x)) * proj_in(x))`, no biases (3B).
    SwiGlu,
    /// `proj_out(gelu_tanh(proj_in(x)))` with biases (7B).
    GeluTanh,
}

/// Patch size `[t, h, w]` of both released models; the token width follows from it.
pub const PATCH: [i64; 3] = [1, 2, 2];
/// Width of the sinusoidal timestep embedding.
pub const TIME_SINUSOID_DIM: i64 = 256;
/// Every RMS norm of the model (apex `FusedRMSNorm`, eps 1e-5).
pub const NORM_EPS: f64 = 1e-5;
/// The released configs' window count `(nt, nh, nw)`, for a 720p-sized grid.
pub const RELEASED_WINDOW: [i64; 3] = [4, 3, 3];

#[derive(Debug, Clone, PartialEq)]
pub struct DitConfig {
    pub variant: DitVariant,
    pub mlp: MlpKind,
    pub vid_in_channels: i64,
    pub vid_out_channels: i64,
    pub dim: i64,
    pub txt_in_dim: i64,
    /// Hidden width of the time embedding MLP (`max(vid_dim, txt_dim)`).
    pub emb_hidden: i64,
    pub heads: i64,
    pub head_dim: i64,
    pub mlp_hidden: i64,
    pub num_blocks: i64,
    /// Blocks `0..mm_layers` have separate video/text weights; the rest share `.all.` (3B only).
    pub mm_layers: i64,
    /// Length of each block's RoPE frequency buffer; RoPE rotates `6 ×` this many channels per head.
    pub rope_freqs: i64,
    /// Window count `(nt, nh, nw)` and whether the window is shifted, per block.
    pub windows: Vec<([i64; 3], bool)>,
}

impl DitConfig {
    pub fn patch_channels_in(&self) -> i64 {
        PATCH.iter().product::<i64>() * self.vid_in_channels
    }

    pub fn patch_channels_out(&self) -> i64 {
        PATCH.iter().product::<i64>() * self.vid_out_channels
    }

    pub fn rope_channels(&self) -> i64 {
        6 * self.rope_freqs
    }

    /// Whether block `index` has separate `.vid.`/`.txt.` weights (else one `.all.` set).
    pub fn separate_streams(&self, index: i64) -> bool {
        index < self.mm_layers
    }

    pub fn is_last_block(&self, index: i64) -> bool {
        index + 1 == self.num_blocks
    }

    /// Reads the configuration from the tensor names and shapes; `metadata_config` is the file's
    /// `config` metadata (JSON) when there is one.
    pub fn detect(weights: &Weights, metadata_config: Option<&Value>) -> Result<Self, ModelError> {
        let shape = |key: &str| weights.shape(key).ok_or_else(|| weights.format_error(format!("missing tensor `{key}`: not a SeedVR2 DiT checkpoint")));
        let vid_in = shape("vid_in.proj.weight")?;
        let vid_out = shape("vid_out.proj.weight")?;
        let txt_in = shape("txt_in.weight")?;
        let emb_in = shape("emb_in.proj_in.weight")?;
        let [dim, patch_in] = two_dims(weights, "vid_in.proj.weight", &vid_in)?;
        let [patch_out, _] = two_dims(weights, "vid_out.proj.weight", &vid_out)?;
        let patch_volume = PATCH.iter().product::<i64>();
        if patch_in % patch_volume != 0 || patch_out % patch_volume != 0 {
            return Err(weights.format_error(format!("`vid_in.proj.weight` {vid_in:?} / `vid_out.proj.weight` {vid_out:?} do not fit a 1×2×2 patch")));
        }
        let num_blocks = (0..).take_while(|i| weights.first_key_under(&format!("blocks.{i}.")).is_some()).count() as i64;
        if num_blocks == 0 {
            return Err(weights.format_error("no `blocks.0.*` tensors: not a SeedVR2 DiT checkpoint"));
        }
        let mm_layers = (0..num_blocks).take_while(|i| weights.contains(&format!("blocks.{i}.attn.proj_qkv.vid.weight"))).count() as i64;
        let first_stream = if mm_layers > 0 { "vid" } else { "all" };
        let head_dim = shape(&format!("blocks.0.attn.norm_q.{first_stream}.weight"))?[0];
        let qkv = shape(&format!("blocks.0.attn.proj_qkv.{first_stream}.weight"))?;
        let heads = qkv[0] / (3 * head_dim);
        let mlp = if weights.contains(&format!("blocks.0.mlp.{first_stream}.proj_in_gate.weight")) { MlpKind::SwiGlu } else { MlpKind::GeluTanh };
        let mlp_hidden = shape(&format!("blocks.0.mlp.{first_stream}.proj_in.weight"))?[0];
        let variant = if weights.contains("vid_out_norm.weight") { DitVariant::ThreeB } else { DitVariant::SevenB };
        let rope_freqs = shape("blocks.0.attn.rope.rope.freqs")?[0];
        let windows = windows_from_metadata(metadata_config, num_blocks)
            .unwrap_or_else(|| (0..num_blocks).map(|i| (RELEASED_WINDOW, i % 2 == 1)).collect());
        let config = DitConfig {
            variant,
            mlp,
            vid_in_channels: patch_in / patch_volume,
            vid_out_channels: patch_out / patch_volume,
            dim,
            txt_in_dim: txt_in[1],
            emb_hidden: emb_in[0],
            heads,
            head_dim,
            mlp_hidden,
            num_blocks,
            mm_layers,
            rope_freqs,
            windows,
        };
        if 6 * config.rope_freqs > config.head_dim || heads * 3 * head_dim != qkv[0] {
            return Err(weights.format_error(format!("attention of block 0 ({qkv:?}, head {head_dim}, rope {rope_freqs}) does not fit a SeedVR2 DiT")));
        }
        Ok(config)
    }
}

fn two_dims(weights: &Weights, key: &str, shape: &[i64]) -> Result<[i64; 2], ModelError> {
    match shape {
        [a, b] => Ok([*a, *b]),
        _ => Err(weights.format_error(format!("tensor `{key}` has shape {shape:?}, expected two dimensions"))),
    }
}

/// `window` (a count per block) and `window_method` (`…swin…` for shifted) from the file's config.
fn windows_from_metadata(config: Option<&Value>, num_blocks: i64) -> Option<Vec<([i64; 3], bool)>> {
    let config = config?;
    let counts = config.get("window")?.as_array()?;
    let methods = config.get("window_method")?.as_array()?;
    if counts.len() != num_blocks as usize || methods.len() != num_blocks as usize {
        return None;
    }
    counts
        .iter()
        .zip(methods)
        .map(|(count, method)| {
            let count: Vec<i64> = count.as_array()?.iter().filter_map(Value::as_i64).collect();
            let shifted = method.as_str()?.contains("swin");
            Some(([*count.first()?, *count.get(1)?, *count.get(2)?], shifted))
        })
        .collect()
}
