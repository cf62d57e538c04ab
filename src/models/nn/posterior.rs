//! A VAE encoder's diagonal Gaussian, as SeedVR2's VAE gives it (and diffusers' `DiagonalGaussianDistribution`).
use tch::Tensor;

use crate::models::ModelError;

/// The encoder's diagonal Gaussian: raw (unscaled) mean and log-variance, each `[B, latent, t, h, w]`.
#[derive(Debug)]
pub struct Posterior {
    pub mean: Tensor,
    /// Clamped to [-30, 20] like diffusers' `DiagonalGaussianDistribution`.
    pub logvar: Tensor,
}

impl Posterior {
    /// Splits the encoder output `[B, 2·latent, …]` into mean | log-variance.
    pub(crate) fn from_moments(moments: &Tensor, latent_channels: i64) -> Result<Self, ModelError> {
        Ok(Self {
            mean: moments.f_narrow(1, 0, latent_channels)?,
            logvar: moments.f_narrow(1, latent_channels, latent_channels)?.f_clamp(-30.0, 20.0)?,
        })
    }

    /// The deterministic latent (what the reference decodes).
    pub fn mode(&self) -> &Tensor {
        &self.mean
    }

    /// `mean + exp(logvar / 2) · ε`, what SeedVR2's pipeline uses by default.
    pub fn sample(&self) -> Result<Tensor, ModelError> {
        let std = self.logvar.f_mul_scalar(0.5)?.f_exp()?;
        Ok(self.mean.f_add(&std.f_mul(&self.mean.f_randn_like()?)?)?)
    }

    pub(crate) fn cat(parts: &[Posterior]) -> Result<Self, ModelError> {
        Ok(Self {
            mean: Tensor::f_cat(&parts.iter().map(|p| &p.mean).collect::<Vec<_>>(), 2)?,
            logvar: Tensor::f_cat(&parts.iter().map(|p| &p.logvar).collect::<Vec<_>>(), 2)?,
        })
    }
}
