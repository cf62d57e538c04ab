//! madebyollin's tiny video autoencoders (TAEHV: `taew2_1`, `taew2_2`, `taew2_2_super`, `taehv`), read
//! from their `.pth` / safetensors state dicts, in the original's parallel and frame-by-frame modes; and
//! FlashVSR's TCDecoder, a TAEHV decoder conditioned on the LR video (`tc_*`).
mod blocks;
mod chain;
pub mod config;
mod decoder;
mod encoder;
mod model;
pub mod naming;
mod stream;
pub mod tc_config;
mod tc_decoder;
mod tc_stream;
mod video_vae;
pub mod weights;

pub use config::{DecoderReduction, DecoderVariant, TaehvConfig};
pub use model::{Taehv, TaehvLoadOptions, Trace};
pub use naming::LatentSpace;
pub use stream::{DecodeStream, EncodeStream};
pub use tc_config::{is_tc_decoder, TcDecoderConfig};
pub use tc_decoder::{TcDecoder, TcDecoderLoadOptions};
pub use tc_stream::TcDecodeStream;
pub use video_vae::{LatentAffine, PipelineDecodeStream, PipelineEncodeStream, TaehvVideoVae};
