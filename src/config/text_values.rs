//! Config values written as text (`listen`, `device`, `dtype`, ...): each parsed once, when the config is
//! read, with a message naming its key and what it accepts.
use std::net::SocketAddr;

use crate::device::{DeviceChoice, DtypeChoice, HostAllocator};
use crate::media::OutputFormat;

/// A config value written as text: parsed once, when the config is read, with a message naming the key
/// and what it accepts, so nothing downstream parses it again.
pub trait TextValue: Sized {
    /// "device: expected auto, cpu, cuda or cuda:N".
    const EXPECTED: &'static str;
    fn parse_text(text: &str) -> Option<Self>;
    fn to_text(&self) -> String;
}

pub(super) mod as_text {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    use super::TextValue;

    pub fn serialize<T: TextValue, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&value.to_text())
    }

    pub fn deserialize<'de, T: TextValue, D: Deserializer<'de>>(deserializer: D) -> Result<T, D::Error> {
        let text = String::deserialize(deserializer)?;
        T::parse_text(&text).ok_or_else(|| D::Error::custom(format!("`{text}`: {}", T::EXPECTED)))
    }
}

impl TextValue for SocketAddr {
    const EXPECTED: &'static str = "listen: expected host:port, e.g. 127.0.0.1:8080 or 0.0.0.0:8080";
    fn parse_text(text: &str) -> Option<Self> {
        text.trim().parse().ok()
    }
    fn to_text(&self) -> String {
        self.to_string()
    }
}

impl TextValue for DeviceChoice {
    const EXPECTED: &'static str = "device: expected auto, cpu, cuda or cuda:N";
    fn parse_text(text: &str) -> Option<Self> {
        crate::device::parse_device(text)
    }
    fn to_text(&self) -> String {
        match self {
            DeviceChoice::Auto => "auto".into(),
            DeviceChoice::Cpu => "cpu".into(),
            DeviceChoice::Cuda(index) => format!("cuda:{index}"),
        }
    }
}

impl TextValue for OutputFormat {
    const EXPECTED: &'static str = "output_format: expected h264, h265, prores, ffv1, png or png16";
    fn parse_text(text: &str) -> Option<Self> {
        OutputFormat::parse(text)
    }
    fn to_text(&self) -> String {
        self.as_str().into()
    }
}

impl TextValue for DtypeChoice {
    const EXPECTED: &'static str = "dtype: expected auto, f32, bf16 or f16";
    fn parse_text(text: &str) -> Option<Self> {
        DtypeChoice::parse(text)
    }
    fn to_text(&self) -> String {
        serde_json::to_value(self).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
    }
}

impl TextValue for HostAllocator {
    const EXPECTED: &'static str = "cpu_allocator: expected bounded or fast";
    fn parse_text(text: &str) -> Option<Self> {
        HostAllocator::parse(text.trim())
    }
    fn to_text(&self) -> String {
        match self {
            HostAllocator::Bounded => "bounded".into(),
            HostAllocator::Fast => "fast".into(),
        }
    }
}
