//! How the box is deployed: where the jobs are kept (`database`), what a process runs (`role`) and on
//! which devices its workers run (`devices`).
use serde::{Deserialize, Serialize};

use super::TextValue;
use crate::device::DeviceChoice;

/// Where the jobs are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseTarget {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl std::fmt::Display for DatabaseTarget {
    /// Without the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatabaseTarget::Sqlite(path) => write!(f, "{}", path.display()),
            DatabaseTarget::Postgres(url) => {
                let shown = match (url.find("://"), url.rfind('@')) {
                    (Some(scheme), Some(at)) if at > scheme => format!("{}://…@{}", &url[..scheme], &url[at + 1..]),
                    _ => url.clone(),
                };
                f.write_str(&shown)
            }
        }
    }
}

/// One of `devices`: `cuda:1`, `cpu`, ..., or a bare CUDA index (`1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceEntry(pub DeviceChoice);

impl Serialize for DeviceEntry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.to_text())
    }
}

impl<'de> Deserialize<'de> for DeviceEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Index(u32),
            Text(String),
        }
        let text = match Raw::deserialize(deserializer)? {
            Raw::Index(i) => format!("cuda:{i}"),
            Raw::Text(text) if text.trim().chars().all(|c| c.is_ascii_digit()) && !text.trim().is_empty() => format!("cuda:{}", text.trim()),
            Raw::Text(text) => text,
        };
        DeviceChoice::parse_text(&text)
            .map(DeviceEntry)
            .ok_or_else(|| serde::de::Error::custom(format!("devices: `{text}`: expected cpu, cuda:N or a CUDA index")))
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The API and the executor in one process: one box.
    All,
    /// Uploads, results and the page; runs no job.
    Api,
    /// Runs jobs claimed from the shared database; serves no HTTP.
    Worker,
}

impl Role {
    pub fn serves_http(self) -> bool {
        self != Role::Worker
    }

    pub fn runs_jobs(self) -> bool {
        self != Role::Api
    }
}
