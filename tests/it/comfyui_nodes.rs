//! The ComfyUI custom nodes (`clients/comfyui`), loaded as ComfyUI loads a custom node package and called with
//! tensors in ComfyUI's layouts against a real box with access tokens: VAE decode and encode against the Wan 2.1
//! reference case, an upscale against the box's own job on the same frames, a SeedVR2 restore, a FlashVSR restore
//! (its own node: its models, its decoders, its fields and defaults), sound (ComfyUI's
//! AUDIO) through both, progress from the job's event stream (and polling without it), the box's errors as
//! exceptions, ComfyUI's Cancel cancelling the box's job, queued or running, and a job paused on the box waited on
//! (its queue place and the pause shown on the node) rather than taken for a failure; the model inputs as ComfyUI's
//! prompt validation sees them, with a second box that has a model the first lacks, and each computing node's
//! precision reaching the box (`tests/python/comfyui_nodes_check.py` does the calls).
use crate::common;
use crate::flashvsr_jobs;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::tensors::read_tensor_map;
use common::*;
use serde_json::{json, Value};

const TOKEN: &str = "comfy-secret-0123";
const CASE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/wan21_original/case.safetensors");
const WIDTH: u32 = 64;
const HEIGHT: u32 = 48;
/// 4n + 1 frames: one SeedVR2 batch.
const FRAMES: usize = 5;
const FPS: f64 = 24.0;

fn ffmpeg(args: &[&str]) {
    let status = Command::new("ffmpeg").args(["-nostdin", "-v", "error", "-y"]).args(args).status().expect("run ffmpeg");
    assert!(status.success(), "ffmpeg {args:?}");
}

/// The first FRAMES frames of a real clip at 64×48 as packed rgb24, and the same frames losslessly in an FFV1 MKV (the
/// input of the box's own job, made without the nodes' code).
fn frames(dir: &Path) -> (std::path::PathBuf, Vec<u8>) {
    let raw = dir.join("frames.rgb");
    let source = media("bigbuckbunny.mp4");
    let size = format!("scale={WIDTH}:{HEIGHT}");
    ffmpeg(&["-i", source.to_str().unwrap(), "-frames:v", &FRAMES.to_string(), "-vf", &size, "-f", "rawvideo", "-pix_fmt", "rgb24", raw.to_str().unwrap()]);
    let mkv = dir.join("frames.mkv");
    let geometry = format!("{WIDTH}x{HEIGHT}");
    ffmpeg(&["-f", "rawvideo", "-pix_fmt", "rgb24", "-s", &geometry, "-r", "24", "-i", raw.to_str().unwrap(), "-c:v", "ffv1", "-pix_fmt", "bgr0", mkv.to_str().unwrap()]);
    (raw, std::fs::read(mkv).unwrap())
}

fn max_abs(result: &Value, key: &str) -> f64 {
    result[key].as_f64().unwrap_or_else(|| panic!("{key} missing: {result}"))
}

