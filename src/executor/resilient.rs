//! Out of memory is not a failure for the VAE streams either. A push that runs out of memory is
//! undone (the streams go back to their checkpoint, so the causal caches stay exact) and retried in
//! halves along time; a push that cannot be shortened further is retried with the model's
//! convolutions split into row bands (exact), the band halved on each further failure. Whatever was
//! needed stays for the rest of the job (later pushes are cut to the length that fitted before they
//! are tried, and keep the row split), and every step is logged in the job's plan once.
use tch::Tensor;

use crate::executor::error::ExecError;
use crate::executor::attempt::attempt;
use crate::executor::tiled::streams::{TiledDecoder, TiledEncoder};
use crate::models::vae::VideoVae;
use crate::models::nn::causal_cache::RowSplit;
use crate::tiling::grid::SpatialTiles;

/// Below this, bands are a few rows of a small frame and the retry is not going to fit either.
const MIN_BAND_BYTES: i64 = 256 << 10;

/// The job's fallbacks so far.
#[derive(Debug, Default)]
pub struct OomFallbacks {
    pub log: Vec<String>,
    /// The longest decode push (latent frames) known to fit, once a longer one did not.
    decode_push_limit: Option<i64>,
    /// The longest encode push (pixel frames) known to fit, once a longer one did not.
    encode_push_limit: Option<i64>,
}

impl OomFallbacks {
    /// The next, smaller split after `current` failed (`largest_conv_bytes` sizes the first one), and
    /// the line that says so; `None` below the smallest band worth trying.
    fn next_split(current: Option<RowSplit>, largest_conv_bytes: i64, what: &str) -> Option<(RowSplit, String)> {
        let band = match current {
            None => largest_conv_bytes / 2,
            Some(split) => split.max_band_bytes / 2,
        };
        if band < MIN_BAND_BYTES {
            return None;
        }
        let note = format!("out of memory on {what}: convolutions in row bands of at most {:.1} MiB", band as f64 / 1048576.0);
        Some((RowSplit { max_band_bytes: band }, note))
    }
}

/// Bytes of the largest activation pair a convolution handles for `pixel_frames` frames of
/// `height × width` at the model's full-resolution width: where a row split bites first.
pub fn largest_conv_bytes(pixel_frames: i64, height: i64, width: i64, channels: i64, element_bytes: i64) -> i64 {
    2 * (pixel_frames + 2) * height * width * channels * element_bytes
}

/// What a resilient push needs to size its first row split.
pub struct PushSize {
    /// Bytes of the largest conv input + output of this push (see [`largest_conv_bytes`]).
    pub largest_conv_bytes: i64,
}

impl PushSize {
    /// A push of `[pixel_frames, height, width]` pixels, one tile's worth when tiled.
    pub fn of(vae: &VideoVae, tiles: Option<&SpatialTiles>, element_bytes: i64, [pixel_frames, height, width]: [i64; 3]) -> PushSize {
        let (height, width) = match tiles {
            Some(tiles) => {
                let factor = vae.spatial_factor();
                (height.min(tiles.tile_height_latent * factor), width.min(tiles.tile_width_latent * factor))
            }
            None => (height, width),
        };
        let channels = crate::tiling::memory::model_width(vae);
        PushSize { largest_conv_bytes: largest_conv_bytes(pixel_frames, height, width, channels, element_bytes) }
    }
}

/// Decodes `latent` (`[1, C, t, h, w]`) like `decoder.push`, surviving out-of-memory as described above.
pub fn decode(decoder: &mut TiledDecoder, latent: &Tensor, size: &PushSize, fallbacks: &mut OomFallbacks) -> Result<Tensor, ExecError> {
    let count = latent.size()[2];
    if let Some(limit) = fallbacks.decode_push_limit.filter(|&limit| count > limit) {
        let part = |len: i64| PushSize { largest_conv_bytes: size.largest_conv_bytes * len / count };
        let pieces = (0..count)
            .step_by(limit as usize)
            .map(|start| {
                let len = limit.min(count - start);
                decode(decoder, &latent.narrow(2, start, len), &part(len), fallbacks)
            })
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Tensor::cat(&pieces, 2));
    }
    let checkpoint = decoder.checkpoint();
    let error = match attempt(|| decoder.push(latent)) {
        Ok(frames) => return Ok(frames),
        Err(error) if error.is_out_of_memory() => error,
        Err(error) => return Err(error),
    };
    decoder.restore(checkpoint);
    if count > 1 {
        // Halves from here on: the push is cut by the limit above, this one as every later one.
        let limit = count - count / 2;
        fallbacks.log.push(format!("out of memory on {count} latent frames: split into {limit} + {}, and later pushes likewise", count - limit));
        fallbacks.decode_push_limit = Some(limit);
        return decode(decoder, latent, size, fallbacks);
    }
    let Some((split, note)) = OomFallbacks::next_split(decoder.row_split(), size.largest_conv_bytes, "one latent frame") else { return Err(error) };
    // Logged only where the family has row splits (SeedVR2 has none: the caller's re-plan comes next).
    if !decoder.set_row_split(Some(split)) {
        return Err(error);
    }
    fallbacks.log.push(note);
    decode(decoder, latent, size, fallbacks)
}

/// Encodes `frames` (`[1, 3, n, H, W]`) like `encoder.push`, surviving out-of-memory as described
/// above, except that a long push is retried one latent group (`group` frames) at a time: the encoder
/// buffers frames until a group is complete, so halves would not shorten its chunks reliably, while
/// pushes of one group each run exactly one group.
pub fn encode(encoder: &mut TiledEncoder, frames: &Tensor, group: i64, size: &PushSize, fallbacks: &mut OomFallbacks) -> Result<Option<Tensor>, ExecError> {
    let count = frames.size()[2];
    if fallbacks.encode_push_limit.is_some_and(|limit| count > limit) {
        let part = PushSize { largest_conv_bytes: size.largest_conv_bytes * group / count };
        let mut latents = Vec::new();
        for start in (0..count).step_by(group as usize) {
            let piece = frames.narrow(2, start, group.min(count - start));
            latents.extend(encode(encoder, &piece, group, &part, fallbacks)?);
        }
        return Ok((!latents.is_empty()).then(|| Tensor::cat(&latents, 2)));
    }
    let checkpoint = encoder.checkpoint();
    let error = match attempt(|| encoder.push(frames)) {
        Ok(latent) => return Ok(latent),
        Err(error) if error.is_out_of_memory() => error,
        Err(error) => return Err(error),
    };
    encoder.restore(checkpoint);
    if count > group {
        // One group at a time from here on: the push is cut by the limit above, this one as every later one.
        fallbacks.log.push(format!("out of memory on {count} frames: pushed {group} at a time, and later pushes likewise"));
        fallbacks.encode_push_limit = Some(group);
        return encode(encoder, frames, group, size, fallbacks);
    }
    let Some((split, note)) = OomFallbacks::next_split(encoder.row_split(), size.largest_conv_bytes, &format!("{count} frames")) else { return Err(error) };
    if !encoder.set_row_split(Some(split)) {
        return Err(error);
    }
    fallbacks.log.push(note);
    encode(encoder, frames, group, size, fallbacks)
}
