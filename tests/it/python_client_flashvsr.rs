//! The Python client with a FlashVSR model (issue 55): what it lists, sends and gets back.
use crate::common;
use crate::flashvsr_jobs;

use std::path::Path;
use std::process::Command;

use common::tensors::read_tensor_map;
use common::*;
use serde_json::{json, Value};

use super::python_client::{client_dir, first_field, ok, text, vaebox, SECRET};

/// A FlashVSR model (the small one) through the client: `models` names its family and release; a restore naming only
/// the model sends none of SeedVR2's defaults (a SeedVR2 seed, colour fix or fit would be refused or change the run):
/// the box's own for FlashVSR apply (its TCDecoder, seed 0, pad, AdaIN) and the ×4 result of every frame is saved;
/// a SeedVR2 field given for it is the box's refusal by code; the library finds it by family and estimates with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_restores_with_a_flashvsr_model_sending_only_the_fields_given() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let case = read_tensor_map(&Path::new(flashvsr_jobs::REFERENCE).join("e2e_tiny.safetensors"));
    let models = dir.path().join("models");
    flashvsr_jobs::model_folder(&models, "FlashVSR", &case["context"]);
    // The reference's 29 frames of 64×40.
    flashvsr_jobs::lossless_clip(&case["lr_u8_thwc"], &work.join("lr.mkv"));
    let tokens = format!("alice:{SECRET}");
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_TOKENS", &tokens)]);

    let listed = ok(&["models"], vaebox(&server, &work, &["models"]));
    assert!(listed.lines().any(|l| l.starts_with("FlashVSR\t") && l.ends_with("\trestore\tx4\tpresent\tflashvsr 1.0")), "{listed}");

    let args = ["submit", "lr.mkv", "--op", "restore", "--model", "FlashVSR", "--param", "dtype=f32", "--wait"];
    let id = first_field(&ok(&args, vaebox(&server, &work, &args)));
    let job: Value = serde_json::from_str(&ok(&["status"], vaebox(&server, &work, &["status", &id, "--json"]))).unwrap();
    let plan = &job["plan"];
    assert_eq!((&plan["decoder"], &plan["seed"], &plan["fit"], &plan["color_fix"]), (&json!("tiny"), &json!(0), &json!("pad"), &json!("adain")), "{job}");
    let probed = ffprobe(&work.join(job["output"]["file_name"].as_str().unwrap()));
    assert_eq!((probed.width, probed.height, probed.frames), (256, 160, 29), "{job}");

    let args = ["submit", "lr.mkv", "--op", "restore", "--model", "FlashVSR", "--param", "batch_frames=5"];
    let refused = vaebox(&server, &work, &args);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).starts_with("error: invalid-restore-parameter: "), "{}", text(&refused.stderr));

    let program = "import os, sys, vaebox
box = vaebox.Client(sys.argv[1], token=os.environ['VAEBOX_CLIENT_TOKEN'])
names = [m['name'] for m in box.models() if m['family'] == 'flashvsr']
estimate = box.estimate('lr.mkv', 'restore', model=names[0], color_fix='none')
print(names, estimate['width'], estimate['height'], estimate['frames'])";
    let out = Command::new(python()).args(["-c", program, &server.base]).current_dir(&work).env("PYTHONPATH", client_dir()).env("VAEBOX_CLIENT_TOKEN", SECRET).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "['FlashVSR'] 256 160 29");
}

