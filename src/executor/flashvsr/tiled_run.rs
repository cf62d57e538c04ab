//! A FlashVSR job's streaming run over the whole frame, or one run per spatial tile (`tiles`) stepped
//! together and blended: the executor steps it the same way either way, and checkpoints every run's state.
use std::collections::HashMap;

use tch::Tensor;

use crate::tiling::flashvsr_tiles::{blend, FlashVsrTiles, Tile};
use crate::executor::error::ExecError;
use crate::models::flashvsr::pipeline::{FlashVsrParts, FlashVsrRun};
use crate::models::flashvsr::schedule::Step;
use crate::models::nn::causal_cache::SavedTensors;
use crate::models::stop::StopFlag;
use crate::models::wan_dit::StreamSettings;
use crate::models::ModelError;

pub struct TiledRun<'a> {
    /// The whole frame's run, or each tile's with its tile.
    runs: Vec<(Option<Tile>, FlashVsrRun<'a>)>,
    model: [i64; 2],
}

impl<'a> TiledRun<'a> {
    /// Runs at the original's settings for their own size (a tile's sparse attention keeps as many blocks
    /// per query as the original would for a frame of the tile's size).
    pub fn start(parts: &FlashVsrParts<'a>, context: &Tensor, model: [i64; 2], tiles: Option<&FlashVsrTiles>, colour_fix: bool, stop: &StopFlag) -> Result<Self, ExecError> {
        let laid: Vec<Option<Tile>> = match tiles {
            Some(tiles) => tiles.tiles(model, context.device()).into_iter().map(Some).collect(),
            None => vec![None],
        };
        let mut runs = Vec::with_capacity(laid.len());
        for tile in laid {
            let size = tile.as_ref().map_or(model, |t| [t.rows.len(), t.cols.len()]);
            let mut run = parts.start(context, StreamSettings::official(size))?;
            if !colour_fix {
                run = run.without_colour_fix();
            }
            run.set_stop(stop.clone());
            runs.push((tile, run));
        }
        Ok(Self { runs, model })
    }

    pub fn next_step(&self) -> Step {
        self.runs[0].1.next_step()
    }

    /// The next step on the LQ window `lq` (`[1, 3, n, H, W]` from frame `first`) and the step's noise
    /// `[1, 16, f, H/8, W/8]`: its frames `[T, 3, H, W]` in [-1, 1].
    pub fn step(&mut self, lq: &Tensor, first: i64, noise: &Tensor) -> Result<Tensor, ExecError> {
        if let [(None, run)] = &mut self.runs[..] {
            return Ok(run.step_from(lq, first, noise)?);
        }
        let mut frames = Vec::with_capacity(self.runs.len());
        let mut tiles = Vec::with_capacity(self.runs.len());
        for (tile, run) in &mut self.runs {
            let tile = tile.as_ref().expect("every run of several has its tile");
            frames.push(run.step_from(&tile.of(lq, 1)?, first, &tile.of(noise, 8)?)?);
            tiles.push(tile);
        }
        Ok(blend(&tiles, &frames, self.model)?)
    }

    /// Every run's state (a tile's under `tile{i}.`).
    pub fn save_state(&self, into: &mut SavedTensors) {
        for (index, (tile, run)) in self.runs.iter().enumerate() {
            let mut state = SavedTensors::new();
            run.save_state(&mut state);
            match tile {
                None => into.extend(state),
                Some(_) => into.extend(state.into_iter().map(|(key, tensor)| (format!("tile{index}.{key}"), tensor))),
            }
        }
    }

    pub fn load_state(&mut self, saved: &HashMap<String, Tensor>) -> Result<(), ModelError> {
        for (index, (tile, run)) in self.runs.iter_mut().enumerate() {
            match tile {
                None => run.load_state(saved)?,
                Some(_) => {
                    let prefix = format!("tile{index}.");
                    let own: HashMap<String, Tensor> = saved.iter().filter_map(|(key, t)| key.strip_prefix(&prefix).map(|k| (k.to_string(), t.shallow_clone()))).collect();
                    run.load_state(&own)?;
                }
            }
        }
        Ok(())
    }
}
