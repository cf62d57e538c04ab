//! Latent files: safetensors with one tensor `latent` `[1, C, t, h, w]` and string metadata (model,
//! normalized or raw, fps, source frame count and size). ComfyUI `.latent` files (tensor
//! `latent_tensor`) are read too. Parsed by hand: the format is a length, a JSON header and raw bytes.
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value;
use tch::{Kind, Tensor};

use super::safetensors::{read_header, Dtype, HeaderError, TensorEntry, TensorFileWriter};
use crate::error_codes as codes;

#[derive(Debug, thiserror::Error)]
pub enum LatentError {
    #[error("not a latent file: {0}")]
    NotALatent(String),
    #[error("the latent has shape {shape:?}; expected [1, C, t, h, w]")]
    BadShape { shape: Vec<i64> },
    #[error("the latent has {got} channels; model `{model}` expects {expected}")]
    ChannelMismatch { model: String, got: i64, expected: i64 },
    #[error("the latent contains NaN or infinite values")]
    NotFinite,
    #[error("the latent's metadata: {0}")]
    BadMetadata(String),
    #[error("the latent was made by `{made_by}` ({family}); it cannot be decoded by `{model}` ({model_family})")]
    ModelMismatch { made_by: String, family: String, model: String, model_family: String },
    #[error("latent file {0}")]
    Io(#[from] std::io::Error),
}

impl LatentError {
    pub fn code(&self) -> &'static str {
        match self {
            LatentError::NotALatent(_) => codes::NOT_A_LATENT,
            LatentError::BadShape { .. } => codes::LATENT_BAD_SHAPE,
            LatentError::ChannelMismatch { .. } => codes::LATENT_CHANNEL_MISMATCH,
            LatentError::NotFinite => codes::LATENT_NOT_FINITE,
            LatentError::BadMetadata(_) => codes::LATENT_BAD_METADATA,
            LatentError::ModelMismatch { .. } => codes::LATENT_MODEL_MISMATCH,
            LatentError::Io(_) => codes::LATENT_IO,
        }
    }

    pub fn is_client_error(&self) -> bool {
        !matches!(self, LatentError::Io(_))
    }
}

/// What travels with a latent so that decoding gives back the clip that was encoded.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LatentMeta {
    pub model: Option<String>,
    pub family: Option<String>,
    /// Whether the published per-channel mean/std (or scaling factor) was applied.
    pub normalized: bool,
    pub fps_rational: Option<String>,
    /// Frames of the source clip; decoding trims the output back to this.
    pub source_frames: Option<u64>,
    /// Size of the source clip before padding to the model's spatial factor.
    pub width: Option<u32>,
    pub height: Option<u32>,
}

impl LatentMeta {
    pub fn to_strings(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        out.insert("format".into(), "vaebox-latent-1".into());
        out.insert("normalized".into(), self.normalized.to_string());
        let optional = [
            ("model", self.model.clone()),
            ("family", self.family.clone()),
            ("fps", self.fps_rational.clone()),
            ("source_frames", self.source_frames.map(|v| v.to_string())),
            ("width", self.width.map(|v| v.to_string())),
            ("height", self.height.map(|v| v.to_string())),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                out.insert(key.into(), value);
            }
        }
        out
    }

    fn from_strings(map: &serde_json::Map<String, Value>) -> LatentMeta {
        let text = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_string);
        LatentMeta {
            model: text("model"),
            family: text("family"),
            normalized: text("normalized").is_some_and(|v| v == "true"),
            fps_rational: text("fps"),
            source_frames: text("source_frames").and_then(|v| v.parse().ok()),
            width: text("width").and_then(|v| v.parse().ok()),
            height: text("height").and_then(|v| v.parse().ok()),
        }
    }
}

pub struct LatentFile {
    /// Float32, on the CPU.
    pub latent: Tensor,
    pub meta: LatentMeta,
}

/// Writes to a temporary name and renames, so a crash never leaves a half-written latent.
pub fn write_latent(path: &Path, latent: &Tensor, meta: &LatentMeta) -> std::io::Result<()> {
    let latent = latent.to_device(tch::Device::Cpu).to_kind(Kind::Float).contiguous();
    let numel = latent.numel();
    let mut data = vec![0f32; numel];
    latent.copy_data(&mut data, numel);
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut writer = TensorFileWriter::create(path, "latent", Dtype::F32, &latent.size(), &meta.to_strings())?;
    writer.write_at(0, &bytes)?;
    writer.finish()
}

