//! What realcugan-ncnn-vulkan does around the network for a frame (one tile of the tool's): the graph's
//! convolutions are unpadded, so the frame is first padded by reflection by as much as they consume (18 px
//! per side at 2x, 14 at 3x, 19 at 4x: main.cpp's `prepadding`), plus, at the bottom and right, what makes
//! each padded side a multiple of the UNets' down-sampling (2, or 4 at 3x: realcugan.cpp's
//! `prepadding_bottom`/`prepadding_right`). The output's top-left `scale` × (H, W) is kept, and the 4x
//! model's output is a residual over the frame upscaled by nearest neighbour
//! (realcugan_4x_postproc.comp).
use tch::{Device, Kind, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AroundNetwork {
    scale: i64,
    border: i64,
    multiple: i64,
}

impl AroundNetwork {
    /// `None` for a scale Real-CUGAN has no model for.
    pub(super) fn for_scale(scale: i64) -> Option<Self> {
        let (border, multiple) = match scale {
            2 => (18, 2),
            3 => (14, 4),
            4 => (19, 2),
            _ => return None,
        };
        Some(Self { scale, border, multiple })
    }

    /// `[N,C,H,W]` → `[N,C,H',W']` reflected beyond every edge (the edge row itself not repeated), as the
    /// tool's preprocessing shader indexes it.
    pub(super) fn pad(&self, x: &Tensor) -> Tensor {
        let [.., height, width] = x.size()[..] else { unreachable!("frames are [N,C,H,W]") };
        let rows = self.source_indices(height, x.device());
        let cols = self.source_indices(width, x.device());
        x.index_select(2, &rows).index_select(3, &cols)
    }

    /// The network's output for the padded `frame` → the upscaled frame, Float.
    pub(super) fn finish(&self, network_output: &Tensor, frame: &Tensor) -> Tensor {
        let [.., height, width] = frame.size()[..] else { unreachable!("frames are [N,C,H,W]") };
        let y = network_output.narrow(2, 0, height * self.scale).narrow(3, 0, width * self.scale).to_kind(Kind::Float);
        if self.scale == 4 {
            y + frame.to_kind(Kind::Float).upsample_nearest2d([height * 4, width * 4], None, None)
        } else {
            y
        }
    }

    /// For each padded position along a side of `length`, the frame position it copies.
    fn source_indices(&self, length: i64, device: Device) -> Tensor {
        let after = self.border + (-length).rem_euclid(self.multiple);
        let indices: Vec<i64> = (-self.border..length + after).map(|p| reflect(p, length)).collect();
        Tensor::from_slice(&indices).to_device(device)
    }
}

/// Mirror position `p` into `0..length` without repeating the edge. Where the padding is shorter than the
/// side this is exactly the tool's `(length - 1) - |(|p|) - (length - 1)|`; beyond that (a side no longer
/// than the padding, where the tool would read outside the image) the mirror folds back again, and a side
/// of one pixel is repeated.
fn reflect(p: i64, length: i64) -> i64 {
    if length == 1 {
        return 0;
    }
    let period = 2 * (length - 1);
    let folded = p.rem_euclid(period);
    if folded < length { folded } else { period - folded }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tool's shader formula, valid while the padding is shorter than the side.
    fn shader(p: i64, length: i64) -> i64 {
        (length - 1) - ((p.abs()) - (length - 1)).abs()
    }

    #[test]
    fn reflection_is_the_tools_where_it_reads_inside_the_frame_and_folds_beyond() {
        // At most 19 px before (4x) and 20 after (4x: 19 + 1; 3x: 14 + 3): the shader reads inside from 21 px up.
        for length in [21, 33, 64] {
            for p in -19..length + 20 {
                assert_eq!(reflect(p, length), shader(p, length), "p {p} in {length}");
            }
        }
        let folded: Vec<i64> = (-5..8).map(|p| reflect(p, 3)).collect();
        assert_eq!(folded, [1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1]);
        assert!((-19..40).all(|p| reflect(p, 1) == 0));
    }

    #[test]
    fn padding_rounds_the_bottom_and_right_up_to_the_multiple() {
        let frame = Tensor::arange(7 * 10, (Kind::Float, Device::Cpu)).view([1, 1, 7, 10]);
        for (scale, expected) in [(2, [7 + 36 + 1, 10 + 36]), (3, [7 + 28 + 1, 10 + 28 + 2]), (4, [7 + 38 + 1, 10 + 38])] {
            let padded = AroundNetwork::for_scale(scale).unwrap().pad(&frame);
            assert_eq!(padded.size()[2..], expected, "x{scale}");
        }
        assert!(AroundNetwork::for_scale(5).is_none());
    }
}
