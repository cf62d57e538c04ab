//! Tile planning and tiled execution: exact tiles for the upscaler (`spatial`), blended overlapping
//! tiles for the VAEs (`grid`, `blend`, `vae_tiles`), and the memory model that picks them (`planner`).
pub mod blend;
pub mod grid;
pub mod spatial;
pub mod vae_tiles;
