//! Files written by torch.save (made at test time by tests/python/make_torch_save_fixtures.py) read back
//! exactly: every tensor must equal, in dtype, shape and bits, the same tensor as safetensors wrote it.
//! Files holding anything but tensors are refused as a format error, and nothing in them is run.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use tch::{Kind, Tensor};
use vaebox::models::formats::torch_file::{read_tensor, read_tensors};
use vaebox::models::ModelError;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn python() -> PathBuf {
    std::env::var_os("VAEBOX_PYTHON").map(PathBuf::from).unwrap_or_else(|| Path::new(REPO).join(".venv/bin/python"))
}

fn marker() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("torch_file_evil_ran")
}

/// Written once per run (importing torch is the slow part), then shared by the tests.
fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("torch_file_fixtures");
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(marker());
        std::fs::create_dir_all(&dir).expect("fixture dir");
        let output = Command::new(python())
            .arg(Path::new(REPO).join("tests/python/make_torch_save_fixtures.py"))
            .arg(&dir)
            .arg(marker())
            .output()
            .expect("python runs (set VAEBOX_PYTHON)");
        assert!(output.status.success(), "fixture script failed: {}", String::from_utf8_lossy(&output.stderr));
        dir
    })
}

fn expected(case: &str) -> BTreeMap<String, Tensor> {
    let path = fixtures().join(format!("{case}.safetensors"));
    Tensor::read_safetensors(&path).unwrap_or_else(|e| panic!("{} unreadable: {e}", path.display())).into_iter().collect()
}

/// Same dtype, shape and bits; returns the max abs difference (in f64) for the report.
fn assert_same(name: &str, actual: &Tensor, expected: &Tensor) -> f64 {
    assert_eq!(actual.kind(), expected.kind(), "{name}: dtype");
    assert_eq!(actual.size(), expected.size(), "{name}: shape");
    assert!(actual.is_contiguous(), "{name}: not contiguous");
    let diff = if actual.kind() == Kind::Int64 {
        (actual - expected).abs().max().int64_value(&[]) as f64
    } else {
        (actual.to_kind(Kind::Double) - expected.to_kind(Kind::Double)).abs().max().double_value(&[])
    };
    assert!(actual.equal(expected), "{name}: values differ (max abs diff {diff})");
    println!("{name}: {:?} {:?}, max abs diff {diff}", actual.kind(), actual.size());
    diff
}

fn check_bare(case: &str) {
    let path = fixtures().join(format!("{case}.pt"));
    let actual = read_tensor(&path).unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_eq!(assert_same(case, &actual, &expected(case)["t"]), 0.0);
}

fn check_dict(case: &str) {
    let path = fixtures().join(format!("{case}.pt"));
    let actual = read_tensors(&path).unwrap_or_else(|e| panic!("{case}: {e}"));
    let expected = expected(case);
    let names: Vec<&str> = actual.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names.len(), expected.len(), "{case}: names {names:?}");
    for (name, tensor) in &actual {
        let reference = expected.get(name).unwrap_or_else(|| panic!("{case}: unexpected entry {name}"));
        assert_eq!(assert_same(&format!("{case}.{name}"), tensor, reference), 0.0);
    }
}

fn format_error(path: &Path, result: Result<impl std::fmt::Debug, ModelError>) -> String {
    match result {
        Err(ModelError::Format { path: named, reason }) => {
            assert_eq!(named, path, "the error names the file");
            println!("{}: refused: {reason}", path.display());
            reason
        }
        other => panic!("{}: expected a format error, got {other:?}", path.display()),
    }
}

#[test]
fn bf16_embedding_shaped_like_seedvr2_pos_emb() {
    check_bare("pos_emb");
}

#[test]
fn fp32_matrix() {
    check_bare("fp32");
}

#[test]
fn fp16_strided_view_with_offset() {
    check_bare("fp16_view");
}

#[test]
fn float8_saved_with_rebuild_v3_and_untyped_storage() {
    let path = fixtures().join("fp8.pt");
    let actual = read_tensor(&path).expect("fp8 reads");
    assert_eq!(actual.kind(), Kind::Float8e4m3fn);
    let bytes = actual.view_dtype(Kind::Uint8);
    assert_eq!(assert_same("fp8 (bytes)", &bytes, &expected("fp8")["t"]), 0.0);
}

#[test]
fn int64_beyond_32_bits() {
    check_bare("int64");
}

#[test]
fn dict_of_two_tensors() {
    check_dict("dict");
}

#[test]
fn dict_entries_sharing_one_storage() {
    check_dict("shared");
}

#[test]
fn module_state_dict_in_saved_order() {
    check_dict("state_dict");
    let names: Vec<String> = read_tensors(&fixtures().join("state_dict.pt")).unwrap().into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["weight", "bias"]);
}

#[test]
fn bare_tensor_is_not_a_dict_and_a_dict_of_two_is_not_one_tensor() {
    let bare = fixtures().join("pos_emb.pt");
    assert!(format_error(&bare, read_tensors(&bare)).contains("not a dict"));
    let dict = fixtures().join("dict.pt");
    assert!(format_error(&dict, read_tensor(&dict)).contains("dict of 2 tensors"));
}

#[test]
fn non_tensor_value_is_refused() {
    let path = fixtures().join("ordered_dict.pt");
    assert!(format_error(&path, read_tensors(&path)).contains("entry `x`"));
}

#[test]
fn pickled_function_is_refused_not_run() {
    let path = fixtures().join("evil.pt");
    let reason = format_error(&path, read_tensors(&path));
    assert!(reason.contains("`posix.system`"), "{reason}");
    assert!(!marker().exists(), "the pickle's command ran");
}

#[test]
fn legacy_format_is_refused() {
    let path = fixtures().join("legacy.pt");
    assert!(format_error(&path, read_tensor(&path)).contains("legacy"));
}

#[test]
fn pickle_over_16_mib_is_refused() {
    let path = fixtures().join("big_pickle.pt");
    assert!(format_error(&path, read_tensors(&path)).contains("more than the 16777216"));
}

#[test]
fn storage_shorter_than_its_numel_is_refused() {
    let path = fixtures().join("short_storage.pt");
    assert!(format_error(&path, read_tensor(&path)).contains("has 593918 bytes, but its tensor needs 593920"));
}
