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
    // scripts/gpu/build.sh marks the build for the lent GPU machines (torch 2.11, tch 0.24) with it.
    println!("cargo::rustc-check-cfg=cfg(tch_0_24)");
    let Some(lib) = torch_lib_dir() else {
        println!("cargo:warning=torch library directory not found; run scripts/setup.sh");
        return;
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    build_cuda_shim(&lib);
    for cuda_lib in ["torch_cuda", "c10_cuda"] {
        if lib.join(format!("lib{cuda_lib}.so")).exists() {
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
            println!("cargo:rustc-link-arg=-L{}", lib.display());
            println!("cargo:rustc-link-arg=-l{cuda_lib}");
            println!("cargo:rustc-link-arg=-Wl,--as-needed");
        }
    }
}

/// Compiles src/device/cuda_shim.cpp (device-generic libtorch headers only) when this libtorch has
/// CUDA, and tells the crate with `cfg(cuda_shim)`; otherwise the Rust side reports no device statistics.
fn build_cuda_shim(lib: &std::path::Path) {
    println!("cargo::rustc-check-cfg=cfg(cuda_shim)");
    println!("cargo:rerun-if-changed=src/device/cuda_shim.cpp");
    let torch = lib.parent().expect("lib has a parent");
    if !lib.join("libc10_cuda.so").exists() {
        println!("cargo:warning=libtorch without CUDA: device memory statistics are off");
        return;
    }
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("src/device/cuda_shim.cpp")
        .include(torch.join("include"))
        .include(torch.join("include/torch/csrc/api/include"))
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .flag_if_supported("-w")
        .compile("vaebox_cuda_shim");
    println!("cargo:rustc-cfg=cuda_shim");
}
