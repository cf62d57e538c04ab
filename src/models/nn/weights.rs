//! The shape-checked weight store every model family builds from: checkpoint tensors under the names
//! the modules ask for, lookups that name the offending key as the user's file spells it, and a check
//! that nothing in the file was left unused. A family with a second naming scheme renames once, at load,
//! and tells the store how to spell a key back ([`Weights::with_file_names`]).
//! Opened on a file ([`Weights::open`]), the store reads each tensor only when a module takes it, straight
//! at the module's dtype: a load holds the model's tensors plus one tensor in flight, never the file's
//! contents next to the model's copy of them.
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};

use crate::models::formats::tensor_file::{LoadAs, TensorFile};
use crate::models::ModelError;

/// How the checkpoint file spells one of the store's keys.
pub type FileNames = Box<dyn Fn(&str) -> String>;

/// Where the tensors are: in memory already, or in a file read on demand.
enum Tensors {
    Memory(BTreeMap<String, Tensor>),
    /// Each store key with the name the file gives its tensor.
    File { file: TensorFile, names: BTreeMap<String, String> },
}

impl Tensors {
    fn keys(&self) -> Box<dyn Iterator<Item = &String> + '_> {
        match self {
            Tensors::Memory(map) => Box::new(map.keys()),
            Tensors::File { names, .. } => Box::new(names.keys()),
        }
    }

    fn keys_from<'a>(&'a self, prefix: &str) -> Box<dyn Iterator<Item = &'a String> + 'a> {
        match self {
            Tensors::Memory(map) => Box::new(map.range(prefix.to_string()..).map(|(k, _)| k)),
            Tensors::File { names, .. } => Box::new(names.range(prefix.to_string()..).map(|(k, _)| k)),
        }
    }

    fn contains(&self, key: &str) -> bool {
        match self {
            Tensors::Memory(map) => map.contains_key(key),
            Tensors::File { names, .. } => names.contains_key(key),
        }
    }

    fn info(&self, key: &str) -> Option<(Vec<i64>, Option<Kind>)> {
        match self {
            Tensors::Memory(map) => map.get(key).map(|t| (t.size(), Some(t.kind()))),
            Tensors::File { file, names } => names.get(key).and_then(|name| file.get(name)).map(|info| (info.shape.clone(), info.stored.kind())),
        }
    }

    /// The tensor of `key` (present) on `device` as `load_as` says.
    fn read(&self, key: &str, device: Device, load_as: LoadAs) -> Result<Tensor, ModelError> {
        match self {
            Tensors::Memory(map) => {
                let tensor = &map[key];
                let kind = match load_as {
                    LoadAs::KeepFp8(_) if is_fp8(tensor.kind()) => tensor.kind(),
                    LoadAs::Kind(kind) | LoadAs::KeepFp8(kind) => kind,
                    LoadAs::Stored => tensor.kind(),
                };
                Ok(tensor.f_to_kind(kind)?.f_to_device(device)?)
            }
            Tensors::File { file, names } => file.load(&names[key], device, load_as),
        }
    }
}

pub struct Weights {
    source: PathBuf,
    tensors: Tensors,
    file_names: Option<FileNames>,
    /// Load-time bookkeeping only (which keys the modules asked for); never touched during inference.
    used: RefCell<BTreeSet<String>>,
    /// Bytes of the tensors handed to modules, as they hold them (fp8 kept, others at `kind`).
    handed_bytes: Cell<u64>,
    /// Bytes of tensors the modules made from their weights at load (Winograd kernels) and keep.
    derived_bytes: Cell<u64>,
    device: Device,
    kind: Kind,
    /// Give conv weights channels-last strides (`channels_last_3d` for 5-D ones, `channels_last` for
    /// 4-D ones where a family reads the flag); set before modules are built.
    conv_channels_last: bool,
}

