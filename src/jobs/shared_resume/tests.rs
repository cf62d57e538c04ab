use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::*;

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
    std::fs::write(dir.join(name), text).unwrap();
}

/// The names the storage holds in the job's resume folder, once `checkpoint.json` there says `frames`.
async fn stored_once(blobs: &Blobs, id: Uuid, frames: u64) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let checkpoint = blobs.get_bytes(id, &stored_name(CHECKPOINT)).await.ok();
        if checkpoint.as_deref().and_then(frames_in) == Some(frames) {
            let mut names = blobs.list_folder(id, FOLDER).await.unwrap();
            names.sort();
            return names;
        }
        assert!(Instant::now() < deadline, "the storage never had the checkpoint of {frames} frames");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Two checkpoints made on one box go up (the second's files replace the first's held frames); another box
/// fetches the last into its own folder; the job's success removes them from the storage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_go_up_as_they_are_made_and_come_down_on_another_box() {
    let temp = tempfile::tempdir().unwrap();
    let url = format!("file://{}", temp.path().join("store").display());
    let blobs = Arc::new(Blobs::open(&url, &BTreeMap::new()).unwrap());
    let id = Uuid::new_v4();
    let cancel = Arc::new(AtomicBool::new(false));
    let patience = Patience { give_up_after: Duration::from_secs(1), cancelled: &cancel };

    let here = temp.path().join("a/jobs/x/.clip_restored.resume");
    let box_a = JobFiles::new(&temp.path().join("a"), Some(blobs.clone()));
    let shared = SharedCheckpoints::start(&box_a, id, here.clone(), &patience, cancel.clone()).await.unwrap();
    for (name, text) in [("segment_000000.mkv", "s0"), ("held_000001.safetensors", "h1"), (CHECKPOINT, r#"{"segments":1,"frames":3}"#)] {
        write(&here, name, text);
    }
    write(&here, ".segment_000001.mkv.partial", "being written");
    shared.reports().saved(&here, br#"{"segments":1,"frames":3}"#);
    assert_eq!(stored_once(&blobs, id, 3).await, ["checkpoint.json", "held_000001.safetensors", "segment_000000.mkv"]);

    std::fs::remove_file(here.join("held_000001.safetensors")).unwrap();
    std::fs::remove_file(here.join(".segment_000001.mkv.partial")).unwrap();
    for (name, text) in [("segment_000001.mkv", "s1"), ("held_000002.safetensors", "h2"), (CHECKPOINT, r#"{"segments":2,"frames":6}"#)] {
        write(&here, name, text);
    }
    shared.reports().saved(&here, br#"{"segments":2,"frames":6}"#);
    assert_eq!(stored_once(&blobs, id, 6).await, ["checkpoint.json", "held_000002.safetensors", "segment_000000.mkv", "segment_000001.mkv"]);
    shared.stop().await;

    // Box b has an older checkpoint of its own: the storage's goes further and replaces it.
    let there = temp.path().join("b/jobs/x/.clip_restored.resume");
    write(&there, CHECKPOINT, r#"{"segments":1,"frames":3}"#);
    write(&there, "segment_000000.mkv", "old");
    let box_b = JobFiles::new(&temp.path().join("b"), Some(blobs.clone()));
    let shared = SharedCheckpoints::start(&box_b, id, there.clone(), &patience, cancel.clone()).await.unwrap();
    for (name, text) in [("segment_000000.mkv", "s0"), ("segment_000001.mkv", "s1"), ("held_000002.safetensors", "h2"), (CHECKPOINT, r#"{"segments":2,"frames":6}"#)] {
        assert_eq!(std::fs::read_to_string(there.join(name)).unwrap(), text, "{name}");
    }
    shared.remove().await;
    assert!(blobs.list_folder(id, FOLDER).await.unwrap().is_empty());
}

/// A checkpoint of an output written in place (no segments) cannot go on elsewhere: it does not go up, and
/// clears an older one that did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_of_an_output_written_in_place_stays_on_its_box() {
    let temp = tempfile::tempdir().unwrap();
    let url = format!("file://{}", temp.path().join("store").display());
    let blobs = Arc::new(Blobs::open(&url, &BTreeMap::new()).unwrap());
    let id = Uuid::new_v4();
    blobs.put_bytes(id, &stored_name(CHECKPOINT), bytes::Bytes::from_static(br#"{"segments":1,"frames":3}"#)).await.unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let patience = Patience { give_up_after: Duration::from_secs(1), cancelled: &cancel };
    let here = temp.path().join("a/jobs/x/.clip.resume");
    write(&here, CHECKPOINT, r#"{"segments":0,"frames":9}"#);
    write(&here, "stream_000009.safetensors", "state");
    let shared = SharedCheckpoints::start(&JobFiles::new(&temp.path().join("a"), Some(blobs.clone())), id, here.clone(), &patience, cancel.clone()).await.unwrap();
    shared.reports().saved(&here, br#"{"segments":0,"frames":9}"#);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !blobs.list_folder(id, FOLDER).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the stored checkpoint stayed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shared.stop().await;
    assert_eq!(std::fs::read_to_string(here.join(CHECKPOINT)).unwrap(), r#"{"segments":0,"frames":9}"#, "the box's own folder stays");
}
