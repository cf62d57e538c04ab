//! SeedVR2's one-step restoration of one temporal batch: VAE encode (posterior sample), one DiT call at
//! t = 1000 on `[noise | condition | mask]`, `x0 = noise − v`, VAE decode, colour fix. The batch is
//! already resized, cropped, in [-1, 1] and padded to `4n + 1` frames (see `prepare`).
use std::time::Instant;

use tch::{Device, Kind, Tensor};

use super::colorfix::ColorFix;
use super::dit_tiles::{tiled_velocity, DitTile};
use super::noise_augment::{noised_condition, noised_input, NoiseScales};
use crate::models::nn::posterior::Posterior;
use crate::models::seedvr2::{SeedVr2Vae, SEEDVR2_SCALING_FACTOR};
use crate::models::seedvr2_dit::{DitInput, SeedVr2Dit};
use crate::models::stop::StopFlag;
use crate::models::ModelError;

/// The one sampler step: `uniform_trailing` with one step and shift 1.0 gives only t = T = 1000.
pub const ONE_STEP_TIMESTEP: f64 = 1000.0;

pub struct RestoreModels<'a> {
    pub dit: &'a SeedVr2Dit,
    /// `pos_emb` `[L, 5120]`: the shipped positive prompt (with `cfg_scale = 1` only it is used).
    pub text: &'a Tensor,
}

/// The VAE half of a step. Whole batches at once here ([`WholeBatches`]); the executor streams them
/// through its tiled, memory-planned, out-of-memory-resilient streams instead.
pub trait BatchVae {
    type Error: From<ModelError>;
    fn device(&self) -> Device;
    fn kind(&self) -> Kind;
    /// `[1, 3, T, H, W]` in [-1, 1] (`T = 4n + 1`) → the posterior, `[1, C, n + 1, H/8, W/8]` each.
    fn encode(&mut self, video: &Tensor) -> Result<Posterior, Self::Error>;
    /// Raw latents `[1, C, t, h, w]` → pixel frames `[1, 3, 4t − 3, 8h, 8w]`, unclamped.
    fn decode(&mut self, latent: &Tensor) -> Result<Tensor, Self::Error>;
}

/// The SeedVR2 VAE on the whole batch in one call, as the original's pipeline does.
pub struct WholeBatches<'a>(pub &'a SeedVr2Vae);

impl BatchVae for WholeBatches<'_> {
    type Error = ModelError;

    fn device(&self) -> Device {
        self.0.device()
    }

    fn kind(&self) -> Kind {
        self.0.kind()
    }

    fn encode(&mut self, video: &Tensor) -> Result<Posterior, ModelError> {
        self.0.encode(video)
    }

    fn decode(&mut self, latent: &Tensor) -> Result<Tensor, ModelError> {
        self.0.decode(latent)
    }
}

/// One batch to restore.
pub struct RestoreStep<'a> {
    /// `[3, T, H, W]` in [-1, 1] with `T = 4n + 1`.
    pub input: &'a Tensor,
    /// The first `keep` frames are the real ones (the rest repeat the last) and are what comes out.
    pub keep: i64,
    /// `[rows, columns]` of the real picture at the frames' top left (`Fit::Pad`): the rest is padding,
    /// cut off before the colour fix so that it sees the picture only. `None`: all of it.
    pub keep_size: Option<[i64; 2]>,
    pub color_fix: ColorFix,
    pub noise: Noise,
    /// The front-end's input and latent noise (0 and 0: none, the original's).
    pub noise_scales: NoiseScales,
}

/// Where the two random draws come from: the seeded generator, or tensors given by a test.
pub enum Noise {
    /// `torch.manual_seed(seed)`, then the input noise (when its scale is not 0), the posterior's ε, the
    /// DiT noise (the original's order), and the latent noise (when its scale is not 0).
    Seeded(i64),
    /// The noise augmentations, when asked for, then draw from the generator as it stands.
    Given { posterior_eps: Tensor, noise: Tensor },
}

