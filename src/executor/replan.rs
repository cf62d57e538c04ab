//! The last resort when a job still runs out of memory after every piece-level retry (shorter pushes,
//! then row-split convolutions, see `resilient`): the job is planned again for half the memory the
//! planner gives one latent frame of the plan that failed, and run again from the start. That reaches
//! what the piece-level retry cannot: spatial tiles, smaller ones, or tile-major decoding, for when even
//! the activations of one latent frame of the tiles do not fit (the memory model was made on another
//! device, or other processes hold the memory). Each re-plan is one line in the plan's fallbacks.
use crate::models::vae::VideoVae;
use crate::tiling::grid::TileGrid;
use crate::tiling::memory::{MemoryModel, TiledOp};
use crate::tiling::planner::{self, Plan, PlanRequest};

/// Re-plans per job; each at least halves the memory asked for.
const MAX_REPLANS: usize = 4;
/// Halvings of the budget tried for one re-plan until the planner cuts the frame differently.
const MAX_HALVINGS: u32 = 8;

/// What a VAE job is planned from.
#[derive(Debug, Clone)]
pub struct JobPlanning {
    /// The job's size and the model's memory model; `None` without a calibrated row for the family
    /// (then there is nothing to plan with, and no re-plan).
    pub request: Option<PlanRequest>,
    /// Working-memory budget in MiB (0 = none: whole frames at the configured chunk).
    pub budget_mib: u64,
    /// The configured push length, in latent frames.
    pub max_latent_frames: i64,
}

/// What bounds a VAE stage's plan.
#[derive(Debug, Clone, Copy)]
pub struct PlanLimits {
    /// Working memory in MiB (0 = none).
    pub budget_mib: u64,
    /// The configured push length, in latent frames.
    pub max_latent_frames: i64,
}

impl JobPlanning {
    /// A stage of `op` over `[frames, height, width]` latent cells of `vae`; without a memory model for
    /// the family there is nothing to plan with (whole frames, the configured pushes).
    pub fn for_vae(vae: &VideoVae, op: TiledOp, latent: [i64; 3], limits: PlanLimits, memory: Option<MemoryModel>) -> JobPlanning {
        let [latent_frames, latent_height, latent_width] = latent;
        let PlanLimits { budget_mib, max_latent_frames } = limits;
        let request = memory.map(|memory| PlanRequest {
            op,
            latent_frames,
            latent_height,
            latent_width,
            spatial_factor: vae.spatial_factor(),
            temporal_factor: vae.temporal_factor(),
            budget_bytes: budget_mib << 20,
            max_latent_frames_per_chunk: max_latent_frames.min(latent_frames),
            memory,
            frame_by_frame: vae.runs_frame_by_frame(),
        });
        JobPlanning { request, budget_mib, max_latent_frames }
    }

    pub fn plan(&self) -> Plan {
        match &self.request {
            Some(request) if self.budget_mib > 0 => planner::plan(&PlanRequest { budget_bytes: self.budget_mib << 20, ..request.clone() }),
            _ => Plan { latent_frames_per_chunk: self.max_latent_frames, spatial: None, estimated_peak_bytes: 0, fits: true, tile_major: false, frame_by_frame: false },
        }
    }

    /// After `failed` ran out of memory: the planning for a smaller budget whose plan cuts the frame
    /// differently, and the line that says so; `None` when there is nothing smaller left to try.
    pub fn replan(&self, failed: &Plan, replans_so_far: usize) -> Option<(JobPlanning, String)> {
        let request = self.request.as_ref()?;
        if replans_so_far >= MAX_REPLANS {
            return None;
        }
        // The piece-level retry has already run this plan's tiles one latent frame at a time. A plan
        // that did not fit its budget is estimated above it, so the budget halves too: each re-plan
        // asks for less than the one before.
        let one_frame = match failed.frame_by_frame {
            true => request.estimated_frame_by_frame_bytes(1),
            false => request.estimated_peak_bytes(1, failed.spatial.as_ref(), failed.tile_major),
        };
        let mut budget_bytes = match self.budget_mib {
            0 => one_frame / 2,
            budget_mib => one_frame.min(budget_mib << 20) / 2,
        };
        for _ in 0..MAX_HALVINGS {
            let budget_mib = budget_bytes >> 20;
            if budget_mib == 0 {
                return None;
            }
            let next = JobPlanning { budget_mib, ..self.clone() };
            let plan = next.plan();
            if (plan.spatial, plan.tile_major, plan.frame_by_frame) != (failed.spatial, failed.tile_major, failed.frame_by_frame) {
                let note = format!(
                    "out of memory with {}: re-planned for a budget of {budget_mib} MiB ({}) and started again",
                    describe(request, failed),
                    describe(request, &plan)
                );
                return Some((next, note));
            }
            budget_bytes /= 2;
        }
        None
    }
}

