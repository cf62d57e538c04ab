//! Link-time facts about libtorch that `torch-sys` leaves to the binary:
//! an rpath to the torch libraries (so `target/release/vaebox` runs with no environment), and
//! `libtorch_cuda` kept in DT_NEEDED even though no symbol of ours refers to it directly —
//! the default `--as-needed` would drop it and a GPU box would silently run on CPU.
use std::path::PathBuf;
use std::process::Command;

fn torch_lib_dir() -> Option<PathBuf> {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=PYTHON_SYS_EXECUTABLE");
    if let Ok(dir) = std::env::var("LIBTORCH") {
        let lib = PathBuf::from(dir).join("lib");
        return Some(lib.canonicalize().unwrap_or(lib));
    }
    let python = std::env::var("PYTHON_SYS_EXECUTABLE").unwrap_or_else(|_| "python3".into());
    let out = Command::new(python)
        .args(["-c", "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))"])
        .output()
        .ok()?;
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=migrations");
    let Some(lib) = torch_lib_dir() else {
        println!("cargo:warning=torch library directory not found; run scripts/setup.sh");
        return;
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    for cuda_lib in ["torch_cuda", "c10_cuda"] {
        if lib.join(format!("lib{cuda_lib}.so")).exists() {
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
            println!("cargo:rustc-link-arg=-L{}", lib.display());
            println!("cargo:rustc-link-arg=-l{cuda_lib}");
            println!("cargo:rustc-link-arg=-Wl,--as-needed");
        }
    }
}
