//! What a forward pass can record for the parity tests: intermediate tensors by the reference's names
//! (`vid_in`, `blocks.N.attn.vid`, ...).
pub use crate::models::nn::trace::Trace;
