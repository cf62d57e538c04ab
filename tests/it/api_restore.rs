//! `restore` over HTTP and from the command line, with the small SeedVR2 DiT and VAE of the reference
//! folders (random weights, real structure) in a models folder laid out as a user would: `dit/` with the
//! checkpoint and the shipped text embeddings, `vae/` with the SeedVR2 VAE.
use crate::common;

use std::path::Path;

use common::*;
use serde_json::Value;

/// Per-channel means of each frame of packed RGB, in [0, 1].
fn frame_means(rgb: &[u8], width: usize, height: usize) -> Vec<[f64; 3]> {
    rgb.chunks_exact(width * height * 3)
        .map(|frame| {
            let mut sums = [0.0; 3];
            for pixel in frame.chunks_exact(3) {
                for c in 0..3 {
                    sums[c] += pixel[c] as f64;
                }
            }
            sums.map(|s| s / (width * height) as f64 / 255.0)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clip_is_restored_with_its_timings_plan_and_audio() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();

    let (status, listing) = get_json(&client, &server.url("/v1/models")).await;
    assert_eq!(status, 200);
    let dit = listing["models"].as_array().unwrap().iter().find(|m| m["name"] == "seedvr2-3b-small").expect("the DiT is listed").clone();
    assert_eq!((dit["kind"].as_str(), dit["variant"].as_str(), dit["pairs_with"].as_str()), (Some("dit"), Some("3b"), Some("seedvr2-vae-small")));
    assert_eq!((dit["ops"][0].as_str(), dit["present"].as_bool()), (Some("restore"), Some(true)), "{dit}");

    // 7 frames of 176×144 with a tone, restored to an area of 96 × 112: 94 × 115 after the area resize,
    // cropped to 80 × 112; batches of 5 sharing 2 frames: frames 0–4, then 3–6.
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 7, true, &clip);
    let query = "op=restore&model=seedvr2-3b-small&height=96&width=112&batch_frames=5&batch_overlap=2&seed=7&filename=clip.mp4";
    let job = run_job(&client, &server, query, std::fs::read(&clip).unwrap()).await;
    let timings = &job["timings"];
    for stage in ["encode", "dit", "decode", "color_fix", "compute", "read", "write", "load_model"] {
        assert!(timings[stage].as_f64().is_some_and(|s| s >= 0.0), "timing {stage}: {timings}");
    }
    let parts: f64 = ["encode", "dit", "decode", "color_fix"].iter().map(|s| timings[*s].as_f64().unwrap()).sum();
    assert!((parts - timings["compute"].as_f64().unwrap()).abs() < 1e-6, "compute is the sum of its stages: {timings}");
    assert!(timings["dit"].as_f64().unwrap() > 0.0 && timings["total"].as_f64().unwrap() >= parts);
    let plan = &job["plan"];
    let (_, openapi) = get_json(&client, &server.url("/openapi.json")).await;
    assert_eq!(undescribed_keys(&openapi, &job), Vec::<String>::new(), "{plan}");
    // The check reaches into the plan: a nested key the document does not describe is named.
    let mut trimmed = openapi.clone();
    trimmed["components"]["schemas"]["DitPlan"]["properties"].as_object_mut().unwrap().remove("host_block_bytes");
    assert_eq!(undescribed_keys(&trimmed, &job), ["RestorePlan.dit.host_block_bytes"]);
    assert_eq!((plan["batches"].as_i64(), plan["batch_frames"].as_i64(), plan["batch_overlap"].as_i64()), (Some(2), Some(5), Some(2)), "{plan}");
    assert_eq!((plan["output"][0].as_i64(), plan["output"][1].as_i64(), plan["seed"].as_i64()), (Some(80), Some(112), Some(7)), "{plan}");
    assert_eq!(job["params"]["restore"]["batch_frames"], 5, "{job}");

    let mp4 = fetch(&client, &server, &job).await;
    let out_path = dir.path().join("restored.mp4");
    std::fs::write(&out_path, &mp4).unwrap();
    let probed = ffprobe(&out_path);
    assert_eq!((probed.width, probed.height, probed.frames, probed.has_audio), (112, 80, 7, true), "{probed:?}");

    // The wavelet colour fix gives the output the input's low frequencies: each frame's mean colour is
    // the input frame's (resized) mean, whatever the random DiT does to the detail.
    let (input_rgb, output_rgb) = (rgb_frames_scaled(&clip, 112, 80), rgb_frames(&mp4, &dir.path().join("decode.mp4")));
    let (input_means, output_means) = (frame_means(&input_rgb, 112, 80), frame_means(&output_rgb, 112, 80));
    assert_eq!(output_means.len(), 7);
    for (i, (a, b)) in input_means.iter().zip(&output_means).enumerate() {
        let worst = (0..3).map(|c| (a[c] - b[c]).abs()).fold(0.0, f64::max);
        println!("frame {i}: input mean {a:.3?}, restored mean {b:.3?}");
        assert!(worst < 0.03, "frame {i}: mean colour moved by {worst:.3}");
    }
    assert!(plan["device_memory"]["budget_bytes"].is_null() && plan["device_memory"]["dit_weight_bytes"].as_u64().unwrap() > 0, "{plan}");

    // A budget no batch fits: the planner shortens the default 21-frame batch to single frames, says it
    // does not fit, and the job still runs.
    let query = "op=restore&model=seedvr2-3b-small&height=96&width=112&memory_budget_mib=1&filename=clip.mp4";
    let job = run_job(&client, &server, query, std::fs::read(&clip).unwrap()).await;
    let memory = &job["plan"]["device_memory"];
    assert_eq!((job["plan"]["batch_frames"].as_i64(), job["plan"]["batches"].as_i64()), (Some(1), Some(7)), "{}", job["plan"]);
    assert_eq!((memory["budget_bytes"].as_u64(), memory["fits"].as_bool()), (Some(1 << 20), Some(false)), "{memory}");
    assert!(memory["estimated_batch_bytes"]["dit_bytes"].as_f64().unwrap() > 0.0, "{memory}");
    assert!(job["plan"]["vae"]["decode"]["spatial"].is_object(), "the VAE tiles frames it cannot hold: {}", job["plan"]);

    // A budget that the DiT fits but one VAE push of whole frames does not: the VAE stages stream in
    // spatial tiles (decode tile by tile over the batch) and the colour still holds. The dtype is named:
    // the default follows the CPU (bf16 only where it is native), and the plan follows the dtype. At f32
    // whole frames need ≥ 52 MB (the decoder's caches over the frame) and tiles of 48 × 48 px one by one
    // 37 MB (the calibrated SeedVR2 row at this width).
    let query = "op=restore&model=seedvr2-3b-small&height=96&width=112&batch_frames=5&batch_overlap=2&seed=7&memory_budget_mib=40&dtype=f32&filename=clip.mp4";
    let tiled = run_job(&client, &server, query, std::fs::read(&clip).unwrap()).await;
    let vae = &tiled["plan"]["vae"];
    assert!(vae["encode"]["spatial"].is_object() && vae["decode"]["spatial"].is_object(), "{vae}");
    assert_eq!((vae["decode"]["tile_major"].as_bool(), tiled["plan"]["batch_frames"].as_i64()), (Some(true), Some(5)), "{}", tiled["plan"]);
    assert_eq!(tiled["plan"]["spatial_tiles"], vae["decode"]["spatial"]);
    assert_eq!(undescribed_keys(&openapi, &tiled), Vec::<String>::new(), "{}", tiled["plan"]);
    let tiled_rgb = rgb_frames(&fetch(&client, &server, &tiled).await, &dir.path().join("decode.mp4"));
    for (i, (a, b)) in input_means.iter().zip(&frame_means(&tiled_rgb, 112, 80)).enumerate() {
        let worst = (0..3).map(|c| (a[c] - b[c]).abs()).fold(0.0, f64::max);
        assert!(worst < 0.03, "tiled VAE, frame {i}: mean colour moved by {worst:.3}");
    }
}

/// The input frames resized and cropped like the job's (scale to cover, centre crop), as ffmpeg does it.
fn rgb_frames_scaled(clip: &Path, width: u32, height: u32) -> Vec<u8> {
    let output = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-i"])
        .arg(clip)
        .args(["-vf", &format!("scale=115:94:flags=bicubic,crop={width}:{height}"), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"])
        .output()
        .expect("run ffmpeg");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_jobs_that_cannot_run_are_refused_at_submission() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    // A Wan VAE beside the SeedVR2 one: a model of this box, not one restore can use.
    std::fs::copy(std::path::Path::new(REPO).join("../shared/reference/wan21_original/weights.safetensors"), models.join("vae/wan21-small.safetensors")).unwrap();
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &clip);
    let body = std::fs::read(&clip).unwrap();
    let refused = [
        ("op=restore&model=seedvr2-3b-small&batch_frames=4", 400, "invalid-restore-parameter", "4n + 1"),
        ("op=restore&model=seedvr2-3b-small&batch_frames=5&batch_overlap=5", 400, "invalid-restore-parameter", "batch_overlap"),
        ("op=restore&model=seedvr2-3b-small&height=64", 400, "invalid-restore-parameter", "height and width"),
        ("op=restore&model=seedvr2-3b-small&color_fix=sepia", 400, "invalid-restore-parameter", "is not one of wavelet, adain, lab, hsv, wavelet_adaptive, none"),
        ("op=restore&model=seedvr2-3b-small&scale=5", 400, "invalid-scale", "scale"),
        ("op=restore&model=seedvr2-3b-small&vae=nope", 400, "unknown-model", "nope"),
        ("op=restore&model=seedvr2-3b-small&vae=wan21-small", 400, "unsupported-op", "is a wan21 VAE; restore needs a SeedVR2 VAE: seedvr2-vae-small"),
        ("op=restore&model=seedvr2-vae-small", 400, "unsupported-op", "restore"),
        ("op=upscale&model=seedvr2-3b-small", 400, "unsupported-op", "upscale"),
        ("op=restore&model=seedvr2-3b-small&sead=1", 400, "unknown-parameter", "seed"),
        ("op=restore&model=seedvr2-3b-small&resolution=720&scale=2", 400, "invalid-restore-parameter", "give one of scale, height and width, or resolution"),
        ("op=restore&model=seedvr2-3b-small&height=96&width=112&scale=2", 400, "invalid-restore-parameter", "scale 2 and height and width"),
        ("op=restore&model=seedvr2-3b-small&resolution=720&height=96&width=112", 400, "invalid-restore-parameter", "give one"),
        ("op=restore&model=seedvr2-3b-small&max_resolution=1280", 400, "invalid-restore-parameter", "give it with resolution"),
        ("op=restore&model=seedvr2-3b-small&resolution=720&max_resolution=640", 400, "invalid-restore-parameter", "below resolution"),
        ("op=restore&model=seedvr2-3b-small&resolution=8", 400, "invalid-restore-parameter", "at least 16"),
        ("op=restore&model=seedvr2-3b-small&resolution=-5", 400, "invalid-restore-parameter", "resolution"),
        ("op=restore&model=seedvr2-3b-small&fit=stretch", 400, "invalid-restore-parameter", "fit `stretch` is not one of crop, pad"),
        ("op=restore&model=seedvr2-3b-small&input_noise_scale=1.5", 400, "invalid-restore-parameter", "input_noise_scale must be 0 to 1"),
        ("op=restore&model=seedvr2-3b-small&latent_noise_scale=-0.1", 400, "invalid-restore-parameter", "latent_noise_scale must be 0 to 1"),
        ("op=restore&model=seedvr2-3b-small&latent_noise_scale=lots", 400, "invalid-restore-parameter", "latent_noise_scale"),
        ("op=restore&model=seedvr2-3b-small&prepend_frames=33", 400, "invalid-restore-parameter", "prepend_frames must be 0 to 32"),
        ("op=upscale&resolution=720", 400, "parameter-not-for-op", "`resolution` (only restore)"),
        ("op=interpolate&fit=pad&prepend_frames=2", 400, "parameter-not-for-op", "`prepend_frames` (only restore)"),
        ("op=vae_encode&input_noise_scale=0.5", 400, "parameter-not-for-op", "`input_noise_scale` (only restore)"),
    ];
    for (query, status, code, says) in refused {
        let (got, body) = upload_raw(&client, &server, query, body.clone()).await;
        assert_eq!((got, body["error"]["code"].as_str()), (status, Some(code)), "{query}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{query}: {message}");
    }
    let (_, list) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!(list["jobs"].as_array().unwrap().len(), 0, "nothing was queued: {list}");

    // Without text embeddings the DiT is listed as not present, and refused with the weights' code.
    std::fs::remove_file(models.join("dit/text_embeds.safetensors")).unwrap();
    let (_, listing) = get_json(&client, &server.url("/v1/models")).await;
    let dit: &Value = listing["models"].as_array().unwrap().iter().find(|m| m["name"] == "seedvr2-7b-small").unwrap();
    assert_eq!(dit["present"], false, "{dit}");
    let (got, refusal) = upload_raw(&client, &server, "op=restore&model=seedvr2-7b-small", body).await;
    assert_eq!((got, refusal["error"]["code"].as_str()), (400, Some("model-weights-missing")), "{refusal}");
}

/// The ComfyUI front-end's options over HTTP: `resolution` with `fit=pad` gives exactly the asked size (not
/// a multiple of 16), `prepend_frames` leaves the frame count alone, and the noise scales change the frames,
/// the same way for the same seed, and not at all at 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_end_sizes_prepended_frames_and_noise_scales() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 5, false, &clip);
    let body = std::fs::read(&clip).unwrap();

    // 176 × 144 to a short side of 100: 122 × 100 (176 · 100 / 144 = 122.2), neither side a multiple of
    // 16; padded to 128 × 112 for the model and cut back. Two mirrored frames lead the 5: batches of 5
    // over 7 frames, 5 written.
    let query = "op=restore&model=seedvr2-3b-small&resolution=100&fit=pad&prepend_frames=2&batch_frames=5&batch_overlap=1&filename=clip.mp4";
    let padded = run_job(&client, &server, query, body.clone()).await;
    let plan = &padded["plan"];
    assert_eq!((plan["output"][0].as_i64(), plan["output"][1].as_i64(), plan["fit"].as_str()), (Some(100), Some(122), Some("pad")), "{plan}");
    assert_eq!((plan["padding"][0].as_i64(), plan["padding"][1].as_i64(), plan["latent_grid"][1].as_i64()), (Some(12), Some(6), Some(14)), "{plan}");
    assert_eq!((plan["prepend_frames"].as_i64(), plan["frames"].as_u64(), plan["batches"].as_i64()), (Some(2), Some(5), Some(2)), "{plan}");
    let params = &padded["params"]["restore"];
    assert_eq!((params["resolution"].as_u64(), params["fit"].as_str(), params["prepend_frames"].as_i64()), (Some(100), Some("pad"), Some(2)), "{params}");
    let (_, openapi) = get_json(&client, &server.url("/openapi.json")).await;
    assert_eq!(undescribed_keys(&openapi, &padded), Vec::<String>::new(), "{plan}");
    let out = dir.path().join("padded.mp4");
    std::fs::write(&out, fetch(&client, &server, &padded).await).unwrap();
    let probed = ffprobe(&out);
    assert_eq!((probed.width, probed.height, probed.frames), (122, 100, 5), "{probed:?}");

    // The long side capped: 1:1.22 at 100 would be 122 wide, 112 brings the short side to 92 (91.6).
    let query = "op=restore&model=seedvr2-3b-small&resolution=100&max_resolution=112&fit=pad&batch_frames=5&filename=clip.mp4";
    let capped = run_job(&client, &server, query, body.clone()).await;
    assert_eq!((capped["plan"]["output"][0].as_i64(), capped["plan"]["output"][1].as_i64()), (Some(92), Some(112)), "{}", capped["plan"]);
    // Cropped instead: the centred 96 × 112 of the same 100 × 122.
    let query = "op=restore&model=seedvr2-3b-small&resolution=100&batch_frames=5&filename=clip.mp4";
    let cropped = run_job(&client, &server, query, body.clone()).await;
    let plan = &cropped["plan"];
    assert_eq!((plan["output"][0].as_i64(), plan["output"][1].as_i64(), plan["fit"].as_str()), (Some(96), Some(112), Some("crop")), "{plan}");
    assert_eq!((plan["padding"][0].as_i64(), plan["padding"][1].as_i64()), (Some(0), Some(0)), "{plan}");

    // The noises, each job's frames as the decoded RGB of its result.
    let frames_of = |extra: &'static str| {
        let (client, server, body, dir) = (&client, &server, body.clone(), dir.path().to_path_buf());
        async move {
            let query = format!("op=restore&model=seedvr2-3b-small&resolution=64&batch_frames=5{extra}&filename=clip.mp4");
            let job = run_job(client, server, &query, body).await;
            (rgb_frames(&fetch(client, server, &job).await, &dir.join("noise.mp4")), job["plan"].clone())
        }
    };
    let (plain, _) = frames_of("").await;
    let (zero, zero_plan) = frames_of("&input_noise_scale=0&latent_noise_scale=0").await;
    assert_eq!((zero_plan["input_noise_scale"].as_f64(), zero_plan["latent_noise_scale"].as_f64()), (Some(0.0), Some(0.0)), "{zero_plan}");
    assert!(plain == zero, "a scale of 0 is no noise");
    let (input_noised, plan) = frames_of("&input_noise_scale=0.5").await;
    assert_eq!(plan["input_noise_scale"].as_f64(), Some(0.5), "{plan}");
    let (latent_noised, plan) = frames_of("&latent_noise_scale=0.5").await;
    assert_eq!(plan["latent_noise_scale"].as_f64(), Some(0.5), "{plan}");
    let (latent_again, _) = frames_of("&latent_noise_scale=0.5").await;
    let (both, _) = frames_of("&input_noise_scale=0.5&latent_noise_scale=0.5").await;
    let (both_again, _) = frames_of("&input_noise_scale=0.5&latent_noise_scale=0.5").await;
    let (other_seed, _) = frames_of("&input_noise_scale=0.5&latent_noise_scale=0.5&seed=8").await;
    let moved = |a: &[u8], b: &[u8]| a.iter().zip(b).filter(|(x, y)| x != y).count() as f64 / a.len() as f64;
    println!(
        "bytes changed: input noise {:.3}, latent noise {:.3}, both {:.3}",
        moved(&plain, &input_noised),
        moved(&plain, &latent_noised),
        moved(&plain, &both)
    );
    assert!(moved(&plain, &input_noised) > 0.01 && moved(&plain, &latent_noised) > 0.01, "each noise changes the frames");
    assert!(latent_noised == latent_again && both == both_again, "the same seed gives the same frames");
    assert!(both != input_noised && both != latent_noised && both != other_seed, "the noises add up and follow the seed");
}

