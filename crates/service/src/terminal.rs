//! Terminals: a process on a PTY in the sandbox, for `sbx shell` and the console.
//!
//! Contract: [`Service::open_terminal`] starts the command (a login shell when none is given) on a
//! PTY of the asked size through the sandbox's agent, the same `process.Start` the E2B SDK's `pty`
//! makes, and answers once the agent reports its pid. [`TerminalInput`] carries keystrokes and window
//! sizes to it; [`Terminal::output`] is everything it writes, ending with one [`TerminalEnd`]. The
//! control characters are the sandbox's: Ctrl-C is the byte `0x03`, which the PTY's line discipline
//! turns into SIGINT there. Dropping a [`TerminalInput`] does nothing to the process; a caller that
//! leaves calls [`TerminalInput::hang_up`]. A pause of the sandbox ends the output with a
//! [`TerminalEnd::Failed`] naming the pause, as it ends a command's request ([`crate::in_flight`]):
//! the process is paused with the sandbox; its caller cannot come back to it, so the resume ends it
//! ([`crate::orphan_terminals`]), as it ends a terminal whose open a pause refused. A pause before
//! the terminal is attached (its pid read) refuses the open with a conflict. A terminal opened
//! without a tag has one of its own ([`Service::terminal_tag`]), by which its process is ended
//! if its open fails after its start, and by which a resume, a fork or a later daemon finds it.

use crate::exec::{agent_error, exit_code};
use crate::in_flight::{InFlight, Subscription};
use crate::{validate, Service, ServiceError};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use sandboxd_envd::process::{
    DataEvent, ProcessConfig, ProcessEvent, ProcessSelector, Pty, PtySize, Signal, StartRequest,
};
use sandboxd_envd::{EnvdClient, ProcessStream};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

/// The command a terminal runs when none is given: bash as a login shell where there is one.
const LOGIN_SHELL: &str =
    "if command -v bash >/dev/null 2>&1; then exec bash -il; else exec sh -il; fi";

/// The largest window a terminal accepts, in either dimension.
const MAX_WINDOW: u16 = 1000;

/// What to open.
#[derive(Debug, Clone, Default)]
pub struct TerminalRequest {
    /// The command and its arguments; empty runs a login shell.
    pub cmd: Vec<String>,
    pub cols: u16,
    pub rows: u16,
    /// The user to run as (the sandbox's default when `None`).
    pub user: Option<String>,
    pub cwd: Option<String>,
    pub envs: HashMap<String, String>,
    /// The agent's tag for the process, by which [`Service::connect_terminal`] finds it again.
    pub tag: Option<String>,
}

/// An open terminal: its pid, its input side and its output.
pub struct Terminal {
    pub pid: u32,
    pub input: TerminalInput,
    events: ProcessStream,
    paused: Paused,
}

/// Resolves once the terminal's sandbox is paused, with the message the terminal ends on.
type Paused = Pin<Box<dyn Future<Output = String> + Send>>;

/// How a terminal ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminalEnd {
    /// The process exited with this code (128 + N for signal N).
    Exited(i32),
    /// The output stream broke before the process's end was reported.
    Failed(String),
}

/// One piece of a terminal's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminalOutput {
    Data(Bytes),
    End(TerminalEnd),
}

/// The input side of a terminal; cheap to clone.
#[derive(Clone)]
pub struct TerminalInput {
    client: EnvdClient,
    pid: u32,
    /// The sandbox's id, and its pauses: a hang-up in a paused sandbox is left to its resume.
    sandbox: String,
    in_flight: InFlight,
}

impl TerminalInput {
    /// Writes `data` to the terminal, as if typed.
    pub async fn write(&self, data: Bytes) -> Result<(), ServiceError> {
        self.client
            .send_pty(ProcessSelector::Pid(self.pid), data)
            .await
            .map_err(agent_error)
    }

