//! The upload places are shared between addresses: trickling clients from two addresses, each within its
//! share, leave a place for a third (8 reconnecting clients from 2 addresses once held all 8 places, and 114
//! uploads from a third got 503 over a minute), and an address whose trickle was cut as too slow cools down
//! (503 with Retry-After) instead of taking its place back at once.
use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A connection to the box from `source`, one of the loopback addresses.
async fn connect_from(source: &str, address: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(address.parse().unwrap()).await.unwrap()
}

/// The box's answer, head and body, if it starts within `wait` (read until it closes or goes quiet).
async fn answer_within(socket: &mut TcpStream, wait: Duration) -> Option<String> {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    let mut quiet_for = wait;
    while let Ok(Ok(read)) = tokio::time::timeout(quiet_for, socket.read(&mut buffer)).await {
        if read == 0 {
            break;
        }
        answer.extend_from_slice(&buffer[..read]);
        quiet_for = Duration::from_millis(300);
    }
    (!answer.is_empty()).then(|| String::from_utf8_lossy(&answer).into_owned())
}

/// An upload from `source` announcing a megabyte: `None` when the box took it (it waits for the body),
/// else the box's answer.
async fn start_upload(source: &str, address: &str) -> (TcpStream, Option<String>) {
    let mut socket = connect_from(source, address).await;
    let head = format!("POST /v1/jobs?op=upscale&filename=a.mp4 HTTP/1.1\r\nHost: {address}\r\nContent-Length: 1000000\r\n\r\n");
    socket.write_all(head.as_bytes()).await.unwrap();
    let answer = answer_within(&mut socket, Duration::from_millis(500)).await;
    (socket, answer)
}

/// A byte a second until the box answers.
async fn trickle_until_answered(mut socket: TcpStream, give_up: Instant) -> String {
    loop {
        socket.write_all(b"x").await.expect("the box closed a trickling upload without an answer");
        if let Some(answer) = answer_within(&mut socket, Duration::from_secs(1)).await {
            return answer;
        }
        assert!(Instant::now() < give_up, "a trickling upload was never cut");
    }
}

/// An upload from 127.0.1.1, an address of another /24 than the trickling ones, that is read through:
/// refused for what it is, not for want of a place.
async fn third_address_gets_through(_client: &reqwest::Client, server: &Server) {
    let other_network = reqwest::Client::builder().local_address(std::net::IpAddr::from([127, 0, 1, 1])).build().unwrap();
    let (status, body) = upload_raw(&other_network, server, "op=upscale&filename=a.mp4", b"not a video at all".to_vec()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("not-a-video")), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_clients_from_two_addresses_leave_a_place_for_a_third() {
    let dir = tempfile::tempdir().unwrap();
    // 4 places, 2 per address, one of them (a quarter) kept for addresses that hold none.
    let settings = [("VAEBOX_MAX_CONCURRENT_UPLOADS", "4"), ("VAEBOX_MAX_UPLOADS_PER_CLIENT", "2"), ("VAEBOX_MIN_UPLOAD_RATE_KIB_S", "4")];
    let server = Server::start(dir.path(), &settings);
    let client = client();
    let address = server.base.trim_start_matches("http://").to_string();

    // Three uploads from each of two addresses, more than their share, as reconnecting clients send them.
    let mut holding = Vec::new();
    for source in ["127.0.0.2", "127.0.0.3"] {
        for _ in 0..3 {
            match start_upload(source, &address).await {
                (mut socket, None) => {
                    socket.write_all(&[0u8; 100]).await.unwrap();
                    holding.push((source, socket));
                }
                (_, Some(answer)) => assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("too-many-uploads"), "{source}: {answer}"),
            }
        }
    }
    let held: Vec<&str> = holding.iter().map(|(source, _)| *source).collect();
    assert!(held.contains(&"127.0.0.2") && held.contains(&"127.0.0.3"), "each address gets a place: {held:?}");

    // A third address gets through, again and again, while the two keep trickling.
    for _ in 0..3 {
        third_address_gets_through(&client, &server).await;
    }

    // The trickles are cut as too slow once a 10 s window carried less than the minimum rate.
    let give_up = Instant::now() + Duration::from_secs(25);
    let trickles: Vec<_> = holding.into_iter().map(|(_, socket)| tokio::spawn(trickle_until_answered(socket, give_up))).collect();
    for trickle in trickles {
        let answer = trickle.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 408") && answer.contains("upload-too-slow"), "{answer}");
    }

    // Reconnecting at once does not take the place back: the address cools down, and is told for how long.
    for source in ["127.0.0.2", "127.0.0.3"] {
        let (_, answer) = start_upload(source, &address).await;
        let answer = answer.unwrap_or_else(|| panic!("{source} took a place again right after its trickle was cut"));
        assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("too-many-uploads") && answer.contains("cut off"), "{answer}");
        let retry_after: u64 = answer
            .lines()
            .find_map(|line| line.to_ascii_lowercase().strip_prefix("retry-after:").map(|value| value.trim().parse().unwrap()))
            .unwrap_or_else(|| panic!("no Retry-After: {answer}"));
        assert!((1..=31).contains(&retry_after), "Retry-After: {retry_after}");
    }
    third_address_gets_through(&client, &server).await;
}

