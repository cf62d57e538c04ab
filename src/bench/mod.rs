//! `vaebox bench …` measurements that need more than the job pipeline: side-by-side runs against the
//! reference implementations (diffusers, through a Python script) on the same weights and inputs, and
//! models with random weights at chosen sizes; and the tiling tools (`tiling`: calibration, the
//! child-process measurement and `bench tiling`).
mod dtype;
pub mod load;
pub mod parity;
pub mod upscale;
pub mod peak;
pub mod restore;
mod script;
pub mod seedvr2;
pub mod tiling;
pub mod vae;
mod vae_args;
pub mod weights_load;
pub mod winograd;

pub use script::{run_json, PythonScript};
