//! The shape of a TAEHV model, read from its checkpoint's tensor shapes (patch size, latent width, every
//! channel width, which temporal blocks have stride 2, which decoder stages upsample), and checked
//! against what the authors' loader would build for the file's name.
use super::naming::{self, LatentSpace, NamedShape};
use crate::models::nn::weights::Weights;
use crate::models::ModelError;

/// Sequential indices of the encoder's three TPools (each followed by a stride-2 conv and 3 MemBlocks).
pub const ENCODER_POOLS: [usize; 3] = [2, 7, 12];
/// The encoder's last conv (to the latent channels).
pub const ENCODER_OUT: usize = 17;
/// Sequential indices of the decoder's three TGrows, per decoder variant.
pub const BASE_GROWS: [usize; 3] = [7, 13, 19];
pub const SUPER_GROWS: [usize; 3] = [7, 14, 21];
/// The super decoder's stage convs (before each PixelShuffle): their width says the stage's space factor.
pub const SUPER_STAGE_CONVS: [usize; 3] = [4, 11, 18];
/// The base decoder's convs that set the next stage's width.
pub const BASE_STAGE_CONVS: [usize; 3] = [8, 14, 20];
/// The last decoder conv (to 3·p² pixel channels), in both variants.
pub const DECODER_OUT: usize = 22;

/// Which decoder the checkpoint holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderVariant {
    /// `taew2_1`, `taew2_2`, `taehv`: input clamp, MemBlocks, nearest upsampling.
    Base,
    /// `*_super`: SuperMemBlocks (depthwise 7×7 + 1×1 convs), PixelShuffle upsampling, no input clamp.
    Super,
}

/// A preview build: fewer decoder upscales than the checkpoint has (README's "cheaper preview"), as the
/// original's `decoder_time_upscale` / `decoder_space_upscale` arguments. `None` keeps the checkpoint's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecoderReduction {
    /// Per stage; a stage turned off keeps the LAST `n_f` output rows of its TGrow conv, as the
    /// original's `patch_tgrow_layers` does. Turning on a stage the checkpoint lacks is refused.
    pub time_upscale: Option<[bool; 3]>,
    /// Per stage. The base decoder's upsampling has no weights, so any flags load; the super decoder's
    /// stage widths depend on them, so only the checkpoint's own flags load (as in the original).
    pub space_upscale: Option<[bool; 3]>,
}

