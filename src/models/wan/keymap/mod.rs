//! Weight-name translation between the original Wan / ComfyUI checkpoint names and diffusers'
//! `AutoencoderKLWan` names. Modules are built from diffusers names; original files are renamed once
//! at load time with [`original_to_diffusers`]. The two original layouts differ only in how the levels
//! are listed (`wan21`, `wan22`); stems, middle blocks, heads and the 1×1×1 convs are named alike.
mod names;
mod wan21;
mod wan22;

use names::{indexed, rename, residual_block};

pub use wan21::DecoderLayout;
pub use wan22::LevelLists;

/// Which naming scheme a checkpoint uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// `Wan2.1_VAE.pth`, `Wan2.2_VAE.pth` / ComfyUI: `encoder.conv1`, `encoder.downsamples.N…`, `encoder.head.2`, `conv1`/`conv2`.
    Original,
    /// diffusers `AutoencoderKLWan`: `encoder.conv_in`, `down_blocks.N…`, `decoder.up_blocks.I.resnets.J`, `quant_conv`.
    Diffusers,
}

/// Decides the scheme from a key only one of them has.
pub fn detect_naming<'a>(mut keys: impl Iterator<Item = &'a str>) -> Option<Naming> {
    keys.find_map(|key| match key {
        "encoder.conv1.weight" => Some(Naming::Original),
        "encoder.conv_in.weight" => Some(Naming::Diffusers),
        _ => None,
    })
}

/// How an original-naming checkpoint lists its encoder and decoder levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OriginalLayout {
    /// Wan 2.1 (`wan/modules/vae.py`): one flat `downsamples` / `upsamples` list over all levels.
    Flat(DecoderLayout),
    /// Wan 2.2 (`wan/modules/vae2_2.py`): one block per level, each with its own list.
    Nested(LevelLists),
}

impl OriginalLayout {
    /// Reads the layout from original-naming keys; the error says which keys were looked for.
    pub fn detect(keys: &[&str]) -> Result<Self, &'static str> {
        if wan22::is_nested(keys) {
            LevelLists::from_original_keys(keys)
                .map(Self::Nested)
                .ok_or("no `encoder.downsamples.0.downsamples.J.residual.*` or `decoder.upsamples.0.upsamples.J.residual.*`: cannot count the resnets per level")
        } else {
            DecoderLayout::from_original_keys(keys.iter().copied())
                .map(Self::Flat)
                .ok_or("no `decoder.upsamples.N.resample.1.weight`: cannot split the decoder into levels")
        }
    }
}

/// Directly under `encoder.` / `decoder.`: the stem and the `head` sequential (RMS norm, SiLU, conv).
const CODER_RENAMES: [(&str, &str); 4] = [
    ("conv1.", "conv_in."),
    ("head.0.", "norm_out."),
    ("head.2.", "conv_out."),
    ("middle.1.", "mid_block.attentions.0."),
];

const TOP_RENAMES: [(&str, &str); 2] = [("conv1.", "quant_conv."), ("conv2.", "post_quant_conv.")];

/// `encoder.rest` / `decoder.rest` → `("encoder", "rest")`.
fn split_coder(key: &str) -> Option<(&str, &str)> {
    key.split_once('.').filter(|(c, _)| *c == "encoder" || *c == "decoder")
}

/// Middle block, stem and head: named alike in both original layouts.
fn shared_to_diffusers(rest: &str) -> Option<String> {
    if let Some((n @ (0 | 2), tail)) = rest.strip_prefix("middle.").and_then(indexed) {
        return Some(format!("mid_block.resnets.{}.{}", n / 2, residual_block(tail, true)));
    }
    rename(rest, &CODER_RENAMES, true)
}

fn shared_to_original(rest: &str) -> Option<String> {
    if let Some((n, tail)) = rest.strip_prefix("mid_block.resnets.").and_then(indexed) {
        return Some(format!("middle.{}.{}", n * 2, residual_block(tail, false)));
    }
    rename(rest, &CODER_RENAMES, false)
}

/// Original name to diffusers name. Keys that belong to neither scheme pass through unchanged, so
/// they show up later as unexpected keys with their own name.
pub fn original_to_diffusers(key: &str, layout: OriginalLayout) -> String {
    let Some((coder, rest)) = split_coder(key) else {
        return rename(key, &TOP_RENAMES, true).unwrap_or_else(|| key.to_string());
    };
    let levels = match layout {
        OriginalLayout::Flat(decoder) => wan21::levels_to_diffusers(rest, decoder),
        OriginalLayout::Nested(lists) => wan22::levels_to_diffusers(rest, lists),
    };
    let mapped = levels.or_else(|| shared_to_diffusers(rest)).unwrap_or_else(|| rest.to_string());
    format!("{coder}.{mapped}")
}

