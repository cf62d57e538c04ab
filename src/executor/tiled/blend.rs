//! Sums the weighted tiles of a [`TileBlender`](crate::tiling::blend::TileBlender) layout into one
//! output; the weights themselves are planned in `tiling::blend`.
use tch::{Kind, Tensor};

use crate::models::ModelError;
use crate::tiling::blend::BlendTile;

/// Sums weighted tiles `[B, C, n, h, w]` into one Float `[B, C, n, H, W]` output.
pub struct BlendAccumulator {
    sum: Tensor,
}

impl BlendAccumulator {
    pub fn new(like: &Tensor, height: i64, width: i64) -> BlendAccumulator {
        let size = like.size();
        let sum = Tensor::zeros([size[0], size[1], size[2], height, width], (Kind::Float, like.device()));
        BlendAccumulator { sum }
    }

    pub fn add(&mut self, tile_output: &Tensor, tile: &BlendTile) -> Result<(), ModelError> {
        // Weights live where the layout was made; a no-op when that is the output's device already.
        let weighted = tile_output.f_to_kind(Kind::Float)?.f_mul(&tile.weight.f_to_device(self.sum.device())?)?;
        let _ = self
            .sum
            .f_narrow(3, tile.rows.start, tile.rows.len())?
            .f_narrow(4, tile.cols.start, tile.cols.len())?
            .f_add_(&weighted)?;
        Ok(())
    }

    pub fn finish(self) -> Tensor {
        self.sum
    }
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use super::*;
    use crate::tiling::blend::TileBlender;
    use crate::tiling::spatial::Span;

    fn span(start: i64, end: i64) -> Span {
        Span { start, end }
    }

    #[test]
    fn normalised_weights_sum_to_one_everywhere() {
        let rows = [span(0, 80), span(48, 128)];
        let cols = [span(0, 80), span(32, 112), span(72, 152), span(112, 192)];
        let blender = TileBlender::new(&rows, &cols, Device::Cpu);
        assert!(blender.kept().iter().all(|&k| k));
        let mut acc = BlendAccumulator::new(&Tensor::ones([1, 2, 3, 1, 1], (Kind::Float, Device::Cpu)), 128, 192);
        for i in 0..8 {
            let tile = blender.tile(i).unwrap();
            acc.add(&Tensor::ones([1, 2, 3, tile.rows.len(), tile.cols.len()], (Kind::Float, Device::Cpu)), tile).unwrap();
        }
        let out = acc.finish();
        let deviation = (out - 1.0).abs().max().double_value(&[]);
        assert!(deviation < 1e-6, "{deviation}");
    }
}
