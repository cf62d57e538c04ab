//! The VAE half of a restoration batch through the machinery the VAE jobs use: pushes of the planned
//! length through the causal streams (exact), spatial tiles when one push of whole frames does not fit
//! the budget, and on out of memory first the push-level retry (shorter pushes, `executor::resilient`), then
//! a re-plan for less memory (`vae::replan`), which the rest of the job keeps. Only when all of that
//! fails does the batch itself get shorter (the caller's retry).
use tch::{Device, Kind, Tensor};

use crate::executor::error::ExecError;
use crate::executor::attempt::attempt;
use crate::executor::tiled::streams::{TiledDecoder, TiledEncoder};
use crate::executor::tiled::tile_major::TileMajorDecode;
use crate::executor::replan::{JobPlanning, PlanLimits};
use crate::executor::resilient::{self, OomFallbacks, PushSize};
use crate::jobs::plan::VaeStagePlans;
use crate::models::restore::one_step::BatchVae;
use crate::models::nn::posterior::Posterior;
use crate::models::family::vae::StreamOutput;
use crate::models::stop::StopFlag;
use crate::models::vae::{split_moments, VideoVae};
use crate::tiling::memory::{MemoryModel, TiledOp};
use crate::tiling::planner::Plan;

/// How the VAE works on a job's batches.
#[derive(Debug, Clone, Copy)]
pub struct StreamSettings {
    /// Working memory in MiB (0 = none: whole frames, `max_latent_frames` per push).
    pub budget_mib: u64,
    /// The configured push length, in latent frames.
    pub max_latent_frames: i64,
    pub kind: Kind,
    pub device: Device,
}

/// Told after each push of a VAE stage how much of that stage is done (0 to 1): a restore's progress then
/// moves within its VAE stages, which were most of a batch at a standstill (the first batch's encode was a
/// third of a job at 0 % with no ETA).
pub type PushedShare<'a> = Box<dyn Fn(f64) + 'a>;

/// One per job: what had to give in one batch (a shorter push, a smaller budget) holds for the next.
pub struct StreamedVae<'a> {
    vae: &'a VideoVae,
    settings: StreamSettings,
    memory: Option<MemoryModel>,
    encode: Stage,
    decode: Stage,
    /// The plans the last batch ran with, for the job's plan.
    pub plans: VaeStagePlans,
    /// What gave since the last [`StreamedVae::take_fallbacks`], in order, each line naming its stage.
    fallbacks: Vec<String>,
    pushed: Option<PushedShare<'a>>,
    /// Handed to every stream: a cancel stops a batch's encode or decode between tiles and layers.
    stop: StopFlag,
}

/// One direction's state across batches.
struct Stage {
    budget_mib: u64,
    replans: usize,
    pushes: OomFallbacks,
}

impl Stage {
    fn new(budget_mib: u64) -> Self {
        Stage { budget_mib, replans: 0, pushes: OomFallbacks::default() }
    }
}

impl<'a> StreamedVae<'a> {
    pub fn new(vae: &'a VideoVae, settings: StreamSettings) -> Result<Self, ExecError> {
        if !vae.supports_raw_output() {
            return Err(ExecError::Invalid(format!("restoration needs the SeedVR2 VAE, not a {} one", vae.family().as_str())));
        }
        Ok(StreamedVae {
            vae,
            memory: MemoryModel::for_vae(vae, settings.kind, settings.device),
            encode: Stage::new(settings.budget_mib),
            decode: Stage::new(settings.budget_mib),
            settings,
            plans: VaeStagePlans::default(),
            fallbacks: Vec::new(),
            pushed: None,
            stop: StopFlag::never(),
        })
    }

    /// From now on the streams stop inside a push (`ModelError::Stopped`) once `stop` is raised.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.stop = stop;
    }

    /// `pushed` is told the share of the stage done after each push from now on.
    pub fn report_pushes(&mut self, pushed: PushedShare<'a>) {
        self.pushed = Some(pushed);
    }

    /// The re-plans and push-level fallbacks since the last call, in the order they happened.
    pub fn take_fallbacks(&mut self) -> Vec<String> {
        std::mem::take(&mut self.fallbacks)
    }

    /// The plan a stage would run for a batch of `latent_frames × h × w` latent cells, and what it came from.
    pub fn plan_for(&self, op: TiledOp, latent: [i64; 3]) -> (Plan, JobPlanning) {
        let budget_mib = match op {
            TiledOp::Decode => self.decode.budget_mib,
            _ => self.encode.budget_mib,
        };
        // Held to the batch: on a GPU the setting is no cap at all.
        let limits = PlanLimits { budget_mib, max_latent_frames: self.settings.max_latent_frames.min(latent[0]).max(1) };
        let planning = JobPlanning::for_vae(self.vae, op, latent, limits, self.memory.clone());
        (planning.plan(), planning)
    }

    fn element_bytes(&self) -> i64 {
        self.settings.kind.elt_size_in_bytes() as i64
    }

    /// Runs `work` with the stage's plan; on out of memory re-plans for less and runs it again.
    fn run_stage<T>(
        &mut self,
        op: TiledOp,
        latent: [i64; 3],
        mut work: impl FnMut(&VideoVae, &Plan, &mut OomFallbacks, i64) -> Result<T, ExecError>,
    ) -> Result<T, ExecError> {
        loop {
            let (plan, planning) = self.plan_for(op, latent);
            let (vae, element_bytes) = (self.vae, self.element_bytes());
            let stage = if op == TiledOp::Decode { &mut self.decode } else { &mut self.encode };
            let result = attempt(|| work(vae, &plan, &mut stage.pushes, element_bytes));
            self.fallbacks.extend(stage.pushes.log.drain(..).map(|line| format!("{}: {line}", op.as_str())));
            let error = match result {
                Ok(out) => {
                    match op {
                        TiledOp::Decode => self.plans.decode = Some(plan),
                        _ => self.plans.encode = Some(plan),
                    }
                    return Ok(out);
                }
                Err(error) if error.is_out_of_memory() => error,
                Err(error) => return Err(error),
            };
            let Some((smaller, note)) = planning.replan(&plan, stage.replans) else { return Err(error) };
            tracing::warn!("restore {}: {note}", op.as_str());
            crate::device::release_cached_memory(self.settings.device);
            stage.replans += 1;
            stage.budget_mib = smaller.budget_mib;
            self.fallbacks.push(format!("{}: {note}", op.as_str()));
        }
    }
}



