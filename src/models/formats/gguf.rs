//! A GGUF reader for checkpoints (ComfyUI-GGUF style): metadata is parsed only as far as needed,
//! tensors come back with PyTorch shapes. GGUF lists dimensions innermost first and holds at most 4,
//! so a tensor's real shape is `comfy.gguf.orig_shape.<name>` when present (the data is row-major in
//! that shape), else the reversed dimensions. Plain F32/F16/BF16 tensors keep their kind; Q8_0, Q4_K,
//! Q5_K and Q6_K are dequantised to f32 (`gguf_quants`); any other type is refused by name when that
//! tensor is loaded. Only the header is read up front; each tensor's bytes are read on their own.
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use tch::{Kind, Tensor};

use crate::models::formats::gguf_quants::{self, BlockFormat};
use crate::models::ModelError;

pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
const ORIG_SHAPE_PREFIX: &str = "comfy.gguf.orig_shape.";

/// A tensor's ggml type: one this reader decodes, or the code of one it refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    Bf16,
    Blocks(BlockFormat),
    Other(u32),
}

impl GgmlType {
    fn from_code(code: u32) -> Self {
        match code {
            0 => Self::F32,
            1 => Self::F16,
            8 => Self::Blocks(BlockFormat::Q8_0),
            12 => Self::Blocks(BlockFormat::Q4K),
            13 => Self::Blocks(BlockFormat::Q5K),
            14 => Self::Blocks(BlockFormat::Q6K),
            30 => Self::Bf16,
            other => Self::Other(other),
        }
    }

    /// ggml's name (`Q3_K`), with the numeric code for types this reader refuses.
    pub fn name(self) -> String {
        match self {
            Self::F32 => "F32".into(),
            Self::F16 => "F16".into(),
            Self::Bf16 => "BF16".into(),
            Self::Blocks(format) => format.name().into(),
            Self::Other(code) => format!("{} (ggml type {code})", other_type_name(code).unwrap_or("unknown")),
        }
    }

    /// Bytes holding `elements` values; `None` for a refused type or a count that is not whole blocks.
    fn bytes_for(self, elements: usize) -> Option<usize> {
        match self {
            Self::F32 => Some(4 * elements),
            Self::F16 | Self::Bf16 => Some(2 * elements),
            Self::Blocks(f) => (elements % f.block_values() == 0).then(|| elements / f.block_values() * f.block_bytes()),
            Self::Other(_) => None,
        }
    }
}

/// Names of the ggml types a community checkpoint may carry that this reader does not decode.
fn other_type_name(code: u32) -> Option<&'static str> {
    const NAMES: [(u32, &str); 27] = [
        (2, "Q4_0"), (3, "Q4_1"), (6, "Q5_0"), (7, "Q5_1"), (9, "Q8_1"), (10, "Q2_K"), (11, "Q3_K"), (15, "Q8_K"),
        (16, "IQ2_XXS"), (17, "IQ2_XS"), (18, "IQ3_XXS"), (19, "IQ1_S"), (20, "IQ4_NL"), (21, "IQ3_S"), (22, "IQ2_S"),
        (23, "IQ4_XS"), (24, "I8"), (25, "I16"), (26, "I32"), (27, "I64"), (28, "F64"), (29, "IQ1_M"), (34, "TQ1_0"),
        (35, "TQ2_0"), (39, "MXFP4"), (40, "NVFP4"), (41, "Q1_0"),
    ];
    NAMES.iter().find(|(c, _)| *c == code).map(|(_, name)| *name)
}

