//! The binary itself: linked to CUDA when torch has it, runs one job from the command line,
//! and refuses an invalid configuration with a message naming the key.
use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_vaebox");

#[test]
fn binary_keeps_libtorch_cuda_and_an_rpath_to_torch() {
    let out = Command::new("readelf").args(["-d", BIN]).output().expect("readelf (binutils) is needed");
    assert!(out.status.success());
    let dynamic = String::from_utf8_lossy(&out.stdout);
    let torch_lib = Path::new(REPO).join(".venv/libtorch/lib");
    let torch_lib = torch_lib.canonicalize().unwrap_or(torch_lib);
    assert!(
        dynamic.contains(&format!("[{}]", torch_lib.display())),
        "no rpath/runpath to {}:\n{dynamic}",
        torch_lib.display()
    );
    assert!(dynamic.contains("[libtorch_cpu.so]"), "{dynamic}");
    if torch_lib.join("libtorch_cuda.so").exists() {
        assert!(dynamic.contains("NEEDED") && dynamic.contains("[libtorch_cuda.so]"), "libtorch_cuda.so was dropped:\n{dynamic}");
        // The CUDA allocator statistics (per-job peak, free-memory budget) are compiled in, not stubbed.
        let symbols = Command::new("nm").arg(BIN).output().expect("nm (binutils) is needed");
        let symbols = String::from_utf8_lossy(&symbols.stdout);
        for name in ["vaebox_cuda_peak_allocated_bytes", "vaebox_cuda_memory_info", "vaebox_set_tf32"] {
            assert!(symbols.contains(name), "{name} is not in the binary");
        }
    }
}

#[test]
fn run_upscales_a_clip_without_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("in.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let output = dir.path().join("out.mp4");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .env("VAEBOX_MODELS_DIR", Path::new(REPO).join("models"))
        .args(["run", "--op", "upscale", "--model", "realesrgan-animevideov3", "--scale", "2", "--input"])
        .arg(&clip)
        .arg("--output")
        .arg(&output)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("3/3 frames"), "no progress bar: {stderr}");
    let probed = ffprobe(&output);
    assert_eq!((probed.width, probed.height, probed.frames), (352, 288, 3));
    // A summary for a person, not a page of JSON.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with(&format!("wrote {}: 352×288, 3 frames, ", output.display())) && stdout.contains("took "), "{stdout}");
    assert!(!stdout.contains('{'), "{stdout}");

    // The same again: the output exists, so it is refused unless --overwrite says to replace it.
    let again = |extra: &[&str]| {
        Command::new(BIN)
            .current_dir(dir.path())
            .env("VAEBOX_MODELS_DIR", Path::new(REPO).join("models"))
            .env("RUST_BACKTRACE", "1")
            .args(["run", "--scale", "2", "--input"])
            .arg(&clip)
            .arg("--output")
            .arg(&output)
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = again(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("exists; pass --overwrite"), "{stderr}");
    assert!(!stderr.contains("backtrace") && stderr.lines().count() == 1, "one line, no backtrace: {stderr}");
    let replaced = again(&["--overwrite", "--json"]);
    assert!(replaced.status.success(), "{}", String::from_utf8_lossy(&replaced.stderr));
    let report: serde_json::Value = serde_json::from_slice(&replaced.stdout).expect("--json prints the job");
    assert_eq!(report["plan"]["scale"], 2, "{report}");
}