    /// Changes the terminal's window size (the process gets SIGWINCH).
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<(), ServiceError> {
        let size = window(cols, rows)?;
        self.client
            .resize_pty(ProcessSelector::Pid(self.pid), size)
            .await
            .map_err(agent_error)
    }

    /// Ends the terminal's process: the caller left. In a paused sandbox the process ends when
    /// the sandbox resumes (its agent is frozen too).
    pub async fn hang_up(&self) {
        let pid = ProcessSelector::Pid(self.pid);
        hang_up(&self.in_flight, &self.sandbox, &self.client, pid).await;
    }
}

impl Terminal {
    /// Everything the terminal writes, then exactly one [`TerminalOutput::End`].
    pub fn output(self) -> impl Stream<Item = TerminalOutput> + Send + 'static {
        futures::stream::unfold(Some((self.events, self.paused)), |state| async move {
            let (mut events, mut paused) = state?;
            loop {
                let next = tokio::select! {
                    biased;
                    next = events.next() => next,
                    message = &mut paused => {
                        return Some((TerminalOutput::End(TerminalEnd::Failed(message)), None))
                    }
                };
                let end = match next {
                    Some(Ok(ProcessEvent::Data(DataEvent::Pty(b) | DataEvent::Stdout(b))))
                    | Some(Ok(ProcessEvent::Data(DataEvent::Stderr(b)))) => {
                        return Some((TerminalOutput::Data(b), Some((events, paused))))
                    }
                    Some(Ok(ProcessEvent::Start(_) | ProcessEvent::Keepalive(_))) => continue,
                    Some(Ok(ProcessEvent::End(end))) => TerminalEnd::Exited(exit_code(&end)),
                    Some(Err(e)) => TerminalEnd::Failed(crate::error::chain(&e)),
                    None => TerminalEnd::Failed(
                        "the terminal's output ended without an exit status".into(),
                    ),
                };
                return Some((TerminalOutput::End(end), None));
            }
        })
    }
}

/// A validated window size.
pub(crate) fn window(cols: u16, rows: u16) -> Result<PtySize, ServiceError> {
    if cols == 0 || rows == 0 || cols > MAX_WINDOW || rows > MAX_WINDOW {
        return Err(ServiceError::InvalidRequest(format!(
            "a terminal's cols and rows must be between 1 and {MAX_WINDOW}, got {cols}x{rows}"
        )));
    }
    Ok(PtySize {
        cols: u32::from(cols),
        rows: u32::from(rows),
    })
}

impl Service {
    /// Opens a terminal in sandbox `key`: see the module's contract.
    pub async fn open_terminal(
        &self,
        key: &str,
        req: TerminalRequest,
    ) -> Result<Terminal, ServiceError> {
        let size = window(req.cols, req.rows)?;
        let (cmd, args) = match req.cmd.split_first() {
            Some((cmd, args)) if !cmd.is_empty() => (cmd.clone(), args.to_vec()),
            Some(_) => return Err(ServiceError::InvalidRequest("cmd[0] is empty".into())),
            None => ("/bin/sh".to_string(), vec!["-c".into(), LOGIN_SHELL.into()]),
        };
        if let Some(cwd) = &req.cwd {
            validate::sandbox_path(cwd)?;
        }
        let mut envs = req.envs;
        envs.entry("TERM".into())
            .or_insert_with(|| "xterm-256color".into());
        // A terminal nobody named gets a tag of its own, by which it is ended if it cannot be
        // attached to (its pid unknown).
        let own_tag = req.tag.is_none().then(|| self.terminal_tag());
        let in_flight = self.inner.in_flight.subscribe();
        let (id, client) = self.agent(key, req.user.as_deref()).await?;
        let start = StartRequest {
            process: ProcessConfig {
                cmd,
                args,
                envs,
                cwd: req.cwd,
            },
            pty: Some(Pty { size: Some(size) }),
            tag: req.tag.or_else(|| own_tag.clone()),
            ..Default::default()
        };
        let events = client.start(start).await.map_err(agent_error)?;
        crate::failpoints::hold("terminal.before-attach").await;
        let attached = self
            .attached(id.clone(), client.clone(), events, in_flight)
            .await;
        if let (Some(tag), true) = (own_tag, attached.is_err()) {
            // Not attached (its sandbox paused first, its stream broken): nobody can reach it.
            let tag = ProcessSelector::Tag(tag);
            hang_up(&self.inner.in_flight, &id, &client, tag).await;
        }
        attached
    }

