//! Tiled execution: running the models tile by tile on the layouts [`crate::tiling`] plans. The VAEs
//! stream one blended tile per stream (`streams`), or tile after tile with spooled chunks when one
//! frame's caches do not fit (`tile_major`); the upscaler runs exact or blended tiles (`upscale`);
//! `blend` sums weighted tiles into the output.
pub mod blend;
pub mod streams;
pub mod tile_major;
pub mod upscale;
