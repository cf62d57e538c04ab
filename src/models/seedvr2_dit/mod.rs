//! SeedVR2's one-step restoration transformer (the 3B and 7B "NaDiT"), built from checkpoints under
//! their published key names, configuration read from the weights.
mod attention;
mod block;
pub mod config;
mod embed;
mod layers;
mod model;
pub mod rope;
mod swap;
mod trace;
pub mod window;

pub use config::{DitConfig, DitVariant, MlpKind};
pub use model::{DitInput, DitLoadOptions, SeedVr2Dit, TileOf};
pub use trace::Trace;
pub use swap::BlockPlacement;