pub struct OneStepOutput {
    /// The decoder's output `[3, T_padded, H, W]`, not clamped.
    pub decoded: Tensor,
    /// `keep` frames after the colour fix, `[T, 3, H, W]` (`keep_size` when given), not clamped.
    pub frames: Tensor,
    pub seconds: StageSeconds,
}

/// Wall-clock seconds of each stage (on CUDA after a synchronisation, so work is not billed to the next).
#[derive(Debug, Clone, Copy, Default)]
pub struct StageSeconds {
    pub encode: f64,
    pub dit: f64,
    pub decode: f64,
    pub color_fix: f64,
}

impl StageSeconds {
    pub fn add(&mut self, other: &StageSeconds) {
        self.encode += other.encode;
        self.dit += other.dit;
        self.decode += other.decode;
        self.color_fix += other.color_fix;
    }

    pub fn total(&self) -> f64 {
        self.encode + self.dit + self.decode + self.color_fix
    }
}

/// Times `work`, waiting for the device first so queued kernels count where they belong.
fn timed<T>(device: Device, slot: &mut f64, work: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = work();
    crate::device::cuda::synchronize(device);
    *slot += started.elapsed().as_secs_f64();
    out
}

/// The stages of one batch, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Encode,
    Dit,
    Decode,
    ColorFix,
}

impl Stage {
    pub const ALL: [Stage; 4] = [Stage::Encode, Stage::Dit, Stage::Decode, Stage::ColorFix];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Encode => "encode",
            Stage::Dit => "dit",
            Stage::Decode => "decode",
            Stage::ColorFix => "color_fix",
        }
    }

    /// This stage's seconds in `seconds`.
    pub fn of(self, seconds: &StageSeconds) -> f64 {
        match self {
            Stage::Encode => seconds.encode,
            Stage::Dit => seconds.dit,
            Stage::Decode => seconds.decode,
            Stage::ColorFix => seconds.color_fix,
        }
    }
}

/// The kept frames come out colour-fixed against the same input frames.
pub fn restore<V: BatchVae>(vae: &mut V, models: &RestoreModels, step: RestoreStep) -> Result<OneStepOutput, V::Error> {
    restore_in_stages(vae, models, step, &mut |_| {})
}

/// [`restore`], telling `starting` as each stage begins (for progress).
pub fn restore_in_stages<V: BatchVae>(vae: &mut V, models: &RestoreModels, step: RestoreStep, starting: &mut dyn FnMut(Stage)) -> Result<OneStepOutput, V::Error> {
    restore_tiled_in_stages(vae, models, step, &[], starting)
}

/// [`restore_in_stages`] with the DiT run over `dit_tiles` of the latent (none: the whole latent in one
/// call). Only the DiT is tiled: the noise is drawn for the whole latent first, as untiled.
pub fn restore_tiled_in_stages<V: BatchVae>(vae: &mut V, models: &RestoreModels, step: RestoreStep, dit_tiles: &[DitTile], starting: &mut dyn FnMut(Stage)) -> Result<OneStepOutput, V::Error> {
    restore_tiled_in_stages_until(vae, models, step, dit_tiles, starting, &StopFlag::never())
}

