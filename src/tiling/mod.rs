//! Tile planning and tiled execution: spatial tiles with overlap and blending.
pub mod spatial;
