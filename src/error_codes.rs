//! Every stable error code the box answers with, in one list. Clients match on these strings, so
//! a code is never renamed; the HTTP status that goes with each is chosen in `api::error`.

macro_rules! codes {
    ($($(#[doc = $doc:literal])+ $name:ident = $code:literal;)+) => {
        $($(#[doc = $doc])+ pub const $name: &str = $code;)+
        /// Every code above, in order (the OpenAPI document's `Error.code` enum lists the same).
        pub const ALL: &[&str] = &[$($name),+];
    };
}

codes! {
    // The request: names, fields and routes.
    /// A query parameter, form field or `params` key the endpoint does not take.
    UNKNOWN_PARAMETER = "unknown-parameter";
    /// A job parameter the job's op does not use (`seed` on an upscale), refused rather than ignored.
    PARAMETER_NOT_FOR_OP = "parameter-not-for-op";
    /// No route has this path.
    NOT_FOUND = "not-found";
    /// The path exists, the method does not (the `Allow` header lists those that do).
    METHOD_NOT_ALLOWED = "method-not-allowed";
    /// The query string cannot be read, or a value in it is not a number where one is needed.
    INVALID_QUERY = "invalid-query";
    /// The multipart body is malformed.
    INVALID_MULTIPART = "invalid-multipart";
    /// The `params` part is not a JSON object.
    INVALID_PARAMS = "invalid-params";
    /// A still picture (one frame) sent where a clip is needed: `interpolate`, or a range ("Try first").
    INPUT_IS_A_STILL = "input-is-a-still";
    /// A multipart form without a `file` part.
    MISSING_FILE = "missing-file";
    /// A multipart form with more than one `file` part.
    TOO_MANY_FILES = "too-many-files";
    /// The client stopped sending before the body was complete.
    UPLOAD_INTERRUPTED = "upload-interrupted";
    /// The upload is over `max_upload_bytes`.
    UPLOAD_TOO_LARGE = "upload-too-large";
    /// `max_queued_jobs` jobs are already waiting.
    QUEUE_FULL = "queue-full";
    /// A multipart field other than `file` is over 16 KiB.
    FIELD_TOO_LARGE = "field-too-large";
    /// The client sent nothing for `body_idle_timeout_s` in the middle of its body.
    UPLOAD_STALLED = "upload-stalled";
    /// `max_concurrent_uploads` uploads are already being received; refused before the body is read.
    TOO_MANY_UPLOADS = "too-many-uploads";
    /// The body arrived slower than `min_upload_rate_kib_s` over a 10 s window.
    UPLOAD_TOO_SLOW = "upload-too-slow";
    /// The box holds `max_connections` connections, or this address its share (`max_connections_per_client`):
    /// answered as soon as the connection is accepted, then closed.
    TOO_MANY_CONNECTIONS = "too-many-connections";
    /// This address has `max_event_streams_per_client` `/events` streams open, or all addresses together
    /// half of `max_connections`.
    TOO_MANY_STREAMS = "too-many-streams";
    /// A browser request (POST, DELETE) from a page of another origin that `cors_origins` does not list.
    FOREIGN_ORIGIN = "foreign-origin";
    /// The request's `Host` is a name this box does not have (DNS rebinding); `allowed_hosts` adds names.
    UNKNOWN_HOST = "unknown-host";
    /// A request with two `Host` or two `Origin` headers: which one a proxy and this box would each read is
    /// anyone's guess, so neither is trusted.
    DUPLICATE_HEADER = "duplicate-header";

    // What the job asks for.
    /// `op` is not one of the ops.
    UNKNOWN_OP = "unknown-op";
    /// No model of that name on this box.
    UNKNOWN_MODEL = "unknown-model";
    /// The model cannot do the op asked for.
    UNSUPPORTED_OP = "unsupported-op";
    /// The model is known but its files are not in the models folder.
    MODEL_WEIGHTS_MISSING = "model-weights-missing";
    /// `scale` is not one of the model's scales.
    INVALID_SCALE = "invalid-scale";
    /// A `restore` parameter (size, seed, colour fix, batch) that cannot run; the message names it.
    INVALID_RESTORE_PARAMETER = "invalid-restore-parameter";
    /// An `interpolate` parameter (factor, fps, scene_threshold) that cannot run, or an fps not above the input's.
    INVALID_INTERPOLATE_PARAMETER = "invalid-interpolate-parameter";
    /// `start`, `start_frame`, `frames`, `duration`: given twice, or not a time or a count.
    INVALID_RANGE = "invalid-range";
    /// The range starts past the input's end (or holds no frame).
    RANGE_OUTSIDE_INPUT = "range-outside-input";
    /// `preset` names no preset of this box.
    UNKNOWN_PRESET = "unknown-preset";
    /// `callback_url` is not an absolute `http://host[:port]/path` URL (no user name or password).
    INVALID_CALLBACK_URL = "invalid-callback-url";
    /// `callback_url` while the box has no `callback_secret` to sign its deliveries with.
    CALLBACK_NOT_CONFIGURED = "callback-not-configured";
    /// `callback_url`'s host is not in the box's `callback_hosts` (empty: webhooks go nowhere).
    CALLBACK_HOST_NOT_ALLOWED = "callback-host-not-allowed";
    /// `callback_url` is `https://`: the box's HTTP client has no TLS.
    CALLBACK_HTTPS_UNSUPPORTED = "callback-https-unsupported";
    /// `priority` is not an integer in -1000..=1000.
    INVALID_PRIORITY = "invalid-priority";
    /// `dtype` is not a precision (or, for `/v1/decode` and `/v1/encode`, a tensor dtype) this box takes.
    INVALID_DTYPE = "invalid-dtype";
    /// `tile` is neither 0 nor a side in 16..=8192.
    INVALID_TILE = "invalid-tile";
    /// `normalize` is not true or false.
    INVALID_NORMALIZE = "invalid-normalize";
    /// `keep_audio` or `metrics` is not true or false.
    INVALID_BOOLEAN = "invalid-boolean";
    /// `output_format` is not one of h264, h265, prores, ffv1, png, png16, safetensors, or not one the op
    /// writes (`safetensors` is for `vae_decode`; `vae_encode` writes a latent).
    INVALID_OUTPUT_FORMAT = "invalid-output-format";
    /// A video `output_format` (h264, h265, prores, ffv1) for a still picture: upscale and restore write
    /// a still as `png` or `png16`.
    OUTPUT_FORMAT_NOT_FOR_STILL = "output-format-not-for-still";
    /// `crf` is not a whole number from 0 to 51, or `encoder_preset` is not one of x264's presets.
    INVALID_ENCODER_SETTING = "invalid-encoder-setting";
    /// `crf` or `encoder_preset` with an output format other than h264 and h265 (a still's png included).
    PARAMETER_NOT_FOR_OUTPUT_FORMAT = "parameter-not-for-output-format";
    /// A parameter this input cannot use: `keep_audio` or `interpolate` with a still picture, `fps` (an
    /// image sequence's rate) with anything but a zip of PNG frames.
    PARAMETER_NOT_FOR_INPUT = "parameter-not-for-input";
    /// `fps` is not a positive frame rate up to 1000 (`24`, `30000/1001`).
    INVALID_FPS = "invalid-fps";
    /// `parts` is not `auto` or a whole number from 1 to 64, or asks for parts a job of this kind cannot be
    /// cut into (a still, a PNG result, `metrics`, `interpolate`, a FlashVSR model).
    INVALID_PARTS = "invalid-parts";
    /// A zip of frames with a member that is not a PNG picture.
    SEQUENCE_NOT_PNG = "sequence-not-png";
    /// A zip of PNG frames whose pictures are not all one size.
    SEQUENCE_MIXED_SIZES = "sequence-mixed-sizes";
    /// This box's ffmpeg has no encoder for the `output_format` (see `output_formats` in `/healthz`).
    OUTPUT_FORMAT_UNAVAILABLE = "output-format-unavailable";
    /// `memory_budget_mib` is not a whole number.
    INVALID_MEMORY_BUDGET = "invalid-memory-budget";
    /// `status` (listing jobs) is not a job status.
    INVALID_STATUS = "invalid-status";
    /// `normalize=true` for a VAE whose latent size has no published statistics.
    NORMALIZE_UNSUPPORTED = "normalize-unsupported";
    /// `/v1/decode`, `/v1/encode`: the URL names no model; a job without `model` whose op has no single
    /// model on this box to default to (none, or several: the message names them).
    MISSING_MODEL = "missing-model";
    /// `/v1/decode`, `/v1/encode`: `shape` is not a list of positive sizes of the expected rank (or its
    /// element count does not fit 64 bits).
    INVALID_SHAPE = "invalid-shape";
    /// `/v1/decode`, `/v1/encode`: a batch (the shape's first size) of more items than the queue holds
    /// (`max_queued_jobs`, or `max_queued_jobs_per_token`): each item is a job; the message names the limit.
    BATCH_TOO_LARGE = "batch-too-large";
    /// `/v1/encode`: the pixel tensor holds NaN or infinite values.
    TENSOR_NOT_FINITE = "tensor-not-finite";
    /// The box has access tokens and the call sent none, or one it does not know.
    UNAUTHORIZED = "unauthorized";
    /// The job's output would exceed `max_width`, `max_height` or `max_frames`.
    OUTPUT_TOO_LARGE = "output-too-large";
    /// Every worker heard of offers less device memory (`device_memory_mib`, a GPU's total) than the job
    /// needs: its weights on the device plus the working memory it asks for (`memory_budget_mib`).
    NO_WORKER_FITS = "no-worker-fits";
    /// The data dir's disk has less than `min_free_disk_mib` free, or filled up during the upload.
    INSUFFICIENT_STORAGE = "insufficient-storage";
    /// The job succeeded but its result file is no longer kept (a synchronous call's, or removed by hand).
    RESULT_GONE = "result-gone";
    /// A thumbnail or preview of a side that is not a video (a latent input, an output not made yet).
    PREVIEW_UNAVAILABLE = "preview-unavailable";
    /// `/v1/decode`, `/v1/encode`: a diffusers option this box does not implement.
    UNSUPPORTED_OPTION = "unsupported-option";
    /// `/v1/decode`, `/v1/encode`: the body's length does not match `shape` and `dtype`.
    TENSOR_SIZE_MISMATCH = "tensor-size-mismatch";

    // Jobs.
    /// No job with that id.
    JOB_NOT_FOUND = "job-not-found";
    /// A short id (the first characters of a job's id, as the page and the clients show it) that starts
    /// several jobs' ids: the message lists them.
    AMBIGUOUS_JOB_ID = "ambiguous-job-id";
    /// The job has no result yet, or cannot be deleted while it is queued or running.
    JOB_NOT_FINISHED = "job-not-finished";
    /// Cancelling a job that already ended.
    JOB_ALREADY_FINISHED = "job-already-finished";
    /// The whole clip of a job that ran over its whole input already (it has no range).
    JOB_HAS_NO_RANGE = "job-has-no-range";
    /// The whole clip of a job whose input is no longer kept (its files were removed).
    INPUT_GONE = "input-gone";
    /// The job was cancelled.
    CANCELLED = "cancelled";
    /// A running job stopped at a checkpoint to make way (a pause, another owner's turn, the server's stop); it
    /// goes on from there. Never a job's final error.
    MADE_WAY = "made-way";
    /// Pausing a job that has already ended, or resuming one that is not paused.
    JOB_NOT_PAUSABLE = "job-not-pausable";
    /// `keep=true` on a cancel of a job that makes no segments to keep (a still, a latent, a synchronous call).
    NOTHING_TO_KEEP = "nothing-to-keep";
    /// A priority over the token's `max_priority` (set by the box's admin).
    PRIORITY_OVER_LIMIT = "priority-over-limit";
    /// The stored job cannot be run as it stands (a model or scale that went away).
    INVALID_JOB = "invalid-job";
    /// The executor thread is gone; the server needs a restart.
    EXECUTOR_GONE = "executor-gone";
    /// The device ran out of memory, also after the smaller plans; or, on the CPU, not even the job's smallest plan fits the host's memory.
    OUT_OF_MEMORY = "out-of-memory";
    /// The data dir's disk filled up while the job wrote its output; the partial output is removed.
    DISK_FULL = "disk-full";
    /// The job's worker was lost (killed, cut off from the database) on each of its `max_attempts` runs;
    /// the message lists every loss.
    ATTEMPTS_EXHAUSTED = "attempts-exhausted";
    /// A part of a job run in parts failed for good; the message names the part and why.
    PART_FAILED = "part-failed";
    /// A synchronous call's job whose server restarted before it was answered: its caller is gone.
    CALLER_GONE = "caller-gone";

    // Media.
    /// The upload has zero bytes.
    EMPTY_FILE = "empty-file";
    /// ffprobe finds no video stream.
    NOT_A_VIDEO = "not-a-video";
    /// The video ends before its header says it should.
    TRUNCATED_MEDIA = "truncated-media";
    /// Over a configured limit: bytes, width, height, frames or duration.
    MEDIA_TOO_LARGE = "media-too-large";
    /// ffmpeg or ffprobe did not finish in time.
    MEDIA_TIMEOUT = "media-timeout";
    /// ffmpeg or ffprobe failed.
    FFMPEG_FAILED = "ffmpeg-failed";
    /// ffmpeg or ffprobe cannot be run.
    FFMPEG_MISSING = "ffmpeg-missing";
    /// Reading or writing a media file failed.
    MEDIA_IO = "media-io";
    /// The media layer was handed something inconsistent (a fault of this box).
    MEDIA_INVALID_REQUEST = "media-invalid-request";

    // Latents.
    /// Not a safetensors latent (or ComfyUI `.latent`) file.
    NOT_A_LATENT = "not-a-latent";
    /// The latent is not `[1, C, t, h, w]`.
    LATENT_BAD_SHAPE = "latent-bad-shape";
    /// The latent's metadata says what no clip can be (an `fps` of `0/0` or `-5/1`).
    LATENT_BAD_METADATA = "latent-bad-metadata";
    /// The latent's channels are not the model's.
    LATENT_CHANNEL_MISMATCH = "latent-channel-mismatch";
    /// The latent holds NaN or infinite values.
    LATENT_NOT_FINITE = "latent-not-finite";
    /// The latent was made by a model of another family.
    LATENT_MODEL_MISMATCH = "latent-model-mismatch";
    /// The latent marked `normalized` for a VAE with no published statistics to undo that with.
    LATENT_NORMALIZE_UNSUPPORTED = "latent-normalize-unsupported";
    /// Reading the latent file failed.
    LATENT_IO = "latent-io";

    // Models and the box.
    /// A model file cannot be read.
    MODEL_IO = "model-io";
    /// A model file is not what its family expects.
    MODEL_FORMAT = "model-format";
    /// A GGUF tensor is stored in a quantisation this box does not read.
    UNSUPPORTED_QUANTIZATION = "unsupported-quantization";
    /// The model does not support what the job needs of it.
    UNSUPPORTED_MODEL_OP = "unsupported-model-op";
    /// libtorch reported an error other than running out of memory.
    TORCH_ERROR = "torch-error";
    /// The job store (SQLite or PostgreSQL) failed.
    STORE_ERROR = "store-error";
    /// The job store cannot be reached (PostgreSQL down or cut off); nothing was stored: try again later.
    STORE_UNAVAILABLE = "store-unavailable";
    /// The shared storage (`storage`) cannot be reached or written: an upload is refused (nothing was
    /// queued), or a worker could not fetch a job's input or put its result.
    STORAGE_UNAVAILABLE = "storage-unavailable";
    /// A fault of this box not covered above (a panic in model code, a missing result file).
    INTERNAL_ERROR = "internal-error";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_kebab_case() {
        let mut seen = std::collections::BTreeSet::new();
        for code in ALL {
            assert!(seen.insert(code), "`{code}` is listed twice");
            let words: Vec<_> = code.split('-').collect();
            assert!(words.iter().all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase())), "`{code}` is not kebab-case");
        }
    }
}
