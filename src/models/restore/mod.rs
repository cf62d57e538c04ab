//! SeedVR2 one-step restoration, the tensor work around the models: frames in (resize, crop, normalise,
//! frame padding) and frames out (colour fix, back to bytes). No weights; pure tensor maths.
pub mod colorfix;
pub mod prepare;