/// "whole frames, 4 latent frames per push" or "3 tiles of 60×40 latent cells (overlap 8),
/// tile-major, 1 latent frame per push".
fn describe(request: &PlanRequest, plan: &Plan) -> String {
    let frames = match plan.latent_frames_per_chunk {
        1 => "1 latent frame per push".to_string(),
        n => format!("{n} latent frames per push"),
    };
    let Some(tiles) = plan.spatial else {
        let pace = if plan.frame_by_frame { ", frame by frame" } else { "" };
        return format!("whole frames{pace}, {frames}");
    };
    let count = TileGrid::new(request.latent_height, request.latent_width, Some(&tiles)).count();
    let order = if plan.tile_major { ", tile-major" } else { "" };
    format!(
        "{count} tiles of {}×{} latent cells (overlap {}){order}, {frames}",
        tiles.tile_height_latent.min(request.latent_height),
        tiles.tile_width_latent.min(request.latent_width),
        tiles.overlap_latent
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planning(budget_mib: u64) -> JobPlanning {
        JobPlanning { request: Some(planner::example_request(0)), budget_mib, max_latent_frames: 4 }
    }

    #[test]
    fn a_job_without_a_budget_is_replanned_into_tiles_below_one_latent_frame() {
        let first = planning(0);
        let failed = first.plan();
        assert_eq!((failed.latent_frames_per_chunk, failed.spatial), (4, None));
        let (next, note) = first.replan(&failed, 0).expect("a smaller plan");
        let one_frame = first.request.as_ref().unwrap().estimated_peak_bytes(1, None, false);
        assert_eq!(next.budget_mib, (one_frame / 2) >> 20, "{note}");
        let plan = next.plan();
        assert!(plan.spatial.is_some() && plan.estimated_peak_bytes <= next.budget_mib << 20, "{plan:?}");
        assert!(note.starts_with("out of memory with whole frames, 4 latent frames per push: re-planned for a budget of "), "{note}");
        assert!(note.contains(" tiles of 60×"), "{note}");
    }

    #[test]
    fn replans_run_out() {
        let mut planning = planning(0);
        let mut failed = planning.plan();
        let mut replans = 0;
        while let Some((next, _)) = planning.replan(&failed, replans) {
            let plan = next.plan();
            assert_ne!((plan.spatial, plan.tile_major), (failed.spatial, failed.tile_major));
            assert!(next.budget_mib <= planning.budget_mib / 2 || planning.budget_mib == 0, "{} after {}", next.budget_mib, planning.budget_mib);
            (planning, failed, replans) = (next, plan, replans + 1);
        }
        assert_eq!(replans, MAX_REPLANS);
    }

    #[test]
    fn an_unfit_plan_is_not_replanned_upwards() {
        // Budgets this small leave only the cheapest plan, marked unfit and estimated far above them;
        // half its estimate would be a larger budget than the one that failed.
        let tight = planning(4);
        let failed = tight.plan();
        assert!(!failed.fits && failed.estimated_peak_bytes > 8 << 20, "{failed:?}");
        // The cheapest plan does not depend on the budget, so there is nothing smaller to try.
        assert!(tight.replan(&failed, 0).is_none());
    }

    #[test]
    fn without_a_memory_model_there_is_no_replan() {
        let blind = JobPlanning { request: None, budget_mib: 100, max_latent_frames: 4 };
        assert!(blind.replan(&blind.plan(), 0).is_none());
    }
}
