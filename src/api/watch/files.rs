//! What a watch folder does with files on disk: results into the output folder under a free name, inputs
//! into `done/` or `failed/` (with `NAME.error.txt`), never overwriting anything.
use std::path::{Path, PathBuf};

/// `name` in `dir`, or `stem-1.ext`, `stem-2.ext`, ... : the first that names nothing yet. A link holds its
/// name even when it leads nowhere (`exists` follows it and says no; the link would then be written through).
pub fn free_name(dir: &Path, name: &str) -> PathBuf {
    let taken = |path: &Path| path.symlink_metadata().is_ok();
    let wanted = dir.join(name);
    if !taken(&wanted) {
        return wanted;
    }
    let (stem, extension) = split_name(name);
    (1u32..)
        .map(|n| dir.join(format!("{stem}-{n}{extension}")))
        .find(|candidate| !taken(candidate))
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
    let placed = place_through(result, &temporary, output_dir, name).await;
    // Whatever happened, no hidden copy is left to pile up look after look.
    let _ = tokio::fs::remove_file(&temporary).await;
    placed
}

async fn place_through(result: &Path, temporary: &Path, output_dir: &Path, name: &str) -> std::io::Result<String> {
    tokio::fs::copy(result, temporary).await?;
    let target = free_name(output_dir, name);
    // `free_name` and the rename are not one step: a file another program makes in between under the same
    // name would be replaced. Hard-linking refuses an existing name, so that cannot happen.
    let placed = match tokio::fs::hard_link(temporary, &target).await {
        Ok(()) => target,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let again = free_name(output_dir, name);
            tokio::fs::hard_link(temporary, &again).await?;
            again
        }
        Err(e) => return Err(e),
    };
    Ok(placed.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
}

/// Moves a processed input into `folder/<sub>/` under a free name. `sub` must be a real folder: a link there
/// would carry the input (and its `.error.txt`) out of the watch folder, wherever the link points.
pub async fn move_input(folder: &Path, name: &str, sub: &str) -> std::io::Result<PathBuf> {
    let dir = folder.join(sub);
    match tokio::fs::symlink_metadata(&dir).await {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            let why = format!("{} is not a folder (a link or a file): the input stays where it is", dir.display());
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, why));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => tokio::fs::create_dir(&dir).await?,
        Err(e) => return Err(e),
    }
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

    /// A dangling link at the output's name holds it: the result gets a counter, nothing is written through
    /// the link, and no hidden `.part` copy stays behind.
    #[tokio::test]
    async fn a_link_holds_its_name_even_when_it_leads_nowhere() {
        let dir = tempfile::tempdir().unwrap();
        let (out, elsewhere) = (dir.path().join("out"), dir.path().join("elsewhere"));
        std::fs::create_dir_all(&out).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("gone.mp4"), out.join("clip_x2.mp4")).unwrap();
        let result = dir.path().join("result.mp4");
        std::fs::write(&result, b"frames").unwrap();
        assert_eq!(place_result(&result, &out, "clip_x2.mp4").await.unwrap(), "clip_x2-1.mp4");
        assert!(!elsewhere.exists(), "written through the link");
        let mut names: Vec<String> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(names, ["clip_x2-1.mp4", "clip_x2.mp4"]);
    }

    /// `failed/` that is a link is not followed: the input stays in the watch folder, nothing lands outside.
    #[tokio::test]
    async fn an_input_never_moves_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let (folder, outside) = (dir.path().join("in"), dir.path().join("outside"));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, folder.join("failed")).unwrap();
        std::fs::write(folder.join("bad.mp4"), b"not a video").unwrap();
        assert!(fail_input(&folder, "bad.mp4", "not-a-video", "no").await.is_err());
        assert!(folder.join("bad.mp4").is_file(), "the input left the folder");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "something was written outside the watch folder");
    }
}
