//! IFNet_HDv3.py's `IFNet.forward` at inference (`training=False`), and only what `Model.inference` returns
//! (`merged[2]`): three blocks refine a flow pair and a mask from coarse to fine (at 4/scale, 2/scale,
//! 1/scale of the frame); each sees both frames warped by the flow so far, once as (0, 1) and once swapped,
//! and the two answers are averaged; the frame is the two warped frames blended by the sigmoid of the mask.
//! The fourth block in the file (`block_tea`, the teacher) is used in training only.
use tch::{Kind, TchError, Tensor};

use super::ifblock::IfBlock;
use super::warp::{base_grid, warp};
use crate::models::nn::weights::Weights;
use crate::models::ModelError;

pub struct IfNet {
    blocks: [IfBlock; 3],
}

impl IfNet {
    pub fn new(weights: &Weights, channels_last: bool) -> Result<Self, ModelError> {
        let block = |name: &str| IfBlock::new(&weights.root().pp(name), channels_last);
        Ok(Self { blocks: [block("block0")?, block("block1")?, block("block2")?] })
    }

    /// `Model.inference(img0, img1, scale)`: frames `[N,3,H,W]` Float, sides multiples of
    /// `frame::padding_multiple(scale)` → the middle frame `[N,3,H,W]` Float, unclamped.
    pub fn middle(&self, img0: &Tensor, img1: &Tensor, scale: f64) -> Result<Tensor, TchError> {
        let scales = [4.0 / scale, 2.0 / scale, 1.0 / scale];
        let [n, _, height, width] = img0.size()[..] else { unreachable!("frames are checked to be 4-D") };
        let device = img0.device();
        let grid = base_grid(n, height, width, device)?;
        let mut flow = Tensor::f_zeros([n, 4, height, width], (Kind::Float, device))?;
        let mut mask = Tensor::f_zeros([n, 1, height, width], (Kind::Float, device))?;
        let (mut warped0, mut warped1) = (img0.shallow_clone(), img1.shallow_clone());
        for (block, &scale) in self.blocks.iter().zip(&scales) {
            let (f0, m0) = block.forward(&Tensor::f_cat(&[&warped0, &warped1, &mask], 1)?, &flow, scale)?;
            let (f1, m1) = block.forward(&Tensor::f_cat(&[&warped1, &warped0, &mask.f_neg()?], 1)?, &swap_pair(&flow)?, scale)?;
            // flow = flow + (f0 + cat(f1[2:4], f1[:2])) / 2;  mask = mask + (m0 + (-m1)) / 2
            flow = flow.f_add(&f0.f_add(&swap_pair(&f1)?)?.f_div_scalar(2.0)?)?;
            mask = mask.f_add(&m0.f_add(&m1.f_neg()?)?.f_div_scalar(2.0)?)?;
            warped0 = warp(img0, &flow.f_narrow(1, 0, 2)?, &grid)?;
            warped1 = warp(img1, &flow.f_narrow(1, 2, 2)?, &grid)?;
        }
        let weight0 = mask.f_sigmoid()?;
        let weight1 = weight0.f_neg()?.f_add_scalar(1.0)?;
        warped0.f_mul(&weight0)?.f_add(&warped1.f_mul(&weight1)?)
    }
}

/// The flow pair seen from the other frame: `cat(flow[:, 2:4], flow[:, :2])`.
fn swap_pair(flow: &Tensor) -> Result<Tensor, TchError> {
    Tensor::f_cat(&[flow.f_narrow(1, 2, 2)?, flow.f_narrow(1, 0, 2)?], 1)
}
