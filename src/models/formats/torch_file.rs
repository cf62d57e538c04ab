//! Reads tensors written by `torch.save` (the zip format of PyTorch >= 1.6) without Python: a bare
//! tensor, or a dict / state dict of tensors (SeedVR2's `pos_emb.pt` and `neg_emb.pt` are bare bf16
//! tensors). `data.pkl` is interpreted by a data-only pickle reader (torch_file/pickle.rs) that refuses
//! every class and function except the tensor rebuilders; the storages are read from `data/<key>`.
mod pickle;
mod torch_globals;
mod values;

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::rc::Rc;

use tch::{Kind, Tensor};
use zip::result::ZipError;
use zip::{CompressionMethod, ZipArchive};

use self::pickle::{StorageRef, TensorSpec, Value};
use crate::models::ModelError;

/// torch.save's pickles hold only structure; tensor bytes live in separate entries.
pub const MAX_PICKLE_BYTES: u64 = 16 << 20;
const PICKLE_MAGIC: u8 = 0x80;

/// The one tensor a file holds: saved bare, or as the only entry of a dict.
pub fn read_tensor(path: &Path) -> Result<Tensor, ModelError> {
    let (value, mut archive) = open(path)?;
    match value {
        Value::Tensor(spec) => archive.materialize(&spec),
        Value::Dict(dict) if dict.items.len() == 2 => {
            let mut tensors = archive.named_tensors(dict.items)?;
            Ok(tensors.pop().unwrap().1)
        }
        Value::Dict(dict) => Err(archive.format(format!("holds a dict of {} tensors, not one tensor", dict.items.len() / 2))),
        other => Err(archive.format(format!("holds {}, not a tensor", other.describe()))),
    }
}

/// The tensors of a file that saved a dict (or state dict) of name → tensor, in the file's order.
pub fn read_tensors(path: &Path) -> Result<Vec<(String, Tensor)>, ModelError> {
    let (value, mut archive) = open(path)?;
    match value {
        Value::Dict(dict) => archive.named_tensors(dict.items),
        other => Err(archive.format(format!("holds {}, not a dict of tensors", other.describe()))),
    }
}

/// The names and shapes of a saved dict of tensors, from its pickle alone (no tensor bytes are read): what
/// the model catalogue asks of every checkpoint in a models folder.
pub fn tensor_shapes(path: &Path) -> Result<Vec<(String, Vec<i64>)>, ModelError> {
    let (value, archive) = open(path)?;
    let Value::Dict(dict) = value else { return Err(archive.format(format!("holds {}, not a dict of tensors", value.describe()))) };
    let mut shapes = Vec::with_capacity(dict.items.len() / 2);
    let mut pairs = dict.items.into_iter();
    while let (Some(Value::Str(name)), Some(Value::Tensor(spec))) = (pairs.next(), pairs.next()) {
        shapes.push((name.to_string(), spec.size.clone()));
    }
    Ok(shapes)
}

/// Whether the file is a zip, as `torch.save` writes one (what its extension says aside).
pub fn is_torch_zip(path: &Path) -> bool {
    crate::media::sequence::is_zip(path)
}

struct Archive<'p> {
    path: &'p Path,
    zip: ZipArchive<File>,
    /// `<archive>/`, the folder every entry sits in (torch names it after the file's stem).
    prefix: String,
    file_len: u64,
    /// Each storage read once; tensors viewing the same storage share it.
    storages: HashMap<String, Tensor>,
}

fn open(path: &Path) -> Result<(Value, Archive<'_>), ModelError> {
    let io = |source| ModelError::Io { path: path.to_path_buf(), source };
    let format = |reason: String| ModelError::Format { path: path.to_path_buf(), reason };
    if cfg!(target_endian = "big") {
        return Err(format("torch.save files are little-endian; this machine is not".into()));
    }
    let mut file = File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    let mut first = [0u8; 1];
    if file.read(&mut first).map_err(io)? == 1 && first[0] == PICKLE_MAGIC {
        return Err(format("is a legacy (pre-1.6, non-zip) torch.save file; re-save it with a current PyTorch".into()));
    }
    let zip = ZipArchive::new(file).map_err(|e| match e {
        ZipError::Io(source) => io(source),
        other => format(format!("is not a torch.save zip archive: {other}")),
    })?;
    let pickles: Vec<&str> =
        zip.file_names().filter(|name| name.ends_with("/data.pkl") && name.matches('/').count() == 1).collect();
    let prefix = match pickles.as_slice() {
        [one] => one.trim_end_matches("data.pkl").to_string(),
        [] => return Err(format("has no <archive>/data.pkl entry; it is not a torch.save file".into())),
        _ => return Err(format(format!("has {} data.pkl entries; torch.save writes one", pickles.len()))),
    };
    let mut archive = Archive { path, zip, prefix, file_len, storages: HashMap::new() };
    archive.check_byte_order()?;
    let pickle_bytes = archive.read_entry("data.pkl", None)?;
    let value = pickle::unpickle(&pickle_bytes).map_err(|reason| archive.format(reason))?;
    Ok((value, archive))
}