/// Metadata values, kept only where the loader needs them (integers, integer arrays, strings).
#[derive(Debug, Clone)]
enum Value {
    Int(i64),
    IntArray(Vec<i64>),
    Str(String),
    Other,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.bytes.len()).ok_or(TRUNCATED)?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    fn string(&mut self) -> Result<String, String> {
        let len = self.u64()? as usize;
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| "a GGUF string is not UTF-8".to_string())
    }

    /// One value of GGUF value type `kind`.
    fn value(&mut self, kind: u32) -> Result<Value, String> {
        let int = |bytes: &[u8], signed: bool| -> i64 {
            let mut buf = [0u8; 8];
            buf[..bytes.len()].copy_from_slice(bytes);
            let unsigned = u64::from_le_bytes(buf);
            let bits = 8 * bytes.len() as u32;
            if signed && bits < 64 && unsigned >> (bits - 1) & 1 == 1 { (unsigned | (!0u64 << bits)) as i64 } else { unsigned as i64 }
        };
        Ok(match kind {
            0 | 7 => Value::Int(int(self.take(1)?, false)),
            1 => Value::Int(int(self.take(1)?, true)),
            2 => Value::Int(int(self.take(2)?, false)),
            3 => Value::Int(int(self.take(2)?, true)),
            4 => Value::Int(int(self.take(4)?, false)),
            5 => Value::Int(int(self.take(4)?, true)),
            10 => Value::Int(int(self.take(8)?, false)),
            11 => Value::Int(int(self.take(8)?, true)),
            6 => self.take(4).map(|_| Value::Other)?,
            12 => self.take(8).map(|_| Value::Other)?,
            8 => Value::Str(self.string()?),
            9 => {
                let element_kind = self.u32()?;
                let count = self.u64()?;
                let mut ints = Vec::new();
                for _ in 0..count {
                    if let Value::Int(v) = self.value(element_kind)? {
                        ints.push(v);
                    }
                }
                if ints.len() as u64 == count { Value::IntArray(ints) } else { Value::Other }
            }
            other => return Err(format!("unknown GGUF metadata value type {other}")),
        })
    }
}

struct TensorInfo {
    name: String,
    dims: Vec<i64>,
    ggml_type: GgmlType,
    offset: u64,
}

/// One tensor as the header lists it.
#[derive(Debug, Clone)]
pub struct GgufTensor {
    pub name: String,
    /// The PyTorch shape.
    pub shape: Vec<i64>,
    pub ggml_type: GgmlType,
    /// Absolute position of the data in the file.
    pub start: u64,
}

/// True when the file starts with the GGUF magic.
pub fn is_gguf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == GGUF_MAGIC
}

