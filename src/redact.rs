//! Messages that reach clients (error answers, a failed job's stored message) name files by their place
//! in the data or models folder, never by this machine's paths; the server log keeps the full text.
use std::path::Path;
use std::sync::OnceLock;

/// The folders whose location is private, each in every spelling a message may carry.
#[derive(Debug, Default)]
pub struct Redactor {
    /// (spelling without a trailing `/`, which folder), longest first so that nested spellings win.
    roots: Vec<(String, Folder)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Folder {
    Data,
    Models,
}

impl Folder {
    fn itself(self) -> &'static str {
        match self {
            Folder::Data => "the data folder",
            Folder::Models => "the models folder",
        }
    }
}

static INSTALLED: OnceLock<Redactor> = OnceLock::new();

/// Set once at start-up: error answers are built far from the config (`IntoResponse` has no state).
pub fn install(redactor: Redactor) {
    let _ = INSTALLED.set(redactor);
}

/// `text` as a client may see it (unchanged before `install`).
pub fn client_message(text: &str) -> String {
    match INSTALLED.get() {
        Some(redactor) => redactor.redact(text),
        None => text.to_string(),
    }
}

impl Redactor {
    pub fn new(data_dir: &Path, models_dir: &Path) -> Redactor {
        let mut roots = Vec::new();
        for (dir, folder) in [(data_dir, Folder::Data), (models_dir, Folder::Models)] {
            let cwd = std::env::current_dir().ok();
            let spellings = [Some(dir.to_path_buf()), cwd.map(|cwd| cwd.join(dir)), std::fs::canonicalize(dir).ok()];
            for spelling in spellings.into_iter().flatten() {
                let text = spelling.to_string_lossy().trim_end_matches('/').to_string();
                let text = text.strip_prefix("./").map(str::to_string).unwrap_or(text);
                if text.len() > 1 && text != "." && !roots.iter().any(|(known, _)| *known == text) {
                    roots.push((text, folder));
                }
            }
        }
        roots.sort_by_key(|(text, _)| std::cmp::Reverse(text.len()));
        Redactor { roots }
    }

    /// Every path under a private folder becomes its place there: `<data>/jobs/<id>/input.mp4` → `input.mp4`,
    /// `<data>/uploads/<x>.part` → `the upload`, `<models>/vae/wan.safetensors` → `vae/wan.safetensors`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        while at < text.len() {
            match self.root_at(text, at) {
                Some((len, folder)) => {
                    // ffmpeg names its inputs as `file:` URLs.
                    if out.ends_with("file:") {
                        out.truncate(out.len() - "file:".len());
                    }
                    let end = path_end(text, at + len);
                    out.push_str(&place(folder, &text[at + len..end]));
                    at = end;
                }
                None => {
                    let c = text[at..].chars().next().expect("at is inside text");
                    out.push(c);
                    at += c.len_utf8();
                }
            }
        }
        out
    }

    /// The private folder spelt at `at`, if a path starts there; its length in bytes.
    fn root_at(&self, text: &str, at: usize) -> Option<(usize, Folder)> {
        if text[..at].chars().next_back().is_some_and(continues_a_name) {
            return None;
        }
        let rest = &text[at..];
        self.roots.iter().find_map(|(root, folder)| {
            let after = rest.strip_prefix(root.as_str())?;
            // A relative spelling (`data`) is a path only when followed by a `/`; "data found" is prose.
            let is_path = after.starts_with('/') || (root.starts_with('/') && after.chars().next().is_none_or(ends_a_path));
            is_path.then_some((root.len(), *folder))
        })
    }
}

/// Characters that make a match at this point the middle of a longer name (`metadata/`, `/x/data`).
fn continues_a_name(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '~')
}

/// Paths in messages end at whitespace, a quote or bracket, or the `:` that tools put after a file name.
fn ends_a_path(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | ',' | ';' | ':' | ')' | ']' | '}' | '>')
}

fn path_end(text: &str, from: usize) -> usize {
    text[from..].find(ends_a_path).map_or(text.len(), |i| from + i)
}

/// `inside` is what follows the folder: empty, or `/` and a relative path.
fn place(folder: Folder, inside: &str) -> String {
    let relative = inside.trim_start_matches('/');
    if relative.is_empty() {
        return folder.itself().to_string();
    }
    if folder == Folder::Data {
        if let Some(job_file) = relative.strip_prefix("jobs/") {
            let (id, file) = job_file.split_once('/').unwrap_or((job_file, ""));
            if uuid::Uuid::parse_str(id).is_ok() {
                return if file.is_empty() { "the job's folder".into() } else { file.to_string() };
            }
        }
        if relative.starts_with("uploads/") {
            return "the upload".into();
        }
    }
    relative.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor() -> Redactor {
        Redactor::new(Path::new("/srv/box/data"), Path::new("/opt/models"))
    }

    #[test]
    fn job_upload_and_model_paths_become_places() {
        let r = redactor();
        let id = "0b7d3c3e-3f57-4a3c-9d0e-8f7a2b6f1c11";
        assert_eq!(r.redact(&format!("/srv/box/data/jobs/{id}/input.mp4 is empty (zero bytes)")), "input.mp4 is empty (zero bytes)");
        assert_eq!(
            r.redact("ffprobe failed (exit 1): file:/srv/box/data/uploads/1234.part: Invalid data found when processing input"),
            "ffprobe failed (exit 1): the upload: Invalid data found when processing input"
        );
        assert_eq!(
            r.redact("model file /opt/models/vae/wan.safetensors is not valid: header too large"),
            "model file vae/wan.safetensors is not valid: header too large"
        );
        assert_eq!(r.redact("cannot write to /srv/box/data"), "cannot write to the data folder");
        assert_eq!(r.redact(&format!("\"/srv/box/data/jobs/{id}\"")), "\"the job's folder\"");
    }

    #[test]
    fn other_text_and_longer_names_stay() {
        let r = redactor();
        for text in ["/srv/box/database.db", "/srv/box/data2/x", "see /v1/models", "/x/opt/models/a", "no path at all"] {
            assert_eq!(r.redact(text), text);
        }
    }

    #[test]
    fn a_relative_folder_is_redacted_only_as_a_path() {
        let r = Redactor::new(Path::new("data"), Path::new("models"));
        assert_eq!(r.redact("Invalid data found in models"), "Invalid data found in models");
        assert_eq!(r.redact("metadata/data.json"), "metadata/data.json");
        assert_eq!(r.redact("model file models/dit/x.safetensors"), "model file dit/x.safetensors");
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(r.redact(&format!("open {}/data/vaebox.db", cwd.display())), "open vaebox.db");
    }
}