/// What an upload claims to be, checked without tensors: a latent's shape and metadata.
pub struct LatentSummary {
    pub shape: Vec<i64>,
    pub meta: LatentMeta,
    entry: TensorEntry,
}

/// Finds the latent tensor (ours: `latent`; ComfyUI: `latent_tensor`) and checks its dtype and rank from
/// the header alone, without reading the data: enough for whoever needs only the shape.
pub fn latent_header(path: &Path) -> Result<LatentSummary, LatentError> {
    let header = read_header(path).map_err(|e| match e {
        HeaderError::Io(e) => LatentError::Io(e),
        HeaderError::Format(why) => LatentError::NotALatent(why),
    })?;
    let entry = ["latent", "latent_tensor"]
        .into_iter()
        .find_map(|name| header.tensors.get(name))
        .cloned()
        .ok_or_else(|| LatentError::NotALatent("it has no `latent` (or ComfyUI `latent_tensor`) tensor of F32, F16 or BF16".into()))?;
    if !matches!(entry.dtype, Dtype::F32 | Dtype::F16 | Dtype::Bf16) {
        return Err(LatentError::NotALatent(format!("the latent is stored as {}, not F32, F16 or BF16", entry.dtype.safetensors_name())));
    }
    let shape = entry.shape.clone();
    if shape.len() != 5 || shape[0] != 1 || shape.iter().any(|d| *d <= 0) {
        return Err(LatentError::BadShape { shape });
    }
    let meta = LatentMeta::from_strings(&header.metadata);
    // The rate the decoded video is written at: ffmpeg and players take up to 1000, as an upload's `fps` is.
    if let Some(fps) = meta.fps_rational.as_deref().filter(|fps| crate::media::sequence::parse_fps(fps).is_none()) {
        return Err(LatentError::BadMetadata(format!("fps `{fps}` is not a frame rate above 0 and up to 1000 (N/D, such as 30000/1001)")));
    }
    Ok(LatentSummary { shape, meta, entry })
}

/// `latent_header`, and every value finite: what an upload must pass before it is queued.
pub fn inspect_latent(path: &Path) -> Result<LatentSummary, LatentError> {
    let summary = latent_header(path)?;
    check_finite(path, &summary.entry)?;
    Ok(summary)
}

fn check_finite(path: &Path, entry: &TensorEntry) -> Result<(), LatentError> {
    match values_finite(path, entry)? {
        true => Ok(()),
        false => Err(LatentError::NotFinite),
    }
}

/// Scans the data in bounded blocks, so an upload of any size is checked in little memory.
fn values_finite(path: &Path, entry: &TensorEntry) -> std::io::Result<bool> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(entry.start))?;
    let mut remaining = entry.end - entry.start;
    let mut block = vec![0u8; 1 << 20];
    while remaining > 0 {
        let n = remaining.min(block.len() as u64) as usize;
        file.read_exact(&mut block[..n])?;
        if !all_finite(&block[..n], entry.dtype) {
            return Ok(false);
        }
        remaining -= n as u64;
    }
    Ok(true)
}

/// Whether every value of the file's first tensor is finite (a received pixel tensor, say).
pub fn first_tensor_finite(path: &Path) -> std::io::Result<bool> {
    let header = read_header(path).map_err(|e| match e {
        HeaderError::Io(e) => e,
        HeaderError::Format(why) => std::io::Error::new(std::io::ErrorKind::InvalidData, why),
    })?;
    match header.tensors.values().next() {
        Some(entry) => values_finite(path, entry),
        None => Ok(true),
    }
}

/// An exponent of all ones is NaN or infinity in every float format.
fn all_finite(bytes: &[u8], dtype: Dtype) -> bool {
    match dtype {
        Dtype::F32 => bytes.chunks_exact(4).all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite()),
        Dtype::F16 => bytes.chunks_exact(2).all(|b| u16::from_le_bytes([b[0], b[1]]) & 0x7c00 != 0x7c00),
        Dtype::Bf16 => bytes.chunks_exact(2).all(|b| u16::from_le_bytes([b[0], b[1]]) & 0x7f80 != 0x7f80),
        // Refused by `latent_header` before any data is read.
        Dtype::U8 | Dtype::F8E4m3 | Dtype::F8E5m2 => true,
    }
}