impl Weights {
    /// `source` only labels errors; tensors are cast to `kind` and moved to `device` as modules take them.
    pub fn new(source: &Path, tensors: BTreeMap<String, Tensor>, device: Device, kind: Kind) -> Self {
        Self::with_tensors(source, Tensors::Memory(tensors), device, kind)
    }

    /// A checkpoint file (safetensors or GGUF), its header read; each tensor is read when a module takes it.
    pub fn open(path: &Path, device: Device, kind: Kind) -> Result<Self, ModelError> {
        let file = TensorFile::open(path)?;
        let names = file.tensors().iter().map(|t| (t.name.clone(), t.name.clone())).collect();
        Ok(Self::with_tensors(path, Tensors::File { file, names }, device, kind))
    }

    fn with_tensors(source: &Path, tensors: Tensors, device: Device, kind: Kind) -> Self {
        Self { source: source.to_path_buf(), tensors, file_names: None, used: RefCell::default(), handed_bytes: Cell::new(0), derived_bytes: Cell::new(0), device, kind, conv_channels_last: false }
    }

    /// Every key renamed once (a family's second naming scheme); pair with [`Weights::with_file_names`].
    pub fn renamed(mut self, rename: impl Fn(&str) -> String) -> Self {
        self.tensors = match self.tensors {
            Tensors::Memory(map) => Tensors::Memory(map.into_iter().map(|(k, t)| (rename(&k), t)).collect()),
            Tensors::File { file, names } => Tensors::File { file, names: names.into_values().map(|name| (rename(&name), name)).collect() },
        };
        self
    }

    pub fn with_file_names(mut self, file_names: FileNames) -> Self {
        self.file_names = Some(file_names);
        self
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn source(&self) -> &Path {
        &self.source
    }

    pub fn conv_channels_last(&self) -> bool {
        self.conv_channels_last
    }

    pub fn set_conv_channels_last(&mut self, on: bool) {
        self.conv_channels_last = on;
    }

    pub fn root(&self) -> WeightPath<'_> {
        WeightPath { weights: self, prefix: String::new() }
    }

