//! `process.Process`: starting processes as a user, streaming their output, signalling and listing them.
//!
//! The [`ProcessTable`] holds every process started through the agent from spawn until it has been
//! reaped; `List`, `SendSignal`, `SendInput` and `CloseStdin` see exactly those. A process is its own
//! process group, and signals go to the group, so a shell's children go with it.
//! Still to come on this surface: `Connect` (reattach), `StreamInput`, `Update` and PTYs.

mod pump;
mod spawn;

use super::auth::Caller;
use super::error::ServerError;
use super::rpc;
use super::AppState;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use sandboxd_envd::process::{
    self as proto, CloseStdinRequest, CloseStdinResponse, ListRequest, ListResponse, ProcessConfig,
    ProcessInfo, ProcessInput, ProcessSelector, SendInputRequest, SendInputResponse,
    SendSignalRequest, SendSignalResponse, Signal, StartRequest,
};
use sandboxd_envd::{KEEPALIVE_HEADER, TIMEOUT_HEADER};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;

/// One running process.
pub struct ProcEntry {
    pub pid: u32,
    pub config: ProcessConfig,
    pub tag: Option<String>,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
}

/// The processes started through the agent and not yet reaped.
#[derive(Default)]
pub struct ProcessTable {
    procs: Mutex<HashMap<u32, Arc<ProcEntry>>>,
}

impl ProcessTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Arc<ProcEntry>>> {
        // A panic while holding this lock cannot leave the map inconsistent; keep serving.
        self.procs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn insert(&self, entry: Arc<ProcEntry>) {
        self.lock().insert(entry.pid, entry);
    }

    fn remove(&self, pid: u32) {
        self.lock().remove(&pid);
    }

    fn find(&self, sel: &ProcessSelector) -> Result<Arc<ProcEntry>, ServerError> {
        let procs = self.lock();
        match sel {
            ProcessSelector::Pid(pid) => procs
                .get(pid)
                .cloned()
                .ok_or_else(|| ServerError::NotFound(format!("process with pid {pid} not found"))),
            ProcessSelector::Tag(tag) => procs
                .values()
                .find(|p| p.tag.as_deref() == Some(tag.as_str()))
                .cloned()
                .ok_or_else(|| ServerError::NotFound(format!("process with tag {tag} not found"))),
        }
    }

    fn list(&self) -> Vec<ProcessInfo> {
        let mut out: Vec<ProcessInfo> = self
            .lock()
            .values()
            .map(|p| ProcessInfo {
                config: p.config.clone(),
                pid: p.pid,
                tag: p.tag.clone(),
            })
            .collect();
        out.sort_by_key(|p| p.pid);
        out
    }

    /// SIGKILLs every tracked process group (at shutdown).
    pub fn kill_all(&self) {
        for pid in self.lock().keys() {
            signal_group(*pid, libc::SIGKILL);
        }
    }
}

/// Sends `sig` to the process group led by `pid`, falling back to the process itself when it left
/// its group.
fn signal_group(pid: u32, sig: libc::c_int) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) with a positive pid/negative pgid has no memory-safety preconditions.
    unsafe { libc::kill(-pid, sig) == 0 || libc::kill(pid, sig) == 0 }
}

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(&proto::path("Start"), post(start))
        .route(&proto::path("List"), rpc::unary(list))
        .route(&proto::path("SendSignal"), rpc::unary(send_signal))
        .route(&proto::path("SendInput"), rpc::unary(send_input))
        .route(&proto::path("CloseStdin"), rpc::unary(close_stdin))
}

async fn start(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    match start_process(&state, &headers, &body) {
        Ok(stream) => rpc::stream_response(Body::from_stream(stream)),
        Err(e) => rpc::stream_error(&e),
    }
}

fn start_process(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<
    impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static,
    ServerError,
> {
    let req: StartRequest = rpc::stream_request(headers, body)?;
    if req.pty.is_some() {
        return Err(ServerError::Unimplemented(
            "PTY processes are not supported yet".into(),
        ));
    }
    let caller = Caller::from_headers(state, headers)?;
    let keepalive = header_u64(headers, KEEPALIVE_HEADER)
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
        .unwrap_or(state.opts.keepalive);
    let deadline = header_u64(headers, TIMEOUT_HEADER)
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    let spec = spawn::SpawnSpec::new(&req, &caller.user, &state.envs)?;
    let mut child = spawn::spawn(spec)?;
    let pid = child
        .id()
        .ok_or_else(|| ServerError::Internal("spawned process has no pid".into()))?;
    let entry = Arc::new(ProcEntry {
        pid,
        config: req.process.clone(),
        tag: req.tag.clone(),
        stdin: tokio::sync::Mutex::new(child.stdin.take()),
    });
    state.processes.insert(entry);
    tracing::info!(pid, cmd = %req.process.cmd, user = %caller.user.name, "process started");
    let events = pump::supervise(child, pid, deadline, state.clone());
    Ok(pump::event_stream(pid, events, keepalive))
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

async fn list(
    state: AppState,
    _caller: Caller,
    _req: ListRequest,
) -> Result<ListResponse, ServerError> {
    Ok(ListResponse {
        processes: state.processes.list(),
    })
}

async fn send_signal(
    state: AppState,
    _caller: Caller,
    req: SendSignalRequest,
) -> Result<SendSignalResponse, ServerError> {
    let entry = state.processes.find(&req.process)?;
    let sig = match req.signal {
        Signal::Sigkill => libc::SIGKILL,
        Signal::Sigterm => libc::SIGTERM,
        Signal::Unspecified => {
            return Err(ServerError::Unimplemented(
                "invalid signal: SIGNAL_UNSPECIFIED".into(),
            ))
        }
    };
    if !signal_group(entry.pid, sig) {
        return Err(ServerError::io("signal process", entry.pid)(
            std::io::Error::last_os_error(),
        ));
    }
    tracing::info!(pid = entry.pid, signal = sig, "signal sent");
    Ok(SendSignalResponse {})
}

async fn send_input(
    state: AppState,
    _caller: Caller,
    req: SendInputRequest,
) -> Result<SendInputResponse, ServerError> {
    let entry = state.processes.find(&req.process)?;
    let data = match req.input {
        ProcessInput::Stdin(d) => d,
        ProcessInput::Pty(_) => {
            return Err(ServerError::FailedPrecondition(
                "process has no pty; write to stdin instead".into(),
            ))
        }
    };
    let mut stdin = entry.stdin.lock().await;
    let pipe = stdin
        .as_mut()
        .ok_or_else(|| ServerError::FailedPrecondition("stdin not enabled or closed".into()))?;
    pipe.write_all(&data)
        .await
        .map_err(ServerError::io("write stdin of process", entry.pid))?;
    Ok(SendInputResponse {})
}

async fn close_stdin(
    state: AppState,
    _caller: Caller,
    req: CloseStdinRequest,
) -> Result<CloseStdinResponse, ServerError> {
    let entry = state.processes.find(&req.process)?;
    entry.stdin.lock().await.take();
    Ok(CloseStdinResponse {})
}