/// Pushes of `latent_frames_per_chunk · t` frames; the stream takes care of the first one being `1 + 4a`.
fn encode_planned(vae: &VideoVae, plan: &Plan, pushes: &mut OomFallbacks, element_bytes: i64, video: &Tensor, pushed: Option<&dyn Fn(f64)>, stop: &StopFlag) -> Result<Tensor, ExecError> {
    let group = vae.temporal_factor();
    let (_, _, frames, height, width) = video.size5()?;
    let push = plan.latent_frames_per_chunk * group;
    let mut encoder = TiledEncoder::with_output(vae, plan.spatial, StreamOutput::Raw);
    encoder.set_stop(stop.clone());
    let mut parts = Vec::new();
    for start in (0..frames).step_by(push as usize) {
        let len = push.min(frames - start);
        let size = PushSize::of(vae, plan.spatial.as_ref(), element_bytes, [len, height, width]);
        parts.extend(resilient::encode(&mut encoder, &video.narrow(2, start, len), group, &size, pushes)?);
        if let Some(pushed) = pushed {
            pushed((start + len) as f64 / frames as f64);
        }
    }
    Ok(Tensor::f_cat(&parts, 2)?)
}

fn decode_planned(vae: &VideoVae, plan: &Plan, pushes: &mut OomFallbacks, element_bytes: i64, latent: &Tensor, pushed: Option<&dyn Fn(f64)>, stop: &StopFlag) -> Result<Tensor, ExecError> {
    let (_, _, frames, h, w) = latent.size5()?;
    let factor = vae.spatial_factor();
    let push = plan.latent_frames_per_chunk;
    let size = |len: i64| PushSize::of(vae, plan.spatial.as_ref(), element_bytes, [len * vae.temporal_factor(), h * factor, w * factor]);
    if let (true, Some(tiles)) = (plan.tile_major, plan.spatial) {
        // The batch's output is held whole anyway, so the tiles blend in memory, with no spool.
        let order = TileMajorDecode { vae, tiles, latent_frames_per_push: push, output: StreamOutput::Raw, checkpoint_frames: 0 };
        return order.run_in_memory(latent, &mut |decoder, slice| {
            // Each tile's stream is made by the decode: the cancel reaches inside its pushes from here.
            decoder.set_stop(stop.clone());
            resilient::decode(decoder, slice, &size(slice.size()[2]), pushes)
        });
    }
    let mut decoder = TiledDecoder::with_output(vae, plan.spatial, StreamOutput::Raw);
    decoder.set_stop(stop.clone());
    let mut parts = Vec::new();
    for start in (0..frames).step_by(push as usize) {
        let len = push.min(frames - start);
        parts.push(resilient::decode(&mut decoder, &latent.narrow(2, start, len), &size(len), pushes)?);
        if let Some(pushed) = pushed {
            pushed((start + len) as f64 / frames as f64);
        }
    }
    Ok(Tensor::f_cat(&parts, 2)?)
}

impl BatchVae for StreamedVae<'_> {
    type Error = ExecError;

    fn device(&self) -> Device {
        self.settings.device
    }

    fn kind(&self) -> Kind {
        self.settings.kind
    }

    fn encode(&mut self, video: &Tensor) -> Result<Posterior, ExecError> {
        let (_, _, frames, height, width) = video.size5()?;
        let (t, f) = (self.vae.temporal_factor(), self.vae.spatial_factor());
        let latent = [(frames - 1) / t + 1, height / f, width / f];
        let (pushed, stop) = (self.pushed.take(), self.stop.clone());
        let moments = self.run_stage(TiledOp::Encode, latent, |vae, plan, pushes, bytes| encode_planned(vae, plan, pushes, bytes, video, pushed.as_deref(), &stop));
        self.pushed = pushed;
        Ok(split_moments(&moments?)?)
    }

    fn decode(&mut self, latent: &Tensor) -> Result<Tensor, ExecError> {
        let (_, _, t, h, w) = latent.size5()?;
        let (pushed, stop) = (self.pushed.take(), self.stop.clone());
        let decoded = self.run_stage(TiledOp::Decode, [t, h, w], |vae, plan, pushes, bytes| decode_planned(vae, plan, pushes, bytes, latent, pushed.as_deref(), &stop));
        self.pushed = pushed;
        decoded
    }
}
