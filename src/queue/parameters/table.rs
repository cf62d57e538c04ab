//! The job parameters, one row each; `PARAMETERS` lists them in the order the document and `vaebox run
//! --help` do, and `taken_by` says which each op takes. A new parameter is a row here, its place in
//! `PARAMETERS` and in the arms of the ops that take it, its field in `JobParams` (named by `stored`) and the
//! code that reads it there. A new op does not compile until `taken_by` names its parameters.
use super::DefaultValue::{self, Else, Is, PerOp, Said};
use super::Literal::{Bool, Float, Int, Text};
use super::{Flag, Parameter, Stored, Value};
use crate::error_codes as codes;
use crate::executor::interpolate::settings::{DEFAULT_FACTOR, FACTORS};
use crate::executor::restore::{self, DEFAULT_BATCH_FRAMES, DEFAULT_SEED, MAX_PREPEND_FRAMES, NOISE_SCALES};
use crate::executor::scene::{DEFAULT_THRESHOLD, THRESHOLDS};
use crate::media::format::ENCODER_PRESETS;
use crate::media::OutputFormat;
use crate::models::registry::DEFAULT_UPSCALE_MODEL;
use crate::models::restore::colorfix::ColorFix;
use crate::models::restore::prepare::{Fit, CROP_MULTIPLE};
use crate::models::Op::{self, Interpolate, Restore, Upscale, VaeDecode, VaeEncode, VaeReconstruct};

/// A row's fields that most rows share.
const ROW: Parameter = Parameter {
    name: "",
    value: Value::Text,
    doc: "",
    default: DefaultValue::None,
    min: None,
    max: None,
    stored: Stored::Apart,
    code: None,
    flag: Flag::Value,
};

pub const PRESET: Parameter = Parameter {
    name: "preset",
    doc: "A preset from /v1/presets (the box's `[presets.NAME]`): its fields fill in those this submission does not give.",
    ..ROW
};

pub const OP: Parameter = Parameter {
    name: "op",
    value: Value::Choice { names: || Op::ALL.map(Op::as_str).to_vec(), canonical: |raw| Op::parse(raw).map(Op::as_str) },
    doc: "What to do with the upload: `upscale` a video or picture, `vae_encode` a video to a latent file, `vae_decode` a \
          latent file to a video, `vae_reconstruct` a video (encode, then decode), `restore` a video with SeedVR2 or \
          FlashVSR (the model's `family` in /v1/models), or `interpolate` a video to a higher frame rate with RIFE.",
    default: Is(Text("upscale")),
    code: Some(codes::UNKNOWN_OP),
    ..ROW
};

pub const MODEL: Parameter = Parameter {
    name: "model",
    doc: "A model from /v1/models that can do `op`. The VAE ops take the full VAEs and the tiny TAEHV decoders \
          (family `taehv`: taew2_1 for Wan 2.1 latents, taew2_2 for Wan 2.2 5B's, taehv for Hunyuan Video's), which \
          take and give the same latents as their full VAE: a fast preview, softer than the full decode.",
    default: Else(Text(DEFAULT_UPSCALE_MODEL), "for `upscale`; for the other ops the one model of this box that can do the op"),
    ..ROW
};

pub const SCALE: Parameter = Parameter {
    name: "scale",
    // Restore's; upscale's (the model's, 2 or 4) are among them.
    value: Value::IntOf(&restore::SCALES),
    doc: "Output size over input size. upscale: one of the model's `scales` in /v1/models (Real-ESRGAN 2 or 4; a \
          Real-CUGAN model has one, its own, taken when scale is not given); restore: 1 to 4, each side times scale \
          (the output's area is the input's times scale²); a FlashVSR model takes 4 only, its default.",
    default: PerOp(Op::default_scale),
    stored: Stored::At("scale"),
    code: Some(codes::INVALID_SCALE),
    ..ROW
};

