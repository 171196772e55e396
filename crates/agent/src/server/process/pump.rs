//! Moving a process's output to its `Start` stream, with backpressure and in order.
//!
//! Guarantees:
//! - Output is read in chunks of at most [`CHUNK`] bytes into a channel of [`QUEUE`] events; a slow
//!   client stalls the readers, the full pipe stalls the child, so memory per process stays bounded.
//! - `end` follows all output: after the process is reaped, stdout and stderr are read to EOF, or until
//!   they stay silent for [`DRAIN_IDLE`] (a background grandchild may hold them open forever).
//! - A client that goes away does not stop the process: the readers keep draining and discarding.
//! - The stream opens with `start`, gets `keepalive` after each idle interval, and always closes with an
//!   end-of-stream frame (an error frame if the supervisor vanished without an `end`).

use super::super::AppState;
use super::signal_group;
use axum::body::Bytes;
use bytes::BytesMut;
use futures::Stream;
use sandboxd_envd::connect::{self, ConnectError};
use sandboxd_envd::process::{
    DataEvent, EndEvent, KeepAlive, ProcessEvent, StartEvent, StartResponse,
};
use sandboxd_envd::Code;
use std::convert::Infallible;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Child;
use tokio::sync::{mpsc, watch};

/// Largest output chunk per event.
pub const CHUNK: usize = 32 << 10;
/// Events buffered between the readers and the client.
pub const QUEUE: usize = 8;
/// How long output may stay silent after the process exited before the stream ends anyway.
pub const DRAIN_IDLE: Duration = Duration::from_millis(200);

/// Spawns the tasks that read `child`'s output and reap it; returns the receiving end of its events
/// (data then exactly one `end`).
pub fn supervise(
    mut child: Child,
    pid: u32,
    deadline: Option<Duration>,
    state: AppState,
) -> mpsc::Receiver<ProcessEvent> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let (exited_tx, exited_rx) = watch::channel(false);
    let stdout = child
        .stdout
        .take()
        .map(|out| tokio::spawn(pump(out, DataEvent::Stdout, tx.clone(), exited_rx.clone())));
    let stderr = child
        .stderr
        .take()
        .map(|err| tokio::spawn(pump(err, DataEvent::Stderr, tx.clone(), exited_rx.clone())));
    tokio::spawn(async move {
        let status = wait_with_deadline(&mut child, pid, deadline).await;
        let _ = exited_tx.send(true);
        for reader in [stdout, stderr].into_iter().flatten() {
            let _ = reader.await;
        }
        state.processes.remove(pid);
        let end = match status {
            Ok(status) => end_event(status),
            Err(e) => EndEvent {
                exit_code: -1,
                exited: false,
                status: "unknown".into(),
                error: Some(format!("waiting for the process failed: {e}")),
            },
        };
        tracing::info!(pid, status = %end.status, "process ended");
        let _ = tx.send(ProcessEvent::End(end)).await;
    });
    rx
}

async fn wait_with_deadline(
    child: &mut Child,
    pid: u32,
    deadline: Option<Duration>,
) -> std::io::Result<ExitStatus> {
    let Some(deadline) = deadline else {
        return child.wait().await;
    };
    tokio::select! {
        status = child.wait() => status,
        _ = tokio::time::sleep(deadline) => {
            tracing::info!(pid, ?deadline, "process deadline passed, killing it");
            signal_group(pid, libc::SIGKILL);
            child.wait().await
        }
    }
}

/// Reads `pipe` to EOF (or to silence after exit), sending chunks as `kind` events while someone
/// listens and discarding them afterwards.
async fn pump<R: AsyncRead + Unpin>(
    mut pipe: R,
    kind: fn(Bytes) -> DataEvent,
    tx: mpsc::Sender<ProcessEvent>,
    mut exited: watch::Receiver<bool>,
) {
    let mut buf = BytesMut::with_capacity(CHUNK);
    let mut listening = true;
    let mut draining = false;
    loop {
        buf.reserve(CHUNK);
        let read = if draining || *exited.borrow() {
            match tokio::time::timeout(DRAIN_IDLE, pipe.read_buf(&mut buf)).await {
                Ok(r) => r,
                Err(_) => return,
            }
        } else {
            tokio::select! {
                r = pipe.read_buf(&mut buf) => r,
                // Sent, or the supervisor is gone: either way the process is over.
                _ = exited.changed() => {
                    draining = true;
                    continue;
                }
            }
        };
        match read {
            Ok(0) => return,
            Ok(_) => {
                let chunk = buf.split().freeze();
                if listening && tx.send(ProcessEvent::Data(kind(chunk))).await.is_err() {
                    listening = false;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "reading process output failed");
                return;
            }
        }
    }
}