/// `run --preset NAME` takes the config's `[presets.NAME]` as `preset=NAME` does over HTTP: its fields fill in
/// those the flags do not give, a flag given wins, and an unknown preset is refused naming the box's.
#[test]
fn run_takes_a_preset_from_the_config_and_flags_win_over_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), "[presets.third]\nscale = 3\nkeep_audio = false\n").unwrap();
    let clip = dir.path().join("in.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &clip);
    let run = |extra: &[&str], output: &str| {
        Command::new(BIN)
            .current_dir(dir.path())
            .env("VAEBOX_MODELS_DIR", Path::new(REPO).join("models"))
            .args(["run", "--input"])
            .arg(&clip)
            .arg("--output")
            .arg(dir.path().join(output))
            .args(extra)
            .output()
            .unwrap()
    };
    let stderr = |out: &std::process::Output| String::from_utf8_lossy(&out.stderr).into_owned();
    // The preset's scale is used (and refused: this upscaler has 2 and 4), so the preset was applied.
    let refused = run(&["--preset", "third"], "a.mp4");
    assert!(!refused.status.success() && stderr(&refused).contains("scale `3` is not supported"), "{}", stderr(&refused));
    let unknown = run(&["--preset", "nope"], "b.mp4");
    assert!(!unknown.status.success(), "{}", stderr(&unknown));
    assert!(stderr(&unknown).contains("no preset `nope`; this box has third (GET /v1/presets)"), "{}", stderr(&unknown));
    // `--scale 2` wins over the preset's 3; its keep_audio=false still applies.
    let out = run(&["--preset", "third", "--scale", "2", "--json"], "c.mp4");
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints the job");
    assert_eq!(report["plan"]["scale"], 2, "{report}");
    let probed = ffprobe(&dir.path().join("c.mp4"));
    assert_eq!((probed.width, probed.height, probed.frames), (352, 288, 2));
}

/// `run --op interpolate` doubles the frame rate with the one interpolator (no `--model` needed).
#[test]
fn run_interpolates_a_clip_without_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("in.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let output = dir.path().join("out.mp4");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .env("VAEBOX_MODELS_DIR", Path::new(REPO).join("models"))
        .args(["run", "--op", "interpolate", "--factor", "2", "--input"])
        .arg(&clip)
        .arg("--output")
        .arg(&output)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let probed = ffprobe(&output);
    assert_eq!((probed.width, probed.height, probed.frames, probed.fps.as_str()), (176, 144, 6, "60000/1001"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with(&format!("wrote {}: 176×144, 6 frames, ", output.display())), "{stdout}");
}

/// The output's name must carry its format's extension: a latent is not written into `.mp4`, nor
/// ProRes into `.mp4`; and an op other than upscale without `--model` takes the one model that can do it.
#[test]
fn run_checks_the_output_extension_and_defaults_the_model_by_op() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("in.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let models = models_with_small_wan21(dir.path());
    let run = |args: &[&str], output: &str| {
        Command::new(BIN)
            .current_dir(dir.path())
            .env("VAEBOX_MODELS_DIR", &models)
            .args(["run", "--input"])
            .arg(&clip)
            .arg("--output")
            .arg(dir.path().join(output))
            .args(args)
            .output()
            .unwrap()
    };
    for (args, output, says) in [
        (&["--op", "vae_encode"][..], "lat.mp4", "does not end in .safetensors"),
        (&["--op", "vae_reconstruct", "--output-format", "prores"][..], "out.mp4", "does not end in .mov"),
        // A flag the op does not use is refused, as the API refuses the field (it once ran without the seed).
        (&["--op", "upscale", "--seed", "3"][..], "up.mp4", "upscale does not take `seed` (only restore)"),
        (&["--op", "vae_encode", "--color-fix", "adain"][..], "lat2.safetensors", "vae_encode does not take `color_fix`"),
        (&["--op", "upscale", "--factor", "2"][..], "up2.mp4", "upscale does not take `factor` (only interpolate)"),
    ] {
        let out = run(args, output);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(says), "{args:?} {output}: {stderr}");
        assert!(!dir.path().join(output).exists());
    }
    // The models folder has one VAE: vae_encode without --model uses it.
    let out = run(&["--op", "vae_encode", "--json"], "lat.safetensors");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.path().join("lat.safetensors").exists());
}

