//! Request parameters as typed structs. A name the endpoint does not take is refused (400
//! `unknown-parameter`, naming it) instead of ignored: a typo like `scal=2` must not quietly run
//! the defaults. The names come from each struct's own `Deserialize`, so there is no second list; the
//! OpenAPI document describes each struct's fields from their `#[param]`s and doc comments.
use serde::de::{DeserializeOwned, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::openapi::path::ParameterIn;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, ToSchema};

use super::error::ApiError;
use crate::device::DtypeChoice;
use crate::error_codes as codes;
use crate::jobs::{JobStatus, OutputFormat};
use crate::models::Op;
use crate::models::restore::colorfix::ColorFix;
use crate::models::restore::prepare::Fit;
use crate::queue::PreviewSide;

/// The fields of `POST /v1/jobs`: query parameters of a raw upload, form fields, or keys of a
/// `params` JSON part. Values stay text here; each is checked where its meaning is, with its own code.
#[derive(Debug, Default, Clone, Deserialize, serde::Serialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct JobFields {
    /// A preset from /v1/presets (the box's `[presets.NAME]`): its fields fill in those this
    /// submission does not give.
    #[param(value_type = String, required = false)]
    pub preset: Option<String>,
    /// What to do with the upload.
    #[param(value_type = Op, inline, required = false, default = "upscale")]
    pub op: Option<String>,
    /// A model from /v1/models that can do `op`.
    #[param(value_type = String, required = false, default = "realesrgan-animevideov3")]
    pub model: Option<String>,
    /// Output size over input size, one of the model's `scales` in /v1/models (default 4;
    /// restore: 2).
    #[param(value_type = Scale, inline, required = false, default = 4)]
    pub scale: Option<String>,
    /// Higher runs first; FIFO among equals.
    #[param(value_type = i64, required = false, default = 0, minimum = -1000, maximum = 1000)]
    pub priority: Option<String>,
    /// The precision the model runs in; auto is bf16 on CUDA and on CPUs with native bf16, else f32.
    #[param(value_type = DtypeChoice, inline, required = false, default = "auto")]
    pub dtype: Option<String>,
    /// Input tile side in pixels: 0 = whole frames, else 16..=8192 (default: the configured tile).
    #[param(value_type = i64, required = false, minimum = 0, maximum = 8192)]
    pub tile: Option<String>,
    /// Apply the published latent mean/std (SeedVR2: scaling factor). Refused at submission
    /// with 400 normalize-unsupported for a VAE whose latent size has no published statistics (Wan 2.1
    /// other than 16 channels, Wan 2.2 other than 48; see latent_channels in /v1/models).
    #[param(value_type = bool, required = false)]
    pub normalize: Option<String>,
    /// Working memory for this job in MiB (0 = none); overrides the configured memory_budget_mib.
    #[param(value_type = u64, required = false, minimum = 0)]
    pub memory_budget_mib: Option<String>,
    /// The result's format (default: the box's output_format, h264 unless configured; png for a still
    /// picture): h264 (8-bit MP4), h265 (10-bit MP4), prores (ProRes 422 HQ MOV), ffv1 (lossless 16-bit
    /// RGB MKV), png (8-bit: one PNG for a still, else a zip of PNG frames; a video's png is png16), png16
    /// (16-bit from the float output, likewise), safetensors (vae_decode only: the float frames). 400
    /// output-format-not-for-still for a video format on a still (upscale, restore); 400
    /// output-format-unavailable when this box's ffmpeg lacks the encoder (output_formats in /healthz).
    #[param(value_type = OutputFormat, inline, required = false)]
    pub output_format: Option<String>,
    /// Copy the input's audio, subtitles and chapters into the result where its container takes them
    /// (default true; a PNG zip has none).
    #[param(value_type = bool, required = false, default = true)]
    pub keep_audio: Option<String>,
    /// Report PSNR/SSIM of the output scaled back down (area average) to the input's size
    /// against the input, in the job's metrics: a sanity figure that catches broken runs.
    #[param(value_type = bool, required = false, default = false)]
    pub metrics: Option<String>,
    /// The SeedVR2 VAE to encode and decode with (default: the DiT's pairs_with in /v1/models).
    #[param(value_type = String, required = false)]
    pub vae: Option<String>,
    /// Target height; with width, the target AREA (the aspect ratio follows the input, sides
    /// cropped to multiples of 16), instead of scale.
    #[param(value_type = u32, required = false)]
    pub height: Option<String>,
    /// Target width (see height).
    #[param(value_type = u32, required = false)]
    pub width: Option<String>,
    /// The output's short side in pixels (at least 16), the long side following the aspect ratio: the
    /// ComfyUI front-end's way to the size, instead of scale or height and width.
    #[param(value_type = u32, required = false, minimum = 16)]
    pub resolution: Option<String>,
    /// With resolution: the most the long side may be; a longer one is brought down to it, the short
    /// side following (0 = no cap, the default).
    #[param(value_type = u32, required = false, default = 0)]
    pub max_resolution: Option<String>,
    /// Sides that are not multiples of 16: crop keeps the centred multiples of 16 (the original's);
    /// pad pads the resized frames up to them (copies of the edge) and cuts the padding off the
    /// output, which then has exactly the resized size.
    #[param(value_type = Fit, inline, required = false, default = "crop")]
    pub fit: Option<String>,
    /// Noise seed (default 666, the original's); batch i uses seed + i.
    #[param(value_type = i64, required = false)]
    pub seed: Option<String>,
    /// The colour fix (default wavelet, the original's; lab, hsv and wavelet_adaptive are the ComfyUI
    /// front-end's).
    #[param(value_type = ColorFix, inline, required = false)]
    pub color_fix: Option<String>,
    /// Frames per DiT call, 4n + 1 (default 21).
    #[param(value_type = i64, required = false)]
    pub batch_frames: Option<String>,
    /// Frames shared and cross-faded by consecutive batches (default 4 when batch_frames > 8,
    /// else 0).
    #[param(value_type = i64, required = false)]
    pub batch_overlap: Option<String>,
    /// upscale: also interpolate, to this many times the frame rate (2 to 4), with RIFE before the
    /// upscaler: one decode, one encode.
    #[param(value_type = i64, required = false, minimum = 2, maximum = 4)]
    pub interpolate: Option<String>,
    /// 0 to 1: Gaussian noise added to the input frames before the VAE encode, 0.025 × the value in
    /// standard deviation (the front-end's; against artefacts on some inputs). From the seed. Default 0.
    #[param(value_type = f64, required = false, default = 0, minimum = 0, maximum = 1)]
    pub input_noise_scale: Option<String>,
    /// 0 to 1: how far the DiT's condition latent is moved towards noise, at the front-end's
    /// resolution-shifted timestep of 1000 × the value. From the seed. Default 0.
    #[param(value_type = f64, required = false, default = 0, minimum = 0, maximum = 1)]
    pub latent_noise_scale: Option<String>,
    /// 0 to 32: frames N..1 are put mirrored before the clip and dropped from the output, so its first
    /// frames are not restored by a batch with no past. Default 0.
    #[param(value_type = i64, required = false, default = 0, minimum = 0, maximum = 32)]
    pub prepend_frames: Option<String>,
    /// interpolate: output frames per input frame, 2 to 4 (default 2 unless fps is given).
    #[param(value_type = i64, required = false, minimum = 2, maximum = 4)]
    pub factor: Option<String>,
    /// interpolate: the output's frame rate instead of a factor (60, 59.94 or 60000/1001): above the
    /// input's and at most 8 times it. upscale, restore: the rate of an image sequence (a zip of PNG
    /// frames), `24` or `30000/1001` (default 24); 400 parameter-not-for-input with any other input.
    #[param(value_type = String, required = false)]
    pub fps: Option<String>,
    /// interpolate: the mean luma change (0 to 1) between two frames taken for a scene cut, which gets
    /// no blended frames (the earlier frame is held); 0 turns the detection off (default 0.1).
    #[param(value_type = f64, required = false, minimum = 0, maximum = 1)]
    pub scene_threshold: Option<String>,
    /// Every op but vae_decode: start this many seconds into the input (at the first frame at or after
    /// that time) instead of at its first frame. Audio and subtitles are cut alike.
    #[param(value_type = f64, required = false, minimum = 0)]
    pub start: Option<String>,
    /// Every op but vae_decode: the index of the first frame to take (0 is the first), instead of start.
    #[param(value_type = i64, required = false, minimum = 0)]
    pub start_frame: Option<String>,
    /// Every op but vae_decode: take at most this many frames from the start.
    #[param(value_type = i64, required = false, minimum = 1)]
    pub frames: Option<String>,
    /// Every op but vae_decode: take the frames that start within this many seconds, instead of frames
    /// ("try the first 5 seconds": duration=5).
    #[param(value_type = f64, required = false)]
    pub duration: Option<String>,
    /// Every op: an `http://` URL the box POSTs the finished job to (its JSON, as GET /v1/jobs/{id}),
    /// signed with the box's callback_secret (header Vaebox-Signature: t=<unix s>,v1=<hex HMAC-SHA256 of
    /// "<t>.<body>">), retried with back-off for a day until a 2xx answers; the job's `callback` records each
    /// try. 400 callback-not-configured without a callback_secret, callback-host-not-allowed for a host not in
    /// callback_hosts, callback-https-unsupported for https, invalid-callback-url otherwise.
    #[param(value_type = String, required = false)]
    pub callback_url: Option<String>,
    /// Raw uploads only: the file's name (a multipart `file` part carries its own).
    #[param(value_type = String, required = false)]
    pub filename: Option<String>,
}

