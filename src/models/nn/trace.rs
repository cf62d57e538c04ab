//! What a forward pass can record for the parity tests: intermediate tensors under the reference's names,
//! copied as they were when recorded.
use std::collections::BTreeMap;

use tch::Tensor;

#[derive(Default)]
pub struct Trace {
    pub tensors: BTreeMap<String, Tensor>,
}

impl Trace {
    pub fn record(&mut self, name: String, tensor: &Tensor) {
        self.tensors.insert(name, tensor.detach().copy());
    }
}
