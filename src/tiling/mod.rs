//! Tile planning, pure arithmetic and the memory model, with no model run: exact tiles for the
//! upscaler (`spatial`), overlapping tile grids for the VAEs and their raised-cosine weights (`grid`,
//! `blend`), the memory model that picks the tiles and pushes (`memory`, `planner`), and a restoration
//! batch's memory (`dit_memory`) and the DiT's own spatial tiles when a frame is too large for it
//! (`dit_tiles`). Running the tiles is the executor's (`executor::tiled`); measuring
//! the model's constants is the bench's (`bench::tiling`).
pub mod blend;
pub mod dit_memory;
pub mod dit_tiles;
pub mod flashvsr_tiles;
pub mod grid;
pub mod memory;
pub mod planner;
pub mod spatial;
