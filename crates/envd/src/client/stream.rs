//! [`ProcessStream`]: the incremental reader of a `Start` response body.
//!
//! It holds at most one partial envelope; it yields each event as its envelope completes, ends at the
//! end-of-stream frame, and turns an error frame or a body that stops early into one final error.

use crate::connect::{EndStream, EnvelopeDecoder};
use crate::process::{self as proc, ProcessEvent};
use crate::Error;
use bytes::BytesMut;
use futures::Stream;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio_util::codec::Decoder;

/// The events of one `Start` stream, decoded as they arrive. Ends after `end` (or an error).
pub struct ProcessStream {
    inner: Pin<Box<dyn Stream<Item = Result<ProcessEvent, Error>> + Send>>,
}

struct StreamState {
    body: Incoming,
    buf: BytesMut,
    done: bool,
}

impl ProcessStream {
    pub(super) fn new(body: Incoming) -> Self {
        let state = StreamState {
            body,
            buf: BytesMut::new(),
            done: false,
        };
        let inner = futures::stream::unfold(state, |mut st| async move {
            if st.done {
                return None;
            }
            let item = next_event(&mut st).await;
            match item {
                Some(Ok(ev)) => Some((Ok(ev), st)),
                Some(Err(e)) => {
                    st.done = true;
                    Some((Err(e), st))
                }
                None => None,
            }
        });
        ProcessStream {
            inner: Box::pin(inner),
        }
    }
}

async fn next_event(st: &mut StreamState) -> Option<Result<ProcessEvent, Error>> {
    loop {
        match EnvelopeDecoder.decode(&mut st.buf) {
            Err(e) => return Some(Err(e.into())),
            Ok(Some(env)) if env.is_end_stream() => {
                st.done = true;
                return match serde_json::from_slice::<EndStream>(&env.data) {
                    Ok(EndStream { error: Some(e) }) => Some(Err(Error::Rpc(e))),
                    Ok(EndStream { error: None }) => None,
                    Err(e) => Some(Err(e.into())),
                };
            }
            Ok(Some(env)) => {
                return Some(
                    serde_json::from_slice::<proc::StartResponse>(&env.data)
                        .map(|r| r.event)
                        .map_err(Error::from),
                )
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

impl Stream for ProcessStream {
    type Item = Result<ProcessEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}
