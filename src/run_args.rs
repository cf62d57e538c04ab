//! `vaebox run`'s flags: one job's fields, read into the options a client would submit.
use std::path::PathBuf;

use vaebox::device::DtypeChoice;
use vaebox::jobs::{InterpolateParams, OutputFormat, RestoreParams};
use vaebox::media::InputRange;
use vaebox::models::restore::colorfix::ColorFix;
use vaebox::models::restore::prepare::Fit;
use vaebox::models::Op;
use vaebox::queue::{JobOptions, OpParameter};

/// `vaebox run`: the job's fields as flags; the output's folder is checked before any work starts.
#[derive(clap::Args)]
pub struct RunArgs {
    /// What to do: `upscale` a video, `vae_encode` a video to a latent file, `vae_decode` a latent file
    /// to a video, `vae_reconstruct` a video (encode, then decode), `restore` a video with SeedVR2, or
    /// `interpolate` a video to a higher frame rate with RIFE.
    #[arg(long, default_value = "upscale", value_parser = op_parser())]
    pub op: Op,
    /// The model: an upscaler (realesrgan-animevideov3, realesrgan-x4plus, realcugan-…) for `upscale`, for
    /// the VAE ops a checkpoint's file stem in the models folder's `vae/`, for `restore` a SeedVR2 DiT's file
    /// stem in `dit/`, rife-hdv3 for `interpolate` (`GET /v1/models` lists what is there) [default:
    /// realesrgan-animevideov3 for `upscale`;
    /// for the other ops the one model in the models folder that can do the op].
    #[arg(long)]
    pub model: Option<String>,
    /// The input file: a video, or for `vae_decode` a latent (`.safetensors`, or a ComfyUI `.latent`).
    #[arg(long)]
    pub input: PathBuf,
    /// Where the result is written (in `--output-format`; for `vae_encode` a latent `.safetensors`), with
    /// the format's extension. Its folder must exist and be writable.
    #[arg(long)]
    pub output: PathBuf,
    /// Replace the output file if it exists (without it, an existing file is refused).
    #[arg(long)]
    pub overwrite: bool,
    /// Print the finished job as JSON (output, timings, plan, metrics) instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// The result's format [default: the config's `output_format`, built in h264]; safetensors is for
    /// `vae_decode` only.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(OutputFormat::ALL.map(OutputFormat::as_str)))]
    pub output_format: Option<String>,
    /// Leave the input's audio, subtitles and chapters out of the result.
    #[arg(long)]
    pub no_audio: bool,
    /// `upscale` only: report PSNR/SSIM of the output scaled back down to the input's size.
    #[arg(long)]
    pub metrics: bool,
    /// `upscale`: the factor, 2 or 4 [default: 4]. `restore`: 1 to 4, the output's area is the input's
    /// times scale² [default: 2].
    #[arg(long)]
    pub scale: Option<i64>,
    /// The precision the model runs in; `auto` follows the config's `dtype`, itself `auto` unless set: bf16
    /// on CUDA and on CPUs with native bf16, else f32.
    #[arg(long, default_value = "auto", value_parser = dtype_parser())]
    pub dtype: String,
    /// `upscale` only: the side of each input tile in pixels, 0 (whole frames) or 16 to 8192
    /// [default: `upscale_tile` from the config, built in 512].
    #[arg(long)]
    pub tile: Option<i64>,
    /// `vae_encode` only: save the latents normalised with the VAE's published mean/std (SeedVR2: its
    /// scaling factor); refused for a VAE whose latent size has none.
    #[arg(long)]
    pub normalize: bool,
    /// `restore` only: the SeedVR2 VAE's file stem in `vae/` [default: the first SeedVR2 VAE there].
    #[arg(long)]
    pub vae: Option<String>,
    /// `restore` only: target height; with `--width`, the output's area (the aspect ratio follows the
    /// input, sides cropped to multiples of 16), instead of `--scale`.
    #[arg(long, requires = "width")]
    pub height: Option<u32>,
    /// `restore` only: target width (see `--height`).
    #[arg(long, requires = "height")]
    pub width: Option<u32>,
    /// `restore` only: the output's short side in pixels, the long side following the aspect ratio (the
    /// ComfyUI front-end's), instead of `--scale` or `--height`/`--width`.
    #[arg(long)]
    pub resolution: Option<u32>,
    /// `restore` only, with `--resolution`: the most the long side may be; a longer one is brought down
    /// to it, the short side following [default: 0, no cap].
    #[arg(long, requires = "resolution")]
    pub max_resolution: Option<u32>,
    /// `restore` only: sides that are not multiples of 16 are cropped to them (`crop`, the original's) or
    /// padded up to them, the padding cut off the output after (`pad`: exactly the resized size)
    /// [default: crop].
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(Fit::ALL.map(Fit::as_str)))]
    pub fit: Option<String>,
    /// `restore` only: the noise seed [default: 666, the original's].
    #[arg(long)]
    pub seed: Option<i64>,
    /// `restore` only: how the restored frames get the input's colours [default: wavelet, the original's;
    /// lab, hsv and wavelet_adaptive are the ComfyUI front-end's].
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(ColorFix::ALL.map(ColorFix::as_str)))]
    pub color_fix: Option<String>,
    /// `restore` only: frames per DiT call, 4n + 1 [default: 21].
    #[arg(long)]
    pub batch_frames: Option<i64>,
    /// `restore` only: frames shared and cross-faded by consecutive batches [default: 4 when batch_frames > 8, else 0].
    #[arg(long)]
    pub batch_overlap: Option<i64>,
    /// `restore` only: 0 to 1, Gaussian noise added to the input frames before the VAE encode (the
    /// front-end's), from the seed [default: 0].
    #[arg(long)]
    pub input_noise_scale: Option<f64>,
    /// `restore` only: 0 to 1, noise mixed into the DiT's condition latent (the front-end's), from the
    /// seed [default: 0].
    #[arg(long)]
    pub latent_noise_scale: Option<f64>,
    /// `restore` only: 0 to 32 mirrored frames (N..1) put before the clip and dropped from the output, so
    /// the first frames are not restored by a batch with no past [default: 0].
    #[arg(long)]
    pub prepend_frames: Option<i64>,
    /// `interpolate` only: output frames per input frame, 2 to 4 [default: 2 unless `--fps`].
    #[arg(long)]
    pub factor: Option<i64>,
    /// `interpolate`: the output's frame rate instead of a factor (60, 59.94, 60000/1001); `upscale` and
    /// `restore` of a zip of PNG frames: the sequence's rate [default: 24].
    #[arg(long)]
    pub fps: Option<String>,
    /// `interpolate` only: the mean luma change (0–1) taken for a scene cut, with no blended frames
    /// across it; 0 turns the detection off [default: 0.1].
    #[arg(long)]
    pub scene_threshold: Option<f64>,
    /// `upscale` only: also interpolate to this many times the frame rate (2 to 4), with RIFE before the
    /// upscaler, in one pass.
    #[arg(long)]
    pub interpolate: Option<i64>,
    /// Every op but `vae_decode`: start this many seconds into the input (the first frame at or after it).
    #[arg(long, conflicts_with = "start_frame")]
    pub start: Option<f64>,
    /// Every op but `vae_decode`: the index of the first frame to take (0 is the first).
    #[arg(long)]
    pub start_frame: Option<u64>,
    /// Every op but `vae_decode`: take at most this many frames.
    #[arg(long, conflicts_with = "duration")]
    pub frames: Option<u64>,
    /// Every op but `vae_decode`: take the frames that start within this many seconds (`--duration 5`:
    /// try the first five seconds).
    #[arg(long)]
    pub duration: Option<f64>,
}