pub const PRIORITY: Parameter = Parameter {
    name: "priority",
    value: Value::Int,
    doc: "Higher runs first; FIFO among equals.",
    default: Is(Int(0)),
    min: Some(-1000),
    max: Some(1000),
    code: Some(codes::INVALID_PRIORITY),
    flag: Flag::None,
    ..ROW
};

pub const DTYPE: Parameter = Parameter {
    name: "dtype",
    value: Value::Choice {
        names: || vec!["auto", "f32", "bf16", "f16"],
        canonical: |raw| crate::device::DtypeChoice::parse(raw).map(crate::device::DtypeChoice::as_str),
    },
    doc: "The precision the model runs in; auto is the config's dtype, itself auto unless set: bf16 on CUDA and on CPUs \
          with native bf16, else f32.",
    default: Is(Text("auto")),
    stored: Stored::At("dtype"),
    code: Some(codes::INVALID_DTYPE),
    ..ROW
};

pub const TILE: Parameter = Parameter {
    name: "tile",
    value: Value::Int,
    doc: "Input tile side in pixels: 0 = whole frames, else 16 to 8192.",
    default: Said("the config's upscale_tile"),
    min: Some(0),
    max: Some(8192),
    stored: Stored::At("tile"),
    code: Some(codes::INVALID_TILE),
    ..ROW
};

pub const PARTS: Parameter = Parameter {
    name: "parts",
    doc: "Cut the job into parts that several workers run at once (several devices, several boxes on one queue): \
          `auto` makes one per worker heard of when the job starts, at most one per segment (`checkpoint_s`); a number \
          asks for that many; 1 never cuts. A job is cut only when two or more workers could take its parts, and only \
          a video whose frames make two segments or more, written as a video, without `interpolate` or `metrics`, and \
          not with a FlashVSR model (400 invalid-parts for a number over 1 then). The result is the one a single \
          worker gives.",
    default: Is(Text("auto")),
    stored: Stored::At("parts"),
    code: Some(codes::INVALID_PARTS),
    ..ROW
};

pub const NORMALIZE: Parameter = Parameter {
    name: "normalize",
    value: Value::Bool,
    doc: "Apply the published latent mean/std (SeedVR2: scaling factor). Refused at submission with 400 \
          normalize-unsupported for a VAE whose latent size has no published statistics (Wan 2.1 other than 16 \
          channels, Wan 2.2 other than 48; see latent_channels in /v1/models).",
    stored: Stored::At("normalize"),
    code: Some(codes::INVALID_NORMALIZE),
    flag: Flag::Switch,
    ..ROW
};

pub const MEMORY_BUDGET_MIB: Parameter = Parameter {
    name: "memory_budget_mib",
    value: Value::U64,
    doc: "Working memory for this job in MiB (0 = none); overrides the configured memory_budget_mib. The budget of an \
          upscale is also what a worker must have free to claim it.",
    stored: Stored::At("memory_budget_mib"),
    code: Some(codes::INVALID_MEMORY_BUDGET),
    ..ROW
};

pub const OUTPUT_FORMAT: Parameter = Parameter {
    name: "output_format",
    value: Value::Choice {
        names: || OutputFormat::ALL.map(OutputFormat::as_str).to_vec(),
        canonical: |raw| OutputFormat::parse(raw).map(OutputFormat::as_str),
    },
    doc: "The result's format: h264 (8-bit MP4), h265 (10-bit MP4), prores (ProRes 422 HQ MOV), ffv1 (lossless 16-bit \
          RGB MKV), png (8-bit: one PNG for a still, else a zip of PNG frames; a video's png is png16), png16 (16-bit \
          from the float output, likewise), safetensors (vae_decode only: the float frames). 400 \
          output-format-not-for-still for a video format on a still (upscale, restore); 400 output-format-unavailable \
          when this box's ffmpeg lacks the encoder (output_formats in /healthz).",
    default: Said("the box's output_format, h264 unless configured; png for a still picture"),
    stored: Stored::At("output_format"),
    code: Some(codes::INVALID_OUTPUT_FORMAT),
    ..ROW
};

