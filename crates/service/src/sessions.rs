//! Shell sessions: a long-lived `bash` in a sandbox that runs one command after another, keeping
//! its state (working directory, variables, functions) between them — Daytona's sessions.
//!
//! Everything is in the sandbox, on the agent's process and file machinery; the daemon holds none
//! of it: the shell is an agent process tagged `session:<id>` (its stdin open), and
//! each command `<c>` of it has files in `/tmp/.sandboxd-sessions/<id>/`: `<c>.cmd` (the command),
//! `<c>.in` (a FIFO, its stdin, there while it runs), `<c>.out` and `<c>.err` (its output, written
//! as it runs), `<c>.exit` (its exit code, renamed into place once it ended and its FIFO is gone, so
//! it is never read half-written).
//!
//! Contract:
//! - Session ids are 1–64 of `[A-Za-z0-9._-]`; creating one that exists is a conflict.
//! - A command runs in the session's shell itself (not a subshell), its stdin its FIFO (opened read
//!   and write by the shell, so it never sees an end of input); commands of one session run in order.
//!   [`Service::session_exec`] answers once the command is handed to the shell;
//!   [`Service::session_wait`] waits for its end; [`Service::session_input`] writes to its stdin
//!   while it runs.
//! - The machinery needs nothing of the image but `/bin/bash`: its directory is made through the
//!   agent's file API, and the FIFO, the exit code and the input are the agent's own binary's work
//!   (`/.sandboxd/agent tool`, `sandboxd_agent::tool`), the script around a command uses only bash's
//!   builtins besides it. No wait outlives the session: a shell that is gone ends the wait at once.
//! - Deleting a session kills its shell (and what it runs), answers once the agent has reaped it
//!   (so a list right after no longer names the session), and removes its files.

use crate::exec::agent_error;
use crate::{Service, ServiceError};
use bytes::Bytes;
use sandboxd_envd::process::{ProcessConfig, ProcessSelector, Signal, StartRequest};
use std::time::Duration;

/// Where sessions keep their commands' files.
pub const SESSIONS_DIR: &str = "/tmp/.sandboxd-sessions";
/// How often a waiter looks for a command's end.
const POLL: Duration = Duration::from_millis(20);
/// How long a deleted session's shell may take to be gone once killed.
const SHELL_GONE_WITHIN: Duration = Duration::from_secs(5);
/// How long writing a command's input may take (a FIFO whose command just ended has no reader, and
/// the writer would wait for one).
const INPUT_DEADLINE: Duration = Duration::from_secs(5);

/// The outcome of [`Service::session_input`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionInput {
    /// Written to the command's stdin.
    Sent,
    /// The command ended: there is no stdin to write to.
    Ended,
}

/// One command of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCommand {
    pub id: String,
    pub command: String,
    /// `None` while it runs.
    pub exit_code: Option<i32>,
}

/// What a command wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandOutput {
    pub stdout: Bytes,
    pub stderr: Bytes,
    /// `None` while it runs.
    pub exit_code: Option<i32>,
}

fn tag(session: &str) -> String {
    format!("session:{session}")
}

fn dir(session: &str) -> String {
    format!("{SESSIONS_DIR}/{session}")
}

/// Session and command ids: safe as file names and process tags.
pub fn validate_id(what: &str, id: &str) -> Result<(), ServiceError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ServiceError::InvalidRequest(format!(
            "invalid {what} id {id:?}: use 1 to 64 letters, digits, '.', '_' or '-'"
        )))
    }
}

/// The shell text that runs `command` as command `cid` of the session in `dir`: bash's builtins and
/// the agent's binary only.
fn script(dir: &str, cid: &str, command: &str) -> String {
    let base = format!("{dir}/{cid}");
    // The newline before `}` ends a trailing comment of the command.
    format!(
        "'{AGENT}' tool fifo '{base}.in'; \
         {{ {command}\n}} <>'{base}.in' >'{base}.out' 2>'{base}.err'; __sandboxd_rc=$?; \
         '{AGENT}' tool ended '{base}' $__sandboxd_rc\n"
    )
}

/// The agent's binary inside every sandbox.
const AGENT: &str = sandboxd_runtime::namespace::rootfs::AGENT_PATH;
/// How often a waiter checks that the session's shell is still there.
const ALIVE_EVERY: u32 = 25;