/// With stderr going to a pipe (a log file, CI), `run` writes plain lines: no carriage-return redraws
/// of a progress bar and no colour codes in its log lines, yet still the progress and the logs.
#[test]
fn run_writes_plain_text_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("in.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let output = dir.path().join("out.mp4");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .env("VAEBOX_MODELS_DIR", Path::new(REPO).join("models"))
        // `run` logs its media processes at debug: lines whose level and fields a terminal would colour.
        .env("VAEBOX_LOG", "warn,vaebox=debug")
        .env_remove("NO_COLOR")
        .args(["run", "--op", "upscale", "--model", "realesrgan-animevideov3", "--scale", "2", "--input"])
        .arg(&clip)
        .arg("--output")
        .arg(&output)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains('\r'), "a carriage return in piped stderr: {stderr:?}");
    assert!(!stderr.contains("\x1b["), "an escape sequence in piped stderr: {stderr:?}");
    assert!(stderr.lines().any(|line| line.contains(" DEBUG ")), "no log line to check: {stderr:?}");
    assert!(stderr.lines().any(|line| line.starts_with("3/3 frames")), "no final progress line: {stderr:?}");
}

/// Every flag of `run --help` says what it is for, and the ones with a fixed set of values list them.
#[test]
fn run_help_documents_every_flag_with_its_values() {
    let out = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    // Long help: each flag on its own line, its text indented below it, a blank line between flags.
    let mut flags: Vec<(String, String)> = Vec::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if (trimmed.starts_with("--") || trimmed.starts_with("-h")) && indent <= 6 {
            let name = trimmed.split([' ', '<']).find(|w| w.starts_with("--")).unwrap().trim_end_matches(',').to_string();
            flags.push((name, trimmed.to_string()));
        } else if let Some((_, text)) = flags.last_mut().filter(|_| indent > 6) {
            text.push(' ');
            text.push_str(trimmed);
        }
    }
    let names: Vec<&str> = flags.iter().map(|(name, _)| name.as_str()).collect();
    for expected in [
        "--op", "--model", "--input", "--output", "--scale", "--dtype", "--tile", "--normalize", "--config", "--help", "--vae", "--height",
        "--width", "--seed", "--color-fix", "--batch-frames", "--batch-overlap", "--factor", "--fps", "--scene-threshold",
        "--preset",
    ] {
        assert!(names.contains(&expected), "{expected} is not in the help:\n{help}");
    }
    for (name, text) in &flags {
        // What is left without the flag's own names, its `<VALUE>` and clap's `[default: ...]`-style notes.
        let plain: String = text.split('[').map(|part| part.split_once(']').map_or(part, |(_, after)| after)).collect();
        let words = plain.split_whitespace().skip_while(|w| w.starts_with('-') || w.starts_with('<')).count();
        assert!(words >= 2, "{name} is not described: `{text}`");
    }
    let text_of = |name: &str| flags.iter().find(|(n, _)| n == name).unwrap().1.clone();
    assert!(text_of("--op").contains("[possible values: upscale, vae_encode, vae_decode, vae_reconstruct, restore, interpolate]"), "{}", text_of("--op"));
    assert!(text_of("--op").contains("[default: upscale]"), "{}", text_of("--op"));
    assert!(text_of("--dtype").contains("[possible values: auto, f32, bf16, f16]"), "{}", text_of("--dtype"));
    assert!(text_of("--model").contains("[default: realesrgan-animevideov3 for `upscale`"), "{}", text_of("--model"));
    assert!(text_of("--scale").contains("2 or 4") && text_of("--scale").contains("[default: 4]"), "{}", text_of("--scale"));
    assert!(text_of("--tile").contains("[default:"), "{}", text_of("--tile"));
    assert!(text_of("--color-fix").contains("[possible values: wavelet, adain, lab, hsv, wavelet_adaptive, none]"), "{}", text_of("--color-fix"));
    assert!(text_of("--batch-frames").contains("4n + 1"), "{}", text_of("--batch-frames"));
}

