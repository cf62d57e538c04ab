//! The socket under every connection, adding the security headers to the HTTP layer's own error answers.
//! hyper answers a request it cannot read (a bad request line, a head over the size limit) by itself with a
//! bare 400 or 431, before any middleware runs; those answers would otherwise go out without the headers
//! every other answer carries.
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::api::browser::SECURITY_HEADERS;

/// A connection's socket; reads pass through, writes of a bare answer get the security headers.
pub struct SecuredIo<S> {
    inner: S,
    /// A rewritten answer's bytes not yet taken by the socket (already reported to hyper as written).
    pending: Vec<u8>,
}

impl<S> SecuredIo<S> {
    pub fn new(inner: S) -> Self {
        SecuredIo { inner, pending: Vec::new() }
    }
}

/// `write` as a whole answer with no body and without the security headers (hyper writes its own error
/// answers in one piece: status line, `content-length: 0`, `date`). The box's own answers always carry
/// the headers, and a piece of a body is never exactly a head, so nothing else is touched.
fn with_headers_added(write: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(write).ok()?;
    if !text.starts_with("HTTP/1.") || !text.ends_with("\r\n\r\n") || text.matches("\r\n\r\n").count() != 1 {
        return None;
    }
    let (status_line, _) = text.split_once("\r\n")?;
    let lower = text.to_ascii_lowercase();
    if SECURITY_HEADERS.iter().any(|(name, _)| lower.contains(&format!("\r\n{}:", name.as_str()))) {
        return None;
    }
    let mut rewritten = String::with_capacity(text.len() + 512);
    rewritten.push_str(status_line);
    rewritten.push_str("\r\n");
    for (name, value) in SECURITY_HEADERS {
        rewritten.push_str(&format!("{}: {value}\r\n", name.as_str()));
    }
    rewritten.push_str(&text[status_line.len() + 2..]);
    Some(rewritten.into_bytes())
}

impl<S: AsyncWrite + Unpin> SecuredIo<S> {
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            let written = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.pending.drain(..written);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for SecuredIo<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SecuredIo<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, write: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_drain(cx))?;
        match with_headers_added(write) {
            Some(rewritten) => {
                self.pending = rewritten;
                // The whole answer counts as written; what the socket has not taken yet goes out before
                // anything else (next write, flush or shutdown).
                let _ = self.poll_drain(cx)?;
                Poll::Ready(Ok(write.len()))
            }
            None => Pin::new(&mut self.inner).poll_write(cx, write),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bare_head_gets_the_headers() {
        let bare = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: Thu, 26 Nov 2026 23:00:00 GMT\r\n\r\n";
        let rewritten = String::from_utf8(with_headers_added(bare).unwrap()).unwrap();
        assert!(rewritten.starts_with("HTTP/1.1 400 Bad Request\r\ncontent-security-policy: "), "{rewritten}");
        assert!(rewritten.contains("\r\nx-content-type-options: nosniff\r\n") && rewritten.ends_with("GMT\r\n\r\n"));
        let ours = b"HTTP/1.1 204 No Content\r\nx-content-type-options: nosniff\r\n\r\n";
        assert!(with_headers_added(ours).is_none());
        assert!(with_headers_added(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\nno").is_none());
        assert!(with_headers_added(b"\x00\x01binary").is_none());
    }
}