impl RunArgs {
    /// The op's own flags that were given (each named once, so a new flag does not compile until it is
    /// placed); the queue's table says which op takes which.
    pub fn given_parameters(&self) -> Vec<OpParameter> {
        let RunArgs {
            op: _,
            model: _,
            input: _,
            output: _,
            overwrite: _,
            json: _,
            dtype: _,
            output_format,
            no_audio,
            metrics,
            scale,
            tile,
            normalize,
            vae,
            height,
            width,
            resolution,
            max_resolution,
            fit,
            seed,
            color_fix,
            batch_frames,
            batch_overlap,
            input_noise_scale,
            latent_noise_scale,
            prepend_frames,
            factor,
            fps,
            scene_threshold,
            interpolate,
            start,
            start_frame,
            frames,
            duration,
        } = self;
        let given = [
            (OpParameter::OutputFormat, output_format.is_some()),
            (OpParameter::KeepAudio, *no_audio),
            (OpParameter::Metrics, *metrics),
            (OpParameter::Scale, scale.is_some()),
            (OpParameter::Tile, tile.is_some()),
            (OpParameter::Normalize, *normalize),
            (OpParameter::Vae, vae.is_some()),
            (OpParameter::Height, height.is_some()),
            (OpParameter::Width, width.is_some()),
            (OpParameter::Seed, seed.is_some()),
            (OpParameter::ColorFix, color_fix.is_some()),
            (OpParameter::BatchFrames, batch_frames.is_some()),
            (OpParameter::BatchOverlap, batch_overlap.is_some()),
            (OpParameter::Resolution, resolution.is_some()),
            (OpParameter::MaxResolution, max_resolution.is_some()),
            (OpParameter::Fit, fit.is_some()),
            (OpParameter::InputNoiseScale, input_noise_scale.is_some()),
            (OpParameter::LatentNoiseScale, latent_noise_scale.is_some()),
            (OpParameter::PrependFrames, prepend_frames.is_some()),
            (OpParameter::Factor, factor.is_some()),
            (OpParameter::Fps, fps.is_some()),
            (OpParameter::SceneThreshold, scene_threshold.is_some()),
            (OpParameter::Interpolate, interpolate.is_some()),
            (OpParameter::Start, start.is_some()),
            (OpParameter::StartFrame, start_frame.is_some()),
            (OpParameter::Frames, frames.is_some()),
            (OpParameter::Duration, duration.is_some()),
        ];
        given.into_iter().filter(|(_, given)| *given).map(|(parameter, _)| parameter).collect()
    }

