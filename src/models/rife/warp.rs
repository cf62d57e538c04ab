//! model/warplayer.py's backward warp: each output pixel samples the input at its own place plus the flow
//! (in pixels), bilinearly, clamped to the border (`grid_sample`, padding_mode='border', align_corners=True).
use tch::{Kind, TchError, Tensor};

/// The sampling grid with no flow, `[N,2,H,W]` Float: x then y, each from -1 to 1 (warplayer's
/// `backwarp_tenGrid`, which the reference caches per size; here one inference makes it once).
pub fn base_grid(n: i64, height: i64, width: i64, device: tch::Device) -> Result<Tensor, TchError> {
    let options = (Kind::Float, device);
    let horizontal = Tensor::f_linspace(-1.0, 1.0, width, options)?.f_view([1, 1, 1, width])?.f_expand([n, -1, height, -1], false)?;
    let vertical = Tensor::f_linspace(-1.0, 1.0, height, options)?.f_view([1, 1, height, 1])?.f_expand([n, -1, -1, width], false)?;
    Tensor::f_cat(&[horizontal, vertical], 1)
}

/// `input` `[N,C,H,W]` Float sampled at `grid + flow` (`flow` `[N,2,H,W]` Float, in pixels).
pub fn warp(input: &Tensor, flow: &Tensor, grid: &Tensor) -> Result<Tensor, TchError> {
    let (height, width) = (input.size()[2] as f64, input.size()[3] as f64);
    // Pixels to the grid's [-1, 1]: the same tensor ÷ double scalar as warplayer.py.
    let flow_x = flow.f_narrow(1, 0, 1)?.f_div_scalar((width - 1.0) / 2.0)?;
    let flow_y = flow.f_narrow(1, 1, 1)?.f_div_scalar((height - 1.0) / 2.0)?;
    let sample_at = grid.f_add(&Tensor::f_cat(&[flow_x, flow_y], 1)?)?.f_permute([0, 2, 3, 1])?;
    const BILINEAR: i64 = 0;
    const BORDER: i64 = 1;
    input.f_grid_sampler(&sample_at, BILINEAR, BORDER, true)
}