/// `GET /v1/jobs`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only the jobs in this status.
    #[param(value_type = JobStatus, inline, required = false)]
    pub status: Option<String>,
    /// At most this many jobs, clamped to 1..=500.
    #[param(value_type = i64, required = false, default = 50, minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// Jobs to skip (the list's `next_offset`).
    #[param(value_type = i64, required = false, default = 0, minimum = 0)]
    pub offset: Option<i64>,
}

/// `GET /v1/jobs/{id}/result`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ResultQuery {
    /// true (or 1): `Content-Disposition: inline`, so a browser plays or shows the file instead of saving it.
    #[param(value_type = bool, required = false, default = false)]
    pub inline: Option<String>,
    /// The access token, for a link that cannot send a header.
    #[param(value_type = String, required = false)]
    pub access_token: Option<String>,
}

/// `GET /v1/jobs/{id}/preview`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PreviewQuery {
    /// Which side: the job's input or its output.
    #[param(value_type = PreviewSide, inline, required = false, default = "output")]
    pub side: Option<String>,
    /// The access token, for a player that cannot send a header.
    #[param(value_type = String, required = false)]
    pub access_token: Option<String>,
}

/// `GET /v1/jobs/{id}/thumbnail`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TokenQuery {
    /// The access token, for an image that cannot send a header.
    #[param(value_type = String, required = false)]
    pub access_token: Option<String>,
}