impl DecoderReduction {
    /// The original's 2-tuple form, `(a, b)` → `(False, a, b)`.
    pub fn time_pair(a: bool, b: bool) -> [bool; 3] {
        [false, a, b]
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaehvConfig {
    /// Pixels folded into channels per side before the encoder (and unfolded after the decoder).
    pub patch_size: i64,
    pub latent_channels: i64,
    pub decoder: DecoderVariant,
    /// The encoder's one width (64 released).
    pub encoder_width: i64,
    /// Per encoder stage: its TPool has stride 2.
    pub encoder_time_downscale: [bool; 3],
    /// The decoder's `n_f` (released: base 256, 128, 64, 64; super 512, 256, 128, 64).
    pub decoder_widths: [i64; 4],
    /// Per decoder stage, as built: its TGrow has stride 2.
    pub decoder_time_upscale: [bool; 3],
    /// Per decoder stage, as built: it doubles H and W.
    pub decoder_space_upscale: [bool; 3],
    /// Per decoder stage: the checkpoint's TGrow conv has stride 2 (differs from the built flags in a
    /// preview build, whose TGrow weights are cut to their last rows).
    pub checkpoint_time_upscale: [bool; 3],
    /// From the file name, as the authors' loader picks it.
    pub latent_space: LatentSpace,
}

impl TaehvConfig {
    /// Input frames per latent frame (4 released): `2^(stride-2 TPools)`.
    pub fn t_downscale(&self) -> i64 {
        1 << self.encoder_time_downscale.iter().filter(|&&on| on).count()
    }

    /// Output frames per latent frame before the trim: `2^(stride-2 TGrows)`.
    pub fn t_upscale(&self) -> i64 {
        1 << self.decoder_time_upscale.iter().filter(|&&on| on).count()
    }

    /// Frames the decoder's output starts with that belong to no input frame (`t_upscale − 1`).
    pub fn frames_to_trim(&self) -> i64 {
        self.t_upscale() - 1
    }

    /// Pixels per latent cell along H and W on the way in: three stride-2 convs, times the patch.
    pub fn spatial_factor(&self) -> i64 {
        8 * self.patch_size
    }

    /// Pixels per latent cell along H and W out of the decoder as built (smaller in a space preview).
    pub fn decoder_spatial_factor(&self) -> i64 {
        (1 << self.decoder_space_upscale.iter().filter(|&&on| on).count()) * self.patch_size
    }

    /// Pixel channels of one patch: 3·p².
    pub fn patch_channels(&self) -> i64 {
        3 * self.patch_size * self.patch_size
    }

    /// Latent frames for `frames` input frames: the encoder pads the end up to a whole group.
    pub fn latent_frames(&self, frames: i64) -> i64 {
        (frames + self.t_downscale() - 1) / self.t_downscale()
    }

    /// Output frames for `latents` latent frames: `t_upscale·T − frames_to_trim` (4T − 3 released).
    pub fn decoded_frames(&self, latents: i64) -> i64 {
        (self.t_upscale() * latents - self.frames_to_trim()).max(0)
    }

    /// Reads the configuration from the checkpoint's shapes; `file_name` gives the latent space and is
    /// checked against the shapes where the original knows the name.
    pub fn detect(weights: &Weights, file_name: &str, reduction: &DecoderReduction) -> Result<Self, ModelError> {
        let shapes = Shapes { weights };
        if super::tc_config::is_tc_decoder_keys(weights.keys()) {
            return Err(weights.format_error("a FlashVSR TCDecoder (a decoder alone, conditioned on the LR video), not a TAEHV autoencoder: it loads as `TcDecoder`"));
        }
        if !weights.contains("encoder.0.weight") || !weights.contains(&format!("decoder.{DECODER_OUT}.weight")) {
            return Err(weights.format_error(format!(
                "not a TAEHV model: no `encoder.0.weight` and `decoder.{DECODER_OUT}.weight` (the state dict of madebyollin's taehv.py)"
            )));
        }
        let first = shapes.get("encoder.0.weight", 4)?;
        let encoder_width = first[0];
        let patch_size = patch_of(first[1]).ok_or_else(|| weights.format_error(format!("`encoder.0.weight` takes {} channels, not 3·p² for a patch size p: not a TAEHV encoder", first[1])))?;
        let mut encoder_time_downscale = [false; 3];
        for (stage, index) in ENCODER_POOLS.iter().enumerate() {
            let key = format!("encoder.{index}.conv.weight");
            encoder_time_downscale[stage] = shapes.stride(&key, shapes.get(&key, 4)?[1], encoder_width)?;
        }
        let latent_channels = shapes.get(&format!("encoder.{ENCODER_OUT}.weight"), 4)?[0];
        let (decoder, decoder_widths, checkpoint_time_upscale, space_upscale, decoder_in) = if weights.contains("decoder.0.weight") {
            shapes.super_decoder()?
        } else {
            shapes.base_decoder()?
        };
        if decoder_in != latent_channels {
            return Err(weights.format_error(format!("the encoder gives {latent_channels} latent channels but the decoder takes {decoder_in}")));
        }
        let last = shapes.get(&format!("decoder.{DECODER_OUT}.weight"), 4)?;
        if last[0] != 3 * patch_size * patch_size {
            return Err(weights.format_error(format!("`decoder.{DECODER_OUT}.weight` gives {} channels, but the encoder's patch size {patch_size} needs {}", last[0], 3 * patch_size * patch_size)));
        }
        let name = naming::named_shape(file_name);
        if let Some(named) = name {
            check_name(weights, file_name, named, patch_size, latent_channels, decoder)?;
        }
        let decoder_time_upscale = reduced_time(weights, checkpoint_time_upscale, reduction.time_upscale)?;
        let decoder_space_upscale = reduced_space(weights, decoder, space_upscale, reduction.space_upscale)?;
        Ok(TaehvConfig {
            patch_size,
            latent_channels,
            decoder,
            encoder_width,
            encoder_time_downscale,
            decoder_widths,
            decoder_time_upscale,
            decoder_space_upscale,
            checkpoint_time_upscale,
            latent_space: naming::latent_space(file_name),
        })
    }
}

/// `p` with `3·p² = channels`.
fn patch_of(channels: i64) -> Option<i64> {
    (1..=16).find(|p| 3 * p * p == channels)
}

/// What a decoder's shapes say: variant, `n_f`, TGrow strides, space flags, latent channels taken.
type DecoderShape = (DecoderVariant, [i64; 4], [bool; 3], [bool; 3], i64);

struct Shapes<'a> {
    weights: &'a Weights,
}

impl Shapes<'_> {
    fn get(&self, key: &str, rank: usize) -> Result<Vec<i64>, ModelError> {
        match self.weights.shape(key) {
            Some(shape) if shape.len() == rank => Ok(shape),
            Some(shape) => Err(self.weights.format_error(format!("tensor `{key}` has shape {shape:?}, not the {rank}-D a TAEHV model has there"))),
            None => Err(self.weights.format_error(format!("missing tensor `{key}`: not a TAEHV model of a known layout"))),
        }
    }

