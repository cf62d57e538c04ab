//! One webhook POST: to an address already checked (the name is not looked up again, so it cannot change
//! between the check and the call), bounded in time, redirects not followed, the answer's body unread.
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::handshake;
use hyper::{header, Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Connecting, sending and the answer's head together; a receiver slower than this counts as down.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Connecting alone: a receiver on the LAN answers a connection in milliseconds.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// What to send, and where.
pub struct Post<'a> {
    pub address: SocketAddr,
    /// `host[:port]` as the URL gives it.
    pub host: &'a str,
    /// Path and query.
    pub target: &'a str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
}

/// What a delivery records when no answer came, whatever the reason: a refused connection and one that hangs
/// tell apart a closed port from a filtered one, and a token may only choose among listed hosts, not map them.
/// The reason goes to the box's log.
pub const NO_ANSWER: &str = "the receiver could not be reached or did not answer in time";

/// The receiver's status, or why none came (`NO_ANSWER`; the cause is logged).
pub async fn send(post: Post<'_>) -> Result<u16, String> {
    let address = post.address;
    exchange(post).await.map_err(|why| {
        tracing::info!(%address, why, "webhook not answered");
        NO_ANSWER.to_string()
    })
}

async fn exchange(post: Post<'_>) -> Result<u16, String> {
    let exchange = async {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(post.address))
            .await
            .map_err(|_| format!("no connection to {} within {} s", post.address, CONNECT_TIMEOUT.as_secs()))?
            .map_err(|e| format!("cannot connect to {}: {e}", post.address))?;
        let (mut sender, connection) = handshake(TokioIo::new(stream)).await.map_err(|e| format!("HTTP handshake: {e}"))?;
        // Dropped (and the connection with it) when this call returns.
        let connection = tokio::spawn(connection);
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(post.target)
            .header(header::HOST, post.host)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::USER_AGENT, concat!("vaebox/", env!("CARGO_PKG_VERSION")));
        for (name, value) in &post.headers {
            request = request.header(*name, value);
        }
        let request = request.body(Full::new(post.body.clone())).map_err(|e| format!("request: {e}"))?;
        let answer = sender.send_request(request).await.map_err(|e| format!("no answer: {e}"));
        connection.abort();
        Ok::<u16, String>(answer?.status().as_u16())
    };
    tokio::time::timeout(TIMEOUT, exchange).await.map_err(|_| format!("no answer within {} s", TIMEOUT.as_secs()))?
}
