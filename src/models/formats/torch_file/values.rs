//! The values a torch.save pickle builds (`pickle` reads them, `torch_globals` makes them from the few
//! callables torch.save names), apart from both so neither has to import the other's types.
use std::rc::Rc;

use tch::Kind;

/// Deeper nesting than torch writes (a state dict's `_metadata` is 3 levels); also keeps drops shallow.
pub(super) const MAX_DEPTH: u32 = 32;

/// The globals a torch.save file may name; everything else is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Global {
    RebuildTensorV2,
    RebuildTensorV3,
    RebuildParameter,
    OrderedDict,
    /// `torch.<Kind>Storage`: numel counts elements of the kind.
    TypedStorage(Kind),
    /// `torch.storage.UntypedStorage`: numel counts bytes; the dtype comes with the tensor.
    UntypedStorage,
    Dtype(Kind),
}

/// One `data/<key>` entry of the archive as the pickle describes it.
#[derive(Debug, PartialEq, Eq)]
pub struct StorageRef {
    pub key: String,
    /// None for an untyped storage, whose numel counts bytes; the tensor then carries the dtype.
    pub kind: Option<Kind>,
    pub byte_len: u64,
}

/// A tensor as `_rebuild_tensor_v2/v3` would build it: a strided view of a storage, in elements of `kind`.
#[derive(Debug)]
pub struct TensorSpec {
    pub storage: Rc<StorageRef>,
    pub kind: Kind,
    pub offset: i64,
    pub size: Vec<i64>,
    pub stride: Vec<i64>,
}

#[derive(Debug, Clone)]
pub struct Seq {
    pub items: Vec<Value>,
    depth: u32,
}

#[derive(Debug, Clone)]
pub enum Value {
    None,
    // Bools and floats only appear in arguments the tensor rebuilders ignore (requires_grad, metadata);
    // their values stay for Debug output.
    Bool(#[allow(dead_code)] bool),
    Int(i64),
    Float(#[allow(dead_code)] f64),
    Str(Rc<str>),
    Tuple(Rc<Seq>),
    List(Seq),
    /// Entries in insertion order, as Python keeps them.
    Dict(Seq),
    Global(Global),
    Storage(Rc<StorageRef>),
    Tensor(Rc<TensorSpec>),
    /// What the memo holds for a list or dict (see the module comment).
    MemoizedContainer,
}

impl Value {
    fn depth(&self) -> u32 {
        match self {
            Value::Tuple(seq) => seq.depth,
            Value::List(seq) | Value::Dict(seq) => seq.depth,
            _ => 0,
        }
    }

    pub fn describe(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "a bool",
            Value::Int(_) => "an int",
            Value::Float(_) => "a float",
            Value::Str(_) => "a string",
            Value::Tuple(_) => "a tuple",
            Value::List(_) => "a list",
            Value::Dict(_) => "a dict",
            Value::Global(_) => "a class or function",
            Value::Storage(_) => "a storage",
            Value::Tensor(_) => "a tensor",
            Value::MemoizedContainer => "a shared list or dict",
        }
    }
}

pub(super) fn seq(items: Vec<Value>) -> Result<Seq, String> {
    let depth = 1 + items.iter().map(Value::depth).max().unwrap_or(0);
    if depth > MAX_DEPTH {
        return Err(format!("values are nested deeper than {MAX_DEPTH} levels"));
    }
    Ok(Seq { items, depth })
}
