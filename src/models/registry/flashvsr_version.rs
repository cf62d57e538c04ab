//! Which release a FlashVSR model folder holds. v1.0 and v1.1 weights have the same keys and shapes, but
//! v1.1's code carries the LQ projection's causal caches from one clip to the next (`Causal_LQ4x_Proj`)
//! where v1.0's builds each clip's from itself (`Buffer_LQ4x_Proj`): v1.1 weights give wrong pictures with
//! v1.0's code. Nothing in the files tells them apart, so the folder's name does, as the authors name
//! their release folders (`FlashVSR`, `FlashVSR-v1.1`); a job or the config can say it explicitly.
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FlashVsrVersion {
    #[serde(rename = "1.0")]
    V1_0,
    #[serde(rename = "1.1")]
    V1_1,
}

impl FlashVsrVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            FlashVsrVersion::V1_0 => "1.0",
            FlashVsrVersion::V1_1 => "1.1",
        }
    }

    pub fn parse(text: &str) -> Option<FlashVsrVersion> {
        match text.trim().trim_start_matches(['v', 'V']) {
            "1.0" | "1" => Some(FlashVsrVersion::V1_0),
            "1.1" => Some(FlashVsrVersion::V1_1),
            _ => None,
        }
    }

    /// The release a folder named as the authors name theirs holds: a `v1.1` (or `v1_1`, `v11`) anywhere
    /// in the name is 1.1; any other name is 1.0, the first release's folder `FlashVSR`.
    pub fn of_folder(name: &str) -> FlashVsrVersion {
        let name = name.to_lowercase();
        if ["v1.1", "v1_1", "v11", "-1.1"].iter().any(|tag| name.contains(tag)) {
            FlashVsrVersion::V1_1
        } else {
            FlashVsrVersion::V1_0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authors_folder_names_say_the_release() {
        assert_eq!(FlashVsrVersion::of_folder("FlashVSR"), FlashVsrVersion::V1_0);
        assert_eq!(FlashVsrVersion::of_folder("FlashVSR-v1.1"), FlashVsrVersion::V1_1);
        assert_eq!(FlashVsrVersion::of_folder("flashvsr_v1_1_bf16"), FlashVsrVersion::V1_1);
        assert_eq!(FlashVsrVersion::of_folder("my-upscaler"), FlashVsrVersion::V1_0);
        assert_eq!(FlashVsrVersion::parse("v1.1"), Some(FlashVsrVersion::V1_1));
        assert_eq!(FlashVsrVersion::parse("1.0"), Some(FlashVsrVersion::V1_0));
        assert_eq!(FlashVsrVersion::parse("2"), None);
    }
}