/// `vaebox run --op restore` with the 7B and the prompt as the original `pos_emb.pt`: the same pipeline
/// without a server, defaults for the rest.
#[test]
fn run_restores_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let safetensors = models.join("dit/text_embeds.safetensors");
    run_python("tests/python/save_pos_emb_pt.py", &[safetensors.as_os_str(), models.join("dit/pos_emb.pt").as_os_str()]);
    std::fs::remove_file(&safetensors).unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    // `vaebox run --op restore` of the clip into `out`, with extra environment; its JSON report.
    let run = |out: &Path, env: &[(&str, &str)]| -> Value {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_vaebox"))
            .current_dir(dir.path())
            .env("VAEBOX_MODELS_DIR", &models)
            .env("VAEBOX_THREADS", "2")
            .envs(env.iter().copied())
            .args(["run", "--op", "restore", "--model", "seedvr2-7b-small", "--scale", "1", "--color-fix", "adain", "--json", "--input"])
            .arg(&clip)
            .arg("--output")
            .arg(out)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice(&output.stdout).expect("a JSON report")
    };
    let out = dir.path().join("out.mp4");
    let report = run(&out, &[]);
    // Scale 1: the same area, cropped to multiples of 16 (176 × 144 stays).
    assert_eq!((report["plan"]["output"][0].as_i64(), report["plan"]["output"][1].as_i64()), (Some(144), Some(176)), "{report}");
    assert_eq!((report["plan"]["color_fix"].as_str(), report["plan"]["batches"].as_i64()), (Some("adain"), Some(1)));
    let probed = ffprobe(&out);
    assert_eq!((probed.width, probed.height, probed.frames), (176, 144, 3));
    assert_eq!(report["plan"]["dit"]["block_placement"], "resident", "{report}");

    // The same job with the DiT's blocks swapped in one at a time: the same frames.
    let swapped_out = dir.path().join("swapped.mp4");
    let report = run(&swapped_out, &[("VAEBOX_DIT_BLOCK_SWAP", "always")]);
    assert_eq!(report["plan"]["dit"]["block_placement"], "swapped", "{report}");
    assert!(report["plan"]["dit"]["host_block_bytes"].as_u64().unwrap() > 0, "{report}");
    let (resident, swapped) = (rgb_frames(&std::fs::read(&out).unwrap(), &dir.path().join("a.mp4")), rgb_frames(&std::fs::read(&swapped_out).unwrap(), &dir.path().join("b.mp4")));
    assert_eq!(resident, swapped, "swapped blocks changed the frames");
}

