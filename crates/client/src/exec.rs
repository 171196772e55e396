//! Running commands: collected (`/exec`) and streamed (`/exec/stream`, NDJSON).
//!
//! Contract of [`Client::exec_stream`]: the stream yields events in the order the daemon sent them and
//! ends right after exactly one terminal item — an [`ExecEvent::Exit`], an [`ExecEvent::Error`], or an
//! `Err` (error answer, transport failure, undecodable line, or a body that ended without a terminal
//! event, reported as [`ClientError::Protocol`]). Anything the daemon sends after the terminal event is
//! ignored. The stream is lazy: the request is sent on the first poll. `stdout`/`stderr` data stays
//! base64 in the event; [`decode_data`] turns it into bytes.

use crate::ndjson::{decode_event, LineSplitter};
use crate::{check_status, Client, ClientError};
use base64::Engine as _;
use bytes::Bytes;
use futures::stream::{BoxStream, Stream, StreamExt};
use reqwest::{Method, RequestBuilder};
use sandboxd_api_types::{ExecEvent, ExecRequest, ExecResult};
use std::collections::VecDeque;

/// Decodes the base64 `data` of a `stdout`/`stderr` event.
pub fn decode_data(data: &str) -> Result<Vec<u8>, ClientError> {
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(ClientError::Base64)
}

impl Client {
    /// `POST /v1/sandboxes/{id}/exec`: runs a command and returns its collected output.
    pub async fn exec(&self, id: &str, request: &ExecRequest) -> Result<ExecResult, ClientError> {
        let url = self.sandbox_endpoint(id, &["exec"])?;
        self.send_json(self.request(Method::POST, url).json(request), "exec result")
            .await
    }

    /// [`Client::exec`], with the steps the daemon's exec took.
    pub async fn exec_timed(
        &self,
        id: &str,
        request: &ExecRequest,
    ) -> Result<crate::timing::Timed<ExecResult>, ClientError> {
        let url = self.sandbox_endpoint(id, &["exec"])?;
        self.send_json_timed(self.request(Method::POST, url).json(request), "exec result")
            .await
    }

    /// `POST /v1/sandboxes/{id}/exec/stream`: runs a command and streams its events (see module docs).
    pub fn exec_stream(
        &self,
        id: &str,
        request: &ExecRequest,
    ) -> impl Stream<Item = Result<ExecEvent, ClientError>> + Send + 'static {
        let state = match self.sandbox_endpoint(id, &["exec", "stream"]) {
            Ok(url) => State::Pending(self.request(Method::POST, url).json(request)),
            Err(e) => State::Failed(e),
        };
        futures::stream::unfold(state, State::advance)
    }
}

enum State {
    Failed(ClientError),
    Pending(RequestBuilder),
    Reading(Reader),
    Done,
}

struct Reader {
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    lines: LineSplitter,
    ready: VecDeque<Vec<u8>>,
    eof: bool,
}

type Step = Option<(Result<ExecEvent, ClientError>, State)>;

impl State {
    async fn advance(self) -> Step {
        match self {
            State::Done => None,
            State::Failed(e) => Some((Err(e), State::Done)),
            State::Pending(request) => {
                let response = match request.send().await {
                    Ok(response) => response,
                    Err(e) => return Some((Err(ClientError::Transport(e)), State::Done)),
                };
                match check_status(response).await {
                    Ok(response) => {
                        Reader {
                            body: response.bytes_stream().boxed(),
                            lines: LineSplitter::default(),
                            ready: VecDeque::new(),
                            eof: false,
                        }
                        .next_event()
                        .await
                    }
                    Err(e) => Some((Err(e), State::Done)),
                }
            }
            State::Reading(reader) => reader.next_event().await,
        }
    }
}

impl Reader {
    async fn next_event(mut self) -> Step {
        loop {
            if let Some(line) = self.ready.pop_front() {
                return Some(match decode_event(&line) {
                    Ok(event @ (ExecEvent::Exit { .. } | ExecEvent::Error { .. })) => {
                        (Ok(event), State::Done)
                    }
                    Ok(event) => (Ok(event), State::Reading(self)),
                    Err(e) => (Err(e), State::Done),
                });
            }
            if self.eof {
                let e = ClientError::Protocol("exec stream ended without an exit event".into());
                return Some((Err(e), State::Done));
            }
            match self.body.next().await {
                Some(Ok(chunk)) => match self.lines.push(&chunk) {
                    Ok(lines) => self.ready.extend(lines),
                    Err(e) => return Some((Err(e), State::Done)),
                },
                Some(Err(e)) => return Some((Err(ClientError::Transport(e)), State::Done)),
                None => {
                    self.eof = true;
                    self.ready.extend(self.lines.finish());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_decodes_from_standard_base64() {
        assert_eq!(decode_data("Mgo=").expect("valid"), b"2\n");
        assert!(matches!(decode_data("%%%"), Err(ClientError::Base64(_))));
    }
}
