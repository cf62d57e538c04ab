//! A FlashVSR model's parts loaded from its folder, held together so the executor can keep them between
//! jobs (1.6 B parameters take seconds to load; jobs repeat): the DiT, the LQ projection, the fixed text
//! context and the decoder — the folder's TCDecoder (Tiny) or a Wan 2.1 VAE of the box (Full).
use tch::{Device, Kind, Tensor};

use super::folder::FlashVsrFolder;
use super::pipeline::{Decoder, FlashVsrParts};
use super::{LqProjLoadOptions, LqProjection};
use crate::models::family::vae::LoadOptions as VaeLoadOptions;
use crate::models::formats::torch_file;
use crate::models::registry::ModelEntry;
use crate::models::taehv::{TcDecoder, TcDecoderLoadOptions};
use crate::models::vae::VideoVae;
use crate::models::wan_dit::{WanDit, WanDitLoadOptions};
use crate::models::ModelError;

pub enum LoadedDecoder {
    Tiny(TcDecoder),
    Full(VideoVae),
}

pub struct FlashVsrModels {
    pub dit: WanDit,
    pub lq: LqProjection,
    /// `posi_prompt.pth`: `[1, tokens, text_dim]` on the device, in the models' precision.
    pub context: Tensor,
    pub decoder: LoadedDecoder,
}

impl FlashVsrModels {
    /// `vae`: a Wan 2.1 VAE entry for Full; none for Tiny (the folder's TCDecoder).
    pub fn load(folder: &FlashVsrFolder, vae: Option<&ModelEntry>, device: Device, kind: Kind) -> Result<Self, ModelError> {
        let dit = WanDit::load(&folder.dit(), &WanDitLoadOptions { device, kind })?;
        let lq = LqProjection::load(&folder.lq_proj(), &LqProjLoadOptions { device, kind, version: folder.version })?;
        let context = torch_file::read_tensor(&folder.prompt())?.to_device(device).to_kind(kind);
        let decoder = match vae {
            None => LoadedDecoder::Tiny(TcDecoder::load(&folder.tc_decoder(), &TcDecoderLoadOptions { device, kind })?),
            Some(entry) => LoadedDecoder::Full(VideoVae::load(entry, &VaeLoadOptions { device, kind })?),
        };
        Ok(Self { dit, lq, context, decoder })
    }

    /// The parts a run streams through (TCDecoder decoding a step's frames at once).
    pub fn parts(&self) -> FlashVsrParts<'_> {
        let decoder = match &self.decoder {
            LoadedDecoder::Tiny(model) => Decoder::Tiny { model, parallel: true },
            LoadedDecoder::Full(vae) => Decoder::Full(vae),
        };
        FlashVsrParts { dit: &self.dit, lq: &self.lq, decoder }
    }

    /// Bytes of every part's weights.
    pub fn weight_bytes(&self) -> u64 {
        let decoder = match &self.decoder {
            LoadedDecoder::Tiny(model) => model.held_bytes().weights,
            LoadedDecoder::Full(vae) => vae.held_bytes().weights,
        };
        self.dit.weight_bytes() + self.lq.held_bytes().weights + decoder
    }
}
