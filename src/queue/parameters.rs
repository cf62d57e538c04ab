//! Which job parameters each op takes, written once. The API (query, form fields, `params` JSON) and
//! `vaebox run`'s flags both refuse by this table a parameter the job's op would not use (400
//! `parameter-not-for-op`): `op=upscale&seed=3` must not run as if the seed meant something. `op`,
//! `model`, `priority` and `dtype` are every op's and are not listed.
use super::QueueError;
use crate::error_codes as codes;
use crate::models::Op;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpParameter {
    Scale,
    Tile,
    Normalize,
    MemoryBudgetMib,
    OutputFormat,
    KeepAudio,
    Metrics,
    Vae,
    Height,
    Width,
    Seed,
    ColorFix,
    BatchFrames,
    BatchOverlap,
    Factor,
    Fps,
    SceneThreshold,
    Interpolate,
    Resolution,
    MaxResolution,
    Fit,
    InputNoiseScale,
    LatentNoiseScale,
    PrependFrames,
    Start,
    StartFrame,
    Frames,
    Duration,
}

impl OpParameter {
    pub const ALL: [OpParameter; 28] = [
        OpParameter::Scale,
        OpParameter::Tile,
        OpParameter::Normalize,
        OpParameter::MemoryBudgetMib,
        OpParameter::OutputFormat,
        OpParameter::KeepAudio,
        OpParameter::Metrics,
        OpParameter::Vae,
        OpParameter::Height,
        OpParameter::Width,
        OpParameter::Seed,
        OpParameter::ColorFix,
        OpParameter::BatchFrames,
        OpParameter::BatchOverlap,
        OpParameter::Factor,
        OpParameter::Fps,
        OpParameter::SceneThreshold,
        OpParameter::Interpolate,
        OpParameter::Resolution,
        OpParameter::MaxResolution,
        OpParameter::Fit,
        OpParameter::InputNoiseScale,
        OpParameter::LatentNoiseScale,
        OpParameter::PrependFrames,
        OpParameter::Start,
        OpParameter::StartFrame,
        OpParameter::Frames,
        OpParameter::Duration,
    ];

    pub fn parse(name: &str) -> Option<OpParameter> {
        OpParameter::ALL.into_iter().find(|parameter| parameter.name() == name)
    }

    /// The ops that read it, in `Op::ALL`'s order.
    pub fn ops(self) -> Vec<Op> {
        Op::ALL.into_iter().filter(|op| self.is_for(*op)).collect()
    }

    /// The name in the API; `vaebox run`'s flag is the same with dashes.
    pub fn name(self) -> &'static str {
        match self {
            OpParameter::Scale => "scale",
            OpParameter::Tile => "tile",
            OpParameter::Normalize => "normalize",
            OpParameter::MemoryBudgetMib => "memory_budget_mib",
            OpParameter::OutputFormat => "output_format",
            OpParameter::KeepAudio => "keep_audio",
            OpParameter::Metrics => "metrics",
            OpParameter::Vae => "vae",
            OpParameter::Height => "height",
            OpParameter::Width => "width",
            OpParameter::Seed => "seed",
            OpParameter::ColorFix => "color_fix",
            OpParameter::BatchFrames => "batch_frames",
            OpParameter::BatchOverlap => "batch_overlap",
            OpParameter::Factor => "factor",
            OpParameter::Fps => "fps",
            OpParameter::SceneThreshold => "scene_threshold",
            OpParameter::Interpolate => "interpolate",
            OpParameter::Resolution => "resolution",
            OpParameter::MaxResolution => "max_resolution",
            OpParameter::Fit => "fit",
            OpParameter::InputNoiseScale => "input_noise_scale",
            OpParameter::LatentNoiseScale => "latent_noise_scale",
            OpParameter::PrependFrames => "prepend_frames",
            OpParameter::Start => "start",
            OpParameter::StartFrame => "start_frame",
            OpParameter::Frames => "frames",
            OpParameter::Duration => "duration",
        }
    }

    /// The parameters `op` reads; a new op does not compile until it says which.
    pub fn of(op: Op) -> &'static [OpParameter] {
        use OpParameter::*;
        match op {
            // The budget of an upscale is what a worker must have free to claim it (several boxes).
            // A range (`start`…`duration`) is every op's that reads a video; a latent is decoded whole.
            // `fps`: an image sequence's rate (a zip of PNG frames; refused for other inputs).
            Op::Upscale => &[Scale, Tile, OutputFormat, KeepAudio, Metrics, MemoryBudgetMib, Interpolate, Fps, Start, StartFrame, Frames, Duration],
            Op::VaeEncode => &[Normalize, MemoryBudgetMib, Start, StartFrame, Frames, Duration],
            Op::VaeDecode => &[MemoryBudgetMib, OutputFormat],
            Op::VaeReconstruct => &[MemoryBudgetMib, OutputFormat, KeepAudio, Start, StartFrame, Frames, Duration],
            Op::Restore => &[
                Scale,
                MemoryBudgetMib,
                OutputFormat,
                KeepAudio,
                Vae,
                Height,
                Width,
                Resolution,
                MaxResolution,
                Fit,
                Seed,
                ColorFix,
                BatchFrames,
                BatchOverlap,
                InputNoiseScale,
                LatentNoiseScale,
                PrependFrames,
                SceneThreshold,
                Start,
                StartFrame,
                Frames,
                Duration,
                Fps,
            ],
            Op::Interpolate => &[Factor, Fps, SceneThreshold, OutputFormat, KeepAudio, Start, StartFrame, Frames, Duration],
        }
    }

    pub fn is_for(self, op: Op) -> bool {
        OpParameter::of(op).contains(&self)
    }
}

/// Refuses the `given` parameters `op` does not read, naming the ops that do read each.
pub fn refuse_parameters_not_for(op: Op, given: impl IntoIterator<Item = OpParameter>) -> Result<(), QueueError> {
    let refused: Vec<String> = given
        .into_iter()
        .filter(|parameter| !parameter.is_for(op))
        .map(|parameter| {
            let takers: Vec<&str> = parameter.ops().into_iter().map(Op::as_str).collect();
            format!("`{}` (only {})", parameter.name(), takers.join(", "))
        })
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    Err(QueueError::refused(codes::PARAMETER_NOT_FOR_OP, format!("{} does not take {}; leave it out", op.as_str(), refused.join(", "))))
}
