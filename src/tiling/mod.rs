//! Tile planning and tiled execution: exact tiles for the upscaler (`spatial`), blended overlapping
//! tiles for the VAEs (`grid`, `blend`, `vae_tiles`; `tile_major` when one frame's caches do not fit),
//! and the memory model that picks them (`memory`, `planner`); a restoration batch's memory (`dit_memory`).
pub mod bench;
pub mod blend;
pub mod calibrate;
pub mod dit_memory;
pub mod grid;
pub mod measure;
pub mod memory;
pub mod planner;
pub mod spatial;
pub mod tile_major;
pub mod vae_tiles;
