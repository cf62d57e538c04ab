//! Named job settings from the config (`[presets.NAME]`): `preset=NAME` on a submission (or `vaebox run
//! --preset NAME`) fills in every field the job does not give itself (`JobFields::with_preset`), and
//! `GET /v1/presets` lists them. A preset's fields are checked as the
//! job's own are, by the same code; their names are checked once at start-up.
use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::params::JobFields;
use super::state::AppState;
use crate::config::Config;
use crate::error_codes as codes;
use crate::queue::parameters::preset_text;

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
#[utoipa::path(get, path = "/v1/presets", operation_id = "list_presets", tag = "box", responses((status = 200, description = "Presets", body = PresetList)))]
pub async fn list(State(app): State<AppState>) -> Json<PresetList> {
    let presets = app.config.presets.iter().map(|(name, fields)| (name.clone(), preset_text(fields).into_iter().collect())).collect();
    Json(PresetList { presets })
}

/// Why the config's presets cannot serve, checked when the box starts: a field no job has, or a value every
/// job naming the preset would be refused for (`scale = "big"`, a restore field on an upscale). The models
/// are not asked for: a preset may name one that is not in the models folder yet.
pub fn check(config: &Config) -> Result<(), String> {
    let known = JobFields::names();
    for (name, fields) in &config.presets {
        for key in fields.keys() {
            if !known.contains(&key.as_str()) || NOT_IN_A_PRESET.contains(&key.as_str()) {
                return Err(format!("presets.{name}.{key} is not a job field (the fields of POST /v1/jobs, without preset and filename)"));
            }
        }
        match super::fields::job_request(&JobFields::default().with("preset", name.clone()), config, None) {
            Ok(_) => {}
            Err(error) if MODEL_NOT_HERE.contains(&error.status_and_code().1) => {}
            Err(error) => return Err(format!("presets.{name}: {error}")),
        }
    }
    Ok(())
}

/// Refusals that say the box lacks a model now, not that the preset is wrong.
const MODEL_NOT_HERE: [&str; 3] = [codes::UNKNOWN_MODEL, codes::MODEL_WEIGHTS_MISSING, codes::MISSING_MODEL];
