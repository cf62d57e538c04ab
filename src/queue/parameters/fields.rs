//! A submission's parameters as the text it gave, by name: what a query string, a form, a `params` JSON
//! object, a preset, a watch folder or `vaebox run`'s flags hand to `read`.
use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, Visitor};

use super::{Parameter, PARAMETERS};
use crate::error_codes as codes;
use crate::queue::QueueError;

/// Only names of `PARAMETERS`, each at most once.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct JobFields(BTreeMap<&'static str, String>);

static NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| PARAMETERS.iter().map(|parameter| parameter.name).collect());

impl JobFields {
    /// Every name a submission may give, in the table's order.
    pub fn names() -> &'static [&'static str] {
        &NAMES
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Sets one; `name` must be a parameter's (the code's own names, not a client's).
    pub fn with(mut self, name: &str, value: impl Into<String>) -> JobFields {
        let parameter = Parameter::find(name).unwrap_or_else(|| panic!("`{name}` is not a job parameter"));
        self.0.insert(parameter.name, value.into());
        self
    }

    pub fn without(mut self, name: &str) -> JobFields {
        self.0.remove(name);
        self
    }

    /// The parameters given, in the table's order, with their text.
    pub fn given(&self) -> impl Iterator<Item = (&'static Parameter, &str)> + '_ {
        PARAMETERS.iter().filter_map(|parameter| Some((parameter, self.get(parameter.name)?)))
    }

    /// With the fields of its `preset` (the config's `[presets.NAME]`) where it gives none; unchanged without one.
    pub fn with_preset(&self, presets: &BTreeMap<String, toml::Table>) -> Result<JobFields, QueueError> {
        let Some(name) = self.get("preset") else { return Ok(self.clone()) };
        let preset = presets.get(name.trim()).ok_or_else(|| {
            let known: Vec<&str> = presets.keys().map(String::as_str).collect();
            let has = if known.is_empty() { "none".to_string() } else { known.join(", ") };
            QueueError::refused(codes::UNKNOWN_PRESET, format!("no preset `{name}`; this box has {has} (GET /v1/presets)"))
        })?;
        let mut merged = self.clone().without("preset");
        for (key, text) in preset_text(preset) {
            let parameter = Parameter::find(&key)
                .ok_or_else(|| QueueError::refused(codes::UNKNOWN_PARAMETER, format!("preset `{name}` has `{key}`, which is not a job field")))?;
            merged.0.entry(parameter.name).or_insert(text);
        }
        Ok(merged)
    }
}

/// A preset's (or a watch folder's) values as the text a form field would carry.
pub fn preset_text(fields: &toml::Table) -> Vec<(String, String)> {
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

/// As a struct of optional strings with these names would be read: serde names an unknown or repeated
/// field, and a value that is not text (or null) is refused.
impl<'de> Deserialize<'de> for JobFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<JobFields, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = JobFields;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("the job's parameters")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JobFields, A::Error> {
                let mut fields = JobFields::default();
                while let Some(key) = map.next_key::<String>()? {
                    let parameter = Parameter::find(&key).ok_or_else(|| A::Error::unknown_field(&key, JobFields::names()))?;
                    if fields.0.contains_key(parameter.name) {
                        return Err(A::Error::duplicate_field(parameter.name));
                    }
                    if let Some(value) = map.next_value::<Option<String>>()? {
                        fields.0.insert(parameter.name, value);
                    }
                }
                Ok(fields)
            }
        }
        deserializer.deserialize_struct("JobFields", JobFields::names(), Fields)
    }
}
