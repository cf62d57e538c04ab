//! A GGUF reader for VAE checkpoints (ComfyUI-GGUF style): metadata is parsed only as far as needed,
//! tensors come back with PyTorch shapes. GGUF lists dimensions innermost first and holds at most 4,
//! so a tensor's real shape is `comfy.gguf.orig_shape.<name>` when present (the data is row-major in
//! that shape), else the reversed dimensions. Plain F32/F16/BF16 and Q8_0 tensors are read; other
//! quantisations are refused by name. Nothing here is SeedVR2-specific.
use std::collections::HashMap;
use std::path::Path;

use tch::{Kind, Tensor};

use crate::models::ModelError;

pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
const ORIG_SHAPE_PREFIX: &str = "comfy.gguf.orig_shape.";
/// Q8_0 block: one f16 scale, then 32 signed bytes.
const Q8_0_BLOCK: usize = 32;

/// ggml tensor types this reader understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TensorType {
    F32,
    F16,
    Bf16,
    Q8_0,
}

impl TensorType {
    fn from_ggml(code: u32) -> Option<Self> {
        match code {
            0 => Some(Self::F32),
            1 => Some(Self::F16),
            8 => Some(Self::Q8_0),
            30 => Some(Self::Bf16),
            _ => None,
        }
    }

    fn bytes_for(self, elements: usize) -> usize {
        match self {
            Self::F32 => 4 * elements,
            Self::F16 | Self::Bf16 => 2 * elements,
            Self::Q8_0 => elements / Q8_0_BLOCK * (2 + Q8_0_BLOCK),
        }
    }
}

/// Metadata values, kept only where the loader needs them (integers and integer arrays).
#[derive(Debug, Clone)]
enum Value {
    Int(i64),
    IntArray(Vec<i64>),
    Other,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.bytes.len()).ok_or("truncated GGUF header")?;
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
            8 => self.string().map(|_| Value::Other)?,
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
    kind: TensorType,
    offset: u64,
}

/// True when the file starts with the GGUF magic.
pub fn is_gguf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == GGUF_MAGIC
}

/// Reads every tensor of a GGUF file (v2/v3) as fp32/fp16/bf16 with its PyTorch shape.
pub fn read(path: &Path) -> Result<Vec<(String, Tensor)>, ModelError> {
    let bytes = std::fs::read(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    parse(&bytes).map_err(|reason| ModelError::Format { path: path.to_path_buf(), reason })
}

/// Names and PyTorch shapes, from the header alone (a model listing must not read gigabytes).
pub fn shapes(path: &Path) -> Result<Vec<(String, Vec<i64>)>, ModelError> {
    use std::io::Read;
    let mut prefix = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(HEADER_READ_LIMIT).read_to_end(&mut prefix))
        .map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    let header = parse_header(&prefix).map_err(|reason| ModelError::Format { path: path.to_path_buf(), reason })?;
    Ok(header.infos.iter().map(|info| (info.name.clone(), header.torch_shape(info))).collect())
}

/// VAE checkpoints have a few hundred tensors; their GGUF headers are far smaller than this.
const HEADER_READ_LIMIT: u64 = 64 << 20;

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
        let code = cursor.u32()?;
        let kind = TensorType::from_ggml(code).ok_or_else(|| format!("tensor `{name}` has ggml type {code}, which this loader does not dequantise (F32, F16, BF16, Q8_0 only)"))?;
        infos.push(TensorInfo { name, dims, kind, offset: cursor.u64()? });
    }
    let alignment = match metadata.get("general.alignment") {
        Some(Value::Int(a)) if *a > 0 => *a as u64,
        _ => DEFAULT_ALIGNMENT,
    };
    let data_start = (cursor.pos as u64).div_ceil(alignment) * alignment;
    Ok(GgufHeader { infos, metadata, data_start })
}

fn parse(bytes: &[u8]) -> Result<Vec<(String, Tensor)>, String> {
    let header = parse_header(bytes)?;
    let data_start = header.data_start;
    header
        .infos
        .iter()
        .map(|info| {
            let shape = header.torch_shape(info);
            let elements = shape.iter().product::<i64>() as usize;
            if elements != info.dims.iter().product::<i64>() as usize || (info.kind == TensorType::Q8_0 && elements % Q8_0_BLOCK != 0) {
                return Err(format!("tensor `{}`: shape {shape:?} does not fit its stored dimensions {:?}", info.name, info.dims));
            }
            let start = (data_start + info.offset) as usize;
            let data = bytes
                .get(start..start + info.kind.bytes_for(elements))
                .ok_or_else(|| format!("tensor `{}`: data runs past the end of the file", info.name))?;
            let tensor = decode(data, info.kind, elements).map_err(|e| format!("tensor `{}`: {e}", info.name))?;
            Ok((info.name.clone(), tensor.f_reshape(&shape).map_err(|e| e.to_string())?))
        })
        .collect()
}

fn decode(data: &[u8], kind: TensorType, elements: usize) -> Result<Tensor, tch::TchError> {
    let flat = [elements as i64];
    match kind {
        TensorType::F32 => Tensor::f_from_data_size(data, &flat, Kind::Float),
        TensorType::F16 => Tensor::f_from_data_size(data, &flat, Kind::Half),
        TensorType::Bf16 => Tensor::f_from_data_size(data, &flat, Kind::BFloat16),
        TensorType::Q8_0 => {
            let blocks = elements / Q8_0_BLOCK;
            let (mut scales, mut quants) = (Vec::with_capacity(2 * blocks), Vec::with_capacity(elements));
            for block in data.chunks_exact(2 + Q8_0_BLOCK) {
                scales.extend_from_slice(&block[..2]);
                quants.extend_from_slice(&block[2..]);
            }
            let scales = Tensor::f_from_data_size(&scales, &[blocks as i64, 1], Kind::Half)?.f_to_kind(Kind::Float)?;
            let quants = Tensor::f_from_data_size(&quants, &[blocks as i64, Q8_0_BLOCK as i64], Kind::Int8)?.f_to_kind(Kind::Float)?;
            quants.f_mul(&scales)?.f_reshape(flat)
        }
    }
}
