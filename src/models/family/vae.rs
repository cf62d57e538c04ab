//! What a video VAE family gives the pipelines: the model ([`VaeModel`]) and its streams ([`VaeStream`]).
use std::collections::HashMap;

use tch::{Device, Kind, Tensor};

use super::Family;
use crate::models::nn::causal_cache::{RowSplit, SavedTensors};
use crate::models::nn::weights::HeldBytes;
use crate::models::stop::StopFlag;
use crate::models::ModelError;

pub struct LoadOptions {
    pub device: Device,
    pub kind: Kind,
}

/// What a stream hands back: what the VAE pipelines store and show, or the model's own values for
/// SeedVR2's restoration, which samples the posterior (so it needs the log-variance too) and colour-fixes
/// the decoder's unclamped output, as the original does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StreamOutput {
    /// Encode: the posterior's mean. Decode: frames clamped to [-1, 1].
    #[default]
    Pipeline,
    /// Encode: `mean ‖ logvar` along channels (`[1, 2C, t, h, w]`, see [`split_moments`]). Decode: unclamped.
    Raw,
}

/// How a stream computes a push: all its frames at once (fastest), or one frame at a time through the
/// whole model, depth first, so that only one frame's activations are alive whatever the push (TAEHV's
/// `parallel=False`; memory flat in the push as well as in the clip). Both give the same values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StreamPace {
    #[default]
    Chunk,
    FrameByFrame,
}

/// One direction of a VAE with its exact causal state: chunks pushed in order give what the whole
/// clip gives, in memory bounded by the push.
pub trait VaeStream<'a> {
    /// Encode: frames `[1, 3, n, H, W]` in [-1, 1] → the latent frames this push completed (`None`
    /// while frames wait for a whole group). Decode: latent `[1, C, t, h, w]` → the pixel frames they
    /// decode to (always `Some`).
    fn push(&mut self, input: &Tensor) -> Result<Option<Tensor>, ModelError>;
    /// A push that must give output: every decode push, an encode push of whole groups.
    fn push_some(&mut self, input: &Tensor) -> Result<Tensor, ModelError> {
        self.push(input)?.ok_or_else(|| ModelError::Unsupported { model: "VAE stream".into(), what: "a push that completes no frame here".into() })
    }
    /// A copy of the state to return to if the next push fails.
    fn snapshot(&self) -> BoxedStream<'a>;
    /// The flag a push asks between its layers (a job's cancel): once raised, the push in hand ends with
    /// `ModelError::Stopped` within a layer, not at its end.
    fn set_stop(&mut self, stop: StopFlag);
    /// Exact row-split convolutions from the next push on; false where the family has none.
    fn set_row_split(&mut self, _split: Option<RowSplit>) -> bool {
        false
    }
    /// The state as named tensors under `prefix` (causal caches, frames waiting for a group), so that a job
    /// stopped after this push can go on from it in another process.
    fn save_state(&self, prefix: &str, into: &mut SavedTensors);
    /// Takes the state [`VaeStream::save_state`] gave a stream of the same model, before any push.
    fn load_state(&mut self, prefix: &str, saved: &HashMap<String, Tensor>) -> Result<(), ModelError>;
}

pub type BoxedStream<'a> = Box<dyn VaeStream<'a> + 'a>;

/// What a video VAE family gives the pipelines.
pub trait VaeModel {
    fn family(&self) -> Family;
    fn latent_channels(&self) -> i64;
    /// Pixels per latent cell along H and W; inputs are padded up to a multiple of it.
    fn spatial_factor(&self) -> i64;
    /// Pixel frames per latent frame after the first (causal) one.
    fn temporal_factor(&self) -> i64;
    /// Copies of a clip's last frame an encode pushes after a clip of `1 + k·temporal_factor` frames so that
    /// its last latent comes out (TAEHV takes frames in whole groups); 0 for a causal VAE whose first latent
    /// is the first frame alone.
    fn encode_end_frames(&self) -> i64 {
        0
    }
    /// The decoder's full-resolution channel count: what the calibrated memory rows are keyed by.
    fn memory_width(&self) -> i64;
    /// Bytes of the weights as held, and of what the model made from them at load and keeps (Winograd
    /// kernels): the model's own memory, beside which a job's working memory is planned.
    fn held_bytes(&self) -> HeldBytes;
    /// Whether the streams can split their convolutions into exact row bands.
    fn supports_row_split(&self) -> bool {
        false
    }
    /// Whether the streams can give [`StreamOutput::Raw`] (callers asking for it check this first;
    /// a family without it gives its pipeline values).
    fn supports_raw_output(&self) -> bool {
        false
    }
    fn encode_stream(&self, output: StreamOutput) -> BoxedStream<'_>;
    fn decode_stream(&self, output: StreamOutput) -> BoxedStream<'_>;
    /// The streams at [`StreamPace::FrameByFrame`]; `None` where the family has no such mode (its pushes
    /// are computed as one chunk). The planner asks [`VaeModel::runs_frame_by_frame`] before choosing it.
    fn frame_by_frame_encode_stream(&self, _output: StreamOutput) -> Option<BoxedStream<'_>> {
        None
    }
    fn frame_by_frame_decode_stream(&self, _output: StreamOutput) -> Option<BoxedStream<'_>> {
        None
    }
    fn runs_frame_by_frame(&self) -> bool {
        self.frame_by_frame_decode_stream(StreamOutput::Pipeline).is_some()
    }
    /// What pipelines apply before diffusion (Wan: the published per-channel `(mu - mean) / std` of its
    /// latent size; SeedVR2: its scaling factor), and its inverse.
    fn normalize(&self, raw: &Tensor) -> Result<Tensor, ModelError>;
    fn denormalize(&self, normalized: &Tensor) -> Result<Tensor, ModelError>;
}