/// Reads every tensor of a GGUF file (v2/v3), one at a time, with its PyTorch shape.
pub fn read(path: &Path) -> Result<Vec<(String, Tensor)>, ModelError> {
    let tensors = index(path)?;
    let file = File::open(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    tensors.iter().map(|tensor| Ok((tensor.name.clone(), load(path, &file, tensor)?))).collect()
}

/// A string value of the header's metadata (a converter may carry the safetensors metadata there).
pub fn string_metadata(path: &Path, key: &str) -> Option<String> {
    match read_header(path).ok()?.metadata.remove(key)? {
        Value::Str(value) => Some(value),
        _ => None,
    }
}

/// Names and PyTorch shapes, from the header alone (a model listing must not read gigabytes).
pub fn shapes(path: &Path) -> Result<Vec<(String, Vec<i64>)>, ModelError> {
    Ok(index(path)?.into_iter().map(|tensor| (tensor.name, tensor.shape)).collect())
}

/// Checkpoints have a few thousand tensors at most: their GGUF headers take well under a MiB, so
/// that much is read first, then more (up to the limit) only for a header that does not fit.
const HEADER_FIRST_READ: u64 = 1 << 20;
const HEADER_READ_LIMIT: u64 = 64 << 20;
const TRUNCATED: &str = "truncated GGUF header";

/// The header's tensor list, checked: shapes agree with the stored dimensions and the data of every
/// tensor of a known type lies inside the file.
pub fn index(path: &Path) -> Result<Vec<GgufTensor>, ModelError> {
    let format = |reason| ModelError::Format { path: path.to_path_buf(), reason };
    let file_len = std::fs::metadata(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?.len();
    let header = read_header(path)?;
    header
        .infos
        .iter()
        .map(|info| {
            let shape = header.torch_shape(info);
            let elements: i64 = shape.iter().product();
            if elements != info.dims.iter().product::<i64>() || shape.iter().any(|d| *d < 0) {
                return Err(format(format!("tensor `{}`: shape {shape:?} does not fit its stored dimensions {:?}", info.name, info.dims)));
            }
            let start = header.data_start + info.offset;
            if let GgmlType::Blocks(f) = info.ggml_type {
                if elements as usize % f.block_values() != 0 {
                    return Err(format(format!("tensor `{}`: {elements} values are not whole {} blocks", info.name, f.name())));
                }
            }
            if let Some(bytes) = info.ggml_type.bytes_for(elements as usize) {
                if start + bytes as u64 > file_len {
                    return Err(format(format!("tensor `{}`: data runs past the end of the file (truncated?)", info.name)));
                }
            }
            Ok(GgufTensor { name: info.name.clone(), shape, ggml_type: info.ggml_type, start })
        })
        .collect()
}

/// Reads and decodes one tensor listed by `index`: F32/F16/BF16 keep their kind, block formats become
/// f32, other types are refused.
pub fn load(path: &Path, file: &File, tensor: &GgufTensor) -> Result<Tensor, ModelError> {
    let elements = tensor.shape.iter().product::<i64>() as usize;
    let Some(bytes) = tensor.ggml_type.bytes_for(elements) else {
        return Err(ModelError::UnsupportedQuantization {
            path: path.to_path_buf(),
            tensor: tensor.name.clone(),
            ggml_type: tensor.ggml_type.name(),
        });
    };
    let mut data = vec![0u8; bytes];
    file.read_exact_at(&mut data, tensor.start).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    let decoded = match tensor.ggml_type {
        GgmlType::F32 => Tensor::f_from_data_size(&data, &tensor.shape, Kind::Float),
        GgmlType::F16 => Tensor::f_from_data_size(&data, &tensor.shape, Kind::Half),
        GgmlType::Bf16 => Tensor::f_from_data_size(&data, &tensor.shape, Kind::BFloat16),
        GgmlType::Blocks(format) => {
            let values = gguf_quants::dequantize(format, &data);
            drop(data);
            Tensor::f_from_slice(&values).and_then(|t| t.f_reshape(&tensor.shape))
        }
        GgmlType::Other(_) => unreachable!("refused above"),
    };
    decoded.map_err(|e| ModelError::Format { path: path.to_path_buf(), reason: format!("tensor `{}`: {e}", tensor.name) })
}

fn read_header(path: &Path) -> Result<GgufHeader, ModelError> {
    use std::io::{Read, Seek};
    let io = |source| ModelError::Io { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    let mut read_size = HEADER_FIRST_READ;
    loop {
        let mut prefix = Vec::new();
        (&file).take(read_size).read_to_end(&mut prefix).map_err(io)?;
        match parse_header(&prefix) {
            Err(e) if e == TRUNCATED && read_size < HEADER_READ_LIMIT.min(file_len) => read_size *= 8,
            parsed => return parsed.map_err(|reason| ModelError::Format { path: path.to_path_buf(), reason }),
        }
        (&file).rewind().map_err(io)?;
    }
}

struct GgufHeader {
    infos: Vec<TensorInfo>,
    metadata: HashMap<String, Value>,
    data_start: u64,
}

impl GgufHeader {
    fn torch_shape(&self, info: &TensorInfo) -> Vec<i64> {
        match self.metadata.get(&format!("{ORIG_SHAPE_PREFIX}{}", info.name)) {
            Some(Value::IntArray(shape)) => shape.clone(),
            _ => info.dims.iter().rev().copied().collect(),
        }
    }
}

fn parse_header(bytes: &[u8]) -> Result<GgufHeader, String> {
    let mut cursor = Cursor { bytes, pos: 0 };
    if cursor.take(4)? != GGUF_MAGIC {
        return Err("not a GGUF file".into());
    }
    let version = cursor.u32()?;
    if !(2..=3).contains(&version) {
        return Err(format!("GGUF version {version} is not supported (2 or 3)"));
    }
    let tensor_count = cursor.u64()?;
    let kv_count = cursor.u64()?;
    let mut metadata = HashMap::new();
    for _ in 0..kv_count {
        let key = cursor.string()?;
        let kind = cursor.u32()?;
        metadata.insert(key, cursor.value(kind)?);
    }
    let mut infos = Vec::new();
    for _ in 0..tensor_count {
        let name = cursor.string()?;
        let n_dims = cursor.u32()?;
        let dims = (0..n_dims).map(|_| cursor.u64().map(|d| d as i64)).collect::<Result<Vec<_>, _>>()?;
        let ggml_type = GgmlType::from_code(cursor.u32()?);
        infos.push(TensorInfo { name, dims, ggml_type, offset: cursor.u64()? });
    }
    let alignment = match metadata.get("general.alignment") {
        Some(Value::Int(a)) if *a > 0 => *a as u64,
        _ => DEFAULT_ALIGNMENT,
    };
    let data_start = (cursor.pos as u64).div_ceil(alignment) * alignment;
    Ok(GgufHeader { infos, metadata, data_start })
}
