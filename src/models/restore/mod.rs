//! SeedVR2's one-step restoration around the DiT: frames in (`prepare`), the step itself (`one_step`, its
//! DiT over spatial tiles when the latent is too large for one call: `dit_tiles`),
//! the colour fix (`colorfix`), the front-end's noise augmentations (`noise_augment`), and what a job
//! keeps loaded (`restorer`).
pub mod colorfix;
pub mod dit_tiles;
pub mod noise_augment;
pub mod one_step;
pub mod prepare;
pub mod restorer;