    pub fn shape(&self, key: &str) -> Option<Vec<i64>> {
        self.tensors.info(key).map(|(shape, _)| shape)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.tensors.contains(key)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The first key (in sorted order) under `prefix`, if any.
    pub fn first_key_under(&self, prefix: &str) -> Option<&str> {
        self.tensors.keys_from(prefix).next().map(String::as_str).filter(|k| k.starts_with(prefix))
    }

    /// A key as the checkpoint file spells it.
    pub fn name_in_file(&self, key: &str) -> String {
        match &self.file_names {
            Some(file_names) => file_names(key),
            None => key.to_string(),
        }
    }

    pub fn format_error(&self, reason: impl Into<String>) -> ModelError {
        ModelError::Format { path: self.source.clone(), reason: reason.into() }
    }

    /// What the modules built from this store hold, in bytes.
    pub fn handed_bytes(&self) -> u64 {
        self.handed_bytes.get()
    }

    fn hand(&self, tensor: Tensor) -> Tensor {
        self.handed_bytes.set(self.handed_bytes.get() + tensor_bytes(&tensor));
        tensor
    }

    /// What the modules built from this store hold: their weights, and what they made from them.
    pub fn held_bytes(&self) -> HeldBytes {
        HeldBytes { weights: self.handed_bytes.get(), derived: self.derived_bytes.get() }
    }

    /// A module keeps `tensor`, made from its weights, for as long as it lives.
    pub fn note_derived(&self, tensor: &Tensor) {
        self.derived_bytes.set(self.derived_bytes.get() + tensor_bytes(tensor));
    }

    /// Fails on the first key no module asked for; such a key means the file is not the model we built.
    pub fn ensure_all_used(&self) -> Result<(), ModelError> {
        let used = self.used.borrow();
        match self.tensors.keys().find(|k| !used.contains(k.as_str())) {
            None => Ok(()),
            Some(key) => Err(self.format_error(format!("unexpected tensor `{}` (not part of the detected model)", self.name_in_file(key)))),
        }
    }

    fn checked(&self, key: &str, shape: &[i64]) -> Result<(), ModelError> {
        let name = || self.name_in_file(key);
        let (found, _) = self.tensors.info(key).ok_or_else(|| self.format_error(format!("missing tensor `{}` (expected shape {shape:?})", name())))?;
        if found != shape {
            return Err(self.format_error(format!("tensor `{}` has shape {found:?}, expected {shape:?}", name())));
        }
        self.used.borrow_mut().insert(key.to_string());
        Ok(())
    }

    fn fetch(&self, key: &str, shape: &[i64]) -> Result<Tensor, ModelError> {
        self.checked(key, shape)?;
        Ok(self.hand(self.tensors.read(key, self.device, LoadAs::Kind(self.kind))?))
    }

    /// Like `fetch`, but an fp8 tensor stays fp8 on the device (its layer up-casts it per call), which
    /// halves the memory of a checkpoint shipped in fp8 compared with holding it at the compute dtype.
    fn fetch_stored(&self, key: &str, shape: &[i64]) -> Result<Tensor, ModelError> {
        self.checked(key, shape)?;
        Ok(self.hand(self.tensors.read(key, self.device, LoadAs::KeepFp8(self.kind))?))
    }
}

impl Weights {
    /// The tensors under `prefix`, as modules would hold them (fp8 kept, others at `kind`) but left on
    /// the host, marked used: for weights that go to the device only while they compute. On CUDA they are
    /// pinned, so the copies in can overlap with work.
    pub fn take_host(&self, prefix: &str) -> Result<BTreeMap<String, Tensor>, ModelError> {
        let keys: Vec<String> = self.tensors.keys_from(prefix).take_while(|k| k.starts_with(prefix)).cloned().collect();
        let mut taken = BTreeMap::new();
        for key in keys {
            let mut tensor = self.tensors.read(&key, Device::Cpu, LoadAs::KeepFp8(self.kind))?;
            if self.device.is_cuda() {
                tensor = match crate::device::cuda::pinned(&tensor) {
                    Some(pinned) => pinned,
                    None => tensor.f_pin_memory(self.device)?,
                };
            }
            self.used.borrow_mut().insert(key.clone());
            taken.insert(key, tensor);
        }
        Ok(taken)
    }
}

pub fn is_fp8(kind: Kind) -> bool {
    matches!(kind, Kind::Float8e4m3fn | Kind::Float8e5m2 | Kind::Float8e4m3fnuz | Kind::Float8e5m2fnuz)
}

/// A loaded model's own memory, in bytes: its weights as held, and what it made from them at load and
/// keeps beside them (Winograd kernels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeldBytes {
    pub weights: u64,
    pub derived: u64,
}

/// Bytes a tensor's elements take.
pub fn tensor_bytes(tensor: &Tensor) -> u64 {
    (tensor.numel() * tensor.kind().elt_size_in_bytes()) as u64
}

/// A position in the weight tree (`decoder.up_blocks.1`), mirroring the checkpoint's own names.
#[derive(Clone)]
pub struct WeightPath<'a> {
    weights: &'a Weights,
    prefix: String,
}

impl<'a> WeightPath<'a> {
    pub fn pp(&self, segment: impl Display) -> WeightPath<'a> {
        WeightPath { weights: self.weights, prefix: self.key(segment) }
    }

    pub fn key(&self, name: impl Display) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    pub fn get(&self, name: &str, shape: &[i64]) -> Result<Tensor, ModelError> {
        self.weights.fetch(&self.key(name), shape)
    }

    /// The tensor in its stored dtype when that is fp8 (see [`Weights`]), else as `get`.
    pub fn get_stored(&self, name: &str, shape: &[i64]) -> Result<Tensor, ModelError> {
        self.weights.fetch_stored(&self.key(name), shape)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.weights.contains(&self.key(name))
    }

    pub fn weights(&self) -> &'a Weights {
        self.weights
    }
}
