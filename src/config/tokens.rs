//! `[[tokens]]`: the box's clients, as written in config.toml or in `VAEBOX_TOKENS` (`name:secret[:admin],...`).
use serde::{Deserialize, Serialize};

/// One client of the box. Its secret never appears in logs or debug output.
#[derive(Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AccessToken {
    pub name: String,
    pub secret: String,
    #[serde(default)]
    pub admin: bool,
    /// The webhook of the jobs this token submits without a `callback_url` of their own (or their preset's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// The highest `priority` this token's jobs may ask for (an admin token's are not bounded); none: the
    /// parameter's own bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<i64>,
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken").field("name", &self.name).field("secret", &"…").field("admin", &self.admin).field("callback_url", &self.callback_url).field("max_priority", &self.max_priority).finish()
    }
}

/// Shorter secrets are guessable on a LAN.
pub(super) const MIN_SECRET_CHARS: usize = 12;

/// `name:secret[:admin],...` → `[[tokens]]` tables.
pub(super) fn tokens_from_env(raw: &str) -> Result<toml::Value, String> {
    let mut tokens = Vec::new();
    for item in raw.split(',').map(str::trim).filter(|item| !item.is_empty()) {
        let parts: Vec<&str> = item.split(':').collect();
        let (name, secret, admin) = match parts[..] {
            [name, secret] => (name, secret, false),
            [name, secret, "admin"] => (name, secret, true),
            _ => return Err(format!("`{}`: expected name:secret or name:secret:admin", parts.first().unwrap_or(&""))),
        };
        let mut table = toml::Table::new();
        table.insert("name".into(), toml::Value::String(name.into()));
        table.insert("secret".into(), toml::Value::String(secret.into()));
        table.insert("admin".into(), toml::Value::Boolean(admin));
        tokens.push(toml::Value::Table(table));
    }
    Ok(toml::Value::Array(tokens))
}