/// Addresses of one /24 together hold all the places but the reserve (40 trickling addresses of one network
/// once held 82% of them); an upload refused a place cuts the slowest body held (one that has run 5 s under
/// 4× the minimum rate) and its retry gets the place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_addresses_of_one_network_leave_the_reserve_and_a_refused_upload_cuts_the_slowest() {
    let dir = tempfile::tempdir().unwrap();
    // 4 places, 2 per address, one kept for other networks: one /24 holds at most 3.
    let settings = [("VAEBOX_MAX_CONCURRENT_UPLOADS", "4"), ("VAEBOX_MAX_UPLOADS_PER_CLIENT", "2"), ("VAEBOX_MIN_UPLOAD_RATE_KIB_S", "4")];
    let server = Server::start(dir.path(), &settings);
    let address = server.base.trim_start_matches("http://").to_string();
    let mut holding = Vec::new();
    let mut refused = 0;
    for n in 10..20 {
        match start_upload(&format!("127.0.0.{n}"), &address).await {
            (mut socket, None) => {
                socket.write_all(&[0u8; 100]).await.unwrap();
                holding.push(socket);
            }
            (_, Some(answer)) => {
                assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("too-many-uploads") && answer.contains("/24"), "{answer}");
                refused += 1;
            }
        }
    }
    assert_eq!((holding.len(), refused), (3, 7), "ten addresses of one /24 hold all places but the reserve");
    third_address_gets_through(&client(), &server).await;

    // Past 5 s the trickles are the slowest bodies under 16 KiB/s: a refused upload cuts one, its retry gets through.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let (_, first) = start_upload("127.0.0.30", &address).await;
    assert!(first.is_some_and(|answer| answer.contains("too-many-uploads")), "the network's places are all held");
    let give_up = Instant::now() + Duration::from_secs(8);
    let trickles: Vec<_> = holding.into_iter().map(|socket| tokio::spawn(trickle_until_answered(socket, give_up))).collect();
    let mut cut = 0;
    for trickle in trickles {
        let answer = trickle.await.unwrap();
        if answer.contains("upload-too-slow") && answer.contains("while another waited") {
            cut += 1;
        }
    }
    assert!(cut >= 1, "no trickle was cut for the refused upload");
    let retry = reqwest::Client::builder().local_address(std::net::IpAddr::from([127, 0, 0, 31])).build().unwrap();
    let (status, body) = upload_raw(&retry, &server, "op=upscale&filename=a.mp4", b"not a video at all".to_vec()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("not-a-video")), "{body}");
}
