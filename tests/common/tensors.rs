//! Comparing tensors with reference files.
use std::collections::BTreeMap;
use std::path::Path;

use tch::{Kind, Tensor};

pub fn read_tensor_map(path: &Path) -> BTreeMap<String, Tensor> {
    Tensor::read_safetensors(path).unwrap_or_else(|e| panic!("{} unreadable: {e}", path.display())).into_iter().collect()
}

/// Computed in f64 so the comparison adds no rounding of its own.
pub fn max_abs_diff(actual: &Tensor, expected: &Tensor) -> f64 {
    assert_eq!(actual.size(), expected.size(), "shape mismatch");
    (actual.to_kind(Kind::Double) - expected.to_kind(Kind::Double)).abs().max().double_value(&[])
}
