//! Incremental readers of server-stream response bodies: [`ProcessStream`] (`Start`, `Connect`) and
//! [`WatchStream`] (`WatchDir`), both built on one envelope reader.
//!
//! The reader holds at most one partial envelope; it yields each message as its envelope completes,
//! ends at the end-of-stream frame, and turns an error frame or a body that stops early into one final
//! error. At the end-of-stream frame it also reads the body's own end, waiting at most
//! [`BODY_END_WAIT`] for it (it follows at once from an agent), so that a kept connection
//! ([`super::AgentConnections`]) is free for the next call.

use crate::connect::{EndStream, EnvelopeDecoder};
use crate::filesystem::WatchEvent;
use crate::process::{self as proc, ProcessEvent};
use crate::Error;
use bytes::BytesMut;
use futures::Stream;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::de::DeserializeOwned;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio_util::codec::Decoder;

type Inner<T> = Pin<Box<dyn Stream<Item = Result<T, Error>> + Send>>;

/// The events of one `Start` or `Connect` stream, decoded as they arrive. Ends after `end` (or an
/// error).
pub struct ProcessStream {
    inner: Inner<ProcessEvent>,
}

impl ProcessStream {
    pub(super) fn new(body: Incoming) -> Self {
        ProcessStream {
            inner: messages(body, |r: proc::StartResponse| r.event),
        }
    }

    /// Reads the rest of the stream after `end` (its end-of-stream frame and the body's end),
    /// waiting at most [`BODY_END_WAIT`]: a caller done at `end` leaves its connection free for the
    /// next call.
    pub(super) async fn finish(&mut self) {
        use futures::StreamExt;
        let _ = tokio::time::timeout(BODY_END_WAIT, async {
            while self.inner.next().await.is_some() {}
        })
        .await;
    }
}

impl Stream for ProcessStream {
    type Item = Result<ProcessEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// The events of one `WatchDir` stream: `start` first, then filesystem events and keepalives until the
/// stream is dropped (or fails).
pub struct WatchStream {
    inner: Inner<WatchEvent>,
}

impl WatchStream {
    pub(super) fn new(body: Incoming) -> Self {
        WatchStream {
            inner: messages(body, |e: WatchEvent| e),
        }
    }
}

impl Stream for WatchStream {
    type Item = Result<WatchEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// The one answer of a client-stream call: its message, then the end-of-stream frame (whose error, if
/// any, is the call's).
pub(super) async fn client_stream_answer<M>(body: Incoming) -> Result<M, Error>
where
    M: DeserializeOwned + Send + 'static,
{
    use futures::StreamExt;
    let mut msgs = messages(body, |m: M| m);
    let mut answer = None;
    while let Some(msg) = msgs.next().await {
        answer = Some(msg?);
    }
    answer.ok_or_else(|| Error::Protocol("the call ended without an answer".into()))
}

struct StreamState {
    body: Incoming,
    buf: BytesMut,
    done: bool,
}

/// Decodes the messages `M` of a response body, mapped by `map`.
fn messages<M, T>(body: Incoming, map: fn(M) -> T) -> Inner<T>
where
    M: DeserializeOwned + Send + 'static,
    T: Send + 'static,
{
    let state = StreamState {
        body,
        buf: BytesMut::new(),
        done: false,
    };
    Box::pin(futures::stream::unfold(state, move |mut st| async move {
        if st.done {
            return None;
        }
        match next_message::<M>(&mut st).await {
            Some(Ok(msg)) => Some((Ok(map(msg)), st)),
            Some(Err(e)) => {
                st.done = true;
                Some((Err(e), st))
            }
            None => None,
        }
    }))
}

/// How long the end of a body may take to follow its end-of-stream frame before the reader stops
/// waiting for it (and its connection is not kept).
pub const BODY_END_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// Reads `body` to its end.
async fn to_end(body: &mut Incoming) {
    while let Some(Ok(_)) = body.frame().await {}
}

async fn next_message<M: DeserializeOwned>(st: &mut StreamState) -> Option<Result<M, Error>> {
    loop {
        match EnvelopeDecoder.decode(&mut st.buf) {
            Err(e) => return Some(Err(e.into())),
            Ok(Some(env)) if env.is_end_stream() => {
                st.done = true;
                let _ = tokio::time::timeout(BODY_END_WAIT, to_end(&mut st.body)).await;
                return match serde_json::from_slice::<EndStream>(&env.data) {
                    Ok(EndStream { error: Some(e) }) => Some(Err(Error::Rpc(e))),
                    Ok(EndStream { error: None }) => None,
                    Err(e) => Some(Err(e.into())),
                };
            }
            Ok(Some(env)) => {
                return Some(serde_json::from_slice::<M>(&env.data).map_err(Error::from))
            }
            Ok(None) => {}
        }
        match st.body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    st.buf.extend_from_slice(&data);
                }
            }
            Some(Err(e)) => return Some(Err(Error::Http(e))),
            None => {
                return Some(Err(Error::Protocol(
                    "stream ended without an end-of-stream frame".into(),
                )))
            }
        }
    }
}
