//! Moving a process's output to the streams attached to it, with backpressure and in order, and
//! reporting its end.
//!
//! Guarantees:
//! - Output is read in chunks of at most [`CHUNK`] bytes and handed to the process's [`Hub`]; a slow
//!   client stalls the readers, the full pipe (or terminal) stalls the child, so memory per process
//!   stays bounded.
//! - `end` follows all output: after the process is reaped, its output is read to EOF, or until it
//!   stays silent for [`DRAIN_IDLE`] (a background grandchild may hold it open forever).
//! - Clients that go away do not stop the process: the readers keep draining and discarding.
//! - Once the process has ended it leaves the process table, and every stream still attached gets
//!   `end` as its last event.

use super::super::AppState;
use super::launch::Process;
use super::output::{self, Hub};
use super::pty::{PtyMaster, PtyReader};
use super::signal_group;
use axum::body::Bytes;
use bytes::BytesMut;
use sandboxd_envd::process::{DataEvent, EndEvent, ProcessEvent};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;

/// Largest output chunk per event.
pub const CHUNK: usize = 32 << 10;
/// How long output may stay silent after the process exited before the stream ends anyway.
pub const DRAIN_IDLE: Duration = Duration::from_millis(200);

/// Spawns the tasks that read `child`'s output (its pipes, or the terminal behind `pty`) into `hub`
/// and reap it.
pub fn supervise(
    mut child: Process,
    pid: u32,
    pty: Option<Arc<PtyMaster>>,
    deadline: Option<Duration>,
    state: AppState,
    hub: Arc<Hub>,
) {
    let (exited_tx, exited_rx) = watch::channel(false);
    let mut readers = Vec::new();
    if let Some(master) = pty {
        let terminal = PtyReader(master);
        readers.push(tokio::spawn(pump(
            terminal,
            DataEvent::Pty,
            hub.clone(),
            exited_rx.clone(),
        )));
    }
    if let Some(out) = child.stdout.take() {
        readers.push(tokio::spawn(pump(
            out,
            DataEvent::Stdout,
            hub.clone(),
            exited_rx.clone(),
        )));
    }
    if let Some(err) = child.stderr.take() {
        readers.push(tokio::spawn(pump(
            err,
            DataEvent::Stderr,
            hub.clone(),
            exited_rx,
        )));
    }
    tokio::spawn(async move {
        let status = wait_with_deadline(&mut child, pid, deadline).await;
        let _ = exited_tx.send(true);
        for reader in readers {
            let _ = reader.await;
        }
        let listeners = hub.close();
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
        output::finish(listeners, ProcessEvent::End(end)).await;
    });
}

async fn wait_with_deadline(
    child: &mut Process,
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

/// Reads `source` to EOF (or to silence after exit), publishing chunks as `kind` events.
async fn pump<R: AsyncRead + Unpin>(
    mut source: R,
    kind: fn(Bytes) -> DataEvent,
    hub: Arc<Hub>,
    mut exited: watch::Receiver<bool>,
) {
    let mut buf = BytesMut::with_capacity(CHUNK);
    let mut draining = false;
    loop {
        buf.reserve(CHUNK);
        let read = if draining || *exited.borrow() {
            match tokio::time::timeout(DRAIN_IDLE, source.read_buf(&mut buf)).await {
                Ok(r) => r,
                Err(_) => return,
            }
        } else {
            tokio::select! {
                r = source.read_buf(&mut buf) => r,
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
                hub.publish(ProcessEvent::Data(kind(chunk))).await;
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
