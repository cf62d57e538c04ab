//! Wan 2.2's residual level blocks: the whole level (resnets + resampler) gets a parameter-free
//! shortcut that reshapes pixels into channels (average-down) or channels into pixels (duplicate-up).
use tch::Tensor;

use super::blocks::ResidualBlock;
use super::cache::{FeatureCache, SlotAllocator};
use super::resample::{Resample, ResampleMode};
use super::weights::WeightPath;
use crate::models::ModelError;

/// Space/time-to-channel shortcut: groups `factor_t × factor_s × factor_s` neighbours into channels, then
/// averages groups of channels down to `out_channels`.
#[derive(Debug)]
struct AverageDown {
    out_channels: i64,
    factor_t: i64,
    factor_s: i64,
}

impl AverageDown {
    fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        let (ft, fs) = (self.factor_t, self.factor_s);
        // Chunk-local front padding: a first chunk of one frame gets one zero frame in front.
        let pad_t = (ft - x.size()[2] % ft) % ft;
        let x = x.f_constant_pad_nd([0, 0, 0, 0, pad_t, 0])?;
        let (b, c, t, h, w) = x.size5()?;
        let grouped = x
            .f_reshape([b, c, t / ft, ft, h / fs, fs, w / fs, fs])?
            .f_permute([0, 1, 3, 5, 7, 2, 4, 6])?
            .f_reshape([b, self.out_channels, c * ft * fs * fs / self.out_channels, t / ft, h / fs, w / fs])?;
        Ok(grouped.f_mean_dim(&[2i64][..], false, None)?)
    }
}

/// Channel-to-space/time shortcut, the inverse layout of [`AverageDown`] with repeated channels.
#[derive(Debug)]
struct DuplicateUp {
    out_channels: i64,
    repeats: i64,
    factor_t: i64,
    factor_s: i64,
}

impl DuplicateUp {
    fn forward(&self, x: &Tensor, first_chunk: bool) -> Result<Tensor, ModelError> {
        let (ft, fs) = (self.factor_t, self.factor_s);
        let x = x.f_repeat_interleave_self_int(self.repeats, 1, None)?;
        let (b, _, t, h, w) = x.size5()?;
        let x = x
            .f_reshape([b, self.out_channels, ft, fs, fs, t, h, w])?
            .f_permute([0, 1, 5, 2, 6, 3, 7, 4])?
            .f_reshape([b, self.out_channels, t * ft, h * fs, w * fs])?;
        // The first latent frame yields one frame, like the temporal upsampler beside it.
        Ok(if first_chunk && ft > 1 { x.f_narrow(2, ft - 1, t * ft - (ft - 1))? } else { x })
    }
}

/// One encoder level of Wan 2.2: resnets, then the downsampler, plus the average-down shortcut.
#[derive(Debug)]
pub struct ResidualDownBlock {
    shortcut: AverageDown,
    resnets: Vec<ResidualBlock>,
    downsampler: Option<Resample>,
}

/// Where one residual level sits: widths, depth and which resampling it does.
#[derive(Debug, Clone, Copy)]
pub struct LevelSpec {
    pub in_channels: i64,
    pub out_channels: i64,
    pub res_blocks: usize,
    /// Spatial ×2 resampling (every level but the last).
    pub resample: bool,
    pub temporal: bool,
}

/// `resnets.0..n`: the first maps the level's input width to its output width, the rest keep it.
fn resnet_chain(vp: &WeightPath, level: &LevelSpec, slots: &mut SlotAllocator) -> Result<Vec<ResidualBlock>, ModelError> {
    (0..level.res_blocks)
        .map(|j| {
            let in_dim = if j == 0 { level.in_channels } else { level.out_channels };
            ResidualBlock::new(&vp.pp(format!("resnets.{j}")), in_dim, level.out_channels, slots)
        })
        .collect()
}

impl ResidualDownBlock {
    pub fn new(vp: &WeightPath, level: &LevelSpec, slots: &mut SlotAllocator) -> Result<Self, ModelError> {
        let resnets = resnet_chain(vp, level, slots)?;
        let downsampler = if level.resample {
            let mode = if level.temporal { ResampleMode::Down3d } else { ResampleMode::Down2d };
            Some(Resample::new(&vp.pp("downsampler"), level.out_channels, level.out_channels, mode, slots)?)
        } else {
            None
        };
        let shortcut = AverageDown {
            out_channels: level.out_channels,
            factor_t: if level.resample && level.temporal { 2 } else { 1 },
            factor_s: if level.resample { 2 } else { 1 },
        };
        Ok(Self { shortcut, resnets, downsampler })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let mut h = x.shallow_clone();
        for resnet in &self.resnets {
            h = resnet.forward(&h, cache)?;
        }
        if let Some(downsampler) = &self.downsampler {
            h = downsampler.forward(&h, cache)?;
        }
        Ok(h.f_add(&self.shortcut.forward(x)?)?)
    }
}

/// One decoder level of Wan 2.2: resnets, then an upsampler that keeps channels, plus the duplicate-up shortcut.
#[derive(Debug)]
pub struct ResidualUpBlock {
    shortcut: Option<DuplicateUp>,
    resnets: Vec<ResidualBlock>,
    upsampler: Option<Resample>,
}

impl ResidualUpBlock {
    pub fn new(vp: &WeightPath, level: &LevelSpec, slots: &mut SlotAllocator) -> Result<Self, ModelError> {
        let resnets = resnet_chain(vp, level, slots)?;
        let (upsampler, shortcut) = if level.resample {
            let mode = if level.temporal { ResampleMode::Up3d } else { ResampleMode::Up2d };
            let factor_t = if level.temporal { 2 } else { 1 };
            let factor_s = 2;
            let shortcut = DuplicateUp {
                out_channels: level.out_channels,
                repeats: level.out_channels * factor_t * factor_s * factor_s / level.in_channels,
                factor_t,
                factor_s,
            };
            (Some(Resample::new(&vp.pp("upsampler"), level.out_channels, level.out_channels, mode, slots)?), Some(shortcut))
        } else {
            (None, None)
        };
        Ok(Self { shortcut, resnets, upsampler })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let first_chunk = cache.is_first_chunk();
        let mut h = x.shallow_clone();
        for resnet in &self.resnets {
            h = resnet.forward(&h, cache)?;
        }
        if let Some(upsampler) = &self.upsampler {
            h = upsampler.forward(&h, cache)?;
        }
        match &self.shortcut {
            Some(shortcut) => Ok(h.f_add(&shortcut.forward(x, first_chunk)?)?),
            None => Ok(h),
        }
    }
}
