//! The two decoders (`decoder.N`). Base: soft clamp, conv, ReLU, then per stage three MemBlocks, nearest
//! upsampling, TGrow and a conv to the next width; ReLU and a last conv. Super: a 1×1 conv, then per stage
//! three SuperMemBlocks, a conv widened for PixelShuffle, ReLU, PixelShuffle and TGrow; a last conv.
use super::blocks::{Conv2d, ConvSpec, MemBlock, SuperMemBlock, TGrow};
use super::chain::{Chain, Layer};
use super::config::{DecoderVariant, TaehvConfig, DECODER_OUT};
use super::weights::WeightPath;
use crate::models::ModelError;

const MEM_BLOCKS_PER_STAGE: usize = 3;

pub fn build(path: &WeightPath, config: &TaehvConfig) -> Result<Chain, ModelError> {
    let layers = match config.decoder {
        DecoderVariant::Base => base(path, config)?,
        DecoderVariant::Super => super_decoder(path, config)?,
    };
    Chain::new("decoder", layers)
}

fn stride(on: bool) -> i64 {
    if on { 2 } else { 1 }
}

fn grow(path: &WeightPath, config: &TaehvConfig, stage: usize, n: i64) -> Result<Layer, ModelError> {
    Ok(Layer::Grow(TGrow::new(path, n, stride(config.decoder_time_upscale[stage]), stride(config.checkpoint_time_upscale[stage]))?))
}

fn base(path: &WeightPath, config: &TaehvConfig) -> Result<Vec<Layer>, ModelError> {
    let n = config.decoder_widths;
    let mut layers = vec![Layer::Clamp, Layer::Conv(Conv2d::new(&path.pp(1), ConvSpec::conv3(config.latent_channels, n[0]))?), Layer::Relu];
    for stage in 0..3 {
        for _ in 0..MEM_BLOCKS_PER_STAGE {
            layers.push(Layer::Mem(MemBlock::new(&path.pp(layers.len()), n[stage])?));
        }
        layers.push(Layer::Upsample(stride(config.decoder_space_upscale[stage])));
        layers.push(grow(&path.pp(layers.len()), config, stage, n[stage])?);
        layers.push(Layer::Conv(Conv2d::new(&path.pp(layers.len()), ConvSpec::conv3(n[stage], n[stage + 1]).without_bias())?));
    }
    layers.push(Layer::Relu);
    debug_assert_eq!(layers.len(), DECODER_OUT);
    layers.push(Layer::Conv(Conv2d::new(&path.pp(DECODER_OUT), ConvSpec::conv3(n[3], config.patch_channels()))?));
    Ok(layers)
}

fn super_decoder(path: &WeightPath, config: &TaehvConfig) -> Result<Vec<Layer>, ModelError> {
    let n = config.decoder_widths;
    let mut layers = vec![Layer::Conv(Conv2d::new(&path.pp(0), ConvSpec::pointwise(config.latent_channels, n[0]))?)];
    for stage in 0..3 {
        for _ in 0..MEM_BLOCKS_PER_STAGE {
            layers.push(Layer::SuperMem(SuperMemBlock::new(&path.pp(layers.len()), n[stage])?));
        }
        let space = stride(config.decoder_space_upscale[stage]);
        layers.push(Layer::Conv(Conv2d::new(&path.pp(layers.len()), ConvSpec::conv3(n[stage], n[stage + 1] * space * space))?));
        layers.push(Layer::Relu);
        layers.push(Layer::PixelShuffle(space));
        layers.push(grow(&path.pp(layers.len()), config, stage, n[stage + 1])?);
    }
    debug_assert_eq!(layers.len(), DECODER_OUT);
    layers.push(Layer::Conv(Conv2d::new(&path.pp(DECODER_OUT), ConvSpec::conv3(n[3], config.patch_channels()))?));
    Ok(layers)
}
