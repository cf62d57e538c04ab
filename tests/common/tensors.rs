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

/// A `full_keys*.txt` listing of a released checkpoint (`key<TAB>[shape]<TAB>...`, `#` comments).
pub fn full_keys(path: &Path) -> Vec<(String, Vec<i64>)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let mut fields = line.split('\t');
            let key = fields.next().unwrap().to_string();
            let shape = fields.next().expect("shape column");
            (key, shape.trim_matches(['[', ']']).split(',').map(|d| d.trim().parse::<i64>().expect("dimension")).collect())
        })
        .collect()
}
