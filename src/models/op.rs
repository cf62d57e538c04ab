//! The operations a job can ask of a model; each model lists the ones it can do.
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Upscale,
    VaeEncode,
    VaeDecode,
    VaeReconstruct,
    /// SeedVR2 one-step restoration: video → VAE encode → DiT → VAE decode → colour fix → video.
    Restore,
    /// Frame interpolation (RIFE): the frames between the input's, at `factor` times its rate or at `fps`.
    Interpolate,
}

impl Op {
    pub const ALL: [Op; 6] = [Op::Upscale, Op::VaeEncode, Op::VaeDecode, Op::VaeReconstruct, Op::Restore, Op::Interpolate];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Upscale => "upscale",
            Op::VaeEncode => "vae_encode",
            Op::VaeDecode => "vae_decode",
            Op::VaeReconstruct => "vae_reconstruct",
            Op::Restore => "restore",
            Op::Interpolate => "interpolate",
        }
    }

    /// Its input is a latent file (else a video or a picture): what the upload is checked as and sized by.
    pub fn reads_latent(self) -> bool {
        match self {
            Op::VaeDecode => true,
            Op::Upscale | Op::VaeEncode | Op::VaeReconstruct | Op::Restore | Op::Interpolate => false,
        }
    }

    /// The scale a job of this op gets when it names none (`None`: the op has no scale). The one place
    /// these defaults are written: the checks before queueing fill them in, so a queued job always has it.
    pub fn default_scale(self) -> Option<i64> {
        match self {
            Op::Upscale => Some(4),
            Op::Restore => Some(2),
            Op::VaeEncode | Op::VaeDecode | Op::VaeReconstruct | Op::Interpolate => None,
        }
    }

    /// The scale a job runs at: the one it gave, else the op's default; 1 for ops without a scale.
    pub fn scale_or_default(self, given: Option<i64>) -> i64 {
        given.or(self.default_scale()).unwrap_or(1)
    }

    pub fn parse(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ALL` is a list the compiler does not check: a variant left out of it could not be parsed, named in
    /// the document or given parameters. The schema derived from the enum itself names every variant.
    #[test]
    fn all_lists_every_variant() {
        let schema = serde_json::to_value(<Op as utoipa::PartialSchema>::schema()).unwrap();
        let listed: Vec<&str> = Op::ALL.iter().map(|op| op.as_str()).collect();
        assert_eq!(schema["enum"], serde_json::json!(listed));
    }
}