#[tokio::test]
async fn comfyui_nodes_hand_their_work_to_the_box() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    models_with_small_seedvr2(dir.path());
    let flashvsr_case = read_tensor_map(&Path::new(flashvsr_jobs::REFERENCE).join("e2e_tiny.safetensors"));
    flashvsr_jobs::model_folder(&models, "FlashVSR", &flashvsr_case["context"]);
    std::os::unix::fs::symlink(Path::new(REPO).join("models/realesrgan"), models.join("realesrgan")).unwrap();
    let tokens = format!("comfy:{TOKEN}");
    // No short job is lent the executor beside the busy one: the jobs behind it stay queued, as the checks expect.
    let env = [("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_TOKENS", &tokens), ("VAEBOX_SHORT_JOB_S", "0")];
    let server = Server::start(dir.path(), &env);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {TOKEN}").parse().unwrap());
    let client = reqwest::Client::builder().default_headers(headers).build().unwrap();
    // A second box, without tokens, whose only model is the same small Wan 2.1 VAE under a name the first lacks.
    let second_dir = tempfile::tempdir().unwrap();
    let second_models = second_dir.path().join("models/vae");
    std::fs::create_dir_all(&second_models).unwrap();
    std::fs::copy(models.join("vae/wan21-small.safetensors"), second_models.join("wan21-second.safetensors")).unwrap();
    let second_models = second_dir.path().join("models");
    let second = Server::start(second_dir.path(), &[("VAEBOX_MODELS_DIR", second_models.to_str().unwrap())]);

    // The box's own upscale of the frames, at its own dtype as the node's is.
    let (raw, mkv) = frames(dir.path());
    let query = "op=upscale&model=realesrgan-animevideov3&scale=2&output_format=png&filename=frames.mkv";
    let job = run_job(&client, &server, query, mkv).await;
    let reference = dir.path().join("reference.zip");
    std::fs::write(&reference, fetch(&client, &server, &job).await).unwrap();

    let args: Vec<String> = vec![
        server.base.clone(),
        TOKEN.into(),
        Path::new(REPO).join("clients/comfyui").display().to_string(),
        CASE.into(),
        raw.display().to_string(),
        WIDTH.to_string(),
        HEIGHT.to_string(),
        reference.display().to_string(),
        second.base.clone(),
    ];
    let stdout = tokio::task::spawn_blocking(move || {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
        run_python("tests/python/comfyui_nodes_check.py", &args)
    })
    .await
    .unwrap();
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    println!("{result}");

    // Loaded as ComfyUI loads it, without ComfyUI, and every node's spec is one ComfyUI takes.
    let nodes = json!(["VaeboxConnection", "VaeboxFlashVSRRestore", "VaeboxRestore", "VaeboxUpscale", "VaeboxVAEDecode", "VaeboxVAEEncode"]);
    assert_eq!(result["nodes"], nodes);
    assert!(result["display_names"].as_array().unwrap().contains(&json!("FlashVSR Restore (vaebox)")), "{result}");
    assert_eq!(result["comfy_loaded"], false);
    for key in ["spec_problems", "spec_problems_with_box"] {
        let problems = result[key].as_object().unwrap();
        assert!(problems.len() == 6 && problems.values().all(|p| p == &json!([])), "{key}: {result}");
    }
    // The model input is a COMBO that takes any name a box serves: with no box to ask, a name typed for one
    // passes ComfyUI's validation; with the box, its VAEs, Wan 2.1 first by default (not the first listed).
    assert_eq!(result["decode_model_input_without_box"], "COMBO", "{result}");
    assert_eq!(result["typed_name_without_box_errors"], json!([]), "{result}");
    assert_eq!(result["decode_model_input"], json!(["seedvr2-vae-small", "wan21-small"]));
    assert_eq!(result["decode_model_default"], "wan21-small", "{result}");
    // A connection node to the second box: its model passes validation, joins the list, and runs there.
    assert_eq!(result["second_box_prompt_errors"], json!([]), "{result}");
    let listed = result["decode_model_input_after_second_box"].as_array().cloned().unwrap_or_default();
    assert!(listed.contains(&json!("wan21-second")) && listed.contains(&json!("wan21-small")), "{result}");
    assert!(max_abs(&result, "second_box_decode_max_abs") <= 1e-4, "{result}");
    let refused = result["second_box_unknown_model_error"].as_str().unwrap_or_default();
    assert!(refused.contains("unknown model `wan21-small`; for `vae_decode` this box has wan21-second"), "{result}");
    // A name no box serves for the op is refused by validation with the op's models, not the box's every model.
    let errors = result["unknown_model_prompt_errors"].to_string();
    assert!(errors.contains("unknown model `no-such-model`; for `upscale` this box has realesrgan-animevideov3"), "{result}");
    assert!(!errors.contains("wan21") && !errors.contains("seedvr2") && !errors.contains("Value not in list"), "{result}");
    let errors = result["wrong_op_prompt_errors"].to_string();
    assert!(errors.contains("model `wan21-small` cannot do `upscale`; models that can: realesrgan-animevideov3"), "{result}");
    // Every node that computes has a precision; upscale's and restore's reach their jobs as `dtype`.
    let computing = json!(["VaeboxFlashVSRRestore", "VaeboxRestore", "VaeboxUpscale", "VaeboxVAEDecode", "VaeboxVAEEncode"]);
    assert_eq!(result["precision_inputs"], computing, "{result}");
    assert_eq!((&result["upscale_precision_error"], &result["upscale_job_dtype"]), (&Value::Null, &json!("f32")), "{result}");
    // Each restore node lists its own family's models: SeedVR2's DiTs, FlashVSR's folders (whose decoder is its own
    // TCDecoder or a Wan 2.1 VAE of the box, never the SeedVR2 VAE); a model for the other node is refused saying so.
    assert_eq!(result["restore_model_input"], json!(["seedvr2-3b-small", "seedvr2-7b-small"]));
    assert_eq!(result["flashvsr_model_input"], json!(["FlashVSR"]));
    assert_eq!(result["flashvsr_decoder_input"], json!(["tiny", "wan21-small"]));
    assert_eq!(result["flashvsr_defaults"], json!({"decoder": "tiny", "seed": 0, "fit": "pad", "color_fix": "adain"}));
    assert_eq!(result["flashvsr_prompt_errors"], json!([]), "{result}");
    let errors = result["flashvsr_in_restore_node_errors"].to_string();
    assert!(errors.contains("model `FlashVSR` is a flashvsr model: it takes other inputs, in the FlashVSR Restore (vaebox) node"), "{result}");
    let errors = result["seedvr2_in_flashvsr_node_errors"].to_string();
    assert!(errors.contains("model `seedvr2-3b-small` is not a flashvsr model (this box's: FlashVSR)"), "{result}");
    let errors = result["flashvsr_wrong_decoder_errors"].to_string();
    assert!(errors.contains("model `seedvr2-vae-small` is not a wan21 model (this box's: wan21-small)"), "{result}");
    assert_eq!(result["upscale_model_input_has_animevideov3"], true);
    assert!(result["no_token_error"].as_str().is_some_and(|e| e.contains("unauthorized") && e.contains("token")), "{result}");

    // Decode and encode in f32 (of the case's first 5 frames, 2 latent frames) against the reference computed by the
    // original Wan code in f32. The box's decode
    // and encode match it within 1e-4 (tests/it/remote_vae.rs; the reference's README bounds an independent fp32
    // implementation at about that); the nodes add only exact float32 transfers and an affine map to 0..1,
    // which halves the pixels' error. (The two latents differ by 0.1 to 3 per value, so decoding one in the
    // other's convention cannot pass.)
    assert_eq!(result["decode_shape"], json!([5, 64, 96, 3]), "{result}");
    assert_eq!(result["decode_dtype"], "torch.float32");
    assert!(max_abs(&result, "decode_max_abs") <= 1e-4, "{result}");
    assert!(max_abs(&result, "decode_normalized_max_abs") <= 1e-4, "{result}");
    assert_eq!(result["encode_shape"], json!([1, 16, 2, 8, 12]), "{result}");
    assert!(max_abs(&result, "encode_max_abs") <= 1e-4, "{result}");
    assert!(max_abs(&result, "encode_normalized_max_abs") <= 1e-4, "{result}");

    // Upscale: the node's frames (8-bit APNG in, 16-bit PNG zip out) equal the box's job on the FFV1 of the same
    // frames to one 16-bit code; they are not their input repeated.
    assert_eq!(result["upscale_shape"], json!([FRAMES, 2 * HEIGHT, 2 * WIDTH, 3]), "{result}");
    assert_eq!(result["upscale_dtype"], "torch.float32");
    assert!(max_abs(&result, "upscale_max_abs") <= 1.0 / 65535.0, "{result}");
    assert!(max_abs(&result, "upscale_vs_nearest_max_abs") > 0.05, "{result}");
    assert_eq!(result["upscale_audio"], Value::Null, "no AUDIO in, none out: {result}");

    // Progress came from the job's event stream into ComfyUI's bar, with no poll of the job; where the box
    // answers no stream the node polls, to the same frames.
    assert_eq!(result["progress_last"], json!([1000, 1000]), "{result}");
    assert!(result["progress_updates"].as_u64().unwrap_or(0) >= 2, "{result}");
    assert_eq!(result["upscale_polls"], 0, "{result}");
    assert!(result["fallback_polls"].as_u64().unwrap_or(0) >= 1, "{result}");
    assert_eq!(result["fallback_progress_last"], json!([1000, 1000]), "{result}");
    assert_eq!(max_abs(&result, "fallback_max_abs"), 0.0, "{result}");

    // Sound: given as AUDIO (a stereo tone as long as the frames), the box keeps it and the node returns it at its
    // rate, as long within one frame's duration (float PCM copied through, so the samples themselves too);
    // the frames are the upscale's without sound.
    let frame_samples = 44100.0 / FPS;
    for op in ["upscale", "restore"] {
        assert_eq!(result[format!("{op}_audio_rate")], 44100, "{op}: {result}");
        let given = result[format!("{op}_audio_samples_in")].as_f64().unwrap();
        let shape = &result[format!("{op}_audio_shape")];
        assert_eq!((&shape[0], &shape[1]), (&json!(1), &json!(2)), "{op}: {result}");
        assert!((shape[2].as_f64().unwrap() - given).abs() <= frame_samples, "{op}: {result}");
        assert!(max_abs(&result, &format!("{op}_audio_max_abs")) <= 1e-6, "{op}: {result}");
    }
    assert!(max_abs(&result, "upscale_with_audio_max_abs") <= 1.0 / 65535.0, "{result}");

    // Restore end to end with the small SeedVR2 at scale 1: the frames' count and size, not the input unchanged.
    assert_eq!(result["restore_shape"], json!([FRAMES, HEIGHT, WIDTH, 3]), "{result}");
    assert!(max_abs(&result, "restore_vs_input_max_abs") > 0.05, "{result}");
    assert_eq!(result["restore_progress_last"], json!([1000, 1000]), "{result}");

    // FlashVSR end to end: ×4 the frames, every frame; the job took the node's decoder, seed, fit and colour fix,
    // and was sent none of SeedVR2's fields (the box refuses them for FlashVSR).
    assert_eq!(result["flashvsr_shape"], json!([FRAMES, 4 * HEIGHT, 4 * WIDTH, 3]), "{result}");
    let plan = &result["flashvsr_job_plan"];
    assert_eq!((&plan["decoder"], &plan["vae"], &plan["seed"], &plan["fit"], &plan["color_fix"]), (&json!("full"), &json!("wan21-small"), &json!(3), &json!("pad"), &json!("none")), "{result}");
    assert_eq!(result["flashvsr_job_params"]["dtype"], "f32", "{result}");

    // The box's errors read as what to do.
    let unknown = result["unknown_model_error"].as_str().unwrap_or_default();
    assert!(unknown.contains("unknown-model") && unknown.contains("no-such-model") && unknown.contains("/v1/models"), "{result}");
    assert!(result["unreachable_error"].as_str().is_some_and(|e| e.contains("unreachable")), "{result}");

    // ComfyUI's Cancel once the node's job runs on the box: the node raises ComfyUI's interruption and the job
    // ends cancelled.
    assert_eq!(result["running_cancel_seen"], "running", "{result}");
    assert_eq!(result["running_cancel_raised"], "comfy", "{result}");
    assert_eq!(result["running_cancel_job_status"], "cancelled", "{result}");

    // ComfyUI's Cancel: the jobs (queued behind a busy one) and the synchronous encode's job end cancelled; the
    // restore's fields passed the box's checks at submission.
    assert_eq!(result["cancel_raised"], "comfy", "{result}");
    assert_eq!(result["cancelled_job_op"], "vae_decode", "{result}");
    assert_eq!(result["cancelled_job_status"], "cancelled", "{result}");
    assert_eq!(result["restore_cancel_raised"], "comfy", "{result}");
    assert_eq!(result["restore_job_op"], "restore", "{result}");
    assert_eq!(result["restore_job_status"], "cancelled", "{result}");
    let params = &result["restore_job_params"]["restore"];
    assert_eq!((&params["resolution"], &params["seed"], &params["color_fix"]), (&json!(64), &json!(7), &json!("lab")), "{result}");
    assert_eq!(result["restore_job_params"]["dtype"], "bf16", "{result}");
    assert_eq!(result["encode_cancel_raised"], "comfy", "{result}");
    assert_eq!(result["encode_cancelled_job_op"], "vae_encode", "{result}");
    assert_eq!(result["encode_cancelled_job_status"], "cancelled", "{result}");

    // Paused on the box while the node waits: the node shows its place in the queue, then the pause, and once the
    // job is resumed returns its frame rather than failing.
    assert_eq!(result["paused_seen"], json!(["paused", "queued"]), "{result}");
    assert_eq!((&result["paused_decode_shape"], &result["paused_decode_error"]), (&json!([1, 64, 96, 3]), &Value::Null), "{result}");
    let texts: Vec<&str> = result["paused_node_texts"].as_array().unwrap().iter().map(|t| t[0].as_str().unwrap_or_default()).collect();
    let queued = texts.iter().position(|t| t.starts_with("vaebox: queued, position 1 · "));
    let paused = texts.iter().position(|t| t.starts_with("vaebox: paused on the box"));
    assert!(queued.is_some() && paused > queued && texts.last() == Some(&"vaebox: succeeded"), "{texts:?}");
    assert!(result["paused_node_texts"].as_array().unwrap().iter().all(|t| t[1] == "7"), "{result}");
    assert_eq!(result["blocker_status"], "cancelled", "{result}");
}

