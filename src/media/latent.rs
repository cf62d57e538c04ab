//! Latent files: safetensors with one tensor `latent` `[1, C, t, h, w]` and string metadata (model,
//! normalized or raw, fps, source frame count and size). ComfyUI `.latent` files (tensor
//! `latent_tensor`) are read too. Parsed by hand: the format is a length, a JSON header and raw bytes.
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

use serde_json::{json, Value};
use tch::{Kind, Tensor};

/// Headers beyond this are not latent files (ours are a few hundred bytes).
const MAX_HEADER_BYTES: u64 = 1 << 20;

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
    #[error("the latent was made by `{made_by}` ({family}); it cannot be decoded by `{model}` ({model_family})")]
    ModelMismatch { made_by: String, family: String, model: String, model_family: String },
    #[error("latent file {0}")]
    Io(#[from] std::io::Error),
}

impl LatentError {
    pub fn code(&self) -> &'static str {
        match self {
            LatentError::NotALatent(_) => "not-a-latent",
            LatentError::BadShape { .. } => "latent-bad-shape",
            LatentError::ChannelMismatch { .. } => "latent-channel-mismatch",
            LatentError::NotFinite => "latent-not-finite",
            LatentError::ModelMismatch { .. } => "latent-model-mismatch",
            LatentError::Io(_) => "latent-io",
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
    fn to_strings(&self) -> BTreeMap<String, String> {
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
    let shape = latent.size();
    let numel = latent.numel();
    let mut data = vec![0f32; numel];
    latent.copy_data(&mut data, numel);
    let header = json!({
        "__metadata__": meta.to_strings(),
        "latent": { "dtype": "F32", "shape": shape, "data_offsets": [0, numel * 4] },
    });
    let mut header = serde_json::to_vec(&header).expect("header serializes");
    // The format asks for 8-byte alignment of the data; spaces are valid JSON padding.
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let partial = path.with_extension("partial");
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&partial)?);
        out.write_all(&(header.len() as u64).to_le_bytes())?;
        out.write_all(&header)?;
        for value in &data {
            out.write_all(&value.to_le_bytes())?;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    }
    std::fs::rename(&partial, path)
}

/// Reads our latent files and ComfyUI `.latent` files; checks shape and finiteness, not the model.
pub fn read_latent(path: &Path) -> Result<LatentFile, LatentError> {
    let mut file = std::fs::File::open(path)?;
    let file_len = file.metadata()?.len();
    let not_latent = |why: &str| LatentError::NotALatent(why.to_string());
    let mut len_bytes = [0u8; 8];
    file.read_exact(&mut len_bytes).map_err(|_| not_latent("shorter than a safetensors header"))?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len == 0 || header_len > MAX_HEADER_BYTES || 8 + header_len > file_len {
        return Err(not_latent("no safetensors header"));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header)?;
    let header: serde_json::Map<String, Value> =
        serde_json::from_slice(&header).map_err(|_| not_latent("the safetensors header is not JSON"))?;
    let name = ["latent", "latent_tensor"]
        .into_iter()
        .find(|n| header.contains_key(*n))
        .ok_or_else(|| not_latent("it has no `latent` (or ComfyUI `latent_tensor`) tensor"))?;
    let entry = &header[name];
    let dtype = entry["dtype"].as_str().unwrap_or("");
    let shape: Vec<i64> = entry["shape"]
        .as_array()
        .map(|dims| dims.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    let offsets: Vec<u64> = entry["data_offsets"]
        .as_array()
        .map(|o| o.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let (kind, width) = match dtype {
        "F32" => (Kind::Float, 4),
        "F16" => (Kind::Half, 2),
        "BF16" => (Kind::BFloat16, 2),
        other => return Err(not_latent(&format!("tensor dtype {other} is not F32, F16 or BF16"))),
    };
    if shape.len() != 5 || shape[0] != 1 || shape.iter().any(|d| *d <= 0) {
        return Err(LatentError::BadShape { shape });
    }
    let numel: u64 = shape.iter().map(|d| *d as u64).product();
    let [start, end] = offsets[..] else { return Err(not_latent("bad data offsets")) };
    if end < start || end - start != numel * width || 8 + header_len + end > file_len {
        return Err(not_latent("the tensor data does not match its shape (truncated?)"));
    }
    let mut data = vec![0u8; (end - start) as usize];
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(8 + header_len + start))?;
    file.read_exact(&mut data)?;
    let latent = Tensor::from_data_size(&data, &shape, kind).to_kind(Kind::Float);
    if !bool::try_from(latent.isfinite().all()).unwrap_or(false) {
        return Err(LatentError::NotFinite);
    }
    let meta = header.get("__metadata__").and_then(Value::as_object).map(LatentMeta::from_strings).unwrap_or_default();
    Ok(LatentFile { latent, meta })
}

/// Cheap check at upload time: is this a latent file at all, and of what shape?
pub fn peek_latent_shape(path: &Path) -> Result<(Vec<i64>, LatentMeta), LatentError> {
    let file = read_latent(path)?;
    Ok((file.latent.size(), file.meta))
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
}