/// An output `run` could not write is refused at once, before the input is read or a model loaded.
#[test]
fn run_checks_the_output_folder_before_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("in.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let missing = dir.path().join("no/such/folder");
    for (output, says) in [(missing.join("out.mp4"), "does not exist"), (clip.join("out.mp4"), "is not a folder")] {
        let started = std::time::Instant::now();
        let out = Command::new(BIN)
            .current_dir(dir.path())
            .env("VAEBOX_MODELS_DIR", Path::new(REPO).join("models"))
            .args(["run", "--op", "upscale", "--scale", "2", "--input"])
            .arg(&clip)
            .arg("--output")
            .arg(&output)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{}: ran anyway", output.display());
        let folder = output.parent().unwrap().display().to_string();
        assert!(stderr.contains(&folder) && stderr.contains(says), "{}: {stderr}", output.display());
        assert!(!stderr.contains("frames"), "the job started before the output was checked: {stderr}");
        println!("refused in {:.3} s: {}", started.elapsed().as_secs_f64(), stderr.lines().next().unwrap_or(""));
    }
    assert!(!missing.exists());
}

/// As the server does at submission: a Wan 2.2 checkpoint with 8 latent channels has no published
/// statistics, so `run` refuses to normalise with it, or to undo a normalisation, and writes nothing.
#[test]
fn run_refuses_normalisation_without_published_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(models.join("vae")).unwrap();
    let fixture = Path::new(REPO).join(".cache/fixtures/wan_cases/wan22_r2_t9_48x80/weights.safetensors");
    std::fs::copy(fixture, models.join("vae/wan22-z8.safetensors")).unwrap();
    let clip = dir.path().join("in.mp4");
    make_clip(&media("carphone_pristine.mp4"), 5, false, &clip);
    let latent = dir.path().join("in.safetensors");
    write_safetensors(&latent, "latent", &[1, 8, 2, 3, 5], &[0.25; 8 * 2 * 3 * 5], serde_json::json!({"normalized": "true"}));
    let output = dir.path().join("out");
    for (op, input, normalize, code) in
        [("vae_encode", &clip, true, "normalize-unsupported"), ("vae_decode", &latent, false, "latent-normalize-unsupported")]
    {
        let mut command = Command::new(BIN);
        command.current_dir(dir.path()).env("VAEBOX_MODELS_DIR", &models).args(["run", "--op", op, "--model", "wan22-z8", "--input"]);
        command.arg(input).arg("--output").arg(&output);
        if normalize {
            command.arg("--normalize");
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(code) && stderr.contains("8 latent channels"), "{op}: {stderr}");
        assert!(!output.exists());
    }
}

#[test]
fn invalid_configuration_stops_start_up_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let check = |env: &[(&str, &str)], config: Option<&str>, expect: &str| {
        let mut command = Command::new(BIN);
        command.current_dir(dir.path()).arg("serve");
        if let Some(text) = config {
            let path = dir.path().join("bad.toml");
            std::fs::write(&path, text).unwrap();
            command.arg("--config").arg(path);
        }
        for (k, v) in env {
            command.env(k, v);
        }
        let out = command.output().unwrap();
        assert!(!out.status.success(), "started with a bad config");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expect), "message should mention {expect}: {stderr}");
    };
    check(&[("VAEBOX_LISTEN", "nowhere")], None, "listen");
    check(&[("VAEBOX_MAX_WIDTH", "wide")], None, "VAEBOX_MAX_WIDTH");
    check(&[], Some("max_frames = -3\n"), "max_frames");
    check(&[], Some("no_such_key = 1\n"), "no_such_key");
    check(&[("VAEBOX_DEVICE", "tpu")], None, "device");
    check(&[("VAEBOX_CPU_ALLOCATOR", "greedy")], None, "cpu_allocator");
}

