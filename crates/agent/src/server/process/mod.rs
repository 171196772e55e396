//! `process.Process`: starting processes as a user (on pipes or a terminal), streaming their output to
//! any number of attached clients, input, signals, resizing and listing.
//!
//! The [`ProcessTable`] holds every process started through the agent from spawn until it has been
//! reaped; `List`, `Connect`, `SendSignal`, `SendInput`, `StreamInput`, `CloseStdin` and `Update` see
//! exactly those, selected by pid or tag. A process is its own process group (with a terminal, its own
//! session), and signals go to the group, so a shell's children go with it.
//!
//! A process outlives the call that started it: a `Start` stream the client drops detaches like a
//! `Connect` stream would, and the process runs on (as with envd) until it exits, is signalled, or its
//! `Connect-Timeout-Ms` deadline from `Start` passes.

mod input;
mod launch;
mod output;
mod pty;
mod pump;
mod spawn;

use super::auth::Caller;
use super::error::ServerError;
use super::rpc::{self, StreamShape};
use super::AppState;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use futures::Stream;
use input::Input;
use output::Hub;
use sandboxd_envd::connect::ConnectError;
use sandboxd_envd::process::{
    self as proto, ConnectRequest, KeepAlive, ListRequest, ListResponse, ProcessConfig,
    ProcessEvent, ProcessInfo, ProcessSelector, SendSignalRequest, SendSignalResponse, Signal,
    StartEvent, StartRequest, StartResponse, UpdateRequest, UpdateResponse,
};
use sandboxd_envd::{Code, TIMEOUT_HEADER};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// One running process.
pub struct ProcEntry {
    pub pid: u32,
    pub config: ProcessConfig,
    pub tag: Option<String>,
    input: Input,
    output: Arc<Hub>,
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
        .route(&proto::path("Connect"), post(connect))
        .route(&proto::path("List"), rpc::unary(list))
        .route(&proto::path("SendSignal"), rpc::unary(send_signal))
        .route(&proto::path("SendInput"), rpc::unary(input::send_input))
        .route(&proto::path("StreamInput"), post(input::stream_input))
        .route(&proto::path("CloseStdin"), rpc::unary(input::close_stdin))
        .route(&proto::path("Update"), rpc::unary(update))
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
) -> Result<impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static, ServerError> {
    let mut req: StartRequest = rpc::stream_request(headers, body)?;
    if req.process.cwd.as_deref().unwrap_or("").is_empty() {
        req.process.cwd = state.workdir.clone();
    }
    let caller = Caller::from_headers(state, headers)?;
    let keepalive = rpc::keepalive_interval(headers, state.opts.keepalive);
    let deadline = headers
        .get(TIMEOUT_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    let spec = spawn::SpawnSpec::new(&req, &caller.user, &state.envs())?;
    let spawn::Spawned { mut child, pty } = spawn::spawn(spec)?;
    let pid = child.id();
    let hub = Arc::new(Hub::default());
    let events = hub
        .subscribe()
        .ok_or_else(|| ServerError::Internal("a new process refused its first stream".into()))?;
    let pty = pty.map(Arc::new);
    let input = match &pty {
        Some(master) => Input::Pty(master.clone()),
        None => Input::Pipe(tokio::sync::Mutex::new(child.stdin.take())),
    };
    state.processes.insert(Arc::new(ProcEntry {
        pid,
        config: req.process.clone(),
        tag: req.tag.clone(),
        input,
        output: hub.clone(),
    }));
    tracing::info!(
        pid,
        cmd = %req.process.cmd,
        user = %caller.user.name,
        pty = pty.is_some(),
        "process started"
    );
    pump::supervise(child, pid, pty, deadline, state.clone(), hub);
    Ok(event_stream(pid, events, keepalive))
}

/// `Connect`: a stream of a running process's events from now on, shaped like `Start`'s.
async fn connect(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    match attach(&state, &headers, &body) {
        Ok(stream) => rpc::stream_response(Body::from_stream(stream)),
        Err(e) => rpc::stream_error(&e),
    }
}

fn attach(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static, ServerError> {
    let req: ConnectRequest = rpc::stream_request(headers, body)?;
    Caller::from_headers(state, headers)?;
    let entry = state.processes.find(&req.process)?;
    // A process that has just ended refuses new streams; to the caller it is gone.
    let events = entry.output.subscribe().ok_or_else(|| {
        ServerError::NotFound(format!("process with pid {} not found", entry.pid))
    })?;
    let keepalive = rpc::keepalive_interval(headers, state.opts.keepalive);
    tracing::debug!(pid = entry.pid, "client attached to process");
    Ok(event_stream(entry.pid, events, keepalive))
}

/// The framed body of a `Start` or `Connect` call: `start`, data and keepalives, `end`.
fn event_stream(
    pid: u32,
    events: mpsc::Receiver<ProcessEvent>,
    keepalive: Duration,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let events = futures::stream::unfold(events, |mut rx| async move {
        let event = rx.recv().await?;
        Some((Ok(StartResponse { event }), rx))
    });
    let shape = StreamShape {
        keepalive_message: StartResponse {
            event: ProcessEvent::Keepalive(KeepAlive {}),
        },
        keepalive,
        is_last: |m: &StartResponse| matches!(m.event, ProcessEvent::End(_)),
        on_exhausted: Some(ConnectError::new(
            Code::Internal,
            "the process supervisor ended without an end event",
        )),
    };
    let first = StartResponse {
        event: ProcessEvent::Start(StartEvent { pid }),
    };
    rpc::message_stream(first, events, shape)
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

/// `Update`: resizes a process's terminal (a request without `pty` changes nothing).
async fn update(
    state: AppState,
    _caller: Caller,
    req: UpdateRequest,
) -> Result<UpdateResponse, ServerError> {
    let entry = state.processes.find(&req.process)?;
    let Some(size) = req.pty.map(|p| p.size.unwrap_or_default()) else {
        return Ok(UpdateResponse {});
    };
    let Input::Pty(master) = &entry.input else {
        return Err(ServerError::FailedPrecondition(format!(
            "process {} has no terminal to resize",
            entry.pid
        )));
    };
    master
        .resize(size)
        .map_err(ServerError::io("resize the terminal of process", entry.pid))?;
    tracing::debug!(
        pid = entry.pid,
        cols = size.cols,
        rows = size.rows,
        "terminal resized"
    );
    Ok(UpdateResponse {})
}
