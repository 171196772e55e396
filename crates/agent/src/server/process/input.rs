//! Input to processes: `SendInput` (one chunk), `StreamInput` (a client stream of chunks) and
//! `CloseStdin`.
//!
//! A process takes input one way only, as envd: a piped stdin (unless started with `stdin: false`) or
//! its terminal. Input of the other kind is refused (`failed_precondition`), as is writing after
//! `CloseStdin`; closing a stdin that is already closed (or was never there) succeeds. Writes to one
//! process are serialized, so chunks from concurrent calls never interleave.

use super::super::auth::Caller;
use super::super::error::ServerError;
use super::super::rpc;
use super::super::AppState;
use super::pty::PtyMaster;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use futures::StreamExt;
use sandboxd_envd::process::{
    CloseStdinRequest, CloseStdinResponse, ProcessInput, SendInputRequest, SendInputResponse,
    StreamInputEvent, StreamInputRequest, StreamInputResponse,
};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;

/// Where a process's input goes.
pub enum Input {
    /// Its stdin pipe; `None` once closed or when started with `stdin: false`.
    Pipe(tokio::sync::Mutex<Option<pipe::Sender>>),
    /// Its terminal.
    Pty(Arc<PtyMaster>),
}

impl Input {
    /// Writes one chunk of input to process `pid`.
    pub async fn write(&self, pid: u32, input: &ProcessInput) -> Result<(), ServerError> {
        match (self, input) {
            (Input::Pipe(stdin), ProcessInput::Stdin(data)) => {
                let mut stdin = stdin.lock().await;
                let pipe = stdin.as_mut().ok_or_else(|| {
                    ServerError::FailedPrecondition("stdin not enabled or closed".into())
                })?;
                pipe.write_all(data)
                    .await
                    .map_err(ServerError::io("write stdin of process", pid))
            }
            (Input::Pty(master), ProcessInput::Pty(data)) => master
                .write_all(data)
                .await
                .map_err(ServerError::io("write the terminal of process", pid)),
            (Input::Pipe(_), ProcessInput::Pty(_)) => Err(ServerError::FailedPrecondition(
                "tty not assigned to process: input should be written to the stdin, not the tty"
                    .into(),
            )),
            (Input::Pty(_), ProcessInput::Stdin(_)) => Err(ServerError::FailedPrecondition(
                "tty assigned to process: input should be written to the pty, not the stdin".into(),
            )),
        }
    }

    /// Closes the stdin pipe (the process reads end of file).
    pub async fn close_stdin(&self) -> Result<(), ServerError> {
        match self {
            Input::Pipe(stdin) => {
                stdin.lock().await.take();
                Ok(())
            }
            Input::Pty(_) => Err(ServerError::FailedPrecondition(
                "cannot close stdin for PTY process: send Ctrl+D (0x04) instead".into(),
            )),
        }
    }
}

pub async fn send_input(
    state: AppState,
    _caller: Caller,
    req: SendInputRequest,
) -> Result<SendInputResponse, ServerError> {
    let entry = state.processes.find(&req.process)?;
    entry.input.write(entry.pid, &req.input).await?;
    Ok(SendInputResponse {})
}

pub async fn close_stdin(
    state: AppState,
    _caller: Caller,
    req: CloseStdinRequest,
) -> Result<CloseStdinResponse, ServerError> {
    let entry = state.processes.find(&req.process)?;
    entry.input.close_stdin().await?;
    Ok(CloseStdinResponse {})
}

/// `StreamInput`: `start` names the process, then each `data` message is written as it arrives.
pub async fn stream_input(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    rpc::client_stream_response(consume_input(&state, &headers, body).await)
}

async fn consume_input(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<StreamInputResponse, ServerError> {
    Caller::from_headers(state, headers)?;
    let messages = rpc::client_stream_messages::<StreamInputRequest>(headers, body)?;
    let mut messages = std::pin::pin!(messages);
    let mut target = None;
    while let Some(msg) = messages.next().await {
        match msg? {
            StreamInputEvent::Start(start) => target = Some(state.processes.find(&start.process)?),
            StreamInputEvent::Data(data) => {
                let entry = target.as_ref().ok_or_else(|| {
                    ServerError::InvalidArgument(
                        "input arrived before the start message naming the process".into(),
                    )
                })?;
                entry.input.write(entry.pid, &data.input).await?;
            }
            StreamInputEvent::Keepalive(_) => {}
        }
    }
    Ok(StreamInputResponse {})
}
