//! Memory layout of 5-D (and 4-D) activations and conv weights. tch has no memory-format API, but an
//! NDHWC-contiguous tensor viewed as `[N, C, D, H, W]` is exactly torch's `channels_last_3d`, and
//! libtorch (oneDNN on CPU) picks the format up from the strides.
use tch::Tensor;

use crate::models::ModelError;

/// A copy of `x` with channels-last-3d strides (shape unchanged).
pub fn to_channels_last(x: &Tensor) -> Result<Tensor, ModelError> {
    Ok(x.f_permute([0, 2, 3, 4, 1])?.f_contiguous()?.f_permute([0, 4, 1, 2, 3])?)
}

/// A copy of a 4-D `x` with channels-last strides (shape unchanged): torch's `channels_last`.
pub fn to_channels_last_2d(x: &Tensor) -> Result<Tensor, ModelError> {
    Ok(x.f_permute([0, 2, 3, 1])?.f_contiguous()?.f_permute([0, 3, 1, 2])?)
}

/// A dense copy of a (possibly narrowed) tensor in the layout it already has. `contiguous()` would
/// turn a channels-last slice into the default layout, and the next `cat` and conv would then reorder.
pub fn dense_copy(x: &Tensor) -> Result<Tensor, ModelError> {
    let mut copy = x.f_empty_like()?;
    copy.f_copy_(x)?;
    Ok(copy)
}

/// An uninitialised `[N, C, D, H, W]` tensor of `like`'s kind, device and layout (channels-last-3d or
/// the default).
pub fn empty_5d(size: [i64; 5], like: &Tensor) -> Result<Tensor, ModelError> {
    let options = (like.kind(), like.device());
    if is_channels_last(like) {
        let [n, c, d, h, w] = size;
        return Ok(Tensor::f_empty([n, d, h, w, c], options)?.f_permute([0, 4, 1, 2, 3])?);
    }
    Ok(Tensor::f_empty(size, options)?)
}

/// Whether `x` ([N, C, D, H, W]) has channels-last-3d strides.
pub fn is_channels_last(x: &Tensor) -> bool {
    let size = x.size();
    let stride = x.stride();
    size.len() == 5 && stride[1] == 1 && stride[4] == size[1] && stride[3] == size[1] * size[4]
}

/// Whether frames `[N, T, C, H, W]` each have channels-last strides (a 4-D channels-last batch seen
/// as `[N, T, …]`): every pixel's channels adjacent, pixels in row order.
pub fn frames_are_channels_last(x: &Tensor) -> bool {
    let size = x.size();
    let stride = x.stride();
    size.len() == 5 && stride[2] == 1 && stride[4] == size[2] && stride[3] == size[2] * size[4]
}

/// Whether `x` (`[N, C, H, W]`) has channels-last strides.
pub fn is_channels_last_2d(x: &Tensor) -> bool {
    let size = x.size();
    let stride = x.stride();
    size.len() == 4 && stride[1] == 1 && stride[3] == size[1] && stride[2] == size[1] * size[3]
}
