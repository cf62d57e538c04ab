//! `vaebox bench …` measurements that need more than the job pipeline: side-by-side runs against the
//! reference implementations (diffusers, through a Python script) on the same weights and inputs, and
//! models with random weights at chosen sizes; and the tiling tools (`tiling`: calibration, the
//! child-process measurement and `bench tiling`).
mod clip;
mod dtype;
pub mod flashvsr;
pub mod interpolate;
pub mod load;
pub mod parity;
pub mod upscale;
pub mod upscale_engines;
pub mod peak;
pub mod restore;
mod script;
pub mod seedvr2;
pub mod taehv;
pub mod tiling;
mod timing;
pub mod vae;
mod vae_cache;
mod vae_args;
pub mod weights_load;
pub mod winograd;

pub use dtype::BenchDtype;
pub use script::{run_json, PythonScript};