pub const KEEP_AUDIO: Parameter = Parameter {
    name: "keep_audio",
    value: Value::Bool,
    doc: "Copy the input's audio, subtitles and chapters into the result where its container takes them (a PNG zip \
          has none).",
    default: Is(Bool(true)),
    stored: Stored::At("keep_audio"),
    code: Some(codes::INVALID_BOOLEAN),
    flag: Flag::Negated { long: "no-audio", help: "Leave the input's audio, subtitles and chapters out of the result." },
    ..ROW
};

pub const CRF: Parameter = Parameter {
    name: "crf",
    value: Value::Int,
    doc: "The result's quality for h264 and h265, 0 to 51 (x264/x265 CRF: lower is better and larger; 18 is visually \
          lossless). 400 parameter-not-for-output-format with any other output format (a still's png included).",
    default: Said("the box's output_crf, 18 unless configured"),
    min: Some(0),
    max: Some(51),
    stored: Stored::At("crf"),
    code: Some(codes::INVALID_ENCODER_SETTING),
    ..ROW
};

pub const ENCODER_PRESET: Parameter = Parameter {
    name: "encoder_preset",
    value: Value::Choice { names: || ENCODER_PRESETS.to_vec(), canonical: |raw| ENCODER_PRESETS.iter().copied().find(|name| name.eq_ignore_ascii_case(raw)) },
    doc: "The x264/x265 preset of an h264 or h265 result: slower ones make a smaller file at the same crf. 400 \
          parameter-not-for-output-format with any other output format. (`preset` is the box's named job settings.)",
    default: Said("the box's output_preset, veryfast unless configured"),
    stored: Stored::At("encoder_preset"),
    code: Some(codes::INVALID_ENCODER_SETTING),
    ..ROW
};

pub const METRICS: Parameter = Parameter {
    name: "metrics",
    value: Value::Bool,
    doc: "Report PSNR/SSIM of the output scaled back down (area average) to the input's size against the input, in \
          the job's metrics: a sanity figure that catches broken runs.",
    default: Is(Bool(false)),
    stored: Stored::At("metrics"),
    code: Some(codes::INVALID_BOOLEAN),
    flag: Flag::Switch,
    ..ROW
};

pub const VAE: Parameter = Parameter {
    name: "vae",
    doc: "The SeedVR2 VAE to encode and decode with. For a FlashVSR model, the Wan 2.1 VAE (family `wan21` in \
          /v1/models) to decode with (FlashVSR-Full) instead of the model's own TCDecoder (FlashVSR-Tiny, without vae).",
    default: Said("the DiT's pairs_with in /v1/models; for FlashVSR, none (its TCDecoder)"),
    stored: Stored::At("restore.vae"),
    ..ROW
};

pub const HEIGHT: Parameter = Parameter {
    name: "height",
    value: Value::U32,
    doc: "Target height; with width, the target AREA (the aspect ratio follows the input, sides cropped to multiples \
          of 16), instead of scale.",
    stored: Stored::At("restore.height"),
    ..ROW
};

pub const WIDTH: Parameter =
    Parameter { name: "width", value: Value::U32, doc: "Target width (see height).", stored: Stored::At("restore.width"), ..ROW };
pub const RESOLUTION: Parameter = Parameter {
    name: "resolution",
    value: Value::U32,
    doc: "The output's short side in pixels (at least 16), the long side following the aspect ratio: the ComfyUI \
          front-end's way to the size, instead of scale or height and width.",
    min: Some(CROP_MULTIPLE),
    stored: Stored::At("restore.resolution"),
    ..ROW
};

pub const MAX_RESOLUTION: Parameter = Parameter {
    name: "max_resolution",
    value: Value::U32,
    doc: "With resolution: the most the long side may be; a longer one is brought down to it, the short side \
          following (0 = no cap).",
    default: Is(Int(0)),
    stored: Stored::At("restore.max_resolution"),
    ..ROW
};

