//! What a step can record for the parity tests, under the reference's names without the `step{s}.`
//! prefix: every block's `block{b}.block_mask_u8`, block 0's `block0.out` and its kernel inputs and
//! output `block0.kernel_{q,k,v,out}` (`[L, heads, hd]`, window order), and `local_attn_mask_u8`.
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

/// Block 0's intermediates are kept; the other blocks record only their masks.
pub fn records_intermediates(block: usize) -> bool {
    block == 0
}
