//! Every job parameter, defined once (`table.rs`): its name, kind of value, bounds, default, text and where
//! its value is kept; which ops take it is one match on the op there (`taken_by`). The query string, the
//! multipart form, the `params` JSON, presets, watch folders and `vaebox run`'s flags all give their text as
//! `JobFields`, read by one `read`; the OpenAPI document and the flags' help are written from the same rows.
//! A parameter the job's op does not take is refused (400 `parameter-not-for-op`): `op=upscale&seed=3` must
//! not run as if the seed meant something.
mod fields;
mod read;
mod table;

use std::ops::RangeInclusive;

use super::QueueError;
use crate::error_codes as codes;
use crate::models::Op;

pub use fields::{preset_text, JobFields};
pub use read::{boolean, read};
pub use table::{taken_by, CRF, METRICS, PARAMETERS, PRIORITY, TILE};

pub struct Parameter {
    pub name: &'static str,
    pub value: Value,
    /// For people: the document's description and the flag's help (the ops and the default are added).
    pub doc: &'static str,
    pub default: DefaultValue,
    /// Bounds for the document and the help; the checks that refuse a value out of them (with their own
    /// words) are where the value is used, and read them here (`bounds`) or from the constant written here.
    pub min: Option<i64>,
    pub max: Option<i64>,
    /// Where the value is kept in the job's `JobParams`.
    pub stored: Stored,
    /// The code a value of the wrong kind is refused with; `None`: its group's (`restore.…`, `interpolate.…`, `range.…`).
    pub code: Option<&'static str>,
    pub flag: Flag,
}

pub enum Value {
    Text,
    Bool,
    Int,
    /// Read as `u32`; at least 0.
    U32,
    /// Read as `u64`; at least 0.
    U64,
    Float,
    /// A time in seconds: a number (`90`, `2.5`) or a timecode, `M:SS` or `H:MM:SS`, seconds with a
    /// fraction (`1:30`, `1:02:03.5`), as a player shows it.
    Seconds,
    /// One of these integers (`scale`: the values some op takes; the model's own are checked later).
    IntOf(&'static [i64]),
    /// One of `names()`; `canonical` reads any spelling it takes (`fp16`) as the stored name.
    Choice { names: fn() -> Vec<&'static str>, canonical: fn(&str) -> Option<&'static str> },
}

pub enum DefaultValue {
    None,
    Is(Literal),
    /// The first op's, with words for the rest (`model`).
    Else(Literal, &'static str),
    /// Per op: `scale`.
    PerOp(fn(Op) -> Option<i64>),
    /// Not one value: said in words.
    Said(&'static str),
}

#[derive(Clone, Copy)]
pub enum Literal {
    Int(i64),
    Float(f64),
    Bool(bool),
    Text(&'static str),
}

pub enum Stored {
    /// Read by `read` itself, not a setting of `JobParams` (op, model, priority, callback_url, preset, filename).
    Apart,
    /// The serde path in `JobParams` (`"tile"`, `"restore.seed"`), for every op that takes it.
    At(&'static str),
    /// A path per op.
    ByOp(&'static [(Op, &'static str)]),
}

/// How `vaebox run` takes it.
pub enum Flag {
    /// `--name-with-dashes VALUE`.
    Value,
    /// `--name` alone gives `true`.
    Switch,
    /// `--long` alone gives `false` (`--no-audio` for keep_audio), with its own help.
    Negated { long: &'static str, help: &'static str },
    /// Not a flag: the HTTP submission's only.
    None,
}

impl Parameter {
    pub fn find(name: &str) -> Option<&'static Parameter> {
        PARAMETERS.iter().find(|parameter| parameter.name == name)
    }

    pub fn is_for(&self, op: Op) -> bool {
        taken_by(op).any(|parameter| parameter.name == self.name)
    }

    /// The values its bounds allow (the whole of `i64` on a side without one).
    pub fn bounds(&self) -> RangeInclusive<i64> {
        self.min.unwrap_or(i64::MIN)..=self.max.unwrap_or(i64::MAX)
    }

    /// The ops that take it, in `Op::ALL`'s order.
    pub fn ops(&self) -> impl Iterator<Item = Op> + '_ {
        Op::ALL.into_iter().filter(|op| self.is_for(*op))
    }

    pub fn takes_every_op(&self) -> bool {
        Op::ALL.iter().all(|op| self.is_for(*op))
    }

    /// Where an `op` job keeps it (`None`: apart, or not that op's).
    pub fn path(&self, op: Op) -> Option<&'static str> {
        match self.stored {
            Stored::Apart => None,
            Stored::At(path) => Some(path),
            Stored::ByOp(paths) => paths.iter().find(|(of, _)| *of == op).map(|(_, path)| *path),
        }
    }

    pub fn code(&self, op: Op) -> &'static str {
        let group = self.path(op).and_then(|path| path.split_once('.')).map(|(group, _)| group);
        match (self.code, group) {
            (Some(code), _) => code,
            (None, Some("restore")) => codes::INVALID_RESTORE_PARAMETER,
            (None, Some("interpolate")) => codes::INVALID_INTERPOLATE_PARAMETER,
            (None, Some("range")) => codes::INVALID_RANGE,
            (None, _) => codes::INVALID_QUERY,
        }
    }

    /// The default as JSON, for the document's `default`.
    pub fn default_value(&self) -> Option<serde_json::Value> {
        match self.default {
            DefaultValue::Is(literal) | DefaultValue::Else(literal, _) => Some(literal.json()),
            DefaultValue::PerOp(of) => self.ops().find_map(of).map(serde_json::Value::from),
            DefaultValue::None | DefaultValue::Said(_) => None,
        }
    }

    /// The default in words where the document's `default` cannot say it all (`None` where it can).
    pub fn default_words(&self) -> Option<String> {
        match self.default {
            DefaultValue::None | DefaultValue::Is(_) => None,
            DefaultValue::Else(literal, rest) => Some(format!("{} {rest}", literal.text())),
            DefaultValue::PerOp(of) => {
                let each: Vec<String> = self.ops().filter_map(|op| Some(format!("{}: {}", op.as_str(), of(op)?))).collect();
                Some(each.join("; "))
            }
            DefaultValue::Said(words) => Some(words.to_string()),
        }
    }
}

impl Literal {
    pub fn json(self) -> serde_json::Value {
        match self {
            Literal::Int(value) => value.into(),
            Literal::Float(value) => value.into(),
            Literal::Bool(value) => value.into(),
            Literal::Text(value) => value.into(),
        }
    }

    pub fn text(self) -> String {
        match self {
            Literal::Int(value) => value.to_string(),
            Literal::Float(value) => value.to_string(),
            Literal::Bool(value) => value.to_string(),
            Literal::Text(value) => value.to_string(),
        }
    }
}

/// Refuses the `given` parameters `op` does not take, naming the ops that do take each.
pub fn refuse_parameters_not_for<'a>(op: Op, given: impl IntoIterator<Item = &'a Parameter>) -> Result<(), QueueError> {
    let refused: Vec<String> = given
        .into_iter()
        .filter(|parameter| !parameter.is_for(op))
        .map(|parameter| {
            let takers: Vec<&str> = parameter.ops().map(Op::as_str).collect();
            format!("`{}` (only {})", parameter.name, takers.join(", "))
        })
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    Err(QueueError::refused(codes::PARAMETER_NOT_FOR_OP, format!("{} does not take {}; leave it out", op.as_str(), refused.join(", "))))
}
