//! One checkpoint file of either container, safetensors or GGUF (told apart by magic), read lazily:
//! `open` parses the header only and `load` reads one tensor's bytes at their offset, so a checkpoint
//! of many gigabytes is never held whole in memory, let alone twice on its way to the device.
//! Unlike tch's own safetensors reader this one reads fp8 (F8_E4M3, F8_E5M2), and can keep it as fp8.
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tch::{Device, Kind, Tensor};

use crate::media::safetensors::{self, Dtype, HeaderError};
use crate::models::formats::gguf::{self, GgmlType, GgufTensor};
use crate::models::ModelError;

/// How a tensor is stored in its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Safetensors(Dtype),
    Gguf(GgmlType),
}

impl Stored {
    /// The kind the tensor has when loaded as stored: GGUF block formats are dequantised to f32;
    /// `None` for GGUF types that are refused.
    pub fn kind(self) -> Option<Kind> {
        Some(match self {
            Stored::Safetensors(Dtype::F32) | Stored::Gguf(GgmlType::F32 | GgmlType::Blocks(_)) => Kind::Float,
            Stored::Safetensors(Dtype::F16) | Stored::Gguf(GgmlType::F16) => Kind::Half,
            Stored::Safetensors(Dtype::Bf16) | Stored::Gguf(GgmlType::Bf16) => Kind::BFloat16,
            Stored::Safetensors(Dtype::U8) => Kind::Uint8,
            Stored::Safetensors(Dtype::F8E4m3) => Kind::Float8e4m3fn,
            Stored::Safetensors(Dtype::F8E5m2) => Kind::Float8e5m2,
            Stored::Gguf(GgmlType::Other(_)) => return None,
        })
    }

    pub fn is_fp8(self) -> bool {
        matches!(self, Stored::Safetensors(Dtype::F8E4m3 | Dtype::F8E5m2))
    }

    /// The container's own name for the type (`F8_E4M3`, `Q4_K`).
    pub fn name(self) -> String {
        match self {
            Stored::Safetensors(dtype) => dtype.safetensors_name().into(),
            Stored::Gguf(ggml_type) => ggml_type.name(),
        }
    }
}

/// The kind each tensor is given when loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadAs {
    /// Every tensor becomes this kind.
    Kind(Kind),
    /// fp8 tensors stay fp8 on the device (a layer up-casts its weights when it runs); every other
    /// tensor becomes this kind.
    KeepFp8(Kind),
    /// Every tensor in its stored kind (`Stored::kind`).
    Stored,
}

#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// The PyTorch shape.
    pub shape: Vec<i64>,
    pub stored: Stored,
}

enum Location {
    /// Absolute byte range of the data.
    Safetensors { start: u64, end: u64 },
    Gguf(GgufTensor),
}

pub struct TensorFile {
    path: PathBuf,
    file: File,
    /// In the header's order (sorted by name for safetensors).
    tensors: Vec<TensorInfo>,
    locations: Vec<Location>,
    by_name: HashMap<String, usize>,
    /// safetensors tensors of a dtype not read here (integers, ...): listed so a missing name is told apart.
    unreadable: Vec<String>,
    /// For loads onto a GPU: one page-locked buffer every tensor is read into and copied from, grown to the
    /// largest tensor yet. `None` until the first such load.
    staging: Mutex<Option<Tensor>>,
}

