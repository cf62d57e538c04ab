//! The Wan 2.1 DiT (T2V 1.3B key names) as FlashVSR runs it: one step at timestep 1000, streamed two
//! latent frames at a time with a KV cache of windows, windowed block-sparse self-attention, LQ tokens
//! added before the first block. Configuration read from the weights.
mod block;
pub mod block_mask;
pub mod config;
mod cross_attention;
mod embed;
mod layers;
mod model;
mod rope;
mod self_attention;
pub mod sparse_attention;
mod stream;
mod trace;
pub mod window;

pub use config::{HeadsFrom, WanDitConfig};
pub use model::{Conditioning, WanDit, WanDitLoadOptions};
pub use sparse_attention::AttentionMode;
pub use stream::{StreamSettings, WanDitStream, FIRST_STEP_FRAMES, LATER_STEP_FRAMES};
pub use trace::Trace;