/// Diffusers name to original name; the inverse of [`original_to_diffusers`].
pub fn diffusers_to_original(key: &str, layout: OriginalLayout) -> String {
    let Some((coder, rest)) = split_coder(key) else {
        return rename(key, &TOP_RENAMES, false).unwrap_or_else(|| key.to_string());
    };
    let levels = match layout {
        OriginalLayout::Flat(decoder) => wan21::levels_to_original(rest, decoder),
        OriginalLayout::Nested(lists) => wan22::levels_to_original(rest, lists),
    };
    let mapped = levels.or_else(|| shared_to_original(rest)).unwrap_or_else(|| rest.to_string());
    format!("{coder}.{mapped}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLAT: OriginalLayout = OriginalLayout::Flat(DecoderLayout { layers_per_level: 4 });

    #[test]
    fn maps_shared_keys_in_both_layouts() {
        let nested = OriginalLayout::Nested(LevelLists { encoder_resnets: 2, decoder_resnets: 3 });
        let cases = [
            ("conv1.weight", "quant_conv.weight"),
            ("conv2.bias", "post_quant_conv.bias"),
            ("encoder.conv1.weight", "encoder.conv_in.weight"),
            ("encoder.head.0.gamma", "encoder.norm_out.gamma"),
            ("decoder.head.2.bias", "decoder.conv_out.bias"),
            ("encoder.middle.1.to_qkv.weight", "encoder.mid_block.attentions.0.to_qkv.weight"),
            ("decoder.middle.2.residual.3.gamma", "decoder.mid_block.resnets.1.norm2.gamma"),
        ];
        for layout in [FLAT, nested] {
            for (original, diffusers) in cases {
                assert_eq!(original_to_diffusers(original, layout), diffusers, "{original}");
                assert_eq!(diffusers_to_original(diffusers, layout), original, "{diffusers}");
            }
        }
    }

    #[test]
    fn unknown_keys_pass_through() {
        for key in ["something.else", "encoder.patch.weight", "decoder.up_blocks.0.weird"] {
            assert_eq!(original_to_diffusers(key, FLAT), key);
        }
    }

    #[test]
    fn detects_the_original_layout() {
        let flat = ["encoder.conv1.weight", "encoder.downsamples.0.residual.0.gamma", "decoder.upsamples.3.resample.1.weight"];
        assert_eq!(OriginalLayout::detect(&flat), Ok(FLAT));
        let nested = [
            "encoder.conv1.weight",
            "encoder.downsamples.0.downsamples.1.residual.0.gamma",
            "encoder.downsamples.0.downsamples.2.resample.1.weight",
            "decoder.upsamples.0.upsamples.2.shortcut.weight",
            "decoder.upsamples.0.upsamples.3.time_conv.weight",
        ];
        let lists = LevelLists { encoder_resnets: 2, decoder_resnets: 3 };
        assert_eq!(OriginalLayout::detect(&nested), Ok(OriginalLayout::Nested(lists)));
        assert!(OriginalLayout::detect(&["encoder.conv1.weight"]).is_err());
        assert_eq!(detect_naming(nested.iter().copied()), Some(Naming::Original));
    }

    // The level keys of each layout go through the public mapping both ways (the layouts' own tests read
    // their key counts).
    const WAN21_LAYOUT: DecoderLayout = DecoderLayout { layers_per_level: 4 };
    const WAN22_LISTS: LevelLists = LevelLists { encoder_resnets: 2, decoder_resnets: 3 };

    #[test]
    fn maps_each_kind_of_wan21_level_key() {
        let cases = [
            ("encoder.downsamples.3.residual.6.weight", "encoder.down_blocks.3.conv2.weight"),
            ("encoder.downsamples.3.shortcut.bias", "encoder.down_blocks.3.conv_shortcut.bias"),
            ("encoder.downsamples.5.time_conv.weight", "encoder.down_blocks.5.time_conv.weight"),
            ("decoder.upsamples.10.residual.0.gamma", "decoder.up_blocks.2.resnets.2.norm1.gamma"),
            ("decoder.upsamples.7.resample.1.weight", "decoder.up_blocks.1.upsamplers.0.resample.1.weight"),
            ("decoder.upsamples.14.residual.2.bias", "decoder.up_blocks.3.resnets.2.conv1.bias"),
        ];
        let layout = OriginalLayout::Flat(WAN21_LAYOUT);
        for (original, diffusers) in cases {
            assert_eq!(original_to_diffusers(original, layout), diffusers, "{original}");
            assert_eq!(diffusers_to_original(diffusers, layout), original, "{diffusers}");
        }
    }

    #[test]
    fn maps_each_kind_of_wan22_level_key() {
        let cases = [
            ("encoder.downsamples.0.downsamples.0.residual.0.gamma", "encoder.down_blocks.0.resnets.0.norm1.gamma"),
            ("encoder.downsamples.1.downsamples.0.shortcut.weight", "encoder.down_blocks.1.resnets.0.conv_shortcut.weight"),
            ("encoder.downsamples.2.downsamples.1.residual.6.bias", "encoder.down_blocks.2.resnets.1.conv2.bias"),
            ("encoder.downsamples.1.downsamples.2.resample.1.weight", "encoder.down_blocks.1.downsampler.resample.1.weight"),
            ("encoder.downsamples.2.downsamples.2.time_conv.bias", "encoder.down_blocks.2.downsampler.time_conv.bias"),
            ("decoder.upsamples.0.upsamples.2.residual.3.gamma", "decoder.up_blocks.0.resnets.2.norm2.gamma"),
            ("decoder.upsamples.1.upsamples.0.shortcut.bias", "decoder.up_blocks.1.resnets.0.conv_shortcut.bias"),
            ("decoder.upsamples.1.upsamples.3.time_conv.weight", "decoder.up_blocks.1.upsampler.time_conv.weight"),
            ("decoder.upsamples.2.upsamples.3.resample.1.bias", "decoder.up_blocks.2.upsampler.resample.1.bias"),
        ];
        let layout = OriginalLayout::Nested(WAN22_LISTS);
        for (original, diffusers) in cases {
            assert_eq!(original_to_diffusers(original, layout), diffusers, "{original}");
            assert_eq!(diffusers_to_original(diffusers, layout), original, "{diffusers}");
        }
    }

    #[test]
    fn a_list_entry_past_the_resampler_is_not_renamed_into_it() {
        // Index 3 in an encoder list of 2 resnets + resampler names nothing; it must stay unexpected.
        let key = original_to_diffusers("encoder.downsamples.0.downsamples.3.resample.1.weight", OriginalLayout::Nested(WAN22_LISTS));
        assert_eq!(key, "encoder.down_blocks.0.resnets.3.resample.1.weight");
    }
}