/// A yes/no query value: `true`/`1` or `false`/`0`.
pub fn flag(name: &str, value: Option<&str>) -> Result<bool, ApiError> {
    match value {
        None | Some("false" | "0") => Ok(false),
        Some("true" | "1") => Ok(true),
        Some(other) => Err(ApiError::bad_request(codes::INVALID_QUERY, format!("`{name}` is true or false, not `{other}`"))),
    }
}

/// The query of `POST /v1/decode` and `/v1/encode`: the endpoint's own (`model` and the job fields
/// that apply), and everything diffusers' `remote_decode` / `remote_encode` send. Each is applied or
/// refused (src/api/remote_call.rs); the decode-only ones are refused by name on `/v1/encode`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RemoteQuery {
    /// The VAE, a model from /v1/models (400 missing-model without it).
    #[param(value_type = String, required = true)]
    pub model: Option<String>,
    /// The body's tensor dtype (diffusers' `dtype`, the last one given). The VAE runs at the box's `dtype`
    /// (bf16 on CUDA), or at the first `dtype` where the query names two: the endpoint URL's own
    /// (`/v1/decode?model=m&dtype=f32`), before the one diffusers appends.
    #[param(value_type = TensorDtype, inline, required = false, default = "float32")]
    pub dtype: Option<String>,
    /// decode: [B, C, t, h, w], or [B, C, h, w] as one frame each; encode: [B, 3, T, H, W] or [B, 3, H, W]
    /// with values in [-1, 1]. Each of the B items is a job of its own, the answer has them all. Packed
    /// latents ([B, sequence, C]) are refused (invalid-shape). `requests` sends a list as repeated keys; a
    /// JSON list in one value is accepted too.
    #[serde(default)]
    #[param(value_type = Vec<i64>, required = true, style = Form, explode)]
    pub shape: Vec<String>,
    /// decode: the answer as a tensor (pt) or an MP4 (mp4, one latent: a batch is refused with
    /// unsupported-option); pil is refused (unsupported-option). Not for encode (parameter-not-for-op).
    #[param(value_type = RemoteOutput, inline, required = false, default = "pt")]
    pub output_type: Option<String>,
    /// decode: z / scaling_factor + shift_factor; encode: (z - shift_factor) * scaling_factor.
    #[param(value_type = f64, required = false)]
    pub scaling_factor: Option<String>,
    /// See scaling_factor.
    #[param(value_type = f64, required = false)]
    pub shift_factor: Option<String>,
    /// decode: sent by diffusers' remote_decode as true when it has no scaling_factor; the box has no default
    /// factor, so true scales by scaling_factor/shift_factor when given and not at all otherwise; false with
    /// either of them is refused (invalid-query).
    #[param(value_type = bool, required = false)]
    pub do_scaling: Option<String>,
    /// decode: sent by diffusers' remote_decode; true is refused with 400 unsupported-option.
    #[param(value_type = bool, required = false, default = false)]
    pub partial_postprocess: Option<String>,
    /// decode: sent by diffusers' remote_decode for output_type=pil, which is refused; checked to be png or
    /// jpg (invalid-query), it changes nothing else.
    #[param(value_type = ImageFormat, inline, required = false)]
    pub image_format: Option<String>,
    /// decode: the frames' height, at most the decoded one: the frames are cropped to it, as for a latent
    /// file whose source was padded (invalid-query above it).
    #[param(value_type = i64, required = false)]
    pub height: Option<String>,
    /// decode: the frames' width; see height.
    #[param(value_type = i64, required = false)]
    pub width: Option<String>,
    /// As for POST /v1/jobs.
    #[param(value_type = i64, required = false, default = 0, minimum = -1000, maximum = 1000)]
    pub priority: Option<String>,
    /// As for POST /v1/jobs, where the VAE ops do not take it: refused (parameter-not-for-op).
    #[param(value_type = i64, required = false, minimum = 0, maximum = 8192)]
    pub tile: Option<String>,
    /// encode: as for POST /v1/jobs (vae_encode). decode: the latent is normalized; the box undoes it with
    /// the VAE's published statistics (after scaling_factor/shift_factor), 422 latent-normalize-unsupported
    /// for a VAE without them.
    #[param(value_type = bool, required = false)]
    pub normalize: Option<String>,
    /// As for POST /v1/jobs.
    #[param(value_type = u64, required = false, minimum = 0)]
    pub memory_budget_mib: Option<String>,
}