pub const FIT: Parameter = Parameter {
    name: "fit",
    value: Value::Choice { names: || Fit::ALL.map(Fit::as_str).to_vec(), canonical: |raw| Fit::parse(raw).map(Fit::as_str) },
    doc: "Sides that are not multiples of 16: crop keeps the centred multiples of 16 (the original's); pad pads the \
          resized frames up to them (copies of the edge) and cuts the padding off the output, which then has exactly \
          the resized size. FlashVSR works on multiples of 128, and its default is pad (the whole picture); crop is \
          its original's centre crop.",
    default: Is(Text("crop")),
    stored: Stored::At("restore.fit"),
    ..ROW
};

pub const SEED: Parameter = Parameter {
    name: "seed",
    value: Value::Int,
    doc: "Noise seed (the default is the original's); batch i uses seed + i. FlashVSR's default is 0, its original's.",
    default: Is(Int(DEFAULT_SEED)),
    stored: Stored::At("restore.seed"),
    ..ROW
};

pub const COLOR_FIX: Parameter = Parameter {
    name: "color_fix",
    value: Value::Choice {
        names: || ColorFix::ALL.map(ColorFix::as_str).to_vec(),
        canonical: |raw| ColorFix::parse(raw).map(ColorFix::as_str),
    },
    doc: "How the restored frames get the input's colours (wavelet is the original's; lab, hsv and wavelet_adaptive \
          are the ComfyUI front-end's). FlashVSR takes adain, its original's and its default, or none.",
    default: Is(Text("wavelet")),
    stored: Stored::At("restore.color_fix"),
    ..ROW
};

pub const BATCH_FRAMES: Parameter = Parameter {
    name: "batch_frames",
    value: Value::Int,
    doc: "Frames per DiT call, 4n + 1.",
    default: Is(Int(DEFAULT_BATCH_FRAMES)),
    stored: Stored::At("restore.batch_frames"),
    ..ROW
};

pub const BATCH_OVERLAP: Parameter = Parameter {
    name: "batch_overlap",
    value: Value::Int,
    doc: "Frames shared and cross-faded by consecutive batches.",
    default: Said("4 when batch_frames > 8, else 0"),
    stored: Stored::At("restore.batch_overlap"),
    ..ROW
};

pub const INTERPOLATE: Parameter = Parameter {
    name: "interpolate",
    value: Value::Int,
    doc: "Also interpolate, to this many times the frame rate, with RIFE before the upscaler: one decode, one encode.",
    min: Some(*FACTORS.start()),
    max: Some(*FACTORS.end()),
    stored: Stored::At("interpolate.factor"),
    ..ROW
};

pub const INPUT_NOISE_SCALE: Parameter = Parameter {
    name: "input_noise_scale",
    value: Value::Float,
    doc: "0 to 1: Gaussian noise added to the input frames before the VAE encode, 0.025 × the value in standard \
          deviation (the front-end's; against artefacts on some inputs). From the seed.",
    default: Is(Float(0.0)),
    min: Some(*NOISE_SCALES.start() as i64),
    max: Some(*NOISE_SCALES.end() as i64),
    stored: Stored::At("restore.input_noise_scale"),
    ..ROW
};

pub const LATENT_NOISE_SCALE: Parameter = Parameter {
    name: "latent_noise_scale",
    value: Value::Float,
    doc: "0 to 1: how far the DiT's condition latent is moved towards noise, at the front-end's resolution-shifted \
          timestep of 1000 × the value. From the seed.",
    default: Is(Float(0.0)),
    min: Some(*NOISE_SCALES.start() as i64),
    max: Some(*NOISE_SCALES.end() as i64),
    stored: Stored::At("restore.latent_noise_scale"),
    ..ROW
};

