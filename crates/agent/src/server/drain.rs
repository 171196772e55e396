//! Early answers keep their connection: request bodies a handler leaves unread are drained.
//!
//! A handler that answers before reading the whole request body (a refused token, a bad path, a
//! permission error on the target of an upload) would otherwise make the server close the connection
//! with the rest of the body unread; a client still writing that body — the daemon's proxy relaying an
//! SDK's upload — then fails with a broken pipe instead of reading the answer. [`drain_unread`] wraps
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
                let _ = tokio::time::timeout(DRAIN_TIME, drain(body)).await;
            });
        }
    }
}

/// Reads `body` to its end (or [`DRAIN_LIMIT`], or its first error), discarding it.
async fn drain(mut body: Body) {
    let mut seen = 0u64;
    while let Some(Ok(frame)) = body.frame().await {
        seen += frame.data_ref().map_or(0, |d| d.len() as u64);
        if seen > DRAIN_LIMIT {
            tracing::debug!(seen, "gave up draining an abandoned request body");
            return;
        }
    }
}
