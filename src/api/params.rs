//! Request parameters as typed structs. A name the endpoint does not take is refused (400
//! `unknown-parameter`, naming it) instead of ignored: a typo like `scal=2` must not quietly run
//! the defaults. The names come from each struct's own `Deserialize`, so there is no second list.
use serde::de::{DeserializeOwned, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::ApiError;
use crate::error_codes as codes;

/// The fields of `POST /v1/jobs`: query parameters of a raw upload, form fields, or keys of a
/// `params` JSON part. Values stay text here; each is checked where its meaning is, with its own code.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFields {
    pub op: Option<String>,
    pub model: Option<String>,
    pub scale: Option<String>,
    pub priority: Option<String>,
    pub dtype: Option<String>,
    pub tile: Option<String>,
    pub normalize: Option<String>,
    pub memory_budget_mib: Option<String>,
    /// `restore` only: the SeedVR2 VAE, a target size instead of `scale`, the noise seed, the colour
    /// fix, and the temporal batches.
    pub vae: Option<String>,
    pub height: Option<String>,
    pub width: Option<String>,
    pub seed: Option<String>,
    pub color_fix: Option<String>,
    pub batch_frames: Option<String>,
    pub batch_overlap: Option<String>,
    /// Raw uploads only: the file's name (a multipart `file` part carries its own).
    pub filename: Option<String>,
}

/// `GET /v1/jobs`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub status: Option<String>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

/// The query of `POST /v1/decode` and `/v1/encode`: the endpoint's own (`model` and the job fields
/// that apply), and everything diffusers' `remote_decode` / `remote_encode` send. `height` and `width`
/// only come with packed latents, `image_format` only matters for PIL output, `do_scaling` is
/// diffusers' deprecated spelling of "the latent is scaled": accepted, so those clients keep working.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteQuery {
    pub model: Option<String>,
    /// The body's tensor dtype (diffusers' `dtype`), also the precision the VAE runs in.
    pub dtype: Option<String>,
    /// `requests` sends a list as repeated keys; a JSON list in one value is accepted too.
    #[serde(default)]
    pub shape: Vec<String>,
    pub output_type: Option<String>,
    pub scaling_factor: Option<String>,
    pub shift_factor: Option<String>,
    pub do_scaling: Option<String>,
    pub partial_postprocess: Option<String>,
    pub image_format: Option<String>,
    pub height: Option<String>,
    pub width: Option<String>,
    pub priority: Option<String>,
    pub tile: Option<String>,
    pub normalize: Option<String>,
    pub memory_budget_mib: Option<String>,
}

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
        let doc: Value = serde_json::from_str(include_str!("openapi.json")).unwrap();
        let listed = |path: &str, method: &str| -> BTreeSet<String> {
            let parameters = doc["paths"][path][method]["parameters"].as_array().unwrap();
            parameters.iter().filter(|p| p["in"] == "query").map(|p| p["name"].as_str().unwrap().to_string()).collect()
        };
        let taken = |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| n.to_string()).collect() };
        assert_eq!(listed("/v1/jobs", "post"), taken(field_names::<JobFields>()));
        assert_eq!(listed("/v1/jobs", "get"), taken(field_names::<ListQuery>()));
        assert_eq!(listed("/v1/decode", "post"), taken(field_names::<RemoteQuery>()));
        assert_eq!(listed("/v1/encode", "post"), taken(field_names::<RemoteQuery>()));
        let form = &doc["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"];
        let form: BTreeSet<String> = form.as_object().unwrap().keys().filter(|k| *k != "file" && *k != "params").cloned().collect();
        let mut fields = taken(field_names::<JobFields>());
        fields.remove("filename");
        assert_eq!(form, fields);
    }
}
