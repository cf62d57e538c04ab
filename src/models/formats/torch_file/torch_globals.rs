//! The callables torch.save's pickle names and what calling them builds: storage classes and dtypes by
//! name, persistent storage ids, and the `_rebuild_*` functions that make a tensor's spec from a storage.
//! Anything not listed here is refused by name (see `pickle`).
use std::rc::Rc;

use tch::Kind;

use super::values::{seq, Global, StorageRef, TensorSpec, Value};

pub(super) fn resolve_global(module: &str, name: &str) -> Result<Global, String> {
    let global = match (module, name) {
        ("torch._utils", "_rebuild_tensor_v2") => Some(Global::RebuildTensorV2),
        ("torch._utils", "_rebuild_tensor_v3") => Some(Global::RebuildTensorV3),
        ("torch._utils", "_rebuild_parameter") => Some(Global::RebuildParameter),
        ("collections", "OrderedDict") => Some(Global::OrderedDict),
        ("torch.storage", "UntypedStorage") => Some(Global::UntypedStorage),
        ("torch", name) => match name.strip_suffix("Storage") {
            Some(prefix) => storage_kind(prefix).map(Global::TypedStorage),
            None => dtype_kind(name).map(Global::Dtype),
        },
        _ => None,
    };
    global.ok_or_else(|| format!("references `{module}.{name}`, which a data-only tensor reader does not load"))
}

fn storage_kind(prefix: &str) -> Option<Kind> {
    Some(match prefix {
        "Float" => Kind::Float,
        "Double" => Kind::Double,
        "Half" => Kind::Half,
        "BFloat16" => Kind::BFloat16,
        "Long" => Kind::Int64,
        "Int" => Kind::Int,
        "Short" => Kind::Int16,
        "Char" => Kind::Int8,
        "Byte" => Kind::Uint8,
        "Bool" => Kind::Bool,
        "ComplexFloat" => Kind::ComplexFloat,
        "ComplexDouble" => Kind::ComplexDouble,
        _ => return None,
    })
}

fn dtype_kind(name: &str) -> Option<Kind> {
    Some(match name {
        "float32" | "float" => Kind::Float,
        "float64" | "double" => Kind::Double,
        "float16" | "half" => Kind::Half,
        "bfloat16" => Kind::BFloat16,
        "int64" | "long" => Kind::Int64,
        "int32" | "int" => Kind::Int,
        "int16" | "short" => Kind::Int16,
        "int8" => Kind::Int8,
        "uint8" => Kind::Uint8,
        "bool" => Kind::Bool,
        "complex64" | "cfloat" => Kind::ComplexFloat,
        "complex128" | "cdouble" => Kind::ComplexDouble,
        "float8_e5m2" => Kind::Float8e5m2,
        "float8_e4m3fn" => Kind::Float8e4m3fn,
        "float8_e5m2fnuz" => Kind::Float8e5m2fnuz,
        "float8_e4m3fnuz" => Kind::Float8e4m3fnuz,
        _ => return None,
    })
}

/// torch.save's persistent id: `('storage', storage class, key, location, numel)`.
pub(super) fn storage_from_pid(pid: &Value) -> Result<StorageRef, String> {
    let Value::Tuple(pid) = pid else { return Err(format!("persistent id is {}, not a tuple", pid.describe())) };
    let [Value::Str(tag), Value::Global(class), Value::Str(key), Value::Str(_location), Value::Int(numel)] = pid.items.as_slice() else {
        return Err("persistent id is not ('storage', class, key, location, numel)".into());
    };
    if &**tag != "storage" {
        return Err(format!("persistent id of type `{tag}` is not a storage"));
    }
    let kind = match class {
        Global::TypedStorage(kind) => Some(*kind),
        Global::UntypedStorage => None,
        other => return Err(format!("persistent id names {other:?}, not a storage class")),
    };
    let numel = u64::try_from(*numel).map_err(|_| format!("storage {key} has a negative size"))?;
    let element = kind.map_or(1, |kind| kind.elt_size_in_bytes() as u64);
    let byte_len = numel.checked_mul(element).ok_or_else(|| format!("storage {key} size overflows"))?;
    Ok(StorageRef { key: key.to_string(), kind, byte_len })
}

pub(super) fn call(global: Global, args: &[Value]) -> Result<Value, String> {
    match global {
        Global::RebuildTensorV2 | Global::RebuildTensorV3 => rebuild_tensor(global, args),
        Global::RebuildParameter => match args {
            [tensor @ Value::Tensor(_), Value::Bool(_), hooks] => {
                expect_no_hooks(hooks)?;
                Ok(tensor.clone())
            }
            _ => Err("_rebuild_parameter arguments are not (tensor, requires_grad, hooks)".into()),
        },
        Global::OrderedDict if args.is_empty() => Ok(Value::Dict(seq(Vec::new())?)),
        Global::OrderedDict => Err("OrderedDict is called with arguments".into()),
        other => Err(format!("{other:?} is not callable here")),
    }
}

/// `_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])` takes the dtype
/// from a typed storage; `_rebuild_tensor_v3(..., hooks, dtype[, metadata])` views an untyped one as `dtype`.
fn rebuild_tensor(global: Global, args: &[Value]) -> Result<Value, String> {
    let v3 = global == Global::RebuildTensorV3;
    let fixed = if v3 { 7 } else { 6 };
    if args.len() != fixed && args.len() != fixed + 1 {
        return Err(format!("{global:?} takes {fixed} or {} arguments, not {}", fixed + 1, args.len()));
    }
    let Value::Storage(storage) = &args[0] else { return Err(format!("tensor storage is {}", args[0].describe())) };
    let Value::Int(offset) = args[1] else { return Err("tensor offset is not an int".into()) };
    let size = int_tuple(&args[2], "size")?;
    let stride = int_tuple(&args[3], "stride")?;
    let Value::Bool(_) = args[4] else { return Err("requires_grad is not a bool".into()) };
    expect_no_hooks(&args[5])?;
    let kind = if v3 {
        let Value::Global(Global::Dtype(kind)) = args[6] else { return Err("_rebuild_tensor_v3 dtype is not a torch dtype".into()) };
        kind
    } else {
        storage.kind.ok_or_else(|| format!("storage {} is untyped, so _rebuild_tensor_v2 cannot tell its dtype", storage.key))?
    };
    Ok(Value::Tensor(Rc::new(TensorSpec { storage: storage.clone(), kind, offset, size, stride })))
}

fn int_tuple(value: &Value, what: &str) -> Result<Vec<i64>, String> {
    let Value::Tuple(items) = value else { return Err(format!("tensor {what} is not a tuple")) };
    items.items.iter().map(|v| match v {
        Value::Int(i) => Ok(*i),
        other => Err(format!("tensor {what} holds {}", other.describe())),
    }).collect()
}

fn expect_no_hooks(hooks: &Value) -> Result<(), String> {
    match hooks {
        Value::Dict(d) if d.items.is_empty() => Ok(()),
        Value::None => Ok(()),
        other => Err(format!("tensor backward hooks are {}, not an empty dict", other.describe())),
    }
}
