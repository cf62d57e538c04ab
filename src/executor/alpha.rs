//! A still's alpha channel, carried beside the colour: read as a plane, brought to the output's size the
//! way each op brings its colour there, and handed to the still's PNG writer at the output's depth.
use tch::{Kind, Tensor};

use super::context::{Executor, JobSpec};
use super::error::ExecError;
use super::frames;
use crate::media::{self, MediaInfo, RgbFrames, SampleDepth};

/// The input's alpha, `[1, 1, H, W]` floats in [0, 1] on the job's device; `None` for a picture without one
/// (and for any video: only stills carry alpha through a job).
pub fn read(exec: &Executor, job: &JobSpec, info: &MediaInfo) -> Result<Option<Tensor>, ExecError> {
    if !(info.still && info.alpha) {
        return Ok(None);
    }
    let plane = media::still::read_alpha(&exec.config.tools, &job.input_path, info.width, info.height)?;
    let (h, w) = (i64::from(info.height), i64::from(info.width));
    Ok(Some(Tensor::from_slice(&plane).view([1, 1, h, w]).to_device(exec.device).to_kind(Kind::Float) / 255.0))
}

/// The alpha as a grey picture, `[1, 3, H, W]`: what an upscaler takes, as Real-ESRGAN's own inference
/// script feeds it the alpha channel (grey to RGB, through the same model).
pub fn as_grey_picture(alpha: &Tensor) -> Tensor {
    let (_, _, h, w) = alpha.size4().expect("[1, 1, H, W]");
    alpha.expand([1, 3, h, w], false).contiguous()
}

/// An upscaled grey picture back to one plane: its luma with the weights OpenCV's RGB-to-grey uses, as
/// Real-ESRGAN's script does (the three channels come out nearly equal anyway).
pub fn plane_from_grey_picture(picture: &RgbFrames) -> Result<Vec<u8>, ExecError> {
    let rgb = frames::written_frame(picture, 0);
    let luma = rgb.select(1, 0) * 0.299 + rgb.select(1, 1) * 0.587 + rgb.select(1, 2) * 0.114;
    plane_from_unit(&luma.unsqueeze(1), picture.depth)
}

/// `[1, 1, H, W]` floats in [0, 1] → `H × W` samples at `depth`, little-endian (rounded as colour is).
pub fn plane_from_unit(plane: &Tensor, depth: SampleDepth) -> Result<Vec<u8>, ExecError> {
    let rgb = frames::to_rgb(&as_grey_picture(plane), depth)?;
    let bytes = depth.bytes();
    Ok(rgb.data.chunks_exact(3 * bytes).flat_map(|pixel| pixel[..bytes].iter().copied()).collect())
}
