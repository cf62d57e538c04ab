//! The connection loop. `axum::serve` sets no header read timeout, so a client that opens a socket and
//! sends half a request head would hold it forever; here every HTTP/1.1 connection gets one, and on
//! shutdown connections finish the request in hand, then close, or are cut when the shutdown is over.
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connection_limits::{ConnectionLimits, ConnectionSlot};

/// The open connections of a server whose accept loop has been started.
pub struct Connections {
    tracker: TaskTracker,
    /// Cancelled: connections close once their request is answered (and no new one is accepted).
    stop: CancellationToken,
    /// Cancelled: connections still open are dropped.
    cut: CancellationToken,
}

impl Connections {
    /// Accepts connections on `listener` until `stop` is called, as many as `limits` allow.
    pub fn serve(listener: TcpListener, router: Router, header_timeout: Duration, limits: Arc<ConnectionLimits>) -> Connections {
        let connections = Connections { tracker: TaskTracker::new(), stop: CancellationToken::new(), cut: CancellationToken::new() };
        let (tracker, stop, cut) = (connections.tracker.clone(), connections.stop.clone(), connections.cut.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = stop.cancelled() => break,
                };
                match accepted {
                    Ok((socket, peer)) => match limits.admit(peer.ip()) {
                        Ok(slot) => {
                            tracker.spawn(serve_one(socket, peer, slot, router.clone(), header_timeout, stop.clone(), cut.clone()));
                        }
                        Err(refusal) => {
                            // The answer fits the socket's send buffer: written without waiting, then closed,
                            // so a refused connection holds its descriptor for no longer than this.
                            let _ = socket.try_write(&refusal.response());
                            tracing::debug!(%peer, ?refusal, "connection refused");
                        }
                    },
                    Err(e) => {
                        // Out of file descriptors and the like: pause instead of spinning.
                        tracing::warn!(error = %e, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            tracker.close();
        });
        connections
    }

    /// Stops accepting; open connections close after the request they are serving.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Waits until every connection has closed.
    pub async fn closed(&self) {
        self.tracker.wait().await;
    }

    /// Drops the connections still open and waits (briefly) for their tasks to end.
    pub async fn cut(&self) {
        self.cut.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(1), self.tracker.wait()).await;
    }
}

async fn serve_one(
    socket: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    // Counted as open until this task ends.
    _slot: ConnectionSlot,
    router: Router,
    header_timeout: Duration,
    stop: CancellationToken,
    cut: CancellationToken,
) {
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    // Every request knows its client's address (one address gets only its share of the upload places).
    let client = crate::api::upload_places::ClientAddr(peer.ip());
    let service = tower::ServiceExt::map_request(router, move |mut request: axum::http::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(client);
        request
    });
    let connection = builder.serve_connection(TokioIo::new(super::secured_io::SecuredIo::new(socket)), TowerToHyperService::new(service));
    let mut connection = std::pin::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        _ = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            tokio::select! {
                result = connection.as_mut() => result,
                _ = cut.cancelled() => Ok(()),
            }
        }
    };
    if let Err(e) = result {
        // Header timeouts, clients that hang up: routine on a LAN, not worth more than a debug line.
        tracing::debug!(error = %e, "connection ended with an error");
    }
}
