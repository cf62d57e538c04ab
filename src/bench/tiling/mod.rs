//! The tiling tools: `vaebox calibrate` fits the memory model's constants, `vaebox bench tiling`
//! compares the planner's plans, and both measure each run in a fresh child process (`measure`,
//! behind the hidden `vaebox measure-run`). The planning itself is in [`crate::tiling`].
pub mod bench;
pub mod calibrate;
pub(crate) mod fixtures;
pub mod measure;

pub use fixtures::{load_vae, measured_device, parse_family, synthetic_video, usable_device};