/// Reads a latent for the executor, loaded as float32 on the CPU, in one pass over the file. Its values
/// are checked once more, in memory: jobs that never went through an upload (`vaebox run`) meet no other
/// check, and a NaN would decode to a black or garbage video without an error.
pub fn read_latent(path: &Path) -> Result<LatentFile, LatentError> {
    let summary = latent_header(path)?;
    let entry = &summary.entry;
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(entry.start))?;
    let mut data = vec![0u8; (entry.end - entry.start) as usize];
    file.read_exact(&mut data)?;
    if !all_finite(&data, entry.dtype) {
        return Err(LatentError::NotFinite);
    }
    let kind = match entry.dtype {
        Dtype::F16 => Kind::Half,
        Dtype::Bf16 => Kind::BFloat16,
        _ => Kind::Float,
    };
    let latent = Tensor::from_data_size(&data, &summary.shape, kind).to_kind(Kind::Float);
    Ok(LatentFile { latent, meta: summary.meta })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_values_and_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.safetensors");
        let latent = Tensor::randn([1, 4, 3, 2, 5], (Kind::Float, tch::Device::Cpu));
        let meta = LatentMeta {
            model: Some("wan".into()),
            family: Some("wan21".into()),
            normalized: true,
            fps_rational: Some("30000/1001".into()),
            source_frames: Some(9),
            width: Some(40),
            height: Some(16),
        };
        write_latent(&path, &latent, &meta).unwrap();
        let back = read_latent(&path).unwrap();
        assert_eq!(back.meta, meta);
        assert_eq!(f64::try_from((back.latent - latent).abs().max()).unwrap(), 0.0);
    }

    #[test]
    fn refuses_non_finite_wrong_rank_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.safetensors");
        let nan = Tensor::full([1, 4, 1, 2, 2], f64::NAN, (Kind::Float, tch::Device::Cpu));
        write_latent(&path, &nan, &LatentMeta::default()).unwrap();
        assert_eq!(read_latent(&path).err().unwrap().code(), "latent-not-finite");
        let rank4 = Tensor::zeros([1, 4, 2, 2], (Kind::Float, tch::Device::Cpu));
        write_latent(&path, &rank4, &LatentMeta::default()).unwrap();
        assert_eq!(read_latent(&path).err().unwrap().code(), "latent-bad-shape");
        std::fs::write(&path, b"hello, not a tensor file").unwrap();
        assert_eq!(read_latent(&path).err().unwrap().code(), "not-a-latent");
    }

    /// The planner takes the shape from the header alone; the upload check and the executor's read both
    /// still refuse a NaN or infinity, in every float dtype a latent may come in.
    #[test]
    fn only_the_header_is_trusted_without_reading_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.safetensors");
        for kind in [Kind::Float, Kind::Half, Kind::BFloat16] {
            for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                let latent = Tensor::zeros([1, 4, 2, 3, 3], (Kind::Float, tch::Device::Cpu));
                let _ = latent.get(0).get(3).get(1).get(2).get(0).fill_(bad);
                Tensor::write_safetensors(&[("latent", latent.to_kind(kind))], &path).unwrap();
                let what = format!("{bad} as {kind:?}");
                assert_eq!(latent_header(&path).unwrap_or_else(|e| panic!("{what}: {e}")).shape, [1, 4, 2, 3, 3], "{what}");
                assert_eq!(inspect_latent(&path).err().map(|e| e.code()), Some("latent-not-finite"), "{what}");
                assert_eq!(read_latent(&path).err().map(|e| e.code()), Some("latent-not-finite"), "{what}");
            }
            let finite = Tensor::zeros([1, 4, 2, 3, 3], (Kind::Float, tch::Device::Cpu)).to_kind(kind);
            Tensor::write_safetensors(&[("latent", finite)], &path).unwrap();
            assert!(inspect_latent(&path).is_ok() && read_latent(&path).is_ok(), "{kind:?}");
        }
    }
}
