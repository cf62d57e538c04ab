//! The safetensors container, by hand: an 8-byte length, a JSON header, raw little-endian data.
//! Header reading is bounded and never touches the data, so async code can inspect a file without
//! tensors; writers pre-size the file so frames can be placed as they are produced.
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

/// Ours are a few hundred bytes; real checkpoints have a few hundred KiB of names.
const MAX_HEADER_BYTES: u64 = 100 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
    U8,
    /// fp8 weights, e4m3fn (torch.float8_e4m3fn) and e5m2: kept as stored until a layer up-casts them.
    F8E4m3,
    F8E5m2,
}

impl Dtype {
    pub fn parse_safetensors(s: &str) -> Option<Dtype> {
        match s {
            "F32" => Some(Dtype::F32),
            "F16" => Some(Dtype::F16),
            "BF16" => Some(Dtype::Bf16),
            "U8" => Some(Dtype::U8),
            "F8_E4M3" => Some(Dtype::F8E4m3),
            "F8_E5M2" => Some(Dtype::F8E5m2),
            _ => None,
        }
    }

    /// PyTorch's names, as diffusers' remote clients send them.
    pub fn parse_torch(s: &str) -> Option<Dtype> {
        match s {
            "float32" => Some(Dtype::F32),
            "float16" => Some(Dtype::F16),
            "bfloat16" => Some(Dtype::Bf16),
            "uint8" => Some(Dtype::U8),
            _ => None,
        }
    }

    pub fn safetensors_name(self) -> &'static str {
        match self {
            Dtype::F32 => "F32",
            Dtype::F16 => "F16",
            Dtype::Bf16 => "BF16",
            Dtype::U8 => "U8",
            Dtype::F8E4m3 => "F8_E4M3",
            Dtype::F8E5m2 => "F8_E5M2",
        }
    }

    pub fn torch_name(self) -> &'static str {
        match self {
            Dtype::F32 => "float32",
            Dtype::F16 => "float16",
            Dtype::Bf16 => "bfloat16",
            Dtype::U8 => "uint8",
            Dtype::F8E4m3 => "float8_e4m3fn",
            Dtype::F8E5m2 => "float8_e5m2",
        }
    }

    pub fn size(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::U8 | Dtype::F8E4m3 | Dtype::F8E5m2 => 1,
        }
    }
}

#[derive(Debug, Clone)]
pub struct TensorEntry {
    pub dtype: Dtype,
    pub shape: Vec<i64>,
    /// Absolute byte range of the data in the file.
    pub start: u64,
    pub end: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Header {
    pub tensors: BTreeMap<String, TensorEntry>,
    pub metadata: Map<String, Value>,
    /// Tensors whose dtype we do not read; their names still tell what the file is.
    pub other_names: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a safetensors file: {0}")]
    Format(String),
}

/// Reads and checks the header: every tensor's data must lie inside the file and match its shape.
pub fn read_header(path: &Path) -> Result<Header, HeaderError> {
    let mut file = File::open(path)?;
    let file_len = file.metadata()?.len();
    let format = |why: &str| HeaderError::Format(why.to_string());
    let mut len = [0u8; 8];
    file.read_exact(&mut len).map_err(|_| format("shorter than a header"))?;
    let len = u64::from_le_bytes(len);
    if len == 0 || len > MAX_HEADER_BYTES || 8 + len > file_len {
        return Err(format("no valid header length"));
    }
    let mut raw = vec![0u8; len as usize];
    file.read_exact(&mut raw)?;
    let map: Map<String, Value> = serde_json::from_slice(&raw).map_err(|_| format("the header is not JSON"))?;
    let data_start = 8 + len;
    let mut header = Header::default();
    for (name, value) in map {
        if name == "__metadata__" {
            header.metadata = value.as_object().cloned().unwrap_or_default();
            continue;
        }
        let Some(dtype) = value["dtype"].as_str().and_then(Dtype::parse_safetensors) else {
            header.other_names.push(name);
            continue;
        };
        let shape: Vec<i64> = value["shape"].as_array().map(|d| d.iter().filter_map(Value::as_i64).collect()).unwrap_or_default();
        let offsets: Vec<u64> = value["data_offsets"].as_array().map(|o| o.iter().filter_map(Value::as_u64).collect()).unwrap_or_default();
        let [start, end] = offsets[..] else { return Err(format(&format!("tensor {name} has no data offsets"))) };
        let bytes = checked_numel(&shape).and_then(|n| n.checked_mul(dtype.size()));
        if end < start || Some(end - start) != bytes || data_start.checked_add(end).is_none_or(|last| last > file_len) {
            return Err(format(&format!("tensor {name}: data does not match its shape or lies beyond the file (truncated?)")));
        }
        header.tensors.insert(name, TensorEntry { dtype, shape, start: data_start + start, end: data_start + end });
    }
    Ok(header)
}

/// The bytes that start a file holding one tensor; the data follows immediately.
pub fn single_tensor_prefix(name: &str, dtype: Dtype, shape: &[i64], metadata: &BTreeMap<String, String>) -> Vec<u8> {
    let numel = checked_numel(shape).expect("a shape the caller checked");
    let mut header = json!({ name: { "dtype": dtype.safetensors_name(), "shape": shape, "data_offsets": [0, numel * dtype.size()] } });
    if !metadata.is_empty() {
        header["__metadata__"] = json!(metadata);
    }
    let mut header = serde_json::to_vec(&header).expect("header serializes");
    // 8-byte alignment of the data, as the format recommends; spaces are valid JSON padding.
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut prefix = (header.len() as u64).to_le_bytes().to_vec();
    prefix.extend(header);
    prefix
}

/// A pre-sized single-tensor file filled out of order (e.g. channel planes of a video, frame by
/// frame), written under a temporary name and renamed into place by `finish`.
pub struct TensorFileWriter {
    file: File,
    partial: PathBuf,
    path: PathBuf,
    data_start: u64,
    finished: bool,
    /// The partial file outlives an unfinished writer: a checkpoint names what is written in it.
    keep_partial: bool,
}

impl TensorFileWriter {
    pub fn create(path: &Path, name: &str, dtype: Dtype, shape: &[i64], metadata: &BTreeMap<String, String>) -> std::io::Result<Self> {
        let prefix = single_tensor_prefix(name, dtype, shape, metadata);
        let numel = checked_numel(shape).expect("a shape the caller checked");
        let partial = partial_path(path);
        let mut file = File::create(&partial)?;
        file.write_all(&prefix)?;
        file.set_len(prefix.len() as u64 + numel * dtype.size())?;
        Ok(TensorFileWriter { file, partial, path: path.to_path_buf(), data_start: prefix.len() as u64, finished: false, keep_partial: false })
    }