/// A measured run (what `vaebox calibrate --device cuda` does per size) reads the CUDA allocator's
/// peak where there is a GPU, and without one says so instead of measuring RSS under a CUDA label.
#[test]
fn a_measured_run_on_cuda_uses_the_allocator_statistics_or_refuses() {
    let weights = Path::new(REPO).join("../shared/reference/wan21_original/weights.safetensors");
    let spec = serde_json::json!({
        "model": {"weights": weights, "family": "wan21", "dtype": "f32", "threads": 2, "device": "cuda"},
        "op": "decode", "latent_frames": 2, "latent_height": 4, "latent_width": 6,
        "latent_frames_per_push": 1, "tiles": null, "input": null, "output": null
    });
    let out = Command::new(BIN).args(["measure-run", "--spec", &spec.to_string()]).env("VAEBOX_LOG", "warn").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if tch::Cuda::is_available() {
        assert!(out.status.success(), "{stderr}");
        let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        assert!(report["peak_bytes"].as_f64().unwrap() > 0.0, "{report}");
    } else {
        assert!(!out.status.success(), "measured on a CUDA device this machine does not have: {stdout}");
        assert!(stderr.contains("no CUDA allocator statistics"), "{stderr}");
    }
}

/// `bench tiling --device cuda` plans with the CUDA memory model and measures on the GPU (a tiny clip
/// where there is one); without one it stops before encoding anything and says why.
#[test]
fn the_tiling_bench_on_cuda_measures_on_the_gpu_or_refuses() {
    let args = ["bench", "tiling", "--device", "cuda", "--frames", "5", "--height", "32", "--width", "48", "--budgets", "50%", "--repeats", "1"];
    let out = Command::new(BIN).args(args).env("VAEBOX_LOG", "warn").env("RUST_BACKTRACE", "0").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if tch::Cuda::is_available() {
        assert!(out.status.success(), "{stderr}");
        assert!(stdout.contains(" on cuda, "), "{stdout}");
    } else {
        assert!(!out.status.success(), "benched on a CUDA device this machine does not have: {stdout}");
        assert!(stderr.contains("--device cuda: libtorch sees no CUDA device"), "{stderr}");
    }
}

/// `bench parity` (the GPU kit's correctness step) compares a device with the CPU; on the CPU against
/// itself its f32 comparisons must come out at exactly zero error, every check inside its bound, and
/// each one written to the JSON.
#[test]
fn parity_bench_runs_every_family_and_the_dit() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("parity.json");
    let wan = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/wan21_original/weights.safetensors");
    let args = ["bench", "parity", "--device", "cpu", "--frames", "5", "--height", "16", "--width", "16", "--dit", "3b,7b", "--dit-dim", "256", "--dit-grid", "1,4,4"];
    let out = Command::new(BIN).args(args).arg("--vae").arg(format!("wan21={}", wan.display())).arg("--json").arg(&json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let checks = report["checks"].as_array().unwrap();
    // Wan 2.1: encode and decode at f32 and bf16, two streamed; each DiT: f32, bf16, swapped.
    assert_eq!(checks.len(), 6 + 2 * 3, "{report}");
    for check in checks {
        assert_eq!(check["passed"], true, "{check}");
        if check["check"].as_str().unwrap().contains("f32 vs cpu f32") || check["check"].as_str().unwrap().contains("f32 encode vs") || check["check"].as_str().unwrap().contains("f32 decode vs") {
            assert_eq!(check["relative_error"].as_f64(), Some(0.0), "{check}");
        }
    }
}

/// Without a GPU, `bench parity --device cuda` says so before loading anything.
#[test]
fn parity_bench_on_cuda_refuses_without_a_gpu() {
    if tch::Cuda::is_available() {
        return;
    }
    let out = Command::new(BIN).args(["bench", "parity", "--device", "cuda", "--dit", ""]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--device cuda: libtorch sees no CUDA device"));
}
