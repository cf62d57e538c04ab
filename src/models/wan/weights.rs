//! Checkpoint tensors of a Wan VAE under diffusers names, with shape-checked lookups that name the
//! offending key, and a check that nothing in the file was left unused.
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};

use super::keymap::{self, Naming, OriginalLayout};
use crate::models::ModelError;

pub struct Weights {
    source: PathBuf,
    tensors: BTreeMap<String, Tensor>,
    /// The file's own layout when it uses original names, so errors name keys as the user's file spells them.
    original: Option<OriginalLayout>,
    /// Load-time bookkeeping only (which keys the modules asked for); never touched during inference.
    used: RefCell<BTreeSet<String>>,
    device: Device,
    kind: Kind,
    /// Give 5-D conv weights channels-last-3d strides (see `layout`); set before modules are built.
    conv_channels_last: bool,
}

impl Weights {
    /// Reads a safetensors or GGUF file (fp32/fp16/bf16, GGUF also Q8_0) in either naming scheme.
    pub fn read(path: &Path, device: Device, kind: Kind) -> Result<Self, ModelError> {
        std::fs::metadata(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
        let tensors = crate::models::checkpoint::read_tensors(path)?;
        Self::from_tensors(path, tensors, device, kind)
    }

    /// Takes named tensors in either scheme and renames them to diffusers names.
    pub fn from_tensors(source: &Path, tensors: Vec<(String, Tensor)>, device: Device, kind: Kind) -> Result<Self, ModelError> {
        let format_error = |reason: String| ModelError::Format { path: source.to_path_buf(), reason };
        let naming = keymap::detect_naming(tensors.iter().map(|(k, _)| k.as_str())).ok_or_else(|| {
            format_error("no `encoder.conv1.weight` (original naming) or `encoder.conv_in.weight` (diffusers naming): not a Wan VAE checkpoint".into())
        })?;
        let (renamed, original): (BTreeMap<String, Tensor>, _) = match naming {
            Naming::Diffusers => (tensors.into_iter().collect(), None),
            Naming::Original => {
                let keys: Vec<&str> = tensors.iter().map(|(k, _)| k.as_str()).collect();
                let layout = OriginalLayout::detect(&keys).map_err(|reason| format_error(reason.into()))?;
                (tensors.into_iter().map(|(k, t)| (keymap::original_to_diffusers(&k, layout), t)).collect(), Some(layout))
            }
        };
        Ok(Self { source: source.to_path_buf(), tensors: renamed, original, used: RefCell::default(), device, kind, conv_channels_last: false })
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn device(&self) -> Device {
        self.device
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
        self.tensors.get(key).map(|t| t.size())
    }

    pub fn contains(&self, key: &str) -> bool {
        self.tensors.contains_key(key)
    }

    /// The first key (in sorted order) under `prefix`, if any.
    pub fn first_key_under(&self, prefix: &str) -> Option<&str> {
        self.tensors.range(prefix.to_string()..).next().map(|(k, _)| k.as_str()).filter(|k| k.starts_with(prefix))
    }

    /// A (diffusers) key as the checkpoint file spells it.
    pub fn name_in_file(&self, key: &str) -> String {
        match self.original {
            Some(layout) => keymap::diffusers_to_original(key, layout),
            None => key.to_string(),
        }
    }

    pub fn format_error(&self, reason: impl Into<String>) -> ModelError {
        ModelError::Format { path: self.source.clone(), reason: reason.into() }
    }

    /// Fails on the first key no module asked for; such a key means the file is not the model we built.
    pub fn ensure_all_used(&self) -> Result<(), ModelError> {
        let used = self.used.borrow();
        match self.tensors.keys().find(|k| !used.contains(*k)) {
            None => Ok(()),
            Some(key) => Err(self.format_error(format!("unexpected tensor `{}` (not part of the detected model)", self.name_in_file(key)))),
        }
    }

    fn fetch(&self, key: &str, shape: &[i64]) -> Result<Tensor, ModelError> {
        let name = || self.name_in_file(key);
        let tensor = self.tensors.get(key).ok_or_else(|| self.format_error(format!("missing tensor `{}` (expected shape {shape:?})", name())))?;
        if tensor.size() != shape {
            return Err(self.format_error(format!("tensor `{}` has shape {:?}, expected {shape:?}", name(), tensor.size())));
        }
        self.used.borrow_mut().insert(key.to_string());
        Ok(tensor.f_to_kind(self.kind)?.f_to_device(self.device)?)
    }
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

    pub fn contains(&self, name: &str) -> bool {
        self.weights.contains(&self.key(name))
    }

    pub fn weights(&self) -> &'a Weights {
        self.weights
    }
}
