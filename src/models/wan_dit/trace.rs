//! What a step can record for the parity tests, under the reference's names without the `step{s}.`
//! prefix: every block's `block{b}.block_mask_u8`, block 0's `block0.out` and its kernel inputs and
//! output `block0.kernel_{q,k,v,out}` (`[L, heads, hd]`, window order), and `local_attn_mask_u8`.
pub use crate::models::nn::trace::Trace;

/// Block 0's intermediates are kept; the other blocks record only their masks.
pub fn records_intermediates(block: usize) -> bool {
    block == 0
}
