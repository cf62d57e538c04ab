//! Open connections are bounded: per address and in all, for connections and for `/events` streams, with
//! descriptors kept for the jobs. A hard test once held 20,000 idle event streams from 20 loopback addresses:
//! the process ran out of descriptors, new connections were refused and a job submitted meanwhile failed
//! spawning ffmpeg ("Too many open files").
use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

fn loopback(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

fn server_addr(server: &Server) -> SocketAddr {
    server.url("").trim_start_matches("http://").trim_end_matches('/').parse().unwrap()
}

/// A TCP connection to the server from `from` (any 127.x address is this machine's).
async fn connect_from(server: &Server, from: IpAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(server_addr(server)).await
}

/// What the server sent on `stream` within `wait` without being asked: the refusal, or nothing.
async fn unasked_answer(stream: &mut TcpStream, wait: Duration) -> String {
    let mut bytes = vec![0; 1024];
    match tokio::time::timeout(wait, stream.read(&mut bytes)).await {
        Ok(Ok(n)) => String::from_utf8_lossy(&bytes[..n]).into_owned(),
        _ => String::new(),
    }
}

/// An `/events` stream of job `id` from `from`: its status (the stream stays open while `response` lives).
async fn open_stream(server: &Server, from: IpAddr, id: &str) -> reqwest::Response {
    let client = reqwest::Client::builder().local_address(from).build().unwrap();
    client.get(server.url(&format!("/v1/jobs/{id}/events"))).send().await.unwrap()
}

/// Raises this test process's own descriptor limit: it opens hundreds of sockets.
fn raise_own_descriptor_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the struct they are given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
}

/// An API process (no worker: its jobs stay queued, so their streams stay open): an address gets its share
/// of streams, then 429 `too-many-streams`, while another address still gets one; an address gets its share
/// of connections, then an immediate 503 `too-many-connections`, while another still connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_gets_its_share_of_streams_and_connections_and_others_still_get_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let settings = [("VAEBOX_ROLE", "api"), ("VAEBOX_MAX_EVENT_STREAMS_PER_CLIENT", "4"), ("VAEBOX_MAX_CONNECTIONS_PER_CLIENT", "6")];
    let server = Server::start(dir.path(), &settings);
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &clip);
    let (status, job) = upload_raw(&client(), &server, "op=upscale&model=realesrgan-animevideov3&scale=2&filename=clip.mp4", std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap().to_string();

    let mut streams = Vec::new();
    for _ in 0..4 {
        let stream = open_stream(&server, loopback(2), &id).await;
        assert_eq!(stream.status(), 200);
        streams.push(stream);
    }
    let (status, refused) = json_answer("GET", open_stream(&server, loopback(2), &id).await).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (429, Some("too-many-streams")), "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("max_event_streams_per_client"), "{refused}");
    assert_eq!(open_stream(&server, loopback(3), &id).await.status(), 200, "another address's stream");
    streams.pop();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(open_stream(&server, loopback(2), &id).await.status(), 200, "a place freed by a closed stream");

    let mut held = Vec::new();
    for _ in 0..6 {
        let mut connection = connect_from(&server, loopback(4)).await.unwrap();
        assert_eq!(unasked_answer(&mut connection, Duration::from_millis(200)).await, "", "a connection within the share was answered unasked");
        held.push(connection);
    }
    let mut over = connect_from(&server, loopback(4)).await.unwrap();
    let refusal = unasked_answer(&mut over, Duration::from_secs(2)).await;
    assert!(refusal.starts_with("HTTP/1.1 503") && refusal.contains("too-many-connections") && refusal.contains("max_connections_per_client"), "{refusal}");
    let mut other = connect_from(&server, loopback(5)).await.unwrap();
    other.write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    other.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// With the server's descriptor limit lowered to 400 while it runs, 420 idle connections from 30 addresses
/// get at most 400 − 256 (the reserve) places, the rest an immediate 503; a job submitted meanwhile runs
/// its ffmpeg and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_connections_leaves_descriptors_for_the_jobs() {
    raise_own_descriptor_limit();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[("VAEBOX_MAX_CONNECTIONS_PER_CLIENT", "14")]);
    let limited = std::process::Command::new("prlimit").arg(format!("--pid={}", server.pid())).arg("--nofile=400:400").status().unwrap();
    assert!(limited.success());

    let mut flood = Vec::new();
    for i in 0..420 {
        flood.push(connect_from(&server, loopback(10 + (i % 30) as u8)).await.unwrap());
    }
    let answers = futures_util::future::join_all(flood.iter_mut().map(|c| unasked_answer(c, Duration::from_millis(800)))).await;
    let refused = answers.iter().filter(|a| a.contains("too-many-connections")).count();
    let held = answers.iter().filter(|a| a.is_empty()).count();
    println!("{held} connections held, {refused} refused");
    assert_eq!(held + refused, 420, "every connection is held or refused with the code: {:?}", answers.iter().find(|a| !a.is_empty() && !a.contains("too-many-connections")));
    assert!(held <= 400 - 256, "{held} connections held: the descriptors kept for jobs were given away");
    assert!(held >= 100, "only {held} connections held");

    // Some places free up; the job's upload takes one, its polls reuse it.
    let mut held_connections: Vec<TcpStream> = flood.into_iter().zip(&answers).filter(|(_, answer)| answer.is_empty()).map(|(c, _)| c).collect();
    drop(held_connections.drain(..20));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client = client();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &clip);
    let (status, job) = upload_raw(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=2&filename=clip.mp4", std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let job = wait_for_final(&client, &server, job["id"].as_str().unwrap(), Duration::from_secs(120)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    drop(held_connections);
}
