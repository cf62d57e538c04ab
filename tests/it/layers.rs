//! The folder tree reads top-down: every `crate::…` path in a module's code names a module in a lower layer
//! (or its own), so no module climbs back to one that uses it. Read from the source files themselves; the
//! file-level loops are `import_cycles.rs`.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top to bottom. A module may use modules of its own row only if the row says so (`tiling` over `models`
/// is two rows for that reason).
const LAYERS: &[&[&str]] = &[
    &["server", "bench"],
    &["api"],
    &["queue"],
    &["executor"],
    &["jobs"],
    &["config"],
    &["tiling"],
    &["models"],
    &["media", "device"],
    &["error_codes", "redact", "stats"],
];

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|row| row.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` is in no layer: add it to LAYERS"))
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            rust_files(&entry.unwrap().path(), out);
        }
    } else if path.is_file() && path.extension().is_some_and(|ext| ext == "rs") {
        out.push(path.to_path_buf());
    }
}

/// The top-level modules named by `crate::name` in a file's code (comments skipped).
fn uses_in(file: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut used = BTreeSet::new();
    for line in text.lines().map(str::trim_start).filter(|line| !line.starts_with("//")) {
        let code = line.split("//").next().unwrap_or("");
        for (at, _) in code.match_indices("crate::") {
            let name: String = code[at + 7..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                used.insert(name);
            }
        }
    }
    used
}

/// Every top-level module of the library and the files that make it.
fn modules() -> BTreeMap<String, Vec<PathBuf>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut modules = BTreeMap::new();
    for name in lib.lines().filter_map(|line| line.trim().strip_prefix("pub mod ")?.strip_suffix(';')) {
        let mut files = Vec::new();
        rust_files(&src.join(format!("{name}.rs")), &mut files);
        rust_files(&src.join(name), &mut files);
        assert!(!files.is_empty(), "no files for module `{name}`");
        modules.insert(name.to_string(), files);
    }
    modules
}

#[test]
fn no_module_uses_a_module_above_it() {
    let modules = modules();
    assert!(modules.len() >= 10, "lib.rs lists only {:?}", modules.keys());
    let mut climbs = Vec::new();
    for (module, files) in &modules {
        for file in files {
            for used in uses_in(file) {
                if used == *module {
                    continue;
                }
                assert!(modules.contains_key(&used), "{} uses `crate::{used}`, which lib.rs does not declare", file.display());
                if layer_of(&used) <= layer_of(module) {
                    climbs.push(format!("{} ({module}) uses crate::{used}", file.display()));
                }
            }
        }
    }
    assert!(climbs.is_empty(), "climbs back up the layers:\n{}", climbs.join("\n"));
}

#[test]
fn a_climb_is_caught() {
    let dir = std::env::temp_dir().join(format!("vaebox-layers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("probe.rs");
    std::fs::write(&file, "// crate::api in a comment does not count\nuse crate::queue::Queue; // crate::bench\n").unwrap();
    assert_eq!(uses_in(&file), BTreeSet::from(["queue".to_string()]));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(layer_of("queue") < layer_of("executor"));
}

/// Inside `models`, top to bottom: the FlashVSR pipeline (on the Wan DiT, TAEHV and Wan families, sharing the
/// restore pipeline's colour fix), the restore pipeline (SeedVR2's around its DiT, on any loaded VAE), the
/// catalogue (`vae` loads any VAE the `registry` lists, whose entries say which `op`s they do), the families
/// (which never use one another), the traits the families implement, the shared layers, the file formats.
/// Items of `models` itself (`ModelError`) are below all of them.
const MODEL_FLOORS: &[&[&str]] = &[
    &["flashvsr"],
    &["restore"],
    &["vae"],
    &["registry"],
    &["op"],
    &["wan", "wan_dit", "seedvr2", "seedvr2_dit", "realesrgan", "realcugan", "rife", "taehv"],
    &["family"],
    &["nn"],
    &["formats"],
];

/// The `models` submodules a file names as `crate::models::name` or, at a submodule's root, `super::name`.
fn model_uses_in(file: &Path, at_root: bool) -> BTreeSet<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut used = BTreeSet::new();
    for line in text.lines().map(str::trim_start).filter(|line| !line.starts_with("//")) {
        let code = line.split("//").next().unwrap_or("");
        let prefixes: &[&str] = if at_root { &["crate::models::", "super::"] } else { &["crate::models::"] };
        for prefix in prefixes {
            for (at, _) in code.match_indices(prefix) {
                let name: String = code[at + prefix.len()..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect();
                if !name.is_empty() && MODEL_FLOORS.iter().any(|floor| floor.contains(&name.as_str())) {
                    used.insert(name);
                }
            }
        }
    }
    used
}

#[test]
fn model_families_stand_on_shared_layers_and_never_on_each_other() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/models");
    let floor_of = |name: &str| MODEL_FLOORS.iter().position(|floor| floor.contains(&name)).unwrap();
    let mut wrong = Vec::new();
    for (floor, names) in MODEL_FLOORS.iter().enumerate() {
        for name in *names {
            let mut files = Vec::new();
            rust_files(&models.join(format!("{name}.rs")), &mut files);
            rust_files(&models.join(name), &mut files);
            assert!(!files.is_empty(), "no files for models::{name}");
            for file in files {
                // `super::` at a folder's root (or in a file directly under models/) means models itself.
                let at_root = file.parent() == Some(models.as_path());
                for used in model_uses_in(&file, at_root) {
                    if used != *name && floor_of(&used) <= floor {
                        wrong.push(format!("{} (models::{name}) uses models::{used}", file.display()));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "model modules that climb or use a sibling:\n{}", wrong.join("\n"));
}
