//! What a frame-interpolation family gives the executor: a model that makes the frame between two others
//! ([`Interpolator`]).
use tch::{Device, Kind, Tensor};

use crate::models::ModelError;

#[derive(Debug, Clone, Copy)]
pub struct InterpolatorLoadOptions {
    pub device: Device,
    /// `Float`, `BFloat16` or `Half`: the kind the network's convolutions run in. Flows, warps and the final
    /// blend stay Float whatever this is (a flow in bf16 would be off by pixels at 720p).
    pub kind: Kind,
}

/// A loaded frame interpolator. `interpolate` only reads the model (no interior mutability).
pub trait Interpolator {
    /// Frames a and b `[N,3,H,W]` Float in [0,1] on the model's device, `t` in (0, 1) → the frame at t,
    /// `[N,3,H,W]` Float in [0,1], at the model's default flow scale (right up to 1080p).
    fn interpolate(&self, a: &Tensor, b: &Tensor, t: f64) -> Result<Tensor, ModelError> {
        self.interpolate_at_scale(a, b, t, 1.0)
    }

    /// As `interpolate`, with the flow estimated at `scale` times the frame's resolution (RIFE's `--scale`:
    /// 1.0 by default, 0.5 for 4K, where motions are twice as many pixels; one of 0.25, 0.5, 1, 2, 4).
    fn interpolate_at_scale(&self, a: &Tensor, b: &Tensor, t: f64, scale: f64) -> Result<Tensor, ModelError>;

    /// The frames at each of `times` (as `interpolate_at_scale` gives them, in that order). A model whose times
    /// come from shared steps (RIFE's bisection: 0.25 and 0.75 both start from 0.5) computes each step once:
    /// for 2^k − 1 evenly spaced times, 2^k − 1 inferences instead of one per time per level.
    fn interpolate_many(&self, a: &Tensor, b: &Tensor, times: &[f64], scale: f64) -> Result<Vec<Tensor>, ModelError> {
        times.iter().map(|&t| self.interpolate_at_scale(a, b, t, scale)).collect()
    }

    /// The time the frame `interpolate(a, b, t)` returns really shows: `t` for a model that takes any time,
    /// the nearest time its method reaches for one that does not (RIFE HDv3 bisects: 0.5, 0.25, 0.75, ...).
    fn time_reached(&self, t: f64) -> f64;
}

/// A model the family ships, with its file relative to the models folder.
pub struct ShippedInterpolator {
    pub name: &'static str,
    pub file: &'static str,
    pub description: &'static str,
}

/// One interpolator family: its models and how to load one of them from its file.
pub struct InterpolatorFamily {
    pub family: super::Family,
    pub models: &'static [ShippedInterpolator],
    pub load: fn(file: &std::path::Path, options: &InterpolatorLoadOptions) -> Result<Box<dyn Interpolator>, ModelError>,
}
