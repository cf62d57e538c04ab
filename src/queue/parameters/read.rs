//! `JobFields` read into the options `check` takes: each value by its row's kind (refused with its code
//! when it is not of that kind) and put where its row says the job keeps it. What a value means (a model's
//! scales, a range) is checked by `check` and the settings it resolves.
use std::path::Path;

use serde_json::{Map, Value as Json};

use super::{refuse_parameters_not_for, JobFields, Parameter, Value};
use crate::error_codes as codes;
use crate::jobs::JobParams;
use crate::models::Op;
use crate::queue::{JobOptions, QueueError};

/// The options `fields` ask for (a preset already applied).
pub fn read(fields: &JobFields, models_dir: &Path) -> Result<JobOptions, QueueError> {
    let op_name = fields.get("op").unwrap_or("upscale");
    let op = Op::parse(op_name.trim()).ok_or_else(|| {
        let known: Vec<_> = Op::ALL.iter().map(|op| op.as_str()).collect();
        QueueError::refused(codes::UNKNOWN_OP, format!("unknown op `{op_name}`; expected one of {}", known.join(", ")))
    })?;
    refuse_parameters_not_for(op, fields.given().map(|(parameter, _)| parameter))?;
    // The model comes first, as its refusals name what the box has.
    let model = match fields.get("model") {
        Some(model) => model.to_string(),
        None => crate::queue::default_model(models_dir, op)?,
    };
    crate::queue::find_model(models_dir, op, &model)?;
    let mut stored = Map::new();
    for (parameter, raw) in fields.given() {
        let Some(path) = parameter.path(op) else { continue };
        let value = typed(parameter, op, raw)?;
        let (group, key) = match path.split_once('.') {
            Some((group, key)) => (Some(group), key),
            None => (None, path),
        };
        let place = match group {
            None => &mut stored,
            Some(group) => match stored.entry(group).or_insert_with(|| Json::Object(Map::new())) {
                Json::Object(inner) => inner,
                _ => unreachable!("a group holds an object"),
            },
        };
        place.insert(key.to_string(), value);
    }
    let params: JobParams = serde_json::from_value(Json::Object(stored))
        .map_err(|e| QueueError::refused(codes::INVALID_QUERY, format!("cannot read the parameters: {e}")))?;
    let priority = match fields.get("priority") {
        None => 0,
        Some(raw) => typed(&super::PRIORITY, op, raw)?.as_i64().expect("an integer"),
    };
    Ok(JobOptions { op, model: Some(model), priority, callback_url: fields.get("callback_url").map(String::from), params })
}