impl Service {
    /// Starts session `session` in sandbox `key`.
    pub async fn create_session(&self, key: &str, session: &str) -> Result<(), ServiceError> {
        validate_id("session", session)?;
        let (_, client) = self.agent(key, None).await?;
        if self.session_exists(&client, session).await? {
            return Err(ServiceError::Conflict(format!(
                "session {session:?} already exists"
            )));
        }
        let request = StartRequest {
            process: ProcessConfig {
                cmd: "/bin/bash".into(),
                args: vec!["--noprofile".into(), "--norc".into()],
                ..Default::default()
            },
            pty: None,
            tag: Some(tag(session)),
            stdin: Some(true),
        };
        match client.make_dir(&dir(session)).await.map_err(agent_error) {
            Ok(_) | Err(ServiceError::Conflict(_)) => {}
            Err(e) => return Err(e),
        }
        // The shell outlives this call; its events are not needed.
        let started = client.start(request).await.map_err(agent_error)?;
        drop(started);
        Ok(())
    }

    /// The sessions of sandbox `key`, by id.
    pub async fn list_sessions(&self, key: &str) -> Result<Vec<String>, ServiceError> {
        let (_, client) = self.agent(key, None).await?;
        let mut ids: Vec<String> = client
            .list()
            .await
            .map_err(agent_error)?
            .into_iter()
            .filter_map(|p| {
                p.tag
                    .and_then(|t| t.strip_prefix("session:").map(str::to_string))
            })
            .collect();
        ids.sort();
        Ok(ids)
    }

    async fn session_exists(
        &self,
        client: &sandboxd_envd::EnvdClient,
        session: &str,
    ) -> Result<bool, ServiceError> {
        let want = tag(session);
        Ok(client
            .list()
            .await
            .map_err(agent_error)?
            .iter()
            .any(|p| p.tag.as_deref() == Some(want.as_str())))
    }

    /// Hands `command` to session `session`'s shell; returns its command id.
    pub async fn session_exec(
        &self,
        key: &str,
        session: &str,
        command: &str,
    ) -> Result<String, ServiceError> {
        validate_id("session", session)?;
        if command.trim().is_empty() || command.contains('\0') {
            return Err(ServiceError::InvalidRequest(
                "command must be a non-empty shell command without NUL bytes".into(),
            ));
        }
        let (_, client) = self.agent(key, None).await?;
        if !self.session_exists(&client, session).await? {
            return Err(ServiceError::NotFound(format!(
                "session {session:?} not found"
            )));
        }
        // Time first: ids sort in the order the commands were given.
        let cid = crate::sandboxes::random_id(
            &format!("c{:013x}-", sandboxd_store::unix_millis_now()),
            8,
        );
        let record = format!("{}/{cid}.cmd", dir(session));
        client
            .write_file(&record, None, Bytes::from(command.to_string()))
            .await
            .map_err(agent_error)?;
        let text = script(&dir(session), &cid, command);
        client
            .send_stdin(ProcessSelector::Tag(tag(session)), Bytes::from(text))
            .await
            .map_err(agent_error)?;
        Ok(cid)
    }

    /// The commands session `session` was given, oldest first.
    pub async fn session_commands(
        &self,
        key: &str,
        session: &str,
    ) -> Result<Vec<SessionCommand>, ServiceError> {
        validate_id("session", session)?;
        let (_, client) = self.agent(key, None).await?;
        if !self.session_exists(&client, session).await? {
            return Err(ServiceError::NotFound(format!(
                "session {session:?} not found"
            )));
        }
        let entries = match client.list_dir(&dir(session), 1).await.map_err(agent_error) {
            Ok(e) => e,
            // The shell has not made its directory yet: no commands.
            Err(ServiceError::NotFound(_)) => return Ok(vec![]),
            Err(e) => return Err(e),
        };
        let mut ids: Vec<String> = entries
            .into_iter()
            .filter_map(|e| e.name.strip_suffix(".cmd").map(str::to_string))
            .collect();
        ids.sort();
        let mut commands = Vec::with_capacity(ids.len());
        for id in ids {
            let command = client
                .read_file(&format!("{}/{id}.cmd", dir(session)), None)
                .await
                .map_err(agent_error)?;
            commands.push(SessionCommand {
                exit_code: self.exit_code(&client, session, &id).await?,
                command: String::from_utf8_lossy(&command).into_owned(),
                id,
            });
        }
        Ok(commands)
    }