    /// Attaches to the terminal process tagged `tag` in sandbox `key`: its output from now on, and
    /// its input. [`ServiceError::NotFound`] when no process has that tag.
    pub async fn connect_terminal(&self, key: &str, tag: &str) -> Result<Terminal, ServiceError> {
        let in_flight = self.inner.in_flight.subscribe();
        let (id, client) = self.agent(key, None).await?;
        let events = client
            .connect(ProcessSelector::Tag(tag.to_string()))
            .await
            .map_err(agent_error)?;
        self.attached(id, client, events, in_flight).await
    }

    /// The terminal of sandbox `id` whose event stream is `events`, once the stream names its pid;
    /// a conflict when the sandbox is paused first (after `in_flight` was taken).
    async fn attached(
        &self,
        id: String,
        client: EnvdClient,
        events: ProcessStream,
        in_flight: Subscription,
    ) -> Result<Terminal, ServiceError> {
        let paused = crate::exec::paused_message(in_flight, id.clone());
        let (pid, events, paused) = started(events, paused).await?;
        let input = TerminalInput {
            client,
            pid,
            sandbox: id,
            in_flight: self.inner.in_flight.clone(),
        };
        Ok(Terminal {
            pid,
            input,
            events,
            paused,
        })
    }
}

/// Ends the process `which` selects in sandbox `id` (a terminal's), if it has not ended already;
/// in a paused sandbox the resume ends it ([`crate::orphan_terminals`]): its agent is frozen.
async fn hang_up(in_flight: &InFlight, id: &str, client: &EnvdClient, which: ProcessSelector) {
    if in_flight.is_paused(id) {
        return;
    }
    if let Err(e) = client.send_signal(which.clone(), Signal::Sigkill).await {
        tracing::debug!(process = ?which, error = %e, "hang-up of a terminal that already ended");
    }
}

/// The pid `events` (a terminal's stream) opens with; a conflict when `paused` comes first.
async fn started(
    mut events: ProcessStream,
    mut paused: Paused,
) -> Result<(u32, ProcessStream, Paused), ServiceError> {
    let pid = loop {
        // The pause first: a terminal whose sandbox was paused before it was attached is refused,
        // even if its start was already on its way.
        let next = tokio::select! {
            biased;
            message = &mut paused => return Err(ServiceError::Conflict(message)),
            next = events.next() => next,
        };
        match next {
            Some(Ok(ProcessEvent::Start(s))) => break s.pid,
            Some(Ok(ProcessEvent::Keepalive(_))) => continue,
            Some(Err(e)) => return Err(agent_error(e)),
            Some(Ok(other)) => {
                return Err(ServiceError::Agent(sandboxd_envd::Error::Protocol(
                    format!("the terminal's stream opened with {other:?} instead of its pid"),
                )))
            }
            None => {
                return Err(ServiceError::Agent(sandboxd_envd::Error::Protocol(
                    "the terminal's stream ended before its pid".into(),
                )))
            }
        }
    };
    Ok((pid, events, paused))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_sizes_outside_one_to_a_thousand_are_refused() {
        assert_eq!(window(80, 24).unwrap(), PtySize { cols: 80, rows: 24 });
        for (c, r) in [(0, 24), (80, 0), (1001, 24), (80, 1001)] {
            assert!(
                matches!(window(c, r), Err(ServiceError::InvalidRequest(_))),
                "{c}x{r}"
            );
        }
    }
}