// The values of fields that stay text in the structs above, for the document only; the code that reads
// each field refuses any other value with its own code.
/// Every scale some op takes: restore 1 to 4, upscale the model's own (`scales` in /v1/models).
#[derive(ToSchema)]
#[repr(i64)]
#[allow(dead_code)]
enum Scale {
    X1 = 1,
    X2 = 2,
    X3 = 3,
    X4 = 4,
}

#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum TensorDtype {
    Float32,
    Float16,
    Bfloat16,
}

#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum RemoteOutput {
    Pt,
    Mp4,
}

#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum ImageFormat {
    Png,
    Jpg,
}

/// The multipart form of `POST /v1/jobs`: one `file` part, and the job's fields as form fields or in one
/// `params` JSON part. Its fields are `JobFields`' own parameters (less `filename`), so the two cannot drift.
pub struct UploadForm;

impl utoipa::PartialSchema for UploadForm {
    fn schema() -> RefOr<Schema> {
        let file = ObjectBuilder::new().schema_type(Type::String).format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)));
        let params = ObjectBuilder::new().schema_type(Type::String).description(Some("a JSON object of the fields"));
        let mut form = ObjectBuilder::new().property("file", file).required("file").property("params", params);
        for parameter in JobFields::into_params(|| Some(ParameterIn::Query)) {
            let (Some(mut schema), false) = (parameter.schema, parameter.name == "filename") else { continue };
            super::openapi::unwrap_one_item_one_ofs(&mut schema);
            if let RefOr::T(Schema::Object(object)) = &mut schema {
                object.description = parameter.description;
            }
            form = form.property(parameter.name, schema);
        }
        form.into()
    }
}