    /// The partial file a stopped writer of the same tensor left, to write on in (`None`: there is none,
    /// or it was begun for another tensor). Its partial file is kept when this writer is not finished.
    pub fn continue_partial(path: &Path, name: &str, dtype: Dtype, shape: &[i64], metadata: &BTreeMap<String, String>) -> std::io::Result<Option<Self>> {
        let prefix = single_tensor_prefix(name, dtype, shape, metadata);
        let numel = checked_numel(shape).expect("a shape the caller checked");
        let partial = partial_path(path);
        let mut file = match std::fs::OpenOptions::new().read(true).write(true).open(&partial) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error),
        };
        let mut found = vec![0u8; prefix.len()];
        if file.metadata()?.len() != prefix.len() as u64 + numel * dtype.size() || file.read_exact(&mut found).is_err() || found != prefix {
            return Ok(None);
        }
        Ok(Some(TensorFileWriter { file, partial, path: path.to_path_buf(), data_start: prefix.len() as u64, finished: false, keep_partial: true }))
    }

    /// Keeps the partial file when this writer is dropped unfinished (a checkpoint will name it).
    pub fn keep_partial(&mut self) {
        self.keep_partial = true;
    }

    /// Everything written so far is on the disk when this returns.
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    /// Writes `bytes` at `offset` bytes into the tensor's data.
    pub fn write_at(&mut self, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
        self.file.seek(SeekFrom::Start(self.data_start + offset))?;
        self.file.write_all(bytes)
    }

    pub fn finish(mut self) -> std::io::Result<()> {
        self.file.sync_all()?;
        std::fs::rename(&self.partial, &self.path)?;
        self.finished = true;
        Ok(())
    }
}

impl Drop for TensorFileWriter {
    fn drop(&mut self) {
        if !self.finished && !self.keep_partial {
            let _ = std::fs::remove_file(&self.partial);
        }
    }
}

/// Where a tensor file is written until it is finished (`.name.partial` beside it).
pub fn partial_path(path: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(".partial");
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_files_read_back_with_their_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        let meta = BTreeMap::from([("a".to_string(), "b".to_string())]);
        let mut writer = TensorFileWriter::create(&path, "x", Dtype::F32, &[2, 3], &meta).unwrap();
        writer.write_at(12, &[1, 2, 3, 4]).unwrap();
        writer.finish().unwrap();
        let header = read_header(&path).unwrap();
        let entry = &header.tensors["x"];
        assert_eq!((entry.dtype, entry.shape.clone(), entry.end - entry.start), (Dtype::F32, vec![2, 3], 24));
        assert_eq!(entry.start % 8, 0);
        assert_eq!(header.metadata["a"], "b");
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[(entry.start + 12) as usize..(entry.start + 16) as usize], &[1, 2, 3, 4]);
    }

    #[test]
    fn truncated_data_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        let mut bytes = single_tensor_prefix("x", Dtype::F16, &[4], &BTreeMap::new());
        bytes.extend([0u8; 6]); // 8 are needed
        std::fs::write(&path, bytes).unwrap();
        assert!(matches!(read_header(&path), Err(HeaderError::Format(_))));
    }
}

/// The element count of `shape`, or `None` when a size is negative or the product does not fit 64 bits
/// (a shape whose product wraps would otherwise pass as a tiny tensor).
pub fn checked_numel(shape: &[i64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |n, d| n.checked_mul(u64::try_from(*d).ok()?))
}