/// [`restore_tiled_in_stages`] asking `stop` before each stage and between the DiT's tiles and blocks
/// (`ModelError::Stopped`); the VAE's streams carry their own stop (a job's `StreamedVae`).
pub fn restore_tiled_in_stages_until<V: BatchVae>(
    vae: &mut V,
    models: &RestoreModels,
    step: RestoreStep,
    dit_tiles: &[DitTile],
    starting: &mut dyn FnMut(Stage),
    stop: &StopFlag,
) -> Result<OneStepOutput, V::Error> {
    let _guard = tch::no_grad_guard();
    let RestoreStep { input, keep, keep_size, color_fix, noise, noise_scales } = step;
    let mut seconds = StageSeconds::default();
    let (vae_kind, device) = (vae.kind(), vae.device());
    if let Noise::Seeded(seed) = noise {
        // The encoder draws nothing, so seeding before it leaves ε and the noise as the original's.
        tch::manual_seed(seed);
    }
    stop.check()?;
    starting(Stage::Encode);
    let posterior = timed(device, &mut seconds.encode, || {
        let encoder_input = noised_input(&input.to_device(device).to_kind(Kind::Float), noise_scales.input);
        vae.encode(&encoder_input.to_kind(vae_kind).unsqueeze(0))
    })?;
    let (mean, logvar) = (posterior.mean.to_kind(Kind::Float), posterior.logvar.to_kind(Kind::Float));
    let (eps, noise_cthw) = match noise {
        Noise::Seeded(_) => {
            let eps = mean.randn_like();
            (eps, mean.squeeze_dim(0).randn_like())
        }
        Noise::Given { posterior_eps, noise } => (posterior_eps.to_device(device), noise.to_device(device).permute([3, 0, 1, 2])),
    };
    let sample = &mean + (&logvar * 0.5).exp() * eps.to_kind(Kind::Float);
    // [1, C, t, h, w] → [t, h, w, C], scaled as the pipeline's condition.
    let condition = sample.squeeze_dim(0).permute([1, 2, 3, 0]) * SEEDVR2_SCALING_FACTOR;
    let noise_thwc = noise_cthw.to_kind(Kind::Float).permute([1, 2, 3, 0]);
    let condition = noised_condition(&condition, &noise_thwc, noise_scales.latent);
    let [t, h, w, c] = <[i64; 4]>::try_from(condition.size()).expect("4-D condition");
    let mask = Tensor::ones([t, h, w, 1], (Kind::Float, condition.device()));
    let tokens = Tensor::cat(&[&noise_thwc, &condition, &mask], -1);
    let vid = tokens.reshape([t * h * w, -1]);
    let dit_input = DitInput { vid: &vid, grid: [t, h, w], txt: models.text, timestep: ONE_STEP_TIMESTEP };
    stop.check()?;
    starting(Stage::Dit);
    let velocity = timed(device, &mut seconds.dit, || {
        if !dit_tiles.is_empty() {
            return tiled_velocity(models.dit, &tokens, models.text, ONE_STEP_TIMESTEP, dit_tiles, stop);
        }
        let _heap = crate::device::HeapReuse::for_call();
        models.dit.forward_until(&dit_input, stop)
    })?;
    // v_lerp prediction at t = T: x0 = noise − v.
    let x0 = noise_thwc - velocity.to_kind(Kind::Float).to_device(condition.device()).view([t, h, w, c]);
    let latent = (x0 / SEEDVR2_SCALING_FACTOR).permute([3, 0, 1, 2]).unsqueeze(0);
    stop.check()?;
    starting(Stage::Decode);
    let decoded = timed(device, &mut seconds.decode, || vae.decode(&latent.to_kind(vae_kind)))?.squeeze_dim(0).to_kind(Kind::Float);
    starting(Stage::ColorFix);
    let frames = timed(device, &mut seconds.color_fix, || {
        let picture = |frames: &Tensor| match keep_size {
            Some([rows, columns]) => frames.narrow(2, 0, rows).narrow(3, 0, columns),
            None => frames.shallow_clone(),
        };
        let sample = picture(&decoded.narrow(1, 0, keep)).transpose(0, 1);
        // The clean input: the input noise is not the colour the frames should get.
        let reference = picture(&input.to_device(sample.device()).to_kind(Kind::Float).narrow(1, 0, keep)).transpose(0, 1);
        color_fix.apply(&sample, &reference)
    })?;
    Ok(OneStepOutput { decoded, frames, seconds })
}
