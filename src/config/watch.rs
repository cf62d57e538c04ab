//! `[[watch]]`: folders whose finished files become jobs. The job fields sit beside the folder's own keys,
//! as in a preset (`op = "upscale"`, `scale = 2`, or `preset = "anime-2x"`); they are checked at start-up
//! by the API's own checks, which name the entry (`watch[0].scal`).
use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WatchFolder {
    /// Where files arrive. `done/` and `failed/` inside it receive them once processed.
    pub folder: PathBuf,
    /// Where results land, under the input's name with the job's suffix and extension.
    pub output: PathBuf,
    /// Only names matching this (`*` and `?` wildcards, any case); none: every file but hidden ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Only these extensions (`["mp4", "mkv"]`, any case); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    /// The job's fields (every other key), as a submission would give them.
    #[serde(flatten)]
    pub fields: BTreeMap<String, toml::Value>,
}

impl WatchFolder {
    /// Whether a file of this name is one to take.
    pub fn takes(&self, name: &str) -> bool {
        if name.starts_with('.') {
            return false;
        }
        let lower = name.to_ascii_lowercase();
        let extension_ok = self.extensions.is_empty()
            || self.extensions.iter().any(|e| lower.ends_with(&format!(".{}", e.trim_start_matches('.').to_ascii_lowercase())));
        extension_ok && self.pattern.as_deref().is_none_or(|pattern| wildcard(&pattern.to_ascii_lowercase(), &lower))
    }
}

/// `*` any run of characters, `?` one character.
fn wildcard(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // matched[j]: the pattern so far matches name[..j].
    let mut matched = vec![false; n.len() + 1];
    matched[0] = true;
    for c in p {
        let mut next = vec![false; n.len() + 1];
        for j in 0..=n.len() {
            next[j] = match c {
                '*' => matched[j] || (j > 0 && next[j - 1]),
                '?' => j > 0 && matched[j - 1],
                c => j > 0 && matched[j - 1] && n[j - 1] == c,
            };
        }
        matched = next;
    }
    matched[n.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(pattern: Option<&str>, extensions: &[&str]) -> WatchFolder {
        WatchFolder {
            folder: "in".into(),
            output: "out".into(),
            pattern: pattern.map(String::from),
            extensions: extensions.iter().map(|e| e.to_string()).collect(),
            fields: BTreeMap::new(),
        }
    }

    #[test]
    fn names_are_taken_by_pattern_and_extension() {
        assert!(folder(None, &[]).takes("clip.mp4"));
        assert!(!folder(None, &[]).takes(".clip.mp4.part"));
        assert!(folder(None, &["mp4", ".MKV"]).takes("A.mkv"));
        assert!(!folder(None, &["mp4"]).takes("clip.mov"));
        assert!(folder(Some("cam?_*.mp4"), &[]).takes("CAM1_morning.mp4"));
        assert!(!folder(Some("cam?_*.mp4"), &[]).takes("cam12_x.mp4"));
        assert!(!folder(Some("*.mp4"), &[]).takes("clip.mp4.part"));
    }
}
