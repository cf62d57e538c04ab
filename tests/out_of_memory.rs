//! Out of memory is not a failure: with the server's address space capped (a real allocation failure
//! inside libtorch, not a simulated one), a chunk that does not fit is split and the job still succeeds.
mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn virtual_size_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status.lines().find(|l| l.starts_with("VmSize:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_that_does_not_fit_is_split_and_the_job_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let warm = dir.path().join("warm.mp4");
    let big = dir.path().join("bikes4.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &warm);
    make_clip(&media("bikes.mp4"), 4, false, &big);
    // Whole frames, four at a time: 640×272 ×4 in fp32 needs well over 400 MB of working memory per chunk.
    // Two malloc arenas keep the process's address space from growing by itself while it runs.
    let server = Server::start(
        dir.path(),
        &[("VAEBOX_UPSCALE_TILE", "0"), ("VAEBOX_CHUNK_FRAMES", "4"), ("MALLOC_ARENA_MAX", "2")],
    );
    let client = client();
    let query = "op=upscale&model=realesrgan-animevideov3&scale=4&dtype=f32";
    // A first job loads the model and the kernels, so the baseline below includes them.
    let (_, job) = upload_raw(&client, &server, query, std::fs::read(&warm).unwrap()).await;
    let job = wait_for_final(&client, &server, job["id"].as_str().unwrap(), Duration::from_secs(120)).await;
    assert_eq!(job["status"], "succeeded", "{job}");

    let limit = virtual_size_bytes(server.pid()) + (400 << 20);
    let capped = Command::new("prlimit").arg(format!("--pid={}", server.pid())).arg(format!("--as={limit}:{limit}")).status().unwrap();
    assert!(capped.success(), "prlimit failed");

    let (status, job) = upload_raw(&client, &server, query, std::fs::read(&big).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let job = wait_for_final(&client, &server, job["id"].as_str().unwrap(), Duration::from_secs(600)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let fallbacks = job["plan"]["fallbacks"].as_array().unwrap();
    assert!(!fallbacks.is_empty(), "no out-of-memory fallback happened, so the cap did not bite: {job}");
    println!("fallbacks: {fallbacks:?}");

    let path = dir.path().join("out.mp4");
    std::fs::write(&path, client.get(server.url(job["output"]["url"].as_str().unwrap())).send().await.unwrap().bytes().await.unwrap()).unwrap();
    let probed = ffprobe(&path);
    assert_eq!((probed.width, probed.height, probed.frames), (2560, 1088, 4));
}