/// A restore's progress, as the event stream carries it: a stage from the start (`load`, then each
/// batch's `encode`, `dit` and `decode`), a fraction that never goes back and is 1 at the end, with every
/// frame counted and an ETA of 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_progress_names_its_stages_and_reaches_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 13, false, &clip);
    // Batches of 5 sharing 1 frame: 0–4, 4–8, 8–12.
    let query = "op=restore&model=seedvr2-3b-small&height=96&width=112&batch_frames=5&batch_overlap=1&filename=clip.mp4";
    let (status, job) = upload_raw(&client, &server, query, std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let snapshots = follow_events(&client, &server, job["id"].as_str().unwrap()).await;
    let last = snapshots.last().unwrap();
    assert_eq!(last["status"], "succeeded", "{last}");
    assert_eq!(last["plan"]["batches"], 3, "{}", last["plan"]);
    let progress = &last["progress"];
    assert_eq!((progress["done"].as_u64(), progress["total"].as_u64(), progress["fraction"].as_f64()), (Some(13), Some(13), Some(1.0)), "{progress}");
    assert_eq!((progress["eta_s"].as_f64(), progress["stage"].as_str()), (Some(0.0), Some("done")), "{progress}");

    let running: Vec<&Value> = snapshots.iter().filter(|s| s["status"] == "running").map(|s| &s["progress"]).collect();
    let fractions: Vec<f64> = running.iter().filter_map(|p| p["fraction"].as_f64()).collect();
    assert!(fractions.windows(2).all(|w| w[0] <= w[1]), "the fraction went back: {fractions:?}");
    let stages: Vec<&str> = running.iter().filter_map(|p| p["stage"].as_str()).collect();
    println!("stages seen: {stages:?}, fractions {fractions:?}");
    assert!(stages.iter().all(|s| ["load", "write", "done"].contains(s) || s.contains(" batch ") && s.ends_with("/3")), "{stages:?}");
    assert!(stages.iter().any(|s| s.contains(" batch ")), "no batch stage was streamed: {stages:?}");
    assert!(running.iter().all(|p| !p["stage"].is_null()), "a running job always names its stage: {running:?}");
}

