//! What the authors' loader (`taehv.py`, `TAEHV.__init__`) reads from a checkpoint's file name: the
//! patch size and latent width it builds, the "super" decoder, and which diffusion model's latents the
//! checkpoint speaks. Only the file name is read, not the folders above it: the original tests substrings
//! of the whole path, so a folder named `taehv` would change its build, which is an accident, not a rule.
use std::path::Path;

/// The latent space a checkpoint was trained on. `taew2_1` and `taehv` have identical structures, so
/// only the name tells them apart; a pipeline needs it to know which diffusion latents it may decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatentSpace {
    /// Wan 2.1 (also Wan 2.2 14B and Qwen Image): 16 channels, the normalised `(z - mean) / std` latent.
    Wan21,
    /// Wan 2.2 TI2V-5B: 48 channels, normalised likewise.
    Wan22,
    /// Hunyuan Video 1: 16 channels, the raw VAE latent times 0.476986.
    HunyuanVideo,
    /// A name the authors' loader does not tie to a latent space (renamed files, other checkpoints).
    Unknown,
}

impl LatentSpace {
    pub fn as_str(self) -> &'static str {
        match self {
            LatentSpace::Wan21 => "wan21",
            LatentSpace::Wan22 => "wan22",
            LatentSpace::HunyuanVideo => "hunyuan_video",
            LatentSpace::Unknown => "unknown",
        }
    }
}

/// What a known checkpoint name makes the original build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedShape {
    pub patch_size: i64,
    pub latent_channels: i64,
    pub super_decoder: bool,
}

/// The file name (lower case) the rules below read; empty when the path has none.
pub fn file_name(path: &Path) -> String {
    path.file_name().map(|name| name.to_string_lossy().to_lowercase()).unwrap_or_default()
}

/// `taew2_1` → Wan 2.1, `taew2_2` (and `taew2_2_super`) → Wan 2.2, `taehv` → Hunyuan Video 1; `taehv1_5`
/// (Hunyuan Video 1.5) and every other name → unknown.
pub fn latent_space(file_name: &str) -> LatentSpace {
    if file_name.contains("taew2_2") {
        LatentSpace::Wan22
    } else if file_name.contains("taew2_1") {
        LatentSpace::Wan21
    } else if file_name.contains("taehv") && !file_name.contains("taehv1_5") {
        LatentSpace::HunyuanVideo
    } else {
        LatentSpace::Unknown
    }
}

/// The patch size, latent width and decoder the original builds for a name it knows (README §1), or
/// `None` for a name it would build with its defaults only by accident (a renamed file): such a file is
/// read by its shapes alone.
pub fn named_shape(file_name: &str) -> Option<NamedShape> {
    let (patch_size, latent_channels) = if file_name.contains("taew2_2") {
        (2, 48)
    } else if file_name.contains("taehv1_5") {
        (2, 32)
    } else if file_name.contains("taeh3") {
        (2, 24)
    } else if file_name.contains("taeltx") {
        (4, 128)
    } else if ["taew2_1", "taehv", "taecvx", "taeos1_3"].iter().any(|name| file_name.contains(name)) {
        (1, 16)
    } else {
        return None;
    };
    Some(NamedShape { patch_size, latent_channels, super_decoder: file_name.contains("_super") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_pick_the_original_shapes() {
        let shape = |p, c, s| Some(NamedShape { patch_size: p, latent_channels: c, super_decoder: s });
        assert_eq!(named_shape("taew2_1.pth"), shape(1, 16, false));
        assert_eq!(named_shape("taew2_2.safetensors"), shape(2, 48, false));
        assert_eq!(named_shape("taew2_2_super.pth"), shape(2, 48, true));
        assert_eq!(named_shape("taehv.pth"), shape(1, 16, false));
        assert_eq!(named_shape("taehv1_5_super.pth"), shape(2, 32, true));
        assert_eq!(named_shape("taeh3.pth"), shape(2, 24, false));
        assert_eq!(named_shape("taeltx_2.pth"), shape(4, 128, false));
        assert_eq!(named_shape("my_decoder.safetensors"), None);
    }

    #[test]
    fn names_pick_the_latent_space() {
        assert_eq!(latent_space("taew2_1.pth"), LatentSpace::Wan21);
        assert_eq!(latent_space("taew2_1_weights.safetensors"), LatentSpace::Wan21);
        assert_eq!(latent_space("taew2_2.pth"), LatentSpace::Wan22);
        assert_eq!(latent_space("taew2_2_super.safetensors"), LatentSpace::Wan22);
        assert_eq!(latent_space("taehv.pth"), LatentSpace::HunyuanVideo);
        assert_eq!(latent_space("taehv1_5.pth"), LatentSpace::Unknown);
        assert_eq!(latent_space("taeltx_2.pth"), LatentSpace::Unknown);
        assert_eq!(latent_space(&file_name(Path::new("/models/taehv/decoder.pth"))), LatentSpace::Unknown, "folders do not count");
    }
}
