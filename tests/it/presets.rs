//! Presets (`[presets.NAME]` in config.toml): listed at /v1/presets, `preset=NAME` fills in the fields a job
//! does not give, its own fields win, an unknown name is refused, and a preset with a field no job has stops
//! start-up.
use crate::common;

use common::*;

const CONFIG: &str = r#"
[presets.anime-2x]
op = "upscale"
model = "realesrgan-animevideov3"
scale = 2
output_format = "ffv1"

[presets.smooth]
op = "interpolate"
factor = 3
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preset_fills_in_what_the_job_does_not_give() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), CONFIG).unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();

    let (status, listing) = get_json(&client, &server.url("/v1/presets")).await;
    assert_eq!(status, 200, "{listing}");
    assert_eq!(
        listing["presets"]["anime-2x"],
        serde_json::json!({"op": "upscale", "model": "realesrgan-animevideov3", "scale": "2", "output_format": "ffv1"}),
        "{listing}"
    );
    assert_eq!(listing["presets"]["smooth"]["factor"], "3", "{listing}");

    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &clip);
    let body = || std::fs::read(&clip).unwrap();
    let job = run_job(&client, &server, "preset=anime-2x", body()).await;
    assert_eq!((job["op"].as_str(), job["params"]["scale"].as_i64(), job["params"]["output_format"].as_str()), (Some("upscale"), Some(2), Some("ffv1")), "{job}");
    // The job's own field wins over the preset's.
    let (status, job) = upload_raw(&client, &server, "preset=anime-2x&scale=4&output_format=h264", body()).await;
    assert_eq!(status, 202, "{job}");
    assert_eq!((job["params"]["scale"].as_i64(), job["params"]["output_format"].as_str()), (Some(4), Some("h264")), "{job}");
    // A preset of another op: its fields are the job's, checked as the job's own would be.
    let (status, job) = upload_raw(&client, &server, "preset=smooth", body()).await;
    assert_eq!((status, job["op"].as_str(), job["params"]["interpolate"]["factor"].as_i64()), (202, Some("interpolate"), Some(3)), "{job}");
    let (status, refused) = upload_raw(&client, &server, "preset=smooth&scale=2", body()).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (400, Some("parameter-not-for-op")), "{refused}");

    let (status, refused) = upload_raw(&client, &server, "preset=sharp", body()).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (400, Some("unknown-preset")), "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("anime-2x, smooth"), "{message}");
}

#[test]
fn a_preset_with_a_field_no_job_has_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), "[presets.typo]\nop = \"upscale\"\nscal = 2\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vaebox"))
        .arg("serve")
        .current_dir(dir.path())
        .env("VAEBOX_LISTEN", "127.0.0.1:0")
        .env("VAEBOX_DATA_DIR", dir.path().join("data"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("presets.typo.scal is not a job field"), "{stderr}");
}

/// A preset whose values every job would be refused for stops start-up too, naming the preset and why (it
/// used to start, and every job naming it was refused); a model not in the folder yet does not.
#[test]
fn a_preset_with_a_value_no_job_could_run_stops_start_up() {
    let start = |config: &str| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_vaebox"))
            .arg("serve")
            .current_dir(dir.path())
            .env("VAEBOX_LISTEN", "127.0.0.1:0")
            .env("VAEBOX_DATA_DIR", dir.path().join("data"))
            .env("VAEBOX_MODELS_DIR", std::path::Path::new(REPO).join("models"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A box that starts prints its address; one that refuses its config exits.
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        (line, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for (config, why) in [
        ("[presets.big]\nop = \"upscale\"\nscale = \"huge\"\n", "presets.big: "),
        ("[presets.mixed]\nop = \"upscale\"\nseed = 3\n", "presets.mixed: "),
    ] {
        let (line, stderr) = start(config);
        assert!(line.is_empty() && stderr.contains(why), "{config}: {line}{stderr}");
    }
    let (line, stderr) = start("[presets.later]\nop = \"restore\"\nmodel = \"seedvr2_ema_7b\"\n");
    assert!(line.starts_with("vaebox listening on "), "a preset for a model not here yet stopped start-up: {stderr}");
}