impl Archive<'_> {
    fn format(&self, reason: String) -> ModelError {
        ModelError::Format { path: self.path.to_path_buf(), reason }
    }

    /// Files from PyTorch < 1.10 have no `byteorder` entry; those were written little-endian.
    fn check_byte_order(&mut self) -> Result<(), ModelError> {
        let name = format!("{}byteorder", self.prefix);
        if !self.zip.file_names().any(|entry| entry == name) {
            return Ok(());
        }
        let order = self.read_entry("byteorder", None)?;
        if order != b"little" {
            let order = String::from_utf8_lossy(&order);
            return Err(self.format(format!("stores tensors with byte order `{order}`; only little-endian is read")));
        }
        Ok(())
    }

    /// An uncompressed entry (torch.save compresses nothing) of exactly `expected` bytes, or of at most
    /// MAX_PICKLE_BYTES when the length is not known in advance.
    fn read_entry(&mut self, relative: &str, expected: Option<u64>) -> Result<Vec<u8>, ModelError> {
        let name = format!("{}{relative}", self.prefix);
        let (path, file_len) = (self.path, self.file_len);
        let format = |reason: String| ModelError::Format { path: path.to_path_buf(), reason };
        let mut entry = self.zip.by_name(&name).map_err(|e| match e {
            ZipError::FileNotFound => format(format!("has no entry {name}")),
            ZipError::Io(source) => ModelError::Io { path: path.to_path_buf(), source },
            other => format(format!("entry {name} cannot be read: {other}")),
        })?;
        if entry.compression() != CompressionMethod::Stored {
            return Err(format(format!("entry {name} is compressed ({}); torch.save stores entries uncompressed", entry.compression())));
        }
        let len = entry.size();
        match expected {
            Some(expected) if len != expected => {
                return Err(format(format!("entry {name} has {len} bytes, but its tensor needs {expected}")));
            }
            None if len > MAX_PICKLE_BYTES => {
                return Err(format(format!("entry {name} has {len} bytes, more than the {MAX_PICKLE_BYTES} accepted")));
            }
            _ if len > file_len => return Err(format(format!("entry {name} claims {len} bytes, more than the whole file"))),
            _ => {}
        }
        let mut bytes = vec![0u8; len as usize];
        entry.read_exact(&mut bytes).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
        Ok(bytes)
    }

    fn named_tensors(&mut self, items: Vec<Value>) -> Result<Vec<(String, Tensor)>, ModelError> {
        let mut tensors: Vec<(String, Tensor)> = Vec::with_capacity(items.len() / 2);
        let mut pairs = items.into_iter();
        while let (Some(key), Some(value)) = (pairs.next(), pairs.next()) {
            let Value::Str(name) = key else { return Err(self.format("a dict key is not a string".into())) };
            let Value::Tensor(spec) = value else {
                return Err(self.format(format!("entry `{name}` of the dict holds {}, not a tensor", value.describe())));
            };
            if tensors.iter().any(|(seen, _)| **seen == *name) {
                return Err(self.format(format!("the dict names `{name}` twice")));
            }
            tensors.push((name.to_string(), self.materialize(&spec)?));
        }
        Ok(tensors)
    }

    /// The tensor torch would rebuild: the storage's bytes viewed as `kind`, then the saved view of them.
    fn materialize(&mut self, spec: &Rc<TensorSpec>) -> Result<Tensor, ModelError> {
        let storage = self.storage(&spec.storage)?;
        let element = spec.kind.elt_size_in_bytes() as u64;
        if spec.storage.byte_len % element != 0 {
            let StorageRef { key, byte_len, .. } = &*spec.storage;
            return Err(self.format(format!("storage {key} has {byte_len} bytes, not whole {:?} elements", spec.kind)));
        }
        let numel = (spec.storage.byte_len / element) as i64;
        check_view(spec, numel).map_err(|reason| self.format(format!("storage {}: {reason}", spec.storage.key)))?;
        if spec.kind == Kind::Bool && storage.f_gt(1)?.f_any()?.f_int64_value(&[])? != 0 {
            return Err(self.format(format!("storage {} holds bools other than 0 and 1", spec.storage.key)));
        }
        let typed = storage.f_view_dtype(spec.kind)?;
        Ok(typed.f_as_strided(spec.size.as_slice(), spec.stride.as_slice(), spec.offset)?.f_contiguous()?)
    }

    /// The storage's raw bytes as a 1-D uint8 tensor.
    fn storage(&mut self, storage: &StorageRef) -> Result<Tensor, ModelError> {
        if let Some(bytes) = self.storages.get(&storage.key) {
            let held = bytes.size()[0] as u64;
            if held != storage.byte_len {
                return Err(self.format(format!("storage {} is described with {} and {held} bytes", storage.key, storage.byte_len)));
            }
            return Ok(bytes.shallow_clone());
        }
        let bytes = self.read_entry(&format!("data/{}", storage.key), Some(storage.byte_len))?;
        let tensor = Tensor::f_from_data_size(&bytes, &[bytes.len() as i64], Kind::Uint8)?;
        self.storages.insert(storage.key.clone(), tensor.shallow_clone());
        Ok(tensor)
    }
}

/// The view must stay inside the storage; as_strided would otherwise read past its end.
fn check_view(spec: &TensorSpec, numel: i64) -> Result<(), String> {
    if spec.size.len() != spec.stride.len() {
        return Err(format!("size {:?} and stride {:?} differ in rank", spec.size, spec.stride));
    }
    if spec.offset < 0 || spec.size.iter().chain(&spec.stride).any(|&v| v < 0) {
        return Err(format!("negative offset, size or stride ({}, {:?}, {:?})", spec.offset, spec.size, spec.stride));
    }
    if spec.size.contains(&0) {
        return if spec.offset <= numel { Ok(()) } else { Err(format!("offset {} is past its {numel} elements", spec.offset)) };
    }
    let last = spec.size.iter().zip(&spec.stride).try_fold(spec.offset, |at, (&size, &stride)| {
        (size - 1).checked_mul(stride).and_then(|span| at.checked_add(span))
    });
    match last {
        Some(last) if last < numel => Ok(()),
        _ => {
            let TensorSpec { offset, size, stride, .. } = spec;
            Err(format!("view (offset {offset}, size {size:?}, stride {stride:?}) reaches past its {numel} elements"))
        }
    }
}