/// A yes or no as the query string, the form and the `params` JSON write it: `true`/`1`/`yes` or
/// `false`/`0`/`no`, in any case (diffusers writes Python's `True`/`False`).
pub fn boolean(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

/// Seconds from `90`, `2.5`, `1:30` (minutes and seconds) or `1:02:03.5` (hours, minutes, seconds): the
/// minutes and seconds of a timecode are below 60 and only its last part has a fraction.
pub fn seconds(text: &str) -> Option<f64> {
    let parts: Vec<&str> = text.split(':').collect();
    let last = parts.last()?.parse::<f64>().ok().filter(|s| s.is_finite())?;
    if parts.len() == 1 {
        return Some(last);
    }
    let whole = |part: &&str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    let last_text = parts[parts.len() - 1];
    if parts.len() > 3 || !parts[..parts.len() - 1].iter().all(whole) || !last_text.starts_with(|c: char| c.is_ascii_digit()) || last >= 60.0 {
        return None;
    }
    let leading: Vec<f64> = parts[..parts.len() - 1].iter().map(|part| part.parse::<f64>().unwrap_or(f64::NAN)).collect();
    if parts.len() == 3 && leading[1] >= 60.0 {
        return None;
    }
    Some(leading.iter().fold(0.0, |total, part| total * 60.0 + part) * 60.0 + last)
}

/// `raw` as its row's kind of value, in the form `JobParams` deserialises.
fn typed(parameter: &Parameter, op: Op, raw: &str) -> Result<Json, QueueError> {
    let name = parameter.name;
    let text = raw.trim();
    let refused = |why: String| QueueError::refused(parameter.code(op), why);
    let not_a_number = || refused(format!("{name} `{raw}` is not a number"));
    Ok(match &parameter.value {
        Value::Text => Json::from(text),
        Value::Bool => match boolean(text) {
            Some(value) => Json::from(value),
            None => return Err(refused(format!("{name} `{text}` is not true or false"))),
        },
        Value::Int | Value::IntOf(_) => Json::from(text.parse::<i64>().map_err(|_| not_a_number())?),
        Value::U32 => Json::from(text.parse::<u32>().map_err(|_| not_a_number())?),
        Value::U64 => Json::from(text.parse::<u64>().map_err(|_| not_a_number())?),
        Value::Float => {
            let value = text.parse::<f64>().map_err(|_| not_a_number())?;
            serde_json::Number::from_f64(value).map(Json::Number).ok_or_else(not_a_number)?
        }
        Value::Seconds => {
            let value = seconds(text).ok_or_else(|| refused(format!("{name} `{raw}` is not seconds (`90`, `2.5`) or a timecode (`1:30`, `1:02:03.5`)")))?;
            serde_json::Number::from_f64(value).map(Json::Number).ok_or_else(not_a_number)?
        }
        Value::Choice { names, canonical } => match canonical(text) {
            Some(name) => Json::from(name),
            None => return Err(refused(format!("{name} `{raw}` is not one of {}", names().join(", ")))),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::parameters::{taken_by, Stored, PARAMETERS};

    /// A value each row takes.
    fn example(parameter: &Parameter) -> &'static str {
        match &parameter.value {
            Value::Text => "24",
            Value::Bool => "true",
            Value::Int | Value::U32 | Value::U64 | Value::IntOf(_) => "2",
            Value::Float => "0.5",
            Value::Seconds => "1:30",
            Value::Choice { names, .. } => names()[0],
        }
    }

    /// Every row of every op lands in the stored job under its path, so a row whose path names no field of
    /// `JobParams` (a typo, a field not added) fails here rather than being dropped by serde.
    #[test]
    fn each_parameter_is_kept_where_its_row_says() {
        for op in Op::ALL {
            for parameter in PARAMETERS.iter().filter(|p| p.is_for(op)) {
                let Some(path) = parameter.path(op) else {
                    assert!(matches!(parameter.stored, Stored::Apart), "{} has no path for {}", parameter.name, op.as_str());
                    continue;
                };
                let value = typed(parameter, op, example(parameter)).unwrap();
                let mut object = Map::new();
                match path.split_once('.') {
                    Some((group, key)) => object.insert(group.into(), serde_json::json!({ key: value.clone() })),
                    None => object.insert(path.into(), value.clone()),
                };
                let params: JobParams = serde_json::from_value(Json::Object(object)).unwrap();
                let kept = serde_json::to_value(&params).unwrap();
                let at = path.split('.').fold(&kept, |json, key| &json[key]);
                assert_eq!(at, &value, "{} of {} is not kept at {path}", parameter.name, op.as_str());
            }
        }
    }

    /// `PARAMETERS` and the ops' lists (`taken_by`) name the same rows: a row no op takes, or one an op takes
    /// that `PARAMETERS` leaves out (unknown to the fields, the document and the flags), fails here.
    #[test]
    fn rows_are_named_once_and_the_ops_take_just_them() {
        for (i, parameter) in PARAMETERS.iter().enumerate() {
            assert!(PARAMETERS[..i].iter().all(|p| p.name != parameter.name), "{} twice", parameter.name);
            assert!(parameter.ops().next().is_some(), "no op takes {}", parameter.name);
            if let Stored::ByOp(paths) = parameter.stored {
                assert!(parameter.ops().all(|op| paths.iter().any(|(of, _)| *of == op)), "{}", parameter.name);
            }
        }
        for op in Op::ALL {
            let taken: Vec<&str> = taken_by(op).map(|parameter| parameter.name).collect();
            for (i, name) in taken.iter().enumerate() {
                assert!(!taken[..i].contains(name), "{} takes {name} twice", op.as_str());
                assert!(Parameter::find(name).is_some(), "{} takes {name}, which is not in PARAMETERS", op.as_str());
            }
        }
    }

    #[test]
    fn values_of_the_wrong_kind_are_refused_with_the_rows_code() {
        let refused = |name: &str, op: Op, raw: &str| typed(Parameter::find(name).unwrap(), op, raw).unwrap_err().code();
        assert_eq!(refused("seed", Op::Restore, "x"), codes::INVALID_RESTORE_PARAMETER);
        assert_eq!(refused("scene_threshold", Op::Interpolate, "x"), codes::INVALID_INTERPOLATE_PARAMETER);
        assert_eq!(refused("scene_threshold", Op::Restore, "x"), codes::INVALID_RESTORE_PARAMETER);
        assert_eq!(refused("frames", Op::Upscale, "-1"), codes::INVALID_RANGE);
        assert_eq!(refused("keep_audio", Op::Upscale, "maybe"), codes::INVALID_BOOLEAN);
        assert_eq!(refused("dtype", Op::Upscale, "f8"), codes::INVALID_DTYPE);
        assert_eq!(typed(Parameter::find("dtype").unwrap(), Op::Upscale, " FP16").unwrap(), Json::from("f16"));
    }
}
