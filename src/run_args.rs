//! `vaebox run`'s flags: the file flags, and one flag per job parameter made from the queue's table, so the
//! job's fields are the text a client would submit and are read by the same code.
use std::ffi::OsStr;
use std::path::PathBuf;

use clap::builder::{PossibleValue, TypedValueParser};
use clap::{Arg, ArgAction, ArgMatches, Command};
use vaebox::queue::parameters::{DefaultValue, Flag, Value};
use vaebox::queue::{JobFields, Parameter, PARAMETERS};

/// `vaebox run`: the job's fields as flags; the output's folder is checked before any work starts.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The input file: a video, or for `vae_decode` a latent (`.safetensors`, or a ComfyUI `.latent`).
    #[arg(long)]
    pub input: PathBuf,
    /// Where the result is written (in `--output-format`; for `vae_encode` a latent `.safetensors`), with
    /// the format's extension. Its folder must exist and be writable.
    #[arg(long)]
    pub output: PathBuf,
    /// Replace the output file if it exists (without it, an existing file is refused).
    #[arg(long)]
    pub overwrite: bool,
    /// Print the finished job as JSON (output, timings, plan, metrics) instead of a summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub job: JobFlags,
}

/// The job parameters given as flags.
pub struct JobFlags(pub JobFields);

impl clap::Args for JobFlags {
    fn augment_args(command: Command) -> Command {
        PARAMETERS.iter().filter_map(flag_of).fold(command, Command::arg)
    }

    fn augment_args_for_update(command: Command) -> Command {
        Self::augment_args(command)
    }
}

impl clap::FromArgMatches for JobFlags {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut fields = JobFields::default();
        for parameter in PARAMETERS {
            let value = match parameter.flag {
                Flag::None => None,
                Flag::Value => matches.get_raw(parameter.name).and_then(|mut raw| raw.next()).map(|raw| raw.to_string_lossy().into_owned()),
                Flag::Switch => matches.get_flag(parameter.name).then(|| "true".to_string()),
                Flag::Negated { .. } => matches.get_flag(parameter.name).then(|| "false".to_string()),
            };
            if let Some(value) = value {
                fields = fields.with(parameter.name, value);
            }
        }
        Ok(JobFlags(fields))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// `--name-with-dashes`, its help from the row's text, ops and default, its values checked by kind.
fn flag_of(parameter: &'static Parameter) -> Option<Arg> {
    // clap takes only `'static` names without its `string` feature; this runs once per process.
    let leak = |text: String| -> &'static str { Box::leak(text.into_boxed_str()) };
    let long = |name: &str| leak(name.replace('_', "-"));
    let mut prefix = String::new();
    if !parameter.takes_every_op() {
        let ops: Vec<String> = parameter.ops().map(|op| format!("`{}`", op.as_str())).collect();
        prefix = format!("{} only: ", ops.join(", "));
    }
    let mut help = format!("{prefix}{}", parameter.doc);
    let arg = Arg::new(parameter.name);
    Some(match parameter.flag {
        Flag::None => return None,
        Flag::Switch => arg.long(long(parameter.name)).action(ArgAction::SetTrue).help(help),
        Flag::Negated { long, help } => arg.long(long).action(ArgAction::SetTrue).help(format!("{prefix}{help}")),
        Flag::Value => {
            if let Some(default) = default_note(parameter) {
                help.push(' ');
                help.push_str(&default);
            }
            let arg = arg.long(long(parameter.name)).value_name(leak(parameter.name.to_uppercase())).action(ArgAction::Set).help(help);
            match &parameter.value {
                Value::Int | Value::IntOf(_) => arg.value_parser(clap::value_parser!(i64)),
                Value::U32 => arg.value_parser(clap::value_parser!(u32)),
                Value::U64 => arg.value_parser(clap::value_parser!(u64)),
                Value::Float => arg.value_parser(clap::value_parser!(f64)),
                // Read as the HTTP field is (`queue::parameters::read`): a number or a timecode.
                Value::Seconds => arg,
                Value::Choice { .. } => arg.value_parser(Choice(parameter)),
                Value::Text | Value::Bool => arg,
            }
        }
    })
}

/// `[default: …]` as clap writes its own; a default per op names the others after it.
fn default_note(parameter: &Parameter) -> Option<String> {
    match parameter.default {
        DefaultValue::None => None,
        DefaultValue::Is(value) => Some(format!("[default: {}]", value.text())),
        DefaultValue::Else(value, rest) => Some(format!("[default: {} {rest}]", value.text())),
        DefaultValue::Said(words) => Some(format!("[default: {words}]")),
        DefaultValue::PerOp(of) => {
            let mut each = parameter.ops().filter_map(|op| Some((op.as_str(), of(op)?)));
            let (_, first) = each.next()?;
            let others: Vec<String> = each.map(|(op, value)| format!("{value} for {op}")).collect();
            Some(if others.is_empty() { format!("[default: {first}]") } else { format!("[default: {first}] ({})", others.join(", ")) })
        }
    }
}

/// A row's named values: listed in `--help`, and any spelling the row reads is taken (`--dtype fp16`).
#[derive(Clone)]
struct Choice(&'static Parameter);

impl TypedValueParser for Choice {
    type Value = String;

    fn parse_ref(&self, command: &Command, _: Option<&Arg>, value: &OsStr) -> Result<String, clap::Error> {
        let Value::Choice { names, canonical } = &self.0.value else { unreachable!("a choice's row") };
        let text = value.to_string_lossy();
        match canonical(text.trim()) {
            Some(_) => Ok(text.into_owned()),
            None => {
                let why = format!("`{text}` is not a {}: one of {}\n", self.0.name, names().join(", "));
                Err(clap::Error::raw(clap::error::ErrorKind::InvalidValue, why).with_cmd(command))
            }
        }
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        let Value::Choice { names, .. } = &self.0.value else { return None };
        Some(Box::new(names().into_iter().map(PossibleValue::new)))
    }
}
