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
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Upscale, Op::VaeEncode, Op::VaeDecode, Op::VaeReconstruct, Op::Restore];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Upscale => "upscale",
            Op::VaeEncode => "vae_encode",
            Op::VaeDecode => "vae_decode",
            Op::VaeReconstruct => "vae_reconstruct",
            Op::Restore => "restore",
        }
    }

    pub fn parse(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.as_str() == s)
    }
}