impl utoipa::ToSchema for UploadForm {}

/// The names `T` takes, read from its derived `Deserialize` (the list `deny_unknown_fields` checks).
pub fn field_names<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Names<'a>(&'a mut &'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for Names<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(serde::de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(serde::de::Error::custom("only the names were wanted"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut names: &'static [&'static str] = &[];
    let _ = T::deserialize(Names(&mut names));
    names
}

/// Refuses every name in `given` that `T` does not take, naming each (with the nearest known name).
pub fn refuse_unknown<'a, T: DeserializeOwned>(given: impl IntoIterator<Item = &'a str>) -> Result<(), ApiError> {
    let known = field_names::<T>();
    let mut unknown: Vec<&str> = Vec::new();
    for name in given.into_iter().filter(|name| !known.contains(name)) {
        if !unknown.contains(&name) {
            unknown.push(name);
        }
    }
    if unknown.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = unknown
        .iter()
        .map(|name| match nearest(name, known) {
            Some(near) => format!("`{name}` (did you mean `{near}`?)"),
            None => format!("`{name}`"),
        })
        .collect();
    let noun = if unknown.len() == 1 { "parameter" } else { "parameters" };
    Err(ApiError::bad_request(
        codes::UNKNOWN_PARAMETER,
        format!("unknown {noun} {}; this endpoint takes {}", named.join(", "), known.join(", ")),
    ))
}

/// A typo is at most two edits away (a transposition counts as one) and shorter than the name.
fn nearest(name: &str, known: &[&'static str]) -> Option<&'static str> {
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(name, k), *k))
        .filter(|(distance, k)| *distance <= 2 && *distance < name.len().min(k.len()))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

/// A query string as `T`, refusing unknown names first. A repeated name is refused by serde
/// (ambiguous), a value of the wrong kind names itself in serde's message.
pub fn from_query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).map_err(invalid_query)?;
    refuse_unknown::<T>(pairs.iter().map(|(name, _)| name.as_str()))?;
    serde_urlencoded::from_str(query).map_err(invalid_query)
}

/// Named values (form fields, a `params` object, a query already split into pairs) as `T`.
pub fn from_map<T: DeserializeOwned>(fields: Map<String, Value>) -> Result<T, ApiError> {
    refuse_unknown::<T>(fields.keys().map(String::as_str))?;
    serde_json::from_value(Value::Object(fields)).map_err(invalid_query)
}

