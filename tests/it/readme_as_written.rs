//! The box run the way the README tells a newcomer to: from a folder laid out as the repository root, on the
//! shipped `config.toml` (relative `data_dir = "data"`, `models_dir = "models"`), `target/release/vaebox serve`
//! started there as `scripts/run.sh` ends, and the README's own command lines pasted into a shell in that folder
//! — each line below is checked to be in README.md word for word. Every other test names absolute temporary
//! folders, which is how a relative data dir failed every upscale, interpolate and restore at its last step
//! (ffmpeg's concat list read the segments' relative paths against its own folder) while CI stayed green.
use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;

/// README lines, as written there; `HOST` stands for `http://127.0.0.1:8080`.
const UPSCALE_RAW: &str = "curl --data-binary @clip.mp4 'HOST/v1/jobs?op=upscale&model=realesrgan-animevideov3&scale=4&filename=clip.mp4'";
const UPSCALE_FORM: &str = "curl -F file=@clip.mp4 -F op=upscale -F model=realesrgan-x4plus -F scale=2 HOST/v1/jobs";
const FOLLOW: &str = r#"curl -N "HOST/v1/jobs/<id>/events?compact=1""#;
const DOWNLOAD: &str = "curl -OJ HOST/v1/jobs/<id>/result";
const ENCODE: &str = r#"id=$(curl -s --data-binary @clip.mp4 'HOST/v1/jobs?op=vae_encode&model=wan_2.1_vae&normalize=false&filename=clip.mp4' | jq -er '.id // error(.error.code + ": " + .error.message)')"#;
const WAIT: &str = "curl -sN HOST/v1/jobs/$id/events > /dev/null";
const SAVE_LATENT: &str = "curl -fo clip.latent.safetensors HOST/v1/jobs/$id/result";
const DECODE: &str = "curl --data-binary @clip.latent.safetensors 'HOST/v1/jobs?op=vae_decode&model=wan_2.1_vae'";
const RECONSTRUCT: &str = "curl --data-binary @clip.mp4 'HOST/v1/jobs?op=vae_reconstruct&model=wan_2.1_vae&dtype=bf16'";
const RESTORE: &str = r#"id=$(curl -s --data-binary @clip.mp4 'HOST/v1/jobs?op=restore&model=seedvr2_ema_3b&scale=2&filename=clip.mp4' | jq -er '.id // error(.error.code + ": " + .error.message)')"#;
const FOLLOW_RESTORE: &str = r#"curl -sN "HOST/v1/jobs/$id/events?compact=1""#;
const SAVE_RESTORED: &str = "curl -fo clip_restored.mp4 HOST/v1/jobs/$id/result";
const INTERPOLATE: &str = r#"id=$(curl -s --data-binary @clip.mp4 'HOST/v1/jobs?op=interpolate&factor=2&filename=clip.mp4' | jq -er '.id // error(.error.code + ": " + .error.message)')"#;
const SAVE_INTERPOLATED: &str = "curl -fo clip_x2fps.mp4 HOST/v1/jobs/$id/result";
const FLASHVSR_TINY: &str = "curl --data-binary @clip.mp4 'HOST/v1/jobs?op=restore&model=FlashVSR-v1.1&filename=clip.mp4'";
const FLASHVSR_FULL: &str = "curl --data-binary @clip.mp4 'HOST/v1/jobs?op=restore&model=FlashVSR-v1.1&vae=wan_2.1_vae&filename=clip.mp4'";
const RUN_UPSCALE: &str = "target/release/vaebox run --op upscale --model realesrgan-animevideov3 --scale 4 --input in.mp4 --output out.mp4";
const RUN_RESTORE: &str = "target/release/vaebox run --op restore --model seedvr2_ema_3b --scale 2 --input clip.mp4 --output out.mp4";
const RUN_INTERPOLATE: &str = "target/release/vaebox run --op interpolate --factor 2 --input clip.mp4 --output out.mp4";

const README_HOST: &str = "http://127.0.0.1:8080";

