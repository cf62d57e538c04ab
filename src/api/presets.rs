//! Named job settings from the config (`[presets.NAME]`): `preset=NAME` on a submission fills in every field
//! the job does not give itself, and `GET /v1/presets` lists them. A preset's fields are checked as the
//! job's own are, by the same code; their names are checked once at start-up.
use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::error::ApiError;
use super::params::{self, JobFields};
use super::AppState;
use crate::error_codes as codes;

/// Fields a preset may not set: the preset itself, and the upload's own file name.
const NOT_IN_A_PRESET: [&str; 2] = ["preset", "filename"];

/// The presets of this box.
#[derive(Serialize, ToSchema)]
pub struct PresetList {
    /// Each preset's job fields, by its name, as a submission would give them.
    #[schema(value_type = Object)]
    presets: BTreeMap<String, BTreeMap<String, String>>,
}

/// Presets on this box
///
/// The named job settings from the box's config; submit with `preset=NAME`.
#[utoipa::path(get, path = "/v1/presets", tag = "box", responses((status = 200, description = "Presets", body = PresetList)))]
pub async fn list(State(app): State<AppState>) -> Json<PresetList> {
    let presets = app.config.presets.iter().map(|(name, fields)| (name.clone(), as_text(fields).into_iter().collect())).collect();
    Json(PresetList { presets })
}

/// A preset's values as the text a form field would carry.
fn as_text(fields: &toml::Table) -> Vec<(String, String)> {
    fields
        .iter()
        .map(|(key, value)| {
            let text = match value {
                toml::Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            (key.clone(), text)
        })
        .collect()
}

/// Why the config's presets cannot serve (a field no job has), checked when the box starts.
pub fn check(presets: &BTreeMap<String, toml::Table>) -> Result<(), String> {
    let known = params::field_names::<JobFields>();
    for (name, fields) in presets {
        for key in fields.keys() {
            if !known.contains(&key.as_str()) || NOT_IN_A_PRESET.contains(&key.as_str()) {
                return Err(format!("presets.{name}.{key} is not a job field (the fields of POST /v1/jobs, without preset and filename)"));
            }
        }
    }
    Ok(())
}

/// `fields` with its preset's fields filled in where it gives none; unchanged without `preset`.
pub fn apply(fields: &JobFields, presets: &BTreeMap<String, toml::Table>) -> Result<JobFields, ApiError> {
    let Some(name) = fields.preset.as_deref() else { return Ok(fields.clone()) };
    let preset = presets.get(name.trim()).ok_or_else(|| {
        let known: Vec<&str> = presets.keys().map(String::as_str).collect();
        let has = if known.is_empty() { "none".to_string() } else { known.join(", ") };
        ApiError::bad_request(codes::UNKNOWN_PRESET, format!("no preset `{name}`; this box has {has} (GET /v1/presets)"))
    })?;
    let Value::Object(given) = serde_json::to_value(fields).map_err(|e| ApiError::Internal(e.to_string()))? else {
        return Err(ApiError::Internal("job fields are an object".into()));
    };
    let mut merged: Map<String, Value> = given.into_iter().filter(|(key, value)| !value.is_null() && key != "preset").collect();
    for (key, text) in as_text(preset) {
        merged.entry(key).or_insert(Value::String(text));
    }
    params::from_map(merged)
}