    async fn exit_code(
        &self,
        client: &sandboxd_envd::EnvdClient,
        session: &str,
        cid: &str,
    ) -> Result<Option<i32>, ServiceError> {
        match client
            .read_file(&format!("{}/{cid}.exit", dir(session)), None)
            .await
        {
            Ok(text) => Ok(String::from_utf8_lossy(&text).trim().parse().ok()),
            Err(e) => match agent_error(e) {
                ServiceError::NotFound(_) => Ok(None),
                other => Err(other),
            },
        }
    }

    /// What command `cid` of session `session` wrote so far, and its exit code once it ended.
    pub async fn session_output(
        &self,
        key: &str,
        session: &str,
        cid: &str,
    ) -> Result<CommandOutput, ServiceError> {
        let (client, base) = self.command_files(key, session, cid).await?;
        // The exit code first: when it is there, the output files are complete.
        let exit_code = self.exit_code(&client, session, cid).await?;
        let read = |suffix: &'static str| {
            let path = format!("{base}.{suffix}");
            let client = client.clone();
            async move {
                match client.read_file(&path, None).await {
                    Ok(b) => Ok(b),
                    Err(e) => match agent_error(e) {
                        ServiceError::NotFound(_) => Ok(Bytes::new()),
                        other => Err(other),
                    },
                }
            }
        };
        Ok(CommandOutput {
            stdout: read("out").await?,
            stderr: read("err").await?,
            exit_code,
        })
    }

    /// The agent of sandbox `key` and where command `cid` of session `session` keeps its files
    /// (`<base>.cmd`, `.out`, …); [`ServiceError::NotFound`] when there is no such command.
    async fn command_files(
        &self,
        key: &str,
        session: &str,
        cid: &str,
    ) -> Result<(sandboxd_envd::EnvdClient, String), ServiceError> {
        validate_id("session", session)?;
        validate_id("command", cid)?;
        let (_, client) = self.agent(key, None).await?;
        let base = format!("{}/{cid}", dir(session));
        if client.stat(&format!("{base}.cmd")).await.is_err() {
            return Err(ServiceError::NotFound(format!(
                "command {cid:?} of session {session:?} not found"
            )));
        }
        Ok((client, base))
    }

    /// Writes `data` to the stdin of command `cid` of session `session`, if it still runs.
    pub async fn session_input(
        &self,
        key: &str,
        session: &str,
        cid: &str,
        data: Bytes,
    ) -> Result<SessionInput, ServiceError> {
        let (client, base) = self.command_files(key, session, cid).await?;
        // A command handed to the shell a moment ago may not have its FIFO yet: wait (bounded) for
        // it, or for the command's end.
        let started = tokio::time::Instant::now();
        while client.stat(&format!("{base}.in")).await.is_err() {
            if self.exit_code(&client, session, cid).await?.is_some() {
                return Ok(SessionInput::Ended);
            }
            if started.elapsed() >= INPUT_DEADLINE {
                return Err(ServiceError::Conflict(format!(
                    "command {cid} has not opened its input after {INPUT_DEADLINE:?}: is its session's shell busy with an earlier command?"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
        // A process of the sandbox (the agent's binary) copies its stdin into the FIFO, which is
        // there while the command runs; the agent kills it past the deadline.
        let writer = crate::sandboxes::random_id("input:", 12);
        let request = StartRequest {
            process: ProcessConfig {
                cmd: AGENT.into(),
                args: vec!["tool".into(), "feed".into(), format!("{base}.in")],
                ..Default::default()
            },
            pty: None,
            tag: Some(writer.clone()),
            stdin: Some(true),
        };
        let events = client
            .start_with_timeout(request, Some(INPUT_DEADLINE))
            .await
            .map_err(agent_error)?;
        let selector = ProcessSelector::Tag(writer);
        client
            .send_stdin(selector.clone(), data)
            .await
            .map_err(agent_error)?;
        client.close_stdin(selector).await.map_err(agent_error)?;
        match crate::exec::collect_exit(events).await? {
            0 => Ok(SessionInput::Sent),
            _ => Ok(SessionInput::Ended),
        }
    }

    /// Waits (up to `timeout`) for command `cid` of session `session` to end; its output. A pause
    /// of the sandbox ends the wait with a conflict ([`crate::in_flight`]): the command is paused
    /// with it, and the polls would otherwise resume an auto-resuming sandbox the moment its
    /// timeout paused it.
    pub async fn session_wait(
        &self,
        key: &str,
        session: &str,
        cid: &str,
        timeout: Duration,
    ) -> Result<CommandOutput, ServiceError> {
        // Taken before the state is read: a pause from then on ends this wait.
        let in_flight = self.inner.in_flight.subscribe();
        let (id, _) = self.agent(key, None).await?;
        // The pause first: it is announced before the pause lets go of the sandbox's lock, so a
        // poll never starts a resume after it.
        tokio::select! {
            biased;
            () = in_flight.until_paused(id.clone()) => Err(crate::exec::paused_mid_command(&id)),
            output = self.poll_session_command(&id, session, cid, timeout) => match output {
                // A poll between the pause's record and its announcement finds the sandbox paused.
                Err(ServiceError::Conflict(_))
                    if self.get(&id).await.is_ok_and(|s| s.state == sandboxd_store::SandboxState::Paused) =>
                {
                    Err(crate::exec::paused_mid_command(&id))
                }
                output => output,
            },
        }
    }

    /// [`Service::session_wait`] without the pause.
    async fn poll_session_command(
        &self,
        key: &str,
        session: &str,
        cid: &str,
        timeout: Duration,
    ) -> Result<CommandOutput, ServiceError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut until_alive_check = ALIVE_EVERY;
        loop {
            let output = self.session_output(key, session, cid).await?;
            if output.exit_code.is_some() {
                return Ok(output);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ServiceError::Conflict(format!(
                    "command {cid} still runs after {timeout:?}"
                )));
            }
            until_alive_check -= 1;
            if until_alive_check == 0 {
                until_alive_check = ALIVE_EVERY;
                let (_, client) = self.agent(key, None).await?;
                if !self.session_exists(&client, session).await? {
                    // The shell may have written the end just before it went.
                    let output = self.session_output(key, session, cid).await?;
                    if output.exit_code.is_some() {
                        return Ok(output);
                    }
                    return Err(ServiceError::Conflict(format!(
                        "session {session:?} ended before command {cid} did: its shell is gone"
                    )));
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Kills session `session`'s shell and removes its files.
    pub async fn delete_session(&self, key: &str, session: &str) -> Result<(), ServiceError> {
        validate_id("session", session)?;
        let (_, client) = self.agent(key, None).await?;
        if !self.session_exists(&client, session).await? {
            return Err(ServiceError::NotFound(format!(
                "session {session:?} not found"
            )));
        }
        client
            .send_signal(ProcessSelector::Tag(tag(session)), Signal::Sigkill)
            .await
            .map_err(agent_error)?;
        // Answered once the agent has reaped the shell, so a list right after no longer names it.
        let deadline = tokio::time::Instant::now() + SHELL_GONE_WITHIN;
        while self.session_exists(&client, session).await? {
            if tokio::time::Instant::now() >= deadline {
                return Err(ServiceError::Conflict(format!(
                    "session {session:?}'s shell was killed but is still there after {SHELL_GONE_WITHIN:?}"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
        match client.remove(&dir(session)).await {
            Ok(()) => Ok(()),
            Err(e) => match agent_error(e) {
                ServiceError::NotFound(_) => Ok(()),
                other => Err(other),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_file_names_and_nothing_else() {
        for good in ["s1", "my.session", "a_b-c"] {
            assert!(validate_id("session", good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "x'y", &"x".repeat(65)] {
            assert!(validate_id("session", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_command_runs_in_the_shell_itself_and_its_exit_code_lands_whole() {
        let s = script("/d", "c1", "cd /tmp # a comment");
        assert!(
            s.starts_with("'/.sandboxd/agent' tool fifo '/d/c1.in'"),
            "{s}"
        );
        assert!(s.contains("{ cd /tmp # a comment\n}"), "{s}");
        assert!(s.contains("<>'/d/c1.in' >'/d/c1.out' 2>'/d/c1.err'"));
        // The agent removes the FIFO, then writes the exit code whole (its own unit tests).
        assert!(s.ends_with("'/.sandboxd/agent' tool ended '/d/c1' $__sandboxd_rc\n"));
        // Nothing of the image but bash: no external command besides the agent.
        for tool in ["mkfifo ", "rm ", "mv ", "cat ", "mkdir "] {
            assert!(!s.contains(tool), "{tool}in {s}");
        }
    }
}