/// Progress moves within a batch's VAE stages, push by push: the first batch's encode was a third of a job at
/// 0 % with no ETA, and the ETA stood still through each decode. The job's progress is sampled while it
/// runs (the box stores it every 250 ms): some sample inside the first encode is past 0 with an ETA, and
/// one decode shows more than one fraction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_moves_within_the_vae_stages() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_CHUNK_FRAMES", "4")]);
    let client = client();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 41, false, &clip);
    // One batch of 41 frames at 352×288, the VAE pushing one latent frame (4 frames) at a time.
    let query = "op=restore&model=seedvr2-3b-small&scale=1&batch_frames=41&dtype=f32&filename=clip.mp4";
    let (status, job) = upload_raw(&client, &server, query, std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap();
    let mut samples: Vec<(String, f64, Option<f64>)> = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let (_, job) = get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await;
        let progress = &job["progress"];
        if let (Some(stage), Some(fraction)) = (progress["stage"].as_str(), progress["fraction"].as_f64()) {
            samples.push((stage.to_string(), fraction, progress["eta_s"].as_f64()));
        }
        if job["status"] != "running" && job["status"] != "queued" {
            assert_eq!(job["status"], "succeeded", "{job}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the restore did not end");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let in_encode: Vec<_> = samples.iter().filter(|(stage, _, _)| stage == "encode batch 1/1").collect();
    assert!(in_encode.iter().any(|(_, fraction, eta)| *fraction > 0.0 && eta.is_some()), "the first encode stood at 0 %: {samples:?}");
    let decode_fractions: std::collections::BTreeSet<u64> =
        samples.iter().filter(|(stage, _, _)| stage == "decode batch 1/1").map(|(_, fraction, _)| fraction.to_bits()).collect();
    assert!(decode_fractions.len() > 1, "the decode's progress stood still: {samples:?}");
}