/// The box restarts (SIGTERM, then a new process on the same data dir and port) while a node's upscale runs on it:
/// the node waits for it and takes up its job again by id (no second job; the box handed the running job back at the
/// stop and ran it at the next start), where it
/// used to fail with `unreachable` within 2 s; a box away longer than the node waits has the node give up and its
/// job cancelled once the box is back. The model-name check stays on for a reachable box after a prompt named an
/// unreachable one (or a connection's URL came from a link), lets a prompt through while its own box is away, and
/// asks that box again once it is back (`tests/python/comfyui_restart_check.py` drives the nodes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comfyui_nodes_wait_for_a_restarted_box_and_take_up_their_job_again() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    // One job at a time (none lent beside a running one), a checkpoint per 2-frame chunk, and no grace at SIGTERM:
    // the running job is handed back at once and taken up at the next start.
    let mut env = vec![
        ("VAEBOX_SHORT_JOB_S", "0".to_string()),
        ("VAEBOX_CHUNK_FRAMES", "2".to_string()),
        ("VAEBOX_CHECKPOINT_S", "0".to_string()),
        ("VAEBOX_SHUTDOWN_GRACE_S", "0".to_string()),
    ];
    let start = |env: &[(&str, String)]| Server::start(dir.path(), &env.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>());
    let first = start(&env);
    let port = first.base.rsplit(':').next().unwrap().to_string();
    env.push(("VAEBOX_LISTEN", format!("127.0.0.1:{port}")));
    // An address where nothing listens: a port bound and let go.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();

    let mut script = Command::new(python())
        .arg(Path::new(REPO).join("tests/python/comfyui_restart_check.py"))
        .args([&first.base, &Path::new(REPO).join("clients/comfyui").display().to_string(), &format!("http://{dead}"), "40"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python runs (set VAEBOX_PYTHON)");
    let mut to_script = script.stdin.take().unwrap();
    let lines = BufReader::new(script.stdout.take().unwrap()).lines();
    let mut server = Some(first);
    let mut last = String::new();
    for line in lines.map_while(Result::ok) {
        match line.as_str() {
            "STOP" => {
                let mut stopping = server.take().expect("a box to stop");
                stopping.sigterm();
                assert!(stopping.wait_for_exit(Duration::from_secs(30)).is_some(), "the box did not stop");
            }
            "START" => {
                server = Some(start(&env));
            }
            _ => {
                last = line;
                continue;
            }
        }
        writeln!(to_script, "DONE").unwrap();
    }
    let status = script.wait().unwrap();
    assert!(status.success(), "comfyui_restart_check.py failed (its stderr is above); last line: {last}");
    let result: Value = serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {last}"));
    println!("{result}");

    // The check: lenient for the prompt whose box is away or unknown, and only for it.
    assert_eq!(result["dead_box_errors"], json!([]), "{result}");
    assert_eq!(result["linked_url_errors"], json!([]), "{result}");
    for key in ["after_dead_box_errors", "after_linked_url_errors", "back_errors"] {
        assert!(result[key].to_string().contains("unknown model `no-such-model`; for `upscale` this box has"), "{key}: {result}");
    }
    assert_eq!(result["good_name_errors"], json!([]), "{result}");
    assert_eq!(result["while_away_errors"], json!([]), "{result}");

    // The restart: the node waited, took up the same job (its second attempt) and returned its frames.
    assert_eq!(result["node_alive_while_away"], true, "{result}");
    assert_eq!(result["restart_outcome"]["shape"], json!([40, 144, 192, 3]), "{result}");
    let jobs = result["restart_jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "the node sent its job again: {result}");
    assert_eq!(jobs[0]["id"], result["restart_job_id"], "{result}");
    assert_eq!(jobs[0]["status"], "succeeded", "{result}");
    let texts = result["restart_node_texts"].to_string();
    assert!(texts.contains("vaebox: the box is not answering (restarting?); asking again for up to "), "{result}");
    assert!(texts.contains("vaebox: the box is back after "), "{result}");

    // Given up: `unreachable` naming the wait, and the job cancelled when the box took the next node's job.
    let error = result["give_up_outcome"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("vaebox unreachable") && error.contains("the box did not answer for 3 s"), "{result}");
    assert!(result["give_up_outcome"]["seconds"].as_f64().unwrap() < 30.0, "{result}");
    assert_eq!(result["next_job_outcome"]["shape"], json!([3, 144, 192, 3]), "{result}");
    assert_eq!(result["given_up_job_status"], "cancelled", "{result}");
}
