//! The operations a job can ask of a model; each model lists the ones it can do. What each op is — what it
//! reads and writes, how big its output gets, what it names it, what device memory it holds — is written
//! once, in its [`OpSpec`]: the queue's checks, the executor and the CLI read that. A new op (tried with a
//! scratch `denoise` op that ran through the CLI and the HTTP API) is five Rust files: its variant and spec
//! here, which the compiler then asks for in `queue/parameters/table.rs` (its parameters) and
//! `executor/mod.rs` (its dispatch); its executor file; and its plan, one line of `typed_plans!` in
//! `jobs/plan.rs`, whose `frames` match the compiler then names. The page adds its label
//! (`static/js/form-choices.js`).
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::family::ModelKind;

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

/// The model an `upscale` job without one gets (Real-ESRGAN's small video model, built in).
pub const DEFAULT_UPSCALE_MODEL: &str = "realesrgan-animevideov3";

/// One op, as everything outside its executor sees it.
#[derive(Debug, PartialEq, Eq)]
pub struct OpSpec {
    /// Its name in the API, the CLI, job rows and file names.
    pub name: &'static str,
    pub reads: Reads,
    pub writes: Writes,
    /// The scale a job gets when it names none; `None`: the op has no scale (a scale given is dropped). The one
    /// place these defaults are written: the checks before queueing fill them in, so a queued job has it.
    pub default_scale: Option<i64>,
    /// The kind of model that does it: every model of that kind lists the op.
    pub done_by: ModelKind,
    /// The model a job without one gets; `None`: the one model of this box that can do the op.
    pub default_model: Option<&'static str>,
    /// The output's width and height, from the input's.
    pub size: OutputSize,
    /// Whether it writes frames at another rate than the input's (its `interpolate` settings).
    pub retimes: Retimes,
    /// What its output file is called, after the input's stem.
    pub output_name: OutputName,
    /// What stays on the device while it runs, beside the working memory asked for.
    pub device_need: DeviceNeed,
    /// Settings of its own that are checked (files looked up) before it is queued.
    pub own_settings: Option<OwnSettings>,
    /// The VAE pipeline it runs; `None` for an op that is no VAE pipeline.
    pub vae: Option<VaeOp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// A video, a still picture, a zip of PNG frames or a pixel tensor.
    Media,
    /// A latent file (safetensors): what the upload is checked as and sized by.
    Latent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    /// A latent file (`NAME.latent.safetensors`); it takes no output format.
    Latent,
    /// Frames in the job's output format. `stills`: a still picture in is written as a PNG; `pixel_tensor`:
    /// it may write its frames as a safetensors tensor (`output_format=safetensors`).
    Video { stills: bool, pixel_tensor: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputSize {
    /// No larger than the input, which the input limits already admitted (nothing is checked).
    NoLarger,
    /// The input's size.
    Same,
    /// The input's size times the job's scale.
    Scaled,
    /// The restoration's target, from its own settings (`models::restore::prepare::target_size`).
    RestoreTarget,
    /// A latent's cells times its VAE's spatial and temporal factors.
    DecodedLatent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retimes {
    /// The input's frames, at its rate.
    Never,
    /// Always at another rate (its `interpolate` settings, defaults filled in).
    Always,
    /// Only when the job asks (`interpolate=`), which needs an interpolator on the box.
    WhenAsked,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputName {
    /// `in.mp4` → `in{suffix}.mp4` (the extension is the output's).
    Suffix(&'static str),
    /// `in_x4.mp4`, and `in_x4_x2fps.mp4` when it interpolates by a factor too.
    Scale,
    /// `in_x2fps.mp4` for a factor, `in_60000-1001fps.mp4` for a rate.
    Rate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceNeed {
    /// The model's own checkpoint files.
    ModelFiles,
    /// The DiT's VAE's files: its blocks can stream from host memory (its own files too with
    /// `dit_block_swap = "never"`).
    PairedVae,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnSettings {
    /// `RestoreSettings`, and the VAE and text embeddings it names.
    Restore,
}

/// The VAE pipelines (`executor::vae`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VaeOp {
    Encode,
    Decode,
    Reconstruct,
}

impl VaeOp {
    /// The stage its progress shows.
    pub fn stage(self) -> &'static str {
        match self {
            VaeOp::Encode => "encode",
            VaeOp::Decode => "decode",
            VaeOp::Reconstruct => "reconstruct",
        }
    }
}

// Every field spelt out in every spec (no `..BASE`): a new op's spec does not compile until it says each.
const UPSCALE: OpSpec = OpSpec {
    name: "upscale",
    reads: Reads::Media,
    writes: Writes::Video { stills: true, pixel_tensor: false },
    default_scale: Some(4),
    done_by: ModelKind::Upscaler,
    default_model: Some(DEFAULT_UPSCALE_MODEL),
    size: OutputSize::Scaled,
    retimes: Retimes::WhenAsked,
    output_name: OutputName::Scale,
    device_need: DeviceNeed::ModelFiles,
    own_settings: None,
    vae: None,
};

const VAE_ENCODE: OpSpec = OpSpec {
    name: "vae_encode",
    reads: Reads::Media,
    writes: Writes::Latent,
    default_scale: None,
    done_by: ModelKind::Vae,
    default_model: None,
    size: OutputSize::NoLarger,
    retimes: Retimes::Never,
    output_name: OutputName::Suffix(""),
    device_need: DeviceNeed::ModelFiles,
    own_settings: None,
    vae: Some(VaeOp::Encode),
};

const VAE_DECODE: OpSpec = OpSpec {
    name: "vae_decode",
    reads: Reads::Latent,
    writes: Writes::Video { stills: false, pixel_tensor: true },
    default_scale: None,
    done_by: ModelKind::Vae,
    default_model: None,
    size: OutputSize::DecodedLatent,
    retimes: Retimes::Never,
    output_name: OutputName::Suffix("_decoded"),
    device_need: DeviceNeed::ModelFiles,
    own_settings: None,
    vae: Some(VaeOp::Decode),
};

const VAE_RECONSTRUCT: OpSpec = OpSpec {
    name: "vae_reconstruct",
    reads: Reads::Media,
    writes: Writes::Video { stills: false, pixel_tensor: false },
    default_scale: None,
    done_by: ModelKind::Vae,
    default_model: None,
    size: OutputSize::NoLarger,
    retimes: Retimes::Never,
    output_name: OutputName::Suffix("_reconstructed"),
    device_need: DeviceNeed::ModelFiles,
    own_settings: None,
    vae: Some(VaeOp::Reconstruct),
};

const RESTORE: OpSpec = OpSpec {
    name: "restore",
    reads: Reads::Media,
    writes: Writes::Video { stills: true, pixel_tensor: false },
    default_scale: Some(2),
    done_by: ModelKind::Dit,
    default_model: None,
    size: OutputSize::RestoreTarget,
    retimes: Retimes::Never,
    output_name: OutputName::Suffix("_restored"),
    device_need: DeviceNeed::PairedVae,
    own_settings: Some(OwnSettings::Restore),
    vae: None,
};

const INTERPOLATE: OpSpec = OpSpec {
    name: "interpolate",
    reads: Reads::Media,
    writes: Writes::Video { stills: false, pixel_tensor: false },
    default_scale: None,
    done_by: ModelKind::Interpolator,
    default_model: None,
    size: OutputSize::Same,
    retimes: Retimes::Always,
    output_name: OutputName::Rate,
    device_need: DeviceNeed::ModelFiles,
    own_settings: None,
    vae: None,
};

impl Op {
    pub const ALL: [Op; 6] = [Op::Upscale, Op::VaeEncode, Op::VaeDecode, Op::VaeReconstruct, Op::Restore, Op::Interpolate];

    /// The one match on every op outside its executor's dispatch and its parameters.
    pub const fn spec(self) -> &'static OpSpec {
        match self {
            Op::Upscale => &UPSCALE,
            Op::VaeEncode => &VAE_ENCODE,
            Op::VaeDecode => &VAE_DECODE,
            Op::VaeReconstruct => &VAE_RECONSTRUCT,
            Op::Restore => &RESTORE,
            Op::Interpolate => &INTERPOLATE,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.spec().name
    }

    /// Its input is a latent file (else a video or a picture): what the upload is checked as and sized by.
    pub fn reads_latent(self) -> bool {
        self.spec().reads == Reads::Latent
    }

    /// The scale a job of this op gets when it names none (`None`: the op has no scale).
    pub fn default_scale(self) -> Option<i64> {
        self.spec().default_scale
    }

    /// The scale a job runs at: the one it gave, else the op's default; 1 for ops without a scale.
    pub fn scale_or_default(self, given: Option<i64>) -> i64 {
        given.or(self.default_scale()).unwrap_or(1)
    }

    /// The ops a model of `kind` can do, in `ALL`'s order (as `GET /v1/models` lists them).
    pub fn done_by(kind: ModelKind) -> Vec<Op> {
        Op::ALL.into_iter().filter(|op| op.spec().done_by == kind).collect()
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

    /// What each kind of model is listed as doing in `GET /v1/models`.
    #[test]
    fn each_kind_of_model_does_its_ops() {
        assert_eq!(Op::done_by(ModelKind::Upscaler), [Op::Upscale]);
        assert_eq!(Op::done_by(ModelKind::Vae), [Op::VaeEncode, Op::VaeDecode, Op::VaeReconstruct]);
        assert_eq!(Op::done_by(ModelKind::Dit), [Op::Restore]);
        assert_eq!(Op::done_by(ModelKind::Interpolator), [Op::Interpolate]);
    }

    /// The names are what serde writes (job rows, the API); two specs sharing one would make one op unreachable.
    #[test]
    fn each_spec_is_named_as_serde_names_its_op() {
        for op in Op::ALL {
            assert_eq!(serde_json::to_value(op).unwrap(), serde_json::json!(op.spec().name));
            assert_eq!(Op::ALL.iter().filter(|other| other.spec() == op.spec()).count(), 1, "{op:?}");
        }
    }
}
