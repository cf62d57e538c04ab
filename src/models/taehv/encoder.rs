//! The encoder (`encoder.N`, the same in every variant): conv from 3·p² channels and ReLU, three stages of
//! TPool, stride-2 conv and three MemBlocks, and a last conv to the latent channels.
use super::blocks::{Conv2d, ConvSpec, MemBlock, TPool};
use super::chain::{Chain, Layer};
use super::config::{TaehvConfig, ENCODER_OUT, ENCODER_POOLS};
use super::weights::WeightPath;
use crate::models::ModelError;

const MEM_BLOCKS_PER_STAGE: usize = 3;

pub fn build(path: &WeightPath, config: &TaehvConfig) -> Result<Chain, ModelError> {
    let width = config.encoder_width;
    let mut layers = vec![Layer::Conv(Conv2d::new(&path.pp(0), ConvSpec::conv3(config.patch_channels(), width))?), Layer::Relu];
    for (stage, &pool_at) in ENCODER_POOLS.iter().enumerate() {
        let stride = if config.encoder_time_downscale[stage] { 2 } else { 1 };
        layers.push(Layer::Pool(TPool::new(&path.pp(pool_at), width, stride)?));
        layers.push(Layer::Conv(Conv2d::new(&path.pp(pool_at + 1), ConvSpec::conv3(width, width).strided(2).without_bias())?));
        for block in 0..MEM_BLOCKS_PER_STAGE {
            layers.push(Layer::Mem(MemBlock::new(&path.pp(pool_at + 2 + block), width)?));
        }
    }
    debug_assert_eq!(layers.len(), ENCODER_OUT);
    layers.push(Layer::Conv(Conv2d::new(&path.pp(ENCODER_OUT), ConvSpec::conv3(width, config.latent_channels))?));
    Chain::new("encoder", layers)
}
