//! What a `/v1/decode` or `/v1/encode` call asks for, read from its query: the job every item of the batch
//! becomes, the tensor's layout, and what each item's header carries. Every parameter of `RemoteQuery` is
//! applied here or refused; none is read and dropped.
use std::collections::BTreeMap;

use axum::extract::Request;

use super::error::ApiError;
use super::fields;
use super::params::{self, JobFields, RemoteQuery};
use super::state::AppState;
use crate::config::Config;
use crate::error_codes as codes;
use crate::jobs::OutputFormat;
use crate::media::safetensors::{self, Dtype};
use crate::models::Op;
use crate::queue::{check_output_size, InputSize, JobRequest};

/// What the client sent besides the tensor.
pub struct RemoteCall {
    /// The job each item of the batch becomes.
    pub job: JobRequest,
    pub dtype: Dtype,
    /// One item of the batch, `[1, C, T, H, W]`: what each job reads.
    pub item_shape: [i64; 5],
    /// Items in the body (the shape's first size); each is decoded or encoded alone.
    pub batch: i64,
    /// `/v1/decode` of a 4-D latent: the answer is `[B, 3, H, W]`, images as the client sent latents of images.
    pub images: bool,
    /// Written into each item's tensor header, read by the executor as a latent's metadata
    /// (`normalized`).
    pub metadata: BTreeMap<String, String>,
}

impl RemoteCall {
    /// The body's shape as the client gave it.
    pub fn shape(&self) -> Vec<i64> {
        let [_, c, t, h, w] = self.item_shape;
        if self.images {
            vec![self.batch, c, h, w]
        } else {
            vec![self.batch, c, t, h, w]
        }
    }

    /// Bytes of one item (checked not to overflow when the call was parsed).
    pub fn item_bytes(&self) -> u64 {
        safetensors::checked_numel(&self.item_shape).unwrap_or(u64::MAX).saturating_mul(self.dtype.size())
    }
}

fn bad(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request(code, message)
}

/// `requests` sends a list as repeated keys (`shape=1&shape=16&...`); a JSON list is accepted too.
fn parse_shape(values: &[String]) -> Result<Vec<i64>, ApiError> {
    let shape: Option<Vec<i64>> = match values {
        [one] if one.trim_start().starts_with('[') => serde_json::from_str(one).ok(),
        many => many.iter().map(|v| v.trim().parse().ok()).collect(),
    };
    match shape {
        Some(shape) if !shape.is_empty() && shape.iter().all(|d| *d > 0) => Ok(shape),
        _ => Err(bad(codes::INVALID_SHAPE, format!("`shape` must list positive integers, got {values:?}"))),
    }
}

/// `[B, C, T, H, W]`, or `[B, C, H, W]` as one frame per item: the item's shape, the batch, and whether
/// the frame axis was added.
fn batch_of(shape: &[i64], op: Op) -> Result<([i64; 5], i64, bool), ApiError> {
    let channels = if op == Op::VaeDecode { "C" } else { "3" };
    match *shape {
        [b, c, t, h, w] => Ok(([1, c, t, h, w], b, false)),
        [b, c, h, w] => Ok(([1, c, 1, h, w], b, true)),
        // diffusers packs Flux-style latents to [B, seq, C] and sends height and width with them.
        [_, _, _] if op == Op::VaeDecode => Err(bad(
            codes::INVALID_SHAPE,
            format!("shape {shape:?}: packed latents ([B, sequence, C]) are not supported; send [B, C, t, h, w] or [B, C, h, w]"),
        )),
        _ => Err(bad(codes::INVALID_SHAPE, format!("shape {shape:?}: expected [B, {channels}, T, H, W] or [B, {channels}, H, W]"))),
    }
}

/// The query as named values, and the precision the VAE runs in. `shape` collects its repeats; any other
/// repeated name keeps its last value. `dtype` is the body's tensor dtype, which diffusers' clients always
/// append; an endpoint URL that names one itself (`?model=m&dtype=f32`) puts it first, and that first one
/// is the compute precision. Without it the job runs at the box's `dtype` (bf16 on CUDA): the tensor's
/// float32 made every remote decode run in f32, 53.7 s instead of about 1.3 s for 480p×81 on an H100.
fn read_query(request: &Request) -> Result<(RemoteQuery, Option<String>), ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(request.uri().query().unwrap_or(""))
        .map_err(|e| bad(codes::INVALID_QUERY, e.to_string()))?;
    let mut fields = serde_json::Map::new();
    let mut shape = Vec::new();
    let mut dtypes = Vec::new();
    for (key, value) in pairs {
        match key.as_str() {
            "shape" => shape.push(serde_json::Value::from(value)),
            "dtype" => {
                dtypes.push(value.clone());
                fields.insert(key, value.into());
            }
            _ => {
                fields.insert(key, value.into());
            }
        }
    }
    if !shape.is_empty() {
        fields.insert("shape".into(), shape.into());
    }
    let compute = if dtypes.len() > 1 { dtypes.first().cloned() } else { None };
    Ok((params::from_map(fields)?, compute))
}

