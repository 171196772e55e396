//! Running code in a sandbox's code interpreter (`/v1/sandboxes/{id}/code`).
//!
//! Contract of [`Client::run_code`]: the stream yields the interpreter's output lines as JSON
//! objects, in order, and ends after `end_of_execution`, after an `Err` (error answer, transport
//! failure, undecodable line), or — reported as [`ClientError::Protocol`] — when the body ends
//! without `end_of_execution`. `keepalive` lines are skipped. The request is sent on the first poll.

use crate::ndjson::LineSplitter;
use crate::{check_status, Client, ClientError};
use bytes::Bytes;
use futures::stream::{BoxStream, Stream, StreamExt};
use reqwest::Method;
use sandboxd_api_types::RunCode;
use serde_json::Value;
use std::collections::VecDeque;

impl Client {
    /// `POST /v1/sandboxes/{id}/code`: runs code and streams its output lines (see module docs).
    pub fn run_code(
        &self,
        id: &str,
        request: &RunCode,
    ) -> impl Stream<Item = Result<Value, ClientError>> + Send + 'static {
        let request = self
            .sandbox_endpoint(id, &["code"])
            .map(|url| self.request(Method::POST, url).json(request));
        futures::stream::unfold(Some(Lines::Pending(request)), |state| async move {
            let mut state = state?;
            loop {
                match state {
                    Lines::Pending(Err(e)) => return Some((Err(e), None)),
                    Lines::Pending(Ok(request)) => {
                        let sent = match request.send().await {
                            Ok(r) => check_status(r).await,
                            Err(e) => Err(ClientError::Transport(e)),
                        };
                        match sent {
                            Ok(response) => {
                                state = Lines::Reading {
                                    body: response.bytes_stream().boxed(),
                                    lines: LineSplitter::default(),
                                    ready: VecDeque::new(),
                                }
                            }
                            Err(e) => return Some((Err(e), None)),
                        }
                    }
                    Lines::Reading {
                        mut body,
                        mut lines,
                        mut ready,
                    } => {
                        if let Some(line) = ready.pop_front() {
                            let value: Value = match serde_json::from_slice(&line) {
                                Ok(v) => v,
                                Err(source) => {
                                    let what = "code output line";
                                    return Some((Err(ClientError::Decode { what, source }), None));
                                }
                            };
                            match value["type"].as_str() {
                                Some("keepalive") => {}
                                Some("end_of_execution") => return Some((Ok(value), None)),
                                _ => {
                                    let next = Lines::Reading { body, lines, ready };
                                    return Some((Ok(value), Some(next)));
                                }
                            }
                            state = Lines::Reading { body, lines, ready };
                            continue;
                        }
                        match body.next().await {
                            Some(Ok(chunk)) => match lines.push(&chunk) {
                                Ok(more) => ready.extend(more),
                                Err(e) => return Some((Err(e), None)),
                            },
                            Some(Err(e)) => return Some((Err(ClientError::Transport(e)), None)),
                            None => match lines.finish() {
                                Some(last) => ready.push_back(last),
                                None => {
                                    let cut = "the code output ended without end_of_execution";
                                    return Some((Err(ClientError::Protocol(cut.into())), None));
                                }
                            },
                        }
                        state = Lines::Reading { body, lines, ready };
                    }
                }
            }
        })
    }
}

enum Lines {
    Pending(Result<reqwest::RequestBuilder, ClientError>),
    Reading {
        body: BoxStream<'static, reqwest::Result<Bytes>>,
        lines: LineSplitter,
        ready: VecDeque<Vec<u8>>,
    },
}
