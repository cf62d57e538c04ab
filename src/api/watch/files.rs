//! What a watch folder does with files on disk: results into the output folder under a free name, inputs
//! into `done/` or `failed/` (with `NAME.error.txt`), never overwriting anything.
use std::path::{Path, PathBuf};

/// `name` in `dir`, or `stem-1.ext`, `stem-2.ext`, ... : the first that does not exist yet.
pub fn free_name(dir: &Path, name: &str) -> PathBuf {
    let wanted = dir.join(name);
    if !wanted.exists() {
        return wanted;
    }
    let (stem, extension) = split_name(name);
    (1u32..)
        .map(|n| dir.join(format!("{stem}-{n}{extension}")))
        .find(|candidate| !candidate.exists())
        .expect("some counter is free")
}

/// `clip_x2.mp4` → (`clip_x2`, `.mp4`); `in.latent.safetensors` → (`in`, `.latent.safetensors`), so the
/// counter goes before the extension the box writes.
fn split_name(name: &str) -> (&str, &str) {
    let at = name.strip_suffix(".latent.safetensors").map(str::len).or_else(|| name.rfind('.'));
    match at.filter(|at| *at > 0) {
        Some(at) => name.split_at(at),
        None => (name, ""),
    }
}

/// Copies a result into the output folder: to a hidden temporary name first, so a reader of the folder
/// never sees half a file, then to a free name. The name it got.
pub async fn place_result(result: &Path, output_dir: &Path, name: &str) -> std::io::Result<String> {
    let temporary = output_dir.join(format!(".{name}.{}.part", uuid::Uuid::new_v4()));
    tokio::fs::copy(result, &temporary).await?;
    let target = free_name(output_dir, name);
    // `free_name` and the rename are not one step: a file another program makes in between under the same
    // name would be replaced. Hard-linking refuses an existing name, so that cannot happen.
    let placed = match tokio::fs::hard_link(&temporary, &target).await {
        Ok(()) => target,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let again = free_name(output_dir, name);
            tokio::fs::hard_link(&temporary, &again).await?;
            again
        }
        Err(e) => return Err(e),
    };
    tokio::fs::remove_file(&temporary).await?;
    Ok(placed.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
}

/// Moves a processed input into `folder/<sub>/` under a free name.
pub async fn move_input(folder: &Path, name: &str, sub: &str) -> std::io::Result<PathBuf> {
    let dir = folder.join(sub);
    tokio::fs::create_dir_all(&dir).await?;
    let target = free_name(&dir, name);
    tokio::fs::rename(folder.join(name), &target).await?;
    Ok(target)
}

/// Moves a refused or failed input into `failed/`, with `NAME.error.txt` beside it (code, then message).
pub async fn fail_input(folder: &Path, name: &str, code: &str, message: &str) -> std::io::Result<()> {
    let moved = move_input(folder, name, "failed").await?;
    let moved_name = moved.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    tokio::fs::write(moved.with_file_name(format!("{moved_name}.error.txt")), format!("{code}\n{message}\n")).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_name_gets_a_counter_before_its_suffixes() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(free_name(dir.path(), "clip_x2.mp4"), dir.path().join("clip_x2.mp4"));
        std::fs::write(dir.path().join("clip_x2.mp4"), b"").unwrap();
        assert_eq!(free_name(dir.path(), "clip_x2.mp4"), dir.path().join("clip_x2-1.mp4"));
        std::fs::write(dir.path().join("clip_x2-1.mp4"), b"").unwrap();
        assert_eq!(free_name(dir.path(), "clip_x2.mp4"), dir.path().join("clip_x2-2.mp4"));
        std::fs::write(dir.path().join("in.latent.safetensors"), b"").unwrap();
        assert_eq!(free_name(dir.path(), "in.latent.safetensors"), dir.path().join("in-1.latent.safetensors"));
        std::fs::write(dir.path().join("my.clip_x2.mp4"), b"").unwrap();
        assert_eq!(free_name(dir.path(), "my.clip_x2.mp4"), dir.path().join("my.clip_x2-1.mp4"));
    }
}
