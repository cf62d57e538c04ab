//! Request parameters as typed structs. A name the endpoint does not take is refused (400
//! `unknown-parameter`, naming it) instead of ignored: a typo like `scal=2` must not quietly run
//! the defaults. The names come from each struct's own `Deserialize`, so there is no second list; the
//! OpenAPI document describes each struct's fields from their `#[param]`s and doc comments, and the job
//! fields from the queue's table of parameters.
use serde::de::{DeserializeOwned, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::openapi::extensions::ExtensionsBuilder;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::Required;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, ToSchema};

use super::error::ApiError;
use crate::error_codes as codes;
use crate::jobs::JobStatus;
use crate::queue::PreviewSide;

/// The fields of `POST /v1/jobs` (query parameters of a raw upload, form fields, or keys of a `params` JSON
/// part): the queue's table of job parameters, described here from its rows.
pub use crate::queue::JobFields;

const OPS_EXTENSION: &str = "x-vaebox-ops";

/// Each row as a query parameter: its kind, bounds and default as the schema, and the ops that take it both
/// in its description for people and as `x-vaebox-ops` for generated clients (clients/python/generate.py).
impl IntoParams for JobFields {
    fn into_params(parameter_in: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let parameter_in = parameter_in().unwrap_or(ParameterIn::Query);
        crate::queue::PARAMETERS
            .iter()
            .map(|row| {
                let ops: Vec<&str> = row.ops().map(|op| op.as_str()).collect();
                let mut description = String::new();
                if !row.takes_every_op() {
                    description.push_str(&format!("Ops: {}. ", ops.join(", ")));
                }
                description.push_str(row.doc);
                if let Some(words) = row.default_words() {
                    description.push_str(&format!(" Default: {words}."));
                }
                ParameterBuilder::new()
                    .name(row.name)
                    .parameter_in(parameter_in.clone())
                    .required(Required::False)
                    .description(Some(description))
                    .schema(Some(schema_of(row)))
                    .extensions(Some(ExtensionsBuilder::new().add(OPS_EXTENSION, serde_json::json!(ops)).build()))
                    .build()
            })
            .collect()
    }
}

fn schema_of(row: &crate::queue::Parameter) -> ObjectBuilder {
    use crate::queue::parameters::Value as Kind;
    let format = |known| Some(SchemaFormat::KnownFormat(known));
    let (kind, format, least) = match &row.value {
        Kind::Text | Kind::Choice { .. } => (Type::String, None, None),
        Kind::Bool => (Type::Boolean, None, None),
        Kind::Int => (Type::Integer, format(KnownFormat::Int64), None),
        Kind::U32 => (Type::Integer, format(KnownFormat::Int32), Some(0)),
        Kind::U64 => (Type::Integer, format(KnownFormat::Int64), Some(0)),
        Kind::IntOf(_) => (Type::Integer, None, None),
        Kind::Float => (Type::Number, format(KnownFormat::Double), None),
        // A number or a timecode (`1:30`): text in the schema, as the query string and the form send it.
        Kind::Seconds => (Type::String, None, None),
    };
    let values: Option<Vec<Value>> = match &row.value {
        Kind::IntOf(values) => Some(values.iter().map(|v| Value::from(*v)).collect()),
        Kind::Choice { names, .. } => Some(names().into_iter().map(Value::from).collect()),
        Kind::Text | Kind::Bool | Kind::Int | Kind::U32 | Kind::U64 | Kind::Float | Kind::Seconds => None,
    };
    ObjectBuilder::new()
        .schema_type(kind)
        .format(format)
        .default(row.default_value())
        .enum_values(values)
        .minimum(match row.value {
            Kind::Seconds => None,
            _ => row.min.or(least),
        })
        .maximum(row.max)
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
    /// The access token, for a client that cannot send a header (README: allowed on every GET).
    #[param(value_type = String, required = false)]
    pub access_token: Option<String>,
}

/// `GET /v1/jobs/{id}/events`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// true (or 1): for a terminal (`curl -N`): each change is an event named by the job's status (`queued`,
    /// `running`, `succeeded`, ...) whose data is one short line (`running 42% · dit batch 2/5 · ETA 13s`).
    /// Without it each event is `job` with the whole job as JSON, for programs.
    #[param(value_type = bool, required = false, default = false)]
    pub compact: Option<String>,
    /// The access token, for a client that cannot send a header (a browser's EventSource).
    #[param(value_type = String, required = false)]
    pub access_token: Option<String>,
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

/// `POST /v1/jobs/{id}/cancel`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CancelQuery {
    /// true (or 1): the job's finished segments become its (shorter) result, `NAME_partial-Nf.ext`, served at
    /// `…/result` with `partial: true` (its video only; 400 nothing-to-keep for a job that makes no video
    /// segments: a latent, a still, PNG frames).
    #[param(value_type = bool, required = false, default = false)]
    pub keep: Option<String>,
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
    /// decode: diffusers' image height of a packed ([B, sequence, C]) latent, which this box does not take.
    /// Checked as a positive integer; a 4-D or 5-D latent comes back whole, whatever it says (clients send
    /// their own guesses: ComfyUI-HFRemoteVae sends T·8 for a video).
    #[param(value_type = i64, required = false)]
    pub height: Option<String>,
    /// decode: diffusers' image width of a packed latent; see height.
    #[param(value_type = i64, required = false)]
    pub width: Option<String>,
    /// As for POST /v1/jobs.
    // The bounds of the job row PRIORITY (utoipa takes literals only; a test below holds them to it).
    #[param(value_type = i64, required = false, default = 0, minimum = -1000, maximum = 1000)]
    pub priority: Option<String>,
    /// As for POST /v1/jobs, where the VAE ops do not take it: refused (parameter-not-for-op).
    // The bounds of the job row TILE (utoipa takes literals only; a test below holds them to it).
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
            super::doc_types::unwrap_one_item_one_ofs(&mut schema);
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
        assert_eq!(field_names::<ListQuery>(), ["status", "limit", "offset", "access_token"]);
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
        assert_eq!((fields.get("op"), fields.get("scale"), fields.get("model")), (Some("upscale"), Some("2"), None));
        let (code, message) = refusal(from_query::<JobFields>("scale=2&scale=4"));
        assert_eq!(code, "invalid-query");
        assert!(message.contains("duplicate field `scale`"), "{message}");
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

    /// utoipa takes only literals for a `#[param]`'s bounds, so `RemoteQuery` writes the job rows' again;
    /// here they are held to the rows.
    #[test]
    fn the_remote_querys_bounds_are_the_job_rows() {
        let described = serde_json::to_value(RemoteQuery::into_params(|| Some(ParameterIn::Query))).unwrap();
        for row in [&crate::queue::parameters::PRIORITY, &crate::queue::parameters::TILE] {
            let schema = &described.as_array().unwrap().iter().find(|p| p["name"] == row.name).unwrap()["schema"];
            let bound = |value: &Value| value.as_f64().map(|v| v as i64);
            assert_eq!((bound(&schema["minimum"]), bound(&schema["maximum"])), (row.min, row.max), "{}", row.name);
        }
    }
}