fn invalid_query(e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(codes::INVALID_QUERY, format!("cannot read the parameters: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(result: Result<impl std::fmt::Debug, ApiError>) -> (&'static str, String) {
        let error = result.expect_err("should be refused");
        (error.status_and_code().1, error.to_string())
    }

    #[test]
    fn names_come_from_the_struct() {
        assert_eq!(field_names::<ListQuery>(), ["status", "limit", "offset"]);
        assert!(field_names::<JobFields>().contains(&"memory_budget_mib"));
        assert!(field_names::<RemoteQuery>().contains(&"partial_postprocess"));
    }

    #[test]
    fn unknown_names_are_refused_by_name_with_a_suggestion() {
        let (code, message) = refusal(from_query::<JobFields>("op=upscale&scal=2&modle=x"));
        assert_eq!(code, "unknown-parameter");
        assert!(message.contains("`scal` (did you mean `scale`?)"), "{message}");
        assert!(message.contains("`modle` (did you mean `model`?)"), "{message}");
        let (code, message) = refusal(from_query::<ListQuery>("status=queued&colour=red"));
        assert_eq!(code, "unknown-parameter");
        assert!(message.contains("`colour`") && !message.contains("did you mean"), "{message}");
        let (code, _) = refusal(from_map::<JobFields>(Map::from_iter([("sclae".to_string(), Value::from("2"))])));
        assert_eq!(code, "unknown-parameter");
    }

    #[test]
    fn known_names_are_read() {
        let fields: JobFields = from_query("op=upscale&scale=2&filename=a.mp4").unwrap();
        assert_eq!((fields.op.as_deref(), fields.scale.as_deref(), fields.model), (Some("upscale"), Some("2"), None));
        let list: ListQuery = from_query("limit=5").unwrap();
        assert_eq!((list.limit, list.offset), (Some(5), None));
        let (code, _) = refusal(from_query::<ListQuery>("limit=many"));
        assert_eq!(code, "invalid-query");
        let remote: RemoteQuery = from_map(Map::from_iter([
            ("shape".to_string(), Value::from(vec!["1", "16"])),
            ("model".to_string(), Value::from("m")),
        ]))
        .unwrap();
        assert_eq!(remote.shape, ["1", "16"]);
    }

    /// What /openapi.json lists is exactly what each endpoint takes, no more and no less.
    #[test]
    fn the_openapi_document_lists_the_names_each_endpoint_takes() {
        use std::collections::BTreeSet;
        use utoipa::OpenApi;
        let doc = serde_json::to_value(crate::api::openapi::ApiDoc::openapi()).unwrap();
        let listed = |path: &str, method: &str| -> BTreeSet<String> {
            let parameters = doc["paths"][path][method]["parameters"].as_array().unwrap();
            parameters.iter().filter(|p| p["in"] == "query").map(|p| p["name"].as_str().unwrap().to_string()).collect()
        };
        let taken = |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| n.to_string()).collect() };
        assert_eq!(listed("/v1/jobs", "post"), taken(field_names::<JobFields>()));
        assert_eq!(listed("/v1/jobs", "get"), taken(field_names::<ListQuery>()));
        assert_eq!(listed("/v1/decode", "post"), taken(field_names::<RemoteQuery>()));
        assert_eq!(listed("/v1/encode", "post"), taken(field_names::<RemoteQuery>()));
        let form = &doc["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]["$ref"];
        let form = form.as_str().unwrap().strip_prefix("#/components/schemas/").unwrap();
        let form = &doc["components"]["schemas"][form];
        assert_eq!(form["required"], serde_json::json!(["file"]));
        let form: BTreeSet<String> =
            form["properties"].as_object().unwrap().keys().filter(|k| *k != "file" && *k != "params").cloned().collect();
        let mut fields = taken(field_names::<JobFields>());
        fields.remove("filename");
        assert_eq!(form, fields);
    }
}