pub const PREPEND_FRAMES: Parameter = Parameter {
    name: "prepend_frames",
    value: Value::Int,
    doc: "Frames N..1 are put mirrored before the clip and dropped from the output, so its first frames are not \
          restored by a batch with no past.",
    default: Is(Int(0)),
    min: Some(0),
    max: Some(MAX_PREPEND_FRAMES),
    stored: Stored::At("restore.prepend_frames"),
    ..ROW
};

pub const UNIFORM_BATCHES: Parameter = Parameter {
    name: "uniform_batches",
    value: Value::Bool,
    doc: "Pad a scene's last, shorter batch to `batch_frames` by repeating its last frame (dropped after), so every \
          DiT call has the same shape: faster where a new shape costs (cuDNN's autotuning of each new convolution \
          shape on CUDA); the last batch's frames then differ slightly.",
    default: Is(Bool(false)),
    stored: Stored::At("restore.uniform_batches"),
    ..ROW
};

pub const FACTOR: Parameter = Parameter {
    name: "factor",
    value: Value::Int,
    doc: "Output frames per input frame.",
    default: Else(Int(DEFAULT_FACTOR), "unless fps is given"),
    min: Some(*FACTORS.start()),
    max: Some(*FACTORS.end()),
    stored: Stored::At("interpolate.factor"),
    ..ROW
};

pub const FPS: Parameter = Parameter {
    name: "fps",
    doc: "interpolate: the output's frame rate instead of a factor (60, 59.94 or 60000/1001): above the input's and at \
          most 8 times it. upscale, restore: the rate of an image sequence (a zip of PNG frames), `24` or `30000/1001` \
          (default 24); 400 parameter-not-for-input with any other input.",
    stored: Stored::ByOp(&[(Upscale, "sequence_fps"), (Restore, "sequence_fps"), (Interpolate, "interpolate.fps")]),
    ..ROW
};

pub const SCENE_THRESHOLD: Parameter = Parameter {
    name: "scene_threshold",
    value: Value::Float,
    doc: "The mean luma change (0 to 1) between two frames taken for a scene cut (0 turns the detection off): \
          interpolate gives a cut no blended frames (the earlier frame is held), restore starts a new batch there.",
    default: Is(Float(DEFAULT_THRESHOLD)),
    min: Some(*THRESHOLDS.start() as i64),
    max: Some(*THRESHOLDS.end() as i64),
    stored: Stored::ByOp(&[(Restore, "restore.scene_threshold"), (Interpolate, "interpolate.scene_threshold")]),
    ..ROW
};

pub const START: Parameter = Parameter {
    name: "start",
    value: Value::Seconds,
    doc: "Start this many seconds into the input (at the first frame at or after that time) instead of at its first \
          frame: seconds (`90`) or a timecode (`1:30`, `1:02:03.5`). Audio and subtitles are cut alike.",
    min: Some(0),
    stored: Stored::At("range.start"),
    ..ROW
};

pub const START_FRAME: Parameter = Parameter {
    name: "start_frame",
    value: Value::U64,
    doc: "The index of the first frame to take (0 is the first), instead of start.",
    stored: Stored::At("range.start_frame"),
    ..ROW
};

pub const FRAMES: Parameter = Parameter {
    name: "frames",
    value: Value::U64,
    doc: "Take at most this many frames from the start.",
    min: Some(1),
    stored: Stored::At("range.frames"),
    ..ROW
};

pub const DURATION: Parameter = Parameter {
    name: "duration",
    value: Value::Seconds,
    doc: "Take the frames that start within this many seconds, instead of frames (\"try the first 5 seconds\": \
          duration=5); a timecode (`0:05`, `1:00:00`) too.",
    stored: Stored::At("range.duration"),
    ..ROW
};

