//! The receptive field of a layer path: how far an output pixel reaches into the input (the upscaler's tile overlap).

/// One step of the longest input-to-output path, as far as spatial reach is concerned.
#[derive(Debug, Clone, Copy)]
pub(super) enum SpatialOp {
    Conv { radius: i64 },
    /// Nearest upsample or pixel shuffle: output pixel q reads input pixel floor(q / factor).
    Upsample { factor: i64 },
    /// Bicubic resize by `scale` with half-pixel centres: 4 taps around (q + 0.5) / scale - 0.5.
    Bicubic { scale: f64 },
}

impl SpatialOp {
    pub(super) fn scale(&self) -> f64 {
        match self {
            SpatialOp::Conv { .. } => 1.0,
            SpatialOp::Upsample { factor } => *factor as f64,
            SpatialOp::Bicubic { scale } => *scale,
        }
    }
}

/// Walks each output pixel phase back to the input interval it depends on and returns the
/// largest distance from the pixel's own input pixel `floor(q / total_scale)`.
pub(super) fn path_receptive_radius(ops: &[SpatialOp]) -> i64 {
    let total_scale: f64 = ops.iter().map(SpatialOp::scale).product();
    let phases = (total_scale.ceil() as i64 * 8).max(8);
    let mut radius = 0;
    for q in phases..2 * phases {
        let (mut lo, mut hi) = (q, q);
        for op in ops.iter().rev() {
            (lo, hi) = match *op {
                SpatialOp::Conv { radius } => (lo - radius, hi + radius),
                SpatialOp::Upsample { factor } => (lo.div_euclid(factor), hi.div_euclid(factor)),
                SpatialOp::Bicubic { scale } => {
                    let source = |p: i64| ((p as f64 + 0.5) / scale - 0.5).floor() as i64;
                    (source(lo) - 1, source(hi) + 2)
                }
            };
        }
        let own = (q as f64 / total_scale).floor() as i64;
        radius = radius.max(own - lo).max(hi - own);
    }
    radius
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn radius_of_conv_chain_with_upsampling() {
        let conv = SpatialOp::Conv { radius: 1 };
        assert_eq!(path_receptive_radius(&[conv, conv, SpatialOp::Upsample { factor: 4 }]), 2);
        // A conv after a x2 upsample reaches one input pixel at some phases.
        assert_eq!(path_receptive_radius(&[SpatialOp::Upsample { factor: 2 }, conv]), 1);
        let halved = [conv, SpatialOp::Upsample { factor: 4 }, SpatialOp::Bicubic { scale: 0.5 }];
        assert_eq!(path_receptive_radius(&halved), 2);
    }
}