/// A folder laid out as the repository root after `scripts/setup.sh`: the shipped config.toml, the binary at
/// `target/release/vaebox`, the model files set-up brings, and the checkpoints a user puts in `models/vae/` and
/// `models/dit/` under the README's names (the small reference weights: real structure, random values).
fn repository_copy(root: &Path) {
    std::fs::copy(Path::new(REPO).join("config.toml"), root.join("config.toml")).unwrap();
    std::fs::create_dir_all(root.join("target/release")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_vaebox"), root.join("target/release/vaebox")).unwrap();
    for family in ["realesrgan", "realcugan", "rife"] {
        std::fs::create_dir_all(root.join("models")).unwrap();
        std::os::unix::fs::symlink(Path::new(REPO).join("models").join(family), root.join("models").join(family)).unwrap();
    }
    let reference = Path::new(REPO).join("../shared/reference");
    for sub in ["vae", "dit"] {
        std::fs::create_dir_all(root.join("models").join(sub)).unwrap();
    }
    let copies = [
        ("wan21_original/weights.safetensors", "vae/wan_2.1_vae.safetensors"),
        ("seedvr2/small_weights.safetensors", "vae/ema_vae_fp16.safetensors"),
        ("seedvr2_dit/small_3b_weights.safetensors", "dit/seedvr2_ema_3b.safetensors"),
        ("seedvr2_dit/text_embeds.safetensors", "dit/text_embeds.safetensors"),
    ];
    for (from, to) in copies {
        std::fs::copy(reference.join(from), root.join("models").join(to)).unwrap();
    }
    // A FlashVSR folder under the README's name, the authors' files made from the small reference weights.
    let case = common::tensors::read_tensor_map(&reference.join("flashvsr/e2e_tiny.safetensors"));
    super::flashvsr_jobs::model_folder(&root.join("models"), "FlashVSR-v1.1", &case["context"]);
}

/// A small real clip: 5 frames (a VAE's 1 + 4k) of carphone at 88×72, 30000/1001 fps.
fn small_clip(path: &Path) {
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("carphone_pristine.mp4"))
        .args(["-frames:v", "5", "-vf", "scale=88:72", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// The README's line with the test server's address for `HOST`, after checking that README.md has it.
fn line(readme: &str, text: &str, base: &str) -> String {
    let as_written = text.replace("HOST", README_HOST);
    assert!(readme.contains(&as_written), "README.md no longer has the line this test runs:\n{as_written}");
    text.replace("HOST", base)
}

/// Runs `script` with bash in `folder`, failing on the first failing command; returns what it printed.
fn shell(folder: &Path, script: &str) -> String {
    let output = Command::new("bash").args(["-euo", "pipefail", "-c", script]).current_dir(folder).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the README's commands failed ({}):\n{script}\n--- stdout\n{stdout}\n--- stderr\n{stderr}", output.status);
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_op_runs_from_the_readme_on_the_shipped_config_with_its_relative_paths() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path();
    repository_copy(root);
    small_clip(&root.join("clip.mp4"));
    std::fs::copy(root.join("clip.mp4"), root.join("in.mp4")).unwrap();
    let readme = std::fs::read_to_string(Path::new(REPO).join("README.md")).unwrap();
    let server = Server::start_as_the_readme_says(root);
    let base = server.base.clone();
    let l = |text: &str| line(&readme, text, &base);

    // The upscale examples, each followed to its end and the first downloaded as the README does.
    let script = [
        format!("id=$({} | jq -r .id)", l(UPSCALE_RAW)),
        l(FOLLOW).replace("<id>", "$id"),
        l(DOWNLOAD).replace("<id>", "$id"),
        format!("id=$({} | jq -r .id)", l(UPSCALE_FORM)),
        l(WAIT),
        format!("curl -fs {base}/v1/jobs/$id | jq -r .status"),
    ]
    .join("\n");
    let out = shell(root, &script);
    assert!(out.ends_with("succeeded\n"), "the realesrgan-x4plus job did not succeed:\n{out}");
    let upscaled = ffprobe(&root.join("clip_x4.mp4"));
    assert_eq!((upscaled.width, upscaled.height, upscaled.frames), (352, 288, 5));

    // The VAE examples: encode, save the latent, decode it, and a reconstruct.
    let script = [
        l(ENCODE),
        l(WAIT),
        l(SAVE_LATENT),
        format!("for job in \"$({})\" \"$({})\"; do", l(DECODE), l(RECONSTRUCT)),
        "  id=$(echo \"$job\" | jq -r .id)".to_string(),
        format!("  {}", l(WAIT)),
        format!("  curl -fs {base}/v1/jobs/$id | jq -r .status"),
        "done".to_string(),
    ]
    .join("\n");
    assert_eq!(shell(root, &script), "succeeded\nsucceeded\n");
    assert!(std::fs::metadata(root.join("clip.latent.safetensors")).unwrap().len() > 0);

    // Restore and interpolate, saved under the README's names.
    let script = [l(RESTORE), l(FOLLOW_RESTORE), l(SAVE_RESTORED), l(INTERPOLATE), l(WAIT), l(SAVE_INTERPOLATED)].join("\n");
    let out = shell(root, &script);
    // The compact stream reads as lines: the job's stages, then how it ended.
    assert!(out.contains("event: running\ndata: running ") && out.contains("event: succeeded\ndata: succeeded in "), "{out}");
    let restored = ffprobe(&root.join("clip_restored.mp4"));
    assert_eq!((restored.width, restored.height, restored.frames), (176, 144, 5));
    let interpolated = ffprobe(&root.join("clip_x2fps.mp4"));
    // carphone runs at 30000/1001 fps: twice the rate, twice the frames.
    assert_eq!((interpolated.frames, interpolated.fps.as_str()), (10, "60000/1001"), "{interpolated:?}");

    // FlashVSR, Tiny and Full: every frame and the whole picture, 4×.
    let script = [
        format!("for job in \"$({})\" \"$({})\"; do", l(FLASHVSR_TINY), l(FLASHVSR_FULL)),
        "  id=$(echo \"$job\" | jq -er .id)".to_string(),
        format!("  {}", l(WAIT)),
        format!("  curl -fs {base}/v1/jobs/$id | jq -r .status"),
        format!("  curl -fso flashvsr_$id.mp4 {base}/v1/jobs/$id/result && ffprobe -v error -count_frames -select_streams v -show_entries stream=width,height,nb_read_frames -of csv=p=0 flashvsr_$id.mp4"),
        "done".to_string(),
    ]
    .join("\n");
    assert_eq!(shell(root, &script), "succeeded\n352,288,5\nsucceeded\n352,288,5\n");

    // Everything the jobs wrote stayed in the relative data dir, beside the config.
    assert!(root.join("data/vaebox.db").is_file());
    drop(server);

    // `vaebox run` with the README's relative names: in the working folder, `./` and a subfolder.
    shell(root, &l(RUN_UPSCALE));
    let out = ffprobe(&root.join("out.mp4"));
    assert_eq!((out.width, out.height, out.frames), (352, 288, 5));
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::copy(root.join("clip.mp4"), root.join("sub/clip.mp4")).unwrap();
    shell(root, &l(RUN_INTERPOLATE).replace("--input clip.mp4 --output out.mp4", "--input sub/clip.mp4 --output sub/out.mp4"));
    assert_eq!(ffprobe(&root.join("sub/out.mp4")).frames, 10);
    shell(root, &l(RUN_RESTORE).replace("--output out.mp4", "--output ./restored.mp4"));
    assert_eq!(ffprobe(&root.join("restored.mp4")).frames, 5);
    // No job's resume folder is left behind when it succeeded.
    let hidden: Vec<_> = std::fs::read_dir(root).unwrap().chain(std::fs::read_dir(root.join("sub")).unwrap()).map(|e| e.unwrap().file_name()).filter(|name| name.to_string_lossy().ends_with(".resume")).collect();
    assert!(hidden.is_empty(), "resume folders left behind: {hidden:?}");
}

/// A box set up as told has no Wan VAE until the user puts one in `models/vae/`: the README's encode line
/// then shows the box's refusal (code and message) and fails, where it once set `id=null` and said nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readme_line_the_box_refuses_shows_the_refusal() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path();
    repository_copy(root);
    std::fs::remove_file(root.join("models/vae/wan_2.1_vae.safetensors")).unwrap();
    small_clip(&root.join("clip.mp4"));
    let readme = std::fs::read_to_string(Path::new(REPO).join("README.md")).unwrap();
    let server = Server::start_as_the_readme_says(root);
    let encode = line(&readme, ENCODE, &server.base);
    let output = Command::new("bash").args(["-c", &format!("{encode} && echo \"id=$id\"")]).current_dir(root).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(!output.status.success(), "the refused encode line succeeded:\n{stdout}\n{stderr}");
    assert!(stderr.contains("unknown-model: ") && stderr.contains("wan_2.1_vae"), "the box's refusal was not shown:\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
}