    /// Whether a TPool/TGrow conv of `key`, `wide` channels on its temporal side for `n` per frame, has stride 2.
    fn stride(&self, key: &str, wide: i64, n: i64) -> Result<bool, ModelError> {
        if wide == n {
            Ok(false)
        } else if wide == 2 * n {
            Ok(true)
        } else {
            Err(self.weights.format_error(format!("`{key}` has {wide} channels on its temporal side for {n} per frame: neither stride 1 nor 2")))
        }
    }

    /// Whether a super stage conv giving `out` channels for `n` channels after PixelShuffle doubles space.
    fn space(&self, key: &str, out: i64, n: i64) -> Result<bool, ModelError> {
        if out == n {
            Ok(false)
        } else if out == 4 * n {
            Ok(true)
        } else {
            Err(self.weights.format_error(format!("`{key}` gives {out} channels for {n} after its PixelShuffle: neither x1 nor x2")))
        }
    }

    fn base_decoder(&self) -> Result<DecoderShape, ModelError> {
        let first = self.get("decoder.1.weight", 4)?;
        let mut widths = [first[0], 0, 0, 0];
        for (stage, index) in BASE_STAGE_CONVS.iter().enumerate() {
            widths[stage + 1] = self.get(&format!("decoder.{index}.weight"), 4)?[0];
        }
        let mut time = [false; 3];
        for (stage, index) in BASE_GROWS.iter().enumerate() {
            let key = format!("decoder.{index}.conv.weight");
            time[stage] = self.stride(&key, self.get(&key, 4)?[0], widths[stage])?;
        }
        // The base decoder's upsampling has no weights: the original's default, all three stages.
        Ok((DecoderVariant::Base, widths, time, [true; 3], first[1]))
    }

    fn super_decoder(&self) -> Result<DecoderShape, ModelError> {
        let first = self.get("decoder.0.weight", 4)?;
        let mut widths = [first[0], 0, 0, 0];
        let (mut time, mut space) = ([false; 3], [false; 3]);
        for stage in 0..3 {
            let grow_key = format!("decoder.{}.conv.weight", SUPER_GROWS[stage]);
            let grow = self.get(&grow_key, 4)?;
            widths[stage + 1] = grow[1];
            time[stage] = self.stride(&grow_key, grow[0], grow[1])?;
            let conv_key = format!("decoder.{}.weight", SUPER_STAGE_CONVS[stage]);
            space[stage] = self.space(&conv_key, self.get(&conv_key, 4)?[0], grow[1])?;
        }
        Ok((DecoderVariant::Super, widths, time, space, first[1]))
    }
}

fn check_name(weights: &Weights, file_name: &str, named: NamedShape, patch_size: i64, latent_channels: i64, decoder: DecoderVariant) -> Result<(), ModelError> {
    let super_decoder = decoder == DecoderVariant::Super;
    if named.patch_size != patch_size || named.latent_channels != latent_channels || named.super_decoder != super_decoder {
        let variant = |is_super: bool| if is_super { "super" } else { "base" };
        return Err(weights.format_error(format!(
            "the name `{file_name}` stands for patch size {}, {} latent channels and the {} decoder, but the tensors hold patch size {patch_size}, {latent_channels} latent channels and the {} decoder",
            named.patch_size,
            named.latent_channels,
            variant(named.super_decoder),
            variant(super_decoder)
        )));
    }
    Ok(())
}

fn reduced_time(weights: &Weights, checkpoint: [bool; 3], requested: Option<[bool; 3]>) -> Result<[bool; 3], ModelError> {
    let Some(requested) = requested else { return Ok(checkpoint) };
    for stage in 0..3 {
        if requested[stage] && !checkpoint[stage] {
            return Err(weights.format_error(format!("decoder stage {stage} has no time upscale in this checkpoint; a build cannot add one")));
        }
    }
    Ok(requested)
}

fn reduced_space(weights: &Weights, decoder: DecoderVariant, checkpoint: [bool; 3], requested: Option<[bool; 3]>) -> Result<[bool; 3], ModelError> {
    let Some(requested) = requested else { return Ok(checkpoint) };
    match decoder {
        DecoderVariant::Base => Ok(requested),
        DecoderVariant::Super if requested == checkpoint => Ok(requested),
        DecoderVariant::Super => Err(weights.format_error(format!(
            "the super decoder's space upscale {checkpoint:?} is fixed by its conv widths; {requested:?} cannot be loaded from it (the original fails the same way)"
        ))),
    }
}