/// `true`/`false` as the queue reads a yes or no (diffusers writes Python's `True`/`False`).
fn boolean(name: &str, raw: &Option<String>, code: &'static str) -> Result<Option<bool>, ApiError> {
    let Some(raw) = raw.as_deref() else { return Ok(None) };
    crate::queue::parameters::boolean(raw).map(Some).ok_or_else(|| bad(code, format!("`{name}` `{}` is not true or false", raw.trim())))
}

fn number(key: &str, value: &Option<String>) -> Result<Option<f64>, ApiError> {
    value.as_deref().map(|v| v.trim().parse::<f64>().map_err(|_| bad(codes::INVALID_QUERY, format!("`{key}` must be a number")))).transpose()
}

fn size(key: &str, value: &Option<String>) -> Result<Option<u32>, ApiError> {
    let parsed = value.as_deref().map(|v| v.trim().parse::<u32>().ok().filter(|n| *n > 0));
    match parsed {
        Some(None) => Err(bad(codes::INVALID_QUERY, format!("`{key}` must be a positive integer"))),
        Some(Some(n)) => Ok(Some(n)),
        None => Ok(None),
    }
}

/// The parameters only `/v1/decode` reads, refused by name on `/v1/encode`.
fn refuse_decode_only(query: &RemoteQuery) -> Result<(), ApiError> {
    let given = [
        ("output_type", &query.output_type),
        ("do_scaling", &query.do_scaling),
        ("partial_postprocess", &query.partial_postprocess),
        ("image_format", &query.image_format),
        ("height", &query.height),
        ("width", &query.width),
    ];
    let names: Vec<String> = given.iter().filter(|(_, value)| value.is_some()).map(|(name, _)| format!("`{name}`")).collect();
    if names.is_empty() {
        return Ok(());
    }
    Err(bad(codes::PARAMETER_NOT_FOR_OP, format!("/v1/encode does not take {} (only /v1/decode); leave it out", names.join(", "))))
}

/// Decode's own options: the answer's form, and what each latent's header says (normalized).
fn decode_options(query: &RemoteQuery, job: &mut JobRequest, batch: i64) -> Result<BTreeMap<String, String>, ApiError> {
    job.params.output_format = Some(match query.output_type.as_deref().unwrap_or("pt") {
        "pt" => OutputFormat::Safetensors,
        "mp4" if batch > 1 => {
            let why = format!("output_type=mp4 answers with one video; a batch of {batch} latents needs output_type=pt (or one call per latent)");
            return Err(bad(codes::UNSUPPORTED_OPTION, why));
        }
        "mp4" => OutputFormat::H264,
        other => return Err(bad(codes::UNSUPPORTED_OPTION, format!("output_type `{other}` is not supported for video; use pt or mp4"))),
    });
    if boolean("partial_postprocess", &query.partial_postprocess, codes::INVALID_BOOLEAN)? == Some(true) {
        return Err(bad(codes::UNSUPPORTED_OPTION, "partial_postprocess is not supported; use output_type=pt or mp4"));
    }
    // diffusers sends do_scaling=true when it has no scaling_factor: the latent is decoded as sent, the box
    // having no default factor of its own (normalize=true undoes a Wan pipeline's normalisation).
    let scaled = query.scaling_factor.is_some() || query.shift_factor.is_some();
    if boolean("do_scaling", &query.do_scaling, codes::INVALID_BOOLEAN)? == Some(false) && scaled {
        return Err(bad(codes::INVALID_QUERY, "do_scaling=false contradicts scaling_factor/shift_factor; leave out one or the other"));
    }
    // Only output_type=pil would use it, and that is refused above; a wrong value is still refused.
    if let Some(format) = query.image_format.as_deref().filter(|f| !matches!(*f, "png" | "jpg")) {
        return Err(bad(codes::INVALID_QUERY, format!("image_format `{format}` is not png or jpg")));
    }
    let mut metadata = BTreeMap::new();
    if boolean("normalize", &query.normalize, codes::INVALID_NORMALIZE)? == Some(true) {
        metadata.insert("normalized".into(), "true".into());
    }
    // diffusers documents height and width as the image size of a packed ([B, sequence, C]) latent, which
    // they unpack; a 4-D or 5-D latent has its size in its shape, and clients send what they like for it
    // (ComfyUI-HFRemoteVae: T·8 and h·8 for a video). They are checked as numbers and the frames come
    // back whole: read as a crop, they cut a video's frames to T·8 rows.
    size("height", &query.height)?;
    size("width", &query.width)?;
    Ok(metadata)
}