impl TensorFile {
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        let file = File::open(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
        let (mut tensors, mut locations, mut unreadable) = (Vec::new(), Vec::new(), Vec::new());
        if gguf::is_gguf(path) {
            for tensor in gguf::index(path)? {
                tensors.push(TensorInfo { name: tensor.name.clone(), shape: tensor.shape.clone(), stored: Stored::Gguf(tensor.ggml_type) });
                locations.push(Location::Gguf(tensor));
            }
        } else {
            let header = safetensors::read_header(path).map_err(|e| match e {
                HeaderError::Io(source) => ModelError::Io { path: path.to_path_buf(), source },
                HeaderError::Format(reason) => ModelError::Format { path: path.to_path_buf(), reason },
            })?;
            for (name, entry) in header.tensors {
                tensors.push(TensorInfo { name, shape: entry.shape, stored: Stored::Safetensors(entry.dtype) });
                locations.push(Location::Safetensors { start: entry.start, end: entry.end });
            }
            unreadable = header.other_names;
        }
        let by_name = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(TensorFile { path: path.to_path_buf(), file, tensors, locations, by_name, unreadable, staging: Mutex::new(None) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn get(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// Reads one tensor from the file and places it on `device` as `load_as` says.
    pub fn load(&self, name: &str, device: Device, load_as: LoadAs) -> Result<Tensor, ModelError> {
        let Some(&i) = self.by_name.get(name) else {
            let unreadable = self.unreadable.iter().any(|n| n == name);
            let why = if unreadable { "is stored in a dtype that is not read" } else { "is not in the file" };
            return Err(self.format(format!("tensor `{name}` {why}")));
        };
        let info = &self.tensors[i];
        let target = |stored: Kind| match load_as {
            LoadAs::Kind(kind) => kind,
            LoadAs::KeepFp8(_) if info.stored.is_fp8() => stored,
            LoadAs::KeepFp8(kind) => kind,
            LoadAs::Stored => stored,
        };
        if let (Location::Safetensors { start, end }, true) = (&self.locations[i], device.is_cuda()) {
            let kind = info.stored.kind().expect("every safetensors dtype read has a kind");
            if let Some(on_device) = self.read_to_device(&info.shape, kind, *start..*end, device)? {
                return on_device.f_to_kind(target(kind)).map_err(ModelError::from);
            }
        }
        let on_cpu = match &self.locations[i] {
            Location::Gguf(tensor) => gguf::load(&self.path, &self.file, tensor)?,
            Location::Safetensors { start, end } => {
                let kind = info.stored.kind().expect("every safetensors dtype read has a kind");
                self.read_into_new_tensor(name, &info.shape, kind, *start..*end)?
            }
        };
        place(&on_cpu, device, target(on_cpu.kind())).map_err(ModelError::from)
    }

    /// The bytes at `range` read straight into a new CPU tensor of `shape` and `kind`: no zeroed buffer and
    /// no second copy, so a load from the page cache is one pass over the weights (it was three).
    fn read_into_new_tensor(&self, name: &str, shape: &[i64], kind: Kind, range: std::ops::Range<u64>) -> Result<Tensor, ModelError> {
        let tensor = Tensor::f_empty(shape, (kind, Device::Cpu)).map_err(|e| self.format(format!("tensor `{name}`: {e}")))?;
        // The header reader checked that `range` holds exactly shape × dtype bytes; the slice is the tensor's own size.
        let bytes = tensor.numel() * kind.elt_size_in_bytes();
        if bytes > 0 {
            // SAFETY: a new contiguous CPU tensor of exactly `bytes` bytes that nothing else refers to yet;
            // safetensors stores little-endian values, as the hosts libtorch runs on hold them.
            let target = unsafe { std::slice::from_raw_parts_mut(tensor.data_ptr().cast::<u8>(), bytes) };
            self.file.read_exact_at(target, range.start).map_err(|source| ModelError::Io { path: self.path.clone(), source })?;
        }
        Ok(tensor)
    }

    /// On a GPU, the tensor's bytes read into the reused page-locked buffer and copied from there to
    /// `device` as stored (converted there, by the caller): no new host mapping per tensor to fault in, and
    /// the copy runs at the bus's speed where a pageable one is staged by the driver. `None` when no
    /// page-locked buffer can be had (no CUDA shim): the caller takes the host path.
    fn read_to_device(&self, shape: &[i64], kind: Kind, range: std::ops::Range<u64>, device: Device) -> Result<Option<Tensor>, ModelError> {
        // Exactly shape × dtype bytes (the header reader checked); `view` below refuses any other count.
        let bytes = (range.end - range.start) as i64;
        let mut staging = self.staging.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if staging.as_ref().is_none_or(|buffer| buffer.numel() < bytes as usize) {
            // The smaller buffer goes before the larger is made: both are page-locked host memory.
            *staging = None;
            let Some(buffer) = crate::device::cuda::pinned(&Tensor::f_empty([bytes.max(1)], (Kind::Uint8, Device::Cpu))?) else { return Ok(None) };
            *staging = Some(buffer);
        }
        let buffer = staging.as_ref().expect("made above").narrow(0, 0, bytes);
        if bytes > 0 {
            // SAFETY: the first `bytes` bytes of the contiguous u8 buffer this file owns, behind its lock;
            // the copy below is synchronous, so the device has read them before the next tensor is read in.
            let target = unsafe { std::slice::from_raw_parts_mut(buffer.data_ptr().cast::<u8>(), bytes as usize) };
            self.file.read_exact_at(target, range.start).map_err(|source| ModelError::Io { path: self.path.clone(), source })?;
        }
        let on_device = buffer.f_to_device(device)?.f_view_dtype(kind)?.f_view(shape)?;
        Ok(Some(on_device))
    }

    /// Every tensor, one read at a time, in the file's order.
    pub fn load_all(&self, device: Device, load_as: LoadAs) -> Result<Vec<(String, Tensor)>, ModelError> {
        self.tensors.iter().map(|t| Ok((t.name.clone(), self.load(&t.name, device, load_as)?))).collect()
    }

    fn format(&self, reason: String) -> ModelError {
        ModelError::Format { path: self.path.clone(), reason }
    }
}

/// Converts where the data is smaller: narrowing on the CPU before the copy to the device, widening
/// on the device after it.
fn place(tensor: &Tensor, device: Device, kind: Kind) -> Result<Tensor, tch::TchError> {
    if kind.elt_size_in_bytes() <= tensor.kind().elt_size_in_bytes() {
        tensor.f_to_kind(kind)?.f_to_device(device)
    } else {
        tensor.f_to_device(device)?.f_to_kind(kind)
    }
}
