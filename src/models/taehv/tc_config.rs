//! The shape of a FlashVSR TCDecoder (`TCDecoder.ckpt`: the TAEHV base decoder alone, `decoder.N.*`, with an
//! LR-video condition on its input and an extra 3×3 conv after its first and last ReLUs), read from its
//! tensor shapes: the condition and latent widths it takes, its four widths and its TGrow strides.
use std::collections::BTreeMap;

use crate::models::nn::weights::Weights;
use crate::models::ModelError;

/// The conv from the condition and latent channels to the first width.
pub const TC_FIRST_CONV: usize = 1;
/// The bias-free 3×3 convs (dirac-initialised in the original, trained in the checkpoint) after the
/// first and after the last ReLU.
pub const TC_IDENTITY_CONVS: [usize; 2] = [3, 24];
/// The first MemBlock of each stage (three in a row).
pub const TC_STAGE_MEMBLOCKS: [usize; 3] = [5, 11, 17];
pub const TC_GROWS: [usize; 3] = [9, 15, 21];
/// The convs that set the next stage's width (bias-free).
pub const TC_STAGE_CONVS: [usize; 3] = [10, 16, 22];
/// The last conv, to RGB.
pub const TC_OUT: usize = 26;
/// Every stage doubles H and W (nearest upsampling, no weights): 8 pixels per latent cell.
pub const TC_SPATIAL_FACTOR: i64 = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcDecoderConfig {
    /// The diffusion latent's channels (16 released).
    pub latent_channels: i64,
    /// The condition's channels in front of the latent's: the LR video folded `t_upscale × 8 × 8` per
    /// latent cell (3·4·8·8 = 768 released).
    pub condition_channels: i64,
    /// The decoder's `n_f` (released 512, 256, 128, 128).
    pub widths: [i64; 4],
    /// Per stage: its TGrow has stride 2 (released: the last two).
    pub time_upscale: [bool; 3],
}

impl TcDecoderConfig {
    /// Output frames per latent frame: `2^(stride-2 TGrows)`.
    pub fn t_upscale(&self) -> i64 {
        1 << self.time_upscale.iter().filter(|&&on| on).count()
    }

    /// Frames the first decode starts with that belong to no input frame (`t_upscale − 1`).
    pub fn frames_to_trim(&self) -> i64 {
        self.t_upscale() - 1
    }

    /// Output frames for `latents` latent frames decoded from the start of a stream.
    pub fn decoded_frames(&self, latents: i64) -> i64 {
        (self.t_upscale() * latents - self.frames_to_trim()).max(0)
    }

    /// Reads the configuration from the checkpoint's shapes.
    pub fn detect(weights: &Weights) -> Result<Self, ModelError> {
        let shape = |key: &str| weights.shape(key);
        if !is_tc_decoder_keys(weights.keys()) {
            return Err(weights.format_error(format!(
                "not a FlashVSR TCDecoder: it needs `decoder.{TC_FIRST_CONV}.weight`, `decoder.{}.weight` and `decoder.{TC_OUT}.weight` and no encoder (the state dict of TCDecoder.ckpt)",
                TC_IDENTITY_CONVS[1]
            )));
        }
        let get = |key: String| -> Result<Vec<i64>, ModelError> {
            match shape(&key) {
                Some(found) if found.len() == 4 => Ok(found),
                Some(found) => Err(weights.format_error(format!("tensor `{key}` has shape {found:?}, not the 4-D conv weight a TCDecoder has there"))),
                None => Err(weights.format_error(format!("missing tensor `{key}`: not a TCDecoder of the known layout"))),
            }
        };
        let first = get(format!("decoder.{TC_FIRST_CONV}.weight"))?;
        let mut widths = [first[0], 0, 0, 0];
        for (stage, index) in TC_STAGE_CONVS.iter().enumerate() {
            widths[stage + 1] = get(format!("decoder.{index}.weight"))?[0];
        }
        let mut time_upscale = [false; 3];
        for (stage, index) in TC_GROWS.iter().enumerate() {
            let key = format!("decoder.{index}.conv.weight");
            let rows = get(key.clone())?[0];
            time_upscale[stage] = if rows == widths[stage] {
                false
            } else if rows == 2 * widths[stage] {
                true
            } else {
                return Err(weights.format_error(format!("`{key}` gives {rows} channels for {} per frame: neither stride 1 nor 2", widths[stage])));
            };
        }
        let t_upscale = 1 << time_upscale.iter().filter(|&&on| on).count();
        let condition_channels = 3 * t_upscale * TC_SPATIAL_FACTOR * TC_SPATIAL_FACTOR;
        let latent_channels = first[1] - condition_channels;
        if latent_channels <= 0 {
            return Err(weights.format_error(format!(
                "`decoder.{TC_FIRST_CONV}.weight` takes {} channels, not the {condition_channels} of the LR condition plus a latent",
                first[1]
            )));
        }
        Ok(TcDecoderConfig { latent_channels, condition_channels, widths, time_upscale })
    }
}

/// Whether a checkpoint's keys are a TCDecoder's: the decoder alone, with the convs only it has (the
/// plain TAEHV decoder ends at `decoder.22`).
pub fn is_tc_decoder_keys<'a>(mut keys: impl Iterator<Item = &'a str>) -> bool {
    let needed = [format!("decoder.{TC_FIRST_CONV}.weight"), format!("decoder.{}.weight", TC_IDENTITY_CONVS[1]), format!("decoder.{TC_OUT}.weight")];
    let mut found = [false; 3];
    let only_decoder = keys.all(|key| {
        if let Some(at) = needed.iter().position(|k| k == key) {
            found[at] = true;
        }
        key.starts_with("decoder.")
    });
    only_decoder && found.iter().all(|&f| f)
}

/// [`is_tc_decoder_keys`] on a header's shapes (the registry's view of a file).
pub fn is_tc_decoder(shapes: &BTreeMap<String, Vec<i64>>) -> bool {
    is_tc_decoder_keys(shapes.keys().map(String::as_str))
}
