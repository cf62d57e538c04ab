//! A linear map whose weight may be stored in fp8: kept one byte per value on the device and up-cast to
//! the activations' dtype only for the call (the community's fp8 checkpoints of the DiTs).
use tch::{TchError, Tensor};

use super::weights::{is_fp8, WeightPath};
use crate::models::ModelError;

pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    pub fn new(vp: &WeightPath, in_dim: i64, out_dim: i64, bias: bool) -> Result<Self, ModelError> {
        let weight = vp.get_stored("weight", &[out_dim, in_dim])?;
        let bias = if bias { Some(vp.get("bias", &[out_dim])?) } else { None };
        Ok(Self { weight, bias })
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        if is_fp8(self.weight.kind()) {
            // Only this layer's weight exists at the compute dtype, and only during this call.
            return x.linear(&self.weight.to_kind(x.kind()), self.bias.as_ref());
        }
        x.linear(&self.weight, self.bias.as_ref())
    }

    /// [`Linear::forward`] with libtorch's errors (out of memory) returned instead of raised.
    pub fn try_forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        if is_fp8(self.weight.kind()) {
            return x.f_linear(&self.weight.f_to_kind(x.kind())?, self.bias.as_ref());
        }
        x.f_linear(&self.weight, self.bias.as_ref())
    }
}
