//! What the model families share: 3-D convolutions (direct and Winograd, with their transform pool),
//! linear maps (fp8 weights kept), nearest ×2 up-sampling fused with the 3×3 conv after it, the activation layout, the causal cache and its row split, host
//! buffers, weights as loaded, the encoder's Gaussian posterior, and the parity tests' trace.
pub mod causal_cache;
pub mod conv3d;
pub mod host_buffer;
pub mod layout;
pub mod linear;
pub mod nearest_up_conv2d;
pub mod placement;
pub mod posterior;
pub mod trace;
pub mod transform_pool;
pub mod weights;
pub mod winograd;