    /// The flags as the options a client would submit; the queue's checks then apply to them alike.
    pub fn options(&self, dtype: DtypeChoice) -> JobOptions {
        let restore = (self.op == Op::Restore).then(|| RestoreParams {
            vae: self.vae.clone(),
            height: self.height,
            width: self.width,
            resolution: self.resolution,
            max_resolution: self.max_resolution,
            fit: self.fit.as_deref().and_then(Fit::parse),
            seed: self.seed,
            color_fix: self.color_fix.as_deref().and_then(ColorFix::parse),
            batch_frames: self.batch_frames,
            batch_overlap: self.batch_overlap,
            input_noise_scale: self.input_noise_scale,
            latent_noise_scale: self.latent_noise_scale,
            prepend_frames: self.prepend_frames,
            scene_threshold: self.scene_threshold,
        });
        let interpolate = match self.op {
            Op::Interpolate => Some(InterpolateParams { factor: self.factor, fps: self.fps.clone(), scene_threshold: self.scene_threshold }),
            Op::Upscale => self.interpolate.map(InterpolateParams::upscale_factor),
            Op::VaeEncode | Op::VaeDecode | Op::VaeReconstruct | Op::Restore => None,
        };
        JobOptions {
            model: self.model.clone(),
            scale: self.scale,
            dtype,
            tile: self.tile,
            normalize: Some(self.normalize),
            output_format: self.output_format.as_deref().and_then(OutputFormat::parse),
            // Only when given, as over HTTP: a still refuses it.
            keep_audio: self.no_audio.then_some(false),
            metrics: self.metrics.then_some(true),
            restore,
            interpolate,
            range: Some(InputRange { start: self.start, start_frame: self.start_frame, frames: self.frames, duration: self.duration }),
            sequence_fps: match self.op {
                Op::Upscale | Op::Restore => self.fps.clone(),
                Op::VaeEncode | Op::VaeDecode | Op::VaeReconstruct | Op::Interpolate => None,
            },
            ..JobOptions::new(self.op)
        }
    }
}

/// The ops by name: listed in `--help`, and a misspelt one is refused by clap with the list.
fn op_parser() -> impl clap::builder::TypedValueParser<Value = Op> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Op::ALL.map(Op::as_str)).map(|name| Op::parse(&name).expect("one of Op::ALL"))
}

/// The four precisions; the other spellings `DtypeChoice::parse` knows are accepted, not listed.
fn dtype_parser() -> clap::builder::PossibleValuesParser {
    use clap::builder::PossibleValue;
    clap::builder::PossibleValuesParser::new([
        PossibleValue::new("auto"),
        PossibleValue::new("f32").aliases(["fp32", "float32"]),
        PossibleValue::new("bf16").alias("bfloat16"),
        PossibleValue::new("f16").aliases(["fp16", "float16", "half"]),
    ])
}
