//! A video's colour description (range, matrix, primaries, transfer), read by the probe and written
//! into every output. ffmpeg converts YUV to RGB with BT.601 and limited range unless told otherwise,
//! which shifts the colours of HD and full-range clips; the reader and writer name both explicitly.
use serde::{Deserialize, Serialize};

/// The names are ffmpeg's (`ffprobe`'s `color_*` fields, `-colorspace`/`-color_*` options).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Colour {
    /// `tv` (limited) or `pc` (full).
    pub range: String,
    /// The YUV matrix: `bt709`, `smpte170m`, `bt470bg`, `bt2020nc`, …
    pub matrix: String,
    pub primaries: String,
    pub transfer: String,
    /// False when the input said nothing and these are the defaults for its size.
    #[serde(default)]
    pub flagged: bool,
}

/// Matrices the scaler converts with (ffprobe name → swscale's `*_color_matrix` name).
const MATRICES: &[(&str, &str)] = &[
    ("bt709", "bt709"),
    ("smpte170m", "smpte170m"),
    ("bt470bg", "bt470"),
    ("fcc", "fcc"),
    ("smpte240m", "smpte240m"),
    ("bt2020nc", "bt2020"),
    ("bt2020c", "bt2020"),
];

const PRIMARIES: &[&str] = &["bt709", "bt470m", "bt470bg", "smpte170m", "smpte240m", "film", "bt2020", "smpte428", "smpte431", "smpte432"];

const TRANSFERS: &[&str] = &[
    "bt709",
    "gamma22",
    "gamma28",
    "smpte170m",
    "smpte240m",
    "linear",
    "iec61966-2-1",
    "iec61966-2-4",
    "bt2020-10",
    "bt2020-12",
    "smpte2084",
    "arib-std-b67",
];

/// Frames this tall and taller are HD: BT.709 when unflagged, as players assume.
const HD_LINES: u32 = 720;

impl Colour {
    /// What players assume of an unflagged video this tall: BT.601 below 720 lines, BT.709 from 720,
    /// limited range.
    pub fn default_for_height(height: u32) -> Colour {
        let (matrix, primaries, transfer) = if height >= HD_LINES { ("bt709", "bt709", "bt709") } else { ("smpte170m", "smpte170m", "smpte170m") };
        Colour { range: "tv".into(), matrix: matrix.into(), primaries: primaries.into(), transfer: transfer.into(), flagged: false }
    }

    /// ffprobe's fields, each kept when it is one the writer can write and the default for the
    /// size otherwise. Only the range and matrix change the pixels; primaries and transfer are labels.
    pub fn from_probe(fields: &ProbedColour, height: u32) -> Colour {
        let default = Colour::default_for_height(height);
        let known = |value: &Option<String>, names: &[&str]| value.as_deref().filter(|v| names.contains(v)).map(str::to_string);
        let range = known(&fields.color_range, &["tv", "pc"]);
        let matrices: Vec<&str> = MATRICES.iter().map(|(name, _)| *name).collect();
        let matrix = known(&fields.color_space, &matrices);
        let primaries = known(&fields.color_primaries, PRIMARIES);
        let transfer = known(&fields.color_transfer, TRANSFERS);
        let flagged = range.is_some() || matrix.is_some() || primaries.is_some() || transfer.is_some();
        Colour {
            range: range.unwrap_or(default.range),
            matrix: matrix.unwrap_or(default.matrix),
            primaries: primaries.unwrap_or(default.primaries),
            transfer: transfer.unwrap_or(default.transfer),
            flagged,
        }
    }

    /// The scaler's name for the matrix (`bt601` when the stored name is not one it knows).
    pub fn scaler_matrix(&self) -> &'static str {
        MATRICES.iter().find(|(name, _)| *name == self.matrix).map_or("bt601", |(_, scaler)| scaler)
    }

    /// The scaler's name for the range.
    pub fn scaler_range(&self) -> &'static str {
        if self.range == "pc" {
            "pc"
        } else {
            "tv"
        }
    }

    /// `scale` options for decoding this video's YUV into RGB (the scaler's default interpolation, so an
    /// SD clip decodes bit for bit as ffmpeg's own default would).
    pub fn to_rgb_filter(&self) -> String {
        format!("scale=in_color_matrix={}:in_range={}", self.scaler_matrix(), self.scaler_range())
    }

    /// `scale` options for encoding RGB into this colour's YUV (`out_range` before the pixel format).
    pub fn from_rgb_filter(&self) -> String {
        format!("scale=out_color_matrix={}:out_range={}:flags=accurate_rnd+full_chroma_int", self.scaler_matrix(), self.scaler_range())
    }

    /// The output flags; `rgb` outputs (PNG, RGB FFV1) carry no matrix and are full range.
    pub fn output_flags(&self, rgb: bool) -> Vec<String> {
        // ffmpeg's option calls the RGB "matrix" `rgb` (ffprobe reads it back as `gbr`).
        let (matrix, range) = if rgb { ("rgb", "pc") } else { (self.matrix.as_str(), self.scaler_range()) };
        [("-colorspace:v", matrix), ("-color_primaries:v", self.primaries.as_str()), ("-color_trc:v", self.transfer.as_str()), ("-color_range:v", range)]
            .iter()
            .flat_map(|(flag, value)| [flag.to_string(), value.to_string()])
            .collect()
    }
}

/// ffprobe's `stream=color_*` fields.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ProbedColour {
    pub color_range: Option<String>,
    pub color_space: Option<String>,
    pub color_primaries: Option<String>,
    pub color_transfer: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probed(range: &str, space: &str) -> ProbedColour {
        ProbedColour { color_range: Some(range.into()), color_space: Some(space.into()), ..ProbedColour::default() }
    }

    #[test]
    fn unflagged_videos_get_the_defaults_of_their_size() {
        let sd = Colour::from_probe(&ProbedColour::default(), 576);
        assert_eq!((sd.matrix.as_str(), sd.range.as_str(), sd.flagged), ("smpte170m", "tv", false));
        let hd = Colour::from_probe(&ProbedColour::default(), 720);
        assert_eq!((hd.matrix.as_str(), hd.primaries.as_str(), hd.transfer.as_str()), ("bt709", "bt709", "bt709"));
    }

    #[test]
    fn flags_are_kept_and_unknown_names_replaced() {
        let full_709 = Colour::from_probe(&probed("pc", "bt709"), 144);
        assert_eq!((full_709.scaler_matrix(), full_709.scaler_range(), full_709.flagged), ("bt709", "pc", true));
        assert_eq!(full_709.primaries, "smpte170m", "unflagged primaries fall back to the size's default");
        let odd = Colour::from_probe(&probed("unknown", "reserved; -y"), 144);
        assert_eq!((odd.matrix.as_str(), odd.range.as_str(), odd.flagged), ("smpte170m", "tv", false));
        assert_eq!(Colour::from_probe(&probed("tv", "bt470bg"), 144).scaler_matrix(), "bt470");
    }

    #[test]
    fn rgb_outputs_are_tagged_full_range_without_a_matrix() {
        let colour = Colour::default_for_height(1080);
        assert_eq!(colour.output_flags(true)[..2], ["-colorspace:v".to_string(), "rgb".to_string()]);
        assert!(colour.output_flags(false).windows(2).any(|w| w == ["-color_range:v", "tv"]));
    }
}
