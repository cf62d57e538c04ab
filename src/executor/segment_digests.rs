//! Each finished segment's frames, size and SHA-256, kept in the checkpoint and checked before a job goes on
//! from it. A job used to trust its folder: a segment cut short gave a "succeeded" job with 30 of 120 frames,
//! a checkpoint claiming 30 frames too many a 90-frame result, and a deleted segment failed the job instead
//! of starting over.
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a finished segment was when its checkpoint was written.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SegmentDigest {
    pub file: String,
    pub frames: u64,
    pub bytes: u64,
    pub sha256: String,
}

/// Segment `index` in `dir` (the file `segment_{index:06}.*`) as it is now, holding `frames` frames; `None`
/// when there is no such file (a PNG output keeps frames, not segments).
pub fn digest(dir: &Path, index: usize, frames: u64) -> std::io::Result<Option<SegmentDigest>> {
    let Some(file) = segment_file(dir, index)? else { return Ok(None) };
    let (bytes, sha256) = hash(&dir.join(&file))?;
    Ok(Some(SegmentDigest { file, frames, bytes, sha256 }))
}

/// How many of `digests`, in order, the folder still holds as they were recorded.
pub fn good_prefix(dir: &Path, digests: &[SegmentDigest]) -> usize {
    digests.iter().take_while(|recorded| hash(&dir.join(&recorded.file)).is_ok_and(|(bytes, sha256)| bytes == recorded.bytes && sha256 == recorded.sha256)).count()
}

/// Whether `dir/frames` (a PNG output's) holds each of the first `frames` frames.
pub fn frames_present(dir: &Path, frames: u64) -> bool {
    (0..frames).all(|index| dir.join("frames").join(format!("frame_{index:06}.png")).is_file())
}

fn segment_file(dir: &Path, index: usize) -> std::io::Result<Option<String>> {
    let prefix = format!("segment_{index:06}.");
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) {
            return Ok(Some(name));
        }
    }
    Ok(None)
}

fn hash(path: &Path) -> std::io::Result<(u64, String)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let bytes = std::io::copy(&mut file, &mut hasher)?;
    Ok((bytes, format!("{:x}", hasher.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_changed_cut_or_gone_ends_the_good_prefix() {
        let dir = tempfile::tempdir().unwrap();
        for index in 0..3 {
            std::fs::write(dir.path().join(format!("segment_{index:06}.mp4")), vec![index as u8; 1000]).unwrap();
        }
        let digests: Vec<SegmentDigest> = (0..3).map(|index| digest(dir.path(), index, 30).unwrap().unwrap()).collect();
        assert_eq!(good_prefix(dir.path(), &digests), 3);
        std::fs::write(dir.path().join("segment_000002.mp4"), vec![2u8; 999]).unwrap();
        assert_eq!(good_prefix(dir.path(), &digests), 2, "cut short");
        std::fs::write(dir.path().join("segment_000001.mp4"), vec![7u8; 1000]).unwrap();
        assert_eq!(good_prefix(dir.path(), &digests), 1, "same size, other bytes");
        std::fs::remove_file(dir.path().join("segment_000000.mp4")).unwrap();
        assert_eq!(good_prefix(dir.path(), &digests), 0, "gone");
        assert_eq!(digest(dir.path(), 9, 30).unwrap(), None);
    }
}
