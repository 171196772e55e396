//! Early answers keep their connection: request bodies a handler leaves unread are drained.
//!
//! A handler that answers before reading the whole request body (a refused token, a bad path, a
//! permission error on the target of an upload) would otherwise make the server close the connection
//! with the rest of the body unread; a client still writing that body — an SDK's upload, or the
//! daemon's proxy relaying one to the agent — then fails with a broken pipe instead of reading the
//! answer. The agent's server and the daemon's API both sit behind it. [`drain_unread`] wraps
//! every request body so that, dropped before its end, the rest is read and discarded in the
//! background: at most [`DRAIN_LIMIT`] bytes for at most [`DRAIN_TIME`], after which the connection
//! is given up as before.

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::BodyExt;
use hyper::body::{Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Most bytes of an abandoned request body read and thrown away.
pub const DRAIN_LIMIT: u64 = 64 * 1024 * 1024;
/// Longest an abandoned request body is drained.
pub const DRAIN_TIME: Duration = Duration::from_secs(30);

/// Middleware: wraps the request body so that what the handler leaves unread is drained.
pub async fn drain_unread(req: Request, next: Next) -> Response {
    next.run(req.map(|inner| Body::new(DrainOnDrop { inner: Some(inner) })))
        .await
}

/// A request body that, dropped before its end, reads the rest in a background task.
struct DrainOnDrop {
    /// `None` once the body ended (nothing left to drain).
    inner: Option<Body>,
}

impl HttpBody for DrainOnDrop {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.inner = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for DrainOnDrop {
    fn drop(&mut self) {
        let Some(body) = self.inner.take() else {
            return;
        };
        if body.is_end_stream() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = tokio::time::timeout(DRAIN_TIME, drain(body, DRAIN_LIMIT)).await;
            });
        }
    }
}

/// Reads `body` to its end (or past `limit` bytes, or to its first error), discarding it.
async fn drain(mut body: Body, limit: u64) {
    let mut seen = 0u64;
    while let Some(Ok(frame)) = body.frame().await {
        seen += frame.data_ref().map_or(0, |d| d.len() as u64);
        if seen > limit {
            tracing::debug!(seen, "gave up draining an abandoned request body");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::channel::mpsc;
    use futures::{SinkExt, StreamExt};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    type Chunk = Result<Bytes, std::io::Error>;

    /// A request body fed through a channel of capacity 1: a send completes only while somebody reads.
    fn channel_body() -> (mpsc::Sender<Chunk>, Body) {
        let (tx, rx) = mpsc::channel::<Chunk>(1);
        (tx, Body::from_stream(rx))
    }

    async fn send_all(tx: &mut mpsc::Sender<Chunk>, chunks: usize) -> bool {
        for _ in 0..chunks {
            let sent = tokio::time::timeout(
                Duration::from_secs(5),
                tx.send(Ok(Bytes::from_static(&[7; 1024]))),
            )
            .await;
            if !matches!(sent, Ok(Ok(()))) {
                return false;
            }
        }
        true
    }

    /// A handler that reads one chunk and drops the body: the rest is still read, so a client
    /// writing it is not cut off. Control: a plain body dropped the same way refuses the rest.
    #[tokio::test]
    async fn a_dropped_body_is_read_to_its_end() {
        let (mut tx, body) = channel_body();
        let mut wrapped = DrainOnDrop { inner: Some(body) };
        assert!(send_all(&mut tx, 1).await);
        let first = std::future::poll_fn(|cx| Pin::new(&mut wrapped).poll_frame(cx)).await;
        assert!(first.is_some_and(|f| f.is_ok()));
        drop(wrapped);
        assert!(
            send_all(&mut tx, 100).await,
            "the rest of the body was not drained"
        );

        let (mut tx, body) = channel_body();
        drop(body);
        assert!(
            !send_all(&mut tx, 2).await,
            "control: nobody reads a dropped plain body"
        );
    }

    /// Draining gives up after `limit` bytes of a body that never ends.
    #[tokio::test]
    async fn draining_stops_past_the_limit() {
        let read = Arc::new(AtomicU64::new(0));
        let counter = read.clone();
        let endless = futures::stream::repeat(()).map(move |()| {
            counter.fetch_add(1024, Ordering::Relaxed);
            Chunk::Ok(Bytes::from_static(&[7; 1024]))
        });
        let finished = tokio::time::timeout(
            Duration::from_secs(10),
            drain(Body::from_stream(endless), 64 * 1024),
        )
        .await;
        assert!(finished.is_ok(), "drain ran past its limit");
        let read = read.load(Ordering::Relaxed);
        assert!((64 * 1024..=66 * 1024).contains(&read), "read {read} bytes");
    }

    /// A body whose client stops sending is given up after [`DRAIN_TIME`]: the connection is let go.
    #[tokio::test(start_paused = true)]
    async fn draining_stops_after_its_time() {
        let (tx, body) = channel_body();
        drop(DrainOnDrop { inner: Some(body) });
        tokio::task::yield_now().await;
        tokio::time::advance(DRAIN_TIME - Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert!(!tx.is_closed(), "gave up before its time");
        tokio::time::advance(Duration::from_secs(2)).await;
        tokio::task::yield_now().await;
        assert!(tx.is_closed(), "still draining after {DRAIN_TIME:?}");
    }
}