/// Each item of a batch is a job of its own, waiting in the queue with the others: a batch over what the
/// queue holds (`max_queued_jobs`, or one token's `max_queued_jobs_per_token`) is never taken, however
/// empty the queue, and is refused for its size rather than as a full queue.
fn check_batch(batch: i64, config: &Config) -> Result<(), ApiError> {
    let per_token = (!config.tokens.is_empty() && config.max_queued_jobs_per_token > 0).then_some(config.max_queued_jobs_per_token);
    let (limit, setting) = match per_token {
        Some(per_token) if per_token < config.max_queued_jobs => (per_token, "max_queued_jobs_per_token"),
        _ => (config.max_queued_jobs, "max_queued_jobs"),
    };
    if batch <= i64::from(limit) {
        return Ok(());
    }
    let why = format!("a batch of {batch} items is more than this box takes in one call: at most {limit} ({setting}; each item is a job waiting in the queue); send the batch in calls of {limit} items or fewer");
    Err(bad(codes::BATCH_TOO_LARGE, why))
}

pub fn parse_call(request: &Request, op: Op, app: &AppState) -> Result<RemoteCall, ApiError> {
    let (query, compute_dtype) = read_query(request)?;
    if query.model.is_none() {
        return Err(bad(codes::MISSING_MODEL, "choose the VAE in the endpoint URL, e.g. /v1/decode?model=NAME (see /v1/models)"));
    }
    if op == Op::VaeEncode {
        refuse_decode_only(&query)?;
    }
    let dtype_name = query.dtype.as_deref().unwrap_or("float32");
    let dtype = Dtype::parse_torch(dtype_name)
        .filter(|d| *d != Dtype::U8)
        .ok_or_else(|| bad(codes::INVALID_DTYPE, format!("tensor dtype `{dtype_name}` is not float32, float16 or bfloat16")))?;
    let shape = parse_shape(&query.shape)?;
    let (item_shape, batch, frame_added) = batch_of(&shape, op)?;
    check_batch(batch, &app.config)?;
    if safetensors::checked_numel(&shape).and_then(|n| n.checked_mul(dtype.size())).is_none() {
        return Err(bad(codes::INVALID_SHAPE, format!("shape {shape:?} has more elements than a tensor can hold")));
    }
    let latent_scaling = number("scaling_factor", &query.scaling_factor)?;
    if latent_scaling == Some(0.0) {
        return Err(bad(codes::INVALID_QUERY, "`scaling_factor` must not be 0"));
    }
    let latent_shift = number("shift_factor", &query.shift_factor)?;
    let given = [
        ("model", query.model.clone()),
        ("dtype", compute_dtype),
        ("priority", query.priority.clone()),
        ("tile", query.tile.clone()),
        // Decoding undoes it from the latent's header (below), as for a latent file marked normalized.
        ("normalize", if op == Op::VaeEncode { query.normalize.clone() } else { None }),
        ("memory_budget_mib", query.memory_budget_mib.clone()),
    ];
    let fields = given
        .into_iter()
        .filter_map(|(name, value)| Some((name, value?)))
        .fold(JobFields::default().with("op", op.as_str()), |fields, (name, value)| fields.with(name, value));
    let mut job = fields::job_request(&fields, &app.config, None)?;
    job.params.latent_scaling = latent_scaling;
    job.params.latent_shift = latent_shift;
    let mut metadata = BTreeMap::new();
    if op == Op::VaeDecode {
        metadata = decode_options(&query, &mut job, batch)?;
        check_output_size(&job, &InputSize::Latent(item_shape), &app.config.media_limits())?;
    }
    Ok(RemoteCall { job, dtype, item_shape, batch, images: op == Op::VaeDecode && frame_added, metadata })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_cut_into_items_of_one() {
        assert_eq!(batch_of(&[2, 16, 3, 4, 6], Op::VaeDecode).unwrap(), ([1, 16, 3, 4, 6], 2, false));
        assert_eq!(batch_of(&[3, 16, 4, 6], Op::VaeDecode).unwrap(), ([1, 16, 1, 4, 6], 3, true));
        assert_eq!(batch_of(&[1, 3, 16, 16], Op::VaeEncode).unwrap(), ([1, 3, 1, 16, 16], 1, true));
        for (shape, op) in [(&[1, 256, 16][..], Op::VaeDecode), (&[1, 3, 16][..], Op::VaeEncode), (&[1, 1, 16, 1, 2, 2][..], Op::VaeDecode)] {
            assert_eq!(batch_of(shape, op).unwrap_err().status_and_code().1, codes::INVALID_SHAPE, "{shape:?}");
        }
        assert!(batch_of(&[1, 256, 16], Op::VaeDecode).unwrap_err().to_string().contains("packed"));
    }
}
