//! What a forward pass can record for the parity tests.
use std::collections::BTreeMap;

use tch::Tensor;

/// Intermediate tensors by the reference's names (`vid_in`, `blocks.N.attn.vid`, ...), for parity tests.
#[derive(Default)]
pub struct Trace {
    pub tensors: BTreeMap<String, Tensor>,
}

impl Trace {
    pub fn record(&mut self, name: String, tensor: &Tensor) {
        self.tensors.insert(name, tensor.detach().copy());
    }
}
