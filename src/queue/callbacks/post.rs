//! One webhook POST: to an address already checked (the name is not looked up again, so it cannot change
//! between the check and the call), bounded in time (`callback_timeout_s`: connecting, sending and the
//! answer's head together), redirects not followed, the answer's body unread.
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::handshake;
use hyper::{header, Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Connecting alone, at most: a receiver on the LAN answers a connection in milliseconds.
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
    /// Connecting, sending and the answer's head together; a receiver slower than this counts as down.
    pub timeout: Duration,
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
    let connect_timeout = CONNECT_TIMEOUT.min(post.timeout);
    let exchange = async {
        let stream = tokio::time::timeout(connect_timeout, TcpStream::connect(post.address))
            .await
            .map_err(|_| format!("no connection to {} within {:.1} s", post.address, connect_timeout.as_secs_f64()))?
            .map_err(|e| format!("cannot connect to {}: {e}", post.address))?;
        let (mut sender, connection) = handshake(TokioIo::new(stream)).await.map_err(|e| format!("HTTP handshake: {e}"))?;
        // Ended (and the socket closed) when this call returns, the timeout's too: a receiver that never
        // answers keeps no task or socket of the box's.
        let connection = AbortOnDrop(tokio::spawn(connection));
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
        drop(connection);
        Ok::<u16, String>(answer?.status().as_u16())
    };
    tokio::time::timeout(post.timeout, exchange).await.map_err(|_| format!("no answer within {:.1} s", post.timeout.as_secs_f64()))?
}

/// A task aborted when its handle is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