pub const CALLBACK_URL: Parameter = Parameter {
    name: "callback_url",
    doc: "An `http://` URL the box POSTs the finished job to (its JSON, as GET /v1/jobs/{id}), signed with the box's \
          callback_secret (header Vaebox-Signature: t=<unix s>,v1=<hex HMAC-SHA256 of \"<t>.<body>\">), retried with \
          back-off for a day until a 2xx answers; the job's `callback` records each try. 400 callback-not-configured \
          without a callback_secret, callback-host-not-allowed for a host not in callback_hosts, \
          callback-https-unsupported for https, invalid-callback-url otherwise.",
    flag: Flag::None,
    ..ROW
};

pub const FILENAME: Parameter = Parameter {
    name: "filename",
    doc: "Raw uploads only: the file's name (a multipart `file` part carries its own).",
    flag: Flag::None,
    ..ROW
};

/// Every row, in the document's order.
pub static PARAMETERS: &[Parameter] = &[
    PRESET, OP, MODEL, SCALE, PRIORITY, DTYPE, TILE, NORMALIZE, MEMORY_BUDGET_MIB, OUTPUT_FORMAT, CRF, ENCODER_PRESET,
    KEEP_AUDIO, METRICS, VAE, HEIGHT, WIDTH, RESOLUTION, MAX_RESOLUTION, FIT, SEED, COLOR_FIX, BATCH_FRAMES, BATCH_OVERLAP,
    INTERPOLATE, INPUT_NOISE_SCALE, LATENT_NOISE_SCALE, PREPEND_FRAMES, UNIFORM_BATCHES, FACTOR, FPS,
    SCENE_THRESHOLD, START, START_FRAME, FRAMES, DURATION, PARTS, CALLBACK_URL, FILENAME,
];

/// What every op takes: what to do, with which model, how urgently, in what precision, and who to tell.
const EVERY_OP: &[Parameter] = &[PRESET, OP, MODEL, PRIORITY, DTYPE, CALLBACK_URL, FILENAME];

/// The parameters `op` takes: `EVERY_OP`'s and its own. The one place that says which op takes what, by a
/// match on every op: a new op does not compile until it names its own (none is an answer, but a said one).
/// `start` … `duration` (a part of the input) are every op's that reads a video; a latent is decoded whole.
pub fn taken_by(op: Op) -> impl Iterator<Item = &'static Parameter> {
    let own: &'static [Parameter] = match op {
        Upscale => {
            &[SCALE, TILE, MEMORY_BUDGET_MIB, OUTPUT_FORMAT, CRF, ENCODER_PRESET, KEEP_AUDIO, METRICS, INTERPOLATE, FPS, START, START_FRAME, FRAMES, DURATION, PARTS]
        }
        VaeEncode => &[NORMALIZE, MEMORY_BUDGET_MIB, START, START_FRAME, FRAMES, DURATION],
        VaeDecode => &[MEMORY_BUDGET_MIB, OUTPUT_FORMAT, CRF, ENCODER_PRESET],
        VaeReconstruct => &[MEMORY_BUDGET_MIB, OUTPUT_FORMAT, CRF, ENCODER_PRESET, KEEP_AUDIO, START, START_FRAME, FRAMES, DURATION],
        Restore => &[
            SCALE, MEMORY_BUDGET_MIB, OUTPUT_FORMAT, CRF, ENCODER_PRESET, KEEP_AUDIO, VAE, HEIGHT, WIDTH, RESOLUTION, MAX_RESOLUTION, FIT, SEED,
            COLOR_FIX, BATCH_FRAMES, BATCH_OVERLAP, INPUT_NOISE_SCALE, LATENT_NOISE_SCALE, PREPEND_FRAMES, UNIFORM_BATCHES,
            FPS, SCENE_THRESHOLD, START, START_FRAME, FRAMES, DURATION, PARTS,
        ],
        Interpolate => &[OUTPUT_FORMAT, CRF, ENCODER_PRESET, KEEP_AUDIO, FACTOR, FPS, SCENE_THRESHOLD, START, START_FRAME, FRAMES, DURATION, PARTS],
    };
    EVERY_OP.iter().chain(own)
}
