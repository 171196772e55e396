//! [`Answer`]: an agent's response body that drives its own connection.
//!
//! Contract: a call's HTTP/1.1 connection does its reads and writes when the call is polled, in
//! the caller's task: while the call waits for the answer's head ([`super::EnvdClient`]'s `send`)
//! and then each time the answer's body is polled. No task is spawned per call, so a command's
//! round trip is not handed between the runtime's threads on every read and write. Dropping the
//! answer closes the connection. A connection that fails shows as the body's error (hyper hands the
//! connection's error to the body it was reading).

use super::Body;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::http1::Connection;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::net::UnixStream;

/// One call's connection to an agent.
pub(super) type Conn = Pin<Box<Connection<TokioIo<UnixStream>, Body>>>;

/// A response body read over `conn`, which it drives until the connection ends.
pub struct Answer {
    body: Incoming,
    conn: Option<Conn>,
}

impl Answer {
    pub(super) fn new(body: Incoming, conn: Conn) -> Self {
        Answer {
            body,
            conn: Some(conn),
        }
    }
}

impl hyper::body::Body for Answer {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        // The connection first: what it reads reaches the body before the body is asked.
        if let Some(conn) = this.conn.as_mut() {
            if let Poll::Ready(ended) = conn.as_mut().poll(cx) {
                this.conn = None;
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "envd client connection ended with an error");
                }
            }
        }
        Pin::new(&mut this.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