/// envd's end event: Go's `ProcessState` rendering of `status`.
pub fn end_event(status: ExitStatus) -> EndEvent {
    if let Some(code) = status.code() {
        let text = format!("exit status {code}");
        return EndEvent {
            exit_code: code,
            exited: true,
            error: (code != 0).then(|| text.clone()),
            status: text,
        };
    }
    let mut text = match status.signal() {
        Some(sig) => format!("signal: {}", signal_name(sig)),
        None => "unknown".to_string(),
    };
    if status.core_dumped() {
        text.push_str(" (core dumped)");
    }
    EndEvent {
        exit_code: -1,
        exited: false,
        error: Some(text.clone()),
        status: text,
    }
}

/// Go's names for Linux signals (`syscall.Signal.String()`).
fn signal_name(sig: i32) -> String {
    const NAMES: [&str; 31] = [
        "hangup",
        "interrupt",
        "quit",
        "illegal instruction",
        "trace/breakpoint trap",
        "aborted",
        "bus error",
        "floating point exception",
        "killed",
        "user defined signal 1",
        "segmentation fault",
        "user defined signal 2",
        "broken pipe",
        "alarm clock",
        "terminated",
        "stack fault",
        "child exited",
        "continued",
        "stopped (signal)",
        "stopped",
        "stopped (tty input)",
        "stopped (tty output)",
        "urgent I/O condition",
        "CPU time limit exceeded",
        "file size limit exceeded",
        "virtual timer expired",
        "profiling timer expired",
        "window changed",
        "I/O possible",
        "power failure",
        "bad system call",
    ];
    usize::try_from(sig)
        .ok()
        .and_then(|s| s.checked_sub(1))
        .and_then(|i| NAMES.get(i))
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("signal {sig}"))
}

struct StreamState {
    pid: u32,
    events: mpsc::Receiver<ProcessEvent>,
    keepalive: Duration,
    phase: Phase,
}

enum Phase {
    Start,
    Running,
    Finish(Option<ConnectError>),
    Done,
}

/// The framed response body of a `Start` call: `start`, data and keepalives, `end`, end-of-stream.
pub fn event_stream(
    pid: u32,
    events: mpsc::Receiver<ProcessEvent>,
    keepalive: Duration,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let state = StreamState {
        pid,
        events,
        keepalive,
        phase: Phase::Start,
    };
    futures::stream::unfold(state, |mut st| async move {
        let frame = match std::mem::replace(&mut st.phase, Phase::Running) {
            Phase::Done => return None,
            Phase::Finish(err) => {
                st.phase = Phase::Done;
                connect::encode_end_stream(err)
            }
            Phase::Start => frame(ProcessEvent::Start(StartEvent { pid: st.pid })),
            Phase::Running => {
                let next = tokio::time::timeout(st.keepalive, st.events.recv()).await;
                match next {
                    Err(_) => frame(ProcessEvent::Keepalive(KeepAlive {})),
                    Ok(Some(ev @ ProcessEvent::End(_))) => {
                        st.phase = Phase::Finish(None);
                        frame(ev)
                    }
                    Ok(Some(ev)) => frame(ev),
                    Ok(None) => {
                        st.phase = Phase::Done;
                        connect::encode_end_stream(Some(ConnectError::new(
                            Code::Internal,
                            "the process supervisor ended without an end event",
                        )))
                    }
                }
            }
        };
        Some((Ok(frame), st))
    })
}

fn frame(event: ProcessEvent) -> Bytes {
    // Events are plain data; serialization cannot fail, but never panic on it.
    connect::encode_message(&StartResponse { event }).unwrap_or_else(|e| {
        tracing::error!(error = %e, "cannot encode a process event");
        Bytes::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_events_render_like_go_process_state() {
        let exited = end_event(ExitStatus::from_raw(3 << 8));
        assert_eq!((exited.exit_code, exited.exited), (3, true));
        assert_eq!(exited.status, "exit status 3");
        assert_eq!(exited.error.as_deref(), Some("exit status 3"));
        let ok = end_event(ExitStatus::from_raw(0));
        assert_eq!((ok.status.as_str(), ok.error), ("exit status 0", None));
        let killed = end_event(ExitStatus::from_raw(libc::SIGKILL));
        assert_eq!((killed.exit_code, killed.exited), (-1, false));
        assert_eq!(killed.status, "signal: killed");
        let term = end_event(ExitStatus::from_raw(libc::SIGTERM));
        assert_eq!(term.status, "signal: terminated");
        let core = end_event(ExitStatus::from_raw(libc::SIGSEGV | 0x80));
        assert_eq!(core.status, "signal: segmentation fault (core dumped)");
        assert_eq!(signal_name(64), "signal 64");
    }
}
