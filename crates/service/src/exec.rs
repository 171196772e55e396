//! Commands and files in a running sandbox: thin translations of the native API onto the sandbox's agent
//! (the same envd calls the E2B SDK makes), so there is one implementation of exec and files.

use crate::timing::step;
use crate::{validate, Service, ServiceError};
use base64::Engine;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use sandboxd_api_types as api;
use sandboxd_envd::process::{DataEvent, EndEvent, ProcessConfig, ProcessEvent, StartRequest};
use sandboxd_envd::{Code, EnvdClient, ExecOptions};
use sandboxd_store::SandboxState;
use std::time::Duration;

/// Maps an agent failure to what the caller did wrong, when it was the caller.
pub fn agent_error(e: sandboxd_envd::Error) -> ServiceError {
    use sandboxd_envd::Error as E;
    match &e {
        E::Rpc(c) => match c.code {
            Code::NotFound => ServiceError::NotFound(c.message.clone()),
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
                ServiceError::InvalidRequest(c.message.clone())
            }
            Code::AlreadyExists => ServiceError::Conflict(c.message.clone()),
            Code::PermissionDenied => {
                ServiceError::InvalidRequest(format!("permission denied: {}", c.message))
            }
            _ => ServiceError::Agent(e),
        },
        E::Status {
            status: 404,
            message,
        } => ServiceError::NotFound(message.clone()),
        E::Status {
            status: 400,
            message,
        } => ServiceError::InvalidRequest(message.clone()),
        E::Status {
            status: 403,
            message,
        } => ServiceError::InvalidRequest(format!("permission denied: {message}")),
        _ => ServiceError::Agent(e),
    }
}

/// The exit code of an ended process, shell style: 128 + signal number when a signal ended it.
pub fn exit_code(end: &EndEvent) -> i32 {
    if end.exited || end.exit_code >= 0 {
        return end.exit_code;
    }
    let signal = match end.status.strip_prefix("signal: ").unwrap_or("") {
        "hangup" => 1,
        "interrupt" => 2,
        "quit" => 3,
        "aborted" => 6,
        "killed" => 9,
        "segmentation fault" => 11,
        "broken pipe" => 13,
        "terminated" => 15,
        _ => 0,
    };
    128 + signal
}

/// Reads a process's events to its end; its exit code ([`exit_code`]).
pub(crate) async fn collect_exit(
    mut events: sandboxd_envd::ProcessStream,
) -> Result<i32, ServiceError> {
    use futures::StreamExt;
    while let Some(event) = events.next().await {
        if let ProcessEvent::End(end) = event.map_err(agent_error)? {
            return Ok(exit_code(&end));
        }
    }
    Err(ServiceError::Agent(sandboxd_envd::Error::Protocol(
        "the process's events ended without its exit".into(),
    )))
}

/// What a command's request answers when its sandbox was paused while it ran ([`crate::in_flight`]).
pub(crate) fn paused_mid_command(id: &str) -> ServiceError {
    ServiceError::Conflict(format!(
        "sandbox {id} was paused while the command ran: the command is paused with it and goes on \
         when the sandbox resumes; its output from then on is not returned here"
    ))
}

/// Resolves once sandbox `id` is paused after `in_flight` was taken, with the message a command's
/// stream (or a terminal) ends on ([`paused_mid_command`]).
pub(crate) fn paused_message(
    in_flight: crate::in_flight::Subscription,
    id: String,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>> {
    Box::pin(async move {
        in_flight.until_paused(id.clone()).await;
        paused_mid_command(&id).to_string()
    })
}

/// Longest `timeoutMs` taken: the largest int64, as the API documents the field.
pub const MAX_TIMEOUT_MS: u64 = i64::MAX as u64;
impl Service {
    /// A client of the agent of running sandbox `key` (an auto-resuming one is resumed), acting as
    /// `user`.
    pub(crate) async fn agent(
        &self,
        key: &str,
        user: Option<&str>,
    ) -> Result<(String, EnvdClient), ServiceError> {
        let (sandbox, stored) = self.get_with_endpoint(key).await?;
        let was_running = sandbox.state == SandboxState::Running;
        let sandbox = self.wake(sandbox).await?;
        // The endpoint read with the row, unless a resume may have moved it.
        let endpoint = match stored.filter(|_| was_running) {
            Some(stored) => self.endpoint_of(&sandbox, stored),
            None => self.endpoint(&sandbox.id).await?,
        };
        let client = self.envd_client(&endpoint.socket, &endpoint.token);
        let client = match user {
            Some(u) => {
                validate::user(u)?;
                client.as_user(u)
            }
            None => client,
        };
        Ok((sandbox.id, client))
    }

    /// A client of the agent at `socket`, on the connections this daemon keeps to agents.
    pub(crate) fn envd_client(&self, socket: &std::path::Path, token: &str) -> EnvdClient {
        EnvdClient::new(socket, token).with_connections(&self.inner.agent_connections)
    }

    fn start_request(req: &api::ExecRequest) -> Result<StartRequest, ServiceError> {
        let Some((cmd, args)) = req.cmd.split_first() else {
            return Err(ServiceError::InvalidRequest(
                "cmd must name a program".into(),
            ));
        };
        if cmd.is_empty() || req.cmd.iter().any(|a| a.contains('\0')) {
            return Err(ServiceError::InvalidRequest(
                "cmd must not be empty or contain NUL".into(),
            ));
        }
        if req.timeout_ms.is_some_and(|ms| ms > MAX_TIMEOUT_MS) {
            return Err(ServiceError::InvalidRequest(format!(
                "timeoutMs must be at most {MAX_TIMEOUT_MS}"
            )));
        }
        let envs = req.env.clone().unwrap_or_default();
        validate::env(&envs)?;
        Ok(StartRequest {
            process: ProcessConfig {
                cmd: cmd.clone(),
                args: args.to_vec(),
                envs: envs.into_iter().collect(),
                cwd: req.cwd.clone(),
            },
            ..Default::default()
        })
    }

    /// Runs a command to completion and returns its output.
    pub async fn exec(
        &self,
        key: &str,
        req: api::ExecRequest,
    ) -> Result<api::ExecResult, ServiceError> {
        let start = Self::start_request(&req)?;
        // Taken before the state is read: a pause from then on ends this request.
        let in_flight = self.inner.in_flight.subscribe();
        let (id, client) = step("resolve", self.agent(key, req.user.as_deref())).await?;
        let cmd: Vec<String> = req.cmd.clone();
        let opts = ExecOptions {
            envs: start.process.envs,
            cwd: start.process.cwd,
            tag: None,
            timeout: req.timeout_ms.map(Duration::from_millis),
        };
        let out = tokio::select! {
            out = step("agent", client.exec(&cmd, opts)) => out.map_err(agent_error)?,
            () = in_flight.until_paused(id.clone()) => return Err(paused_mid_command(&id)),
        };
        Ok(api::ExecResult {
            exit_code: exit_code(&out.end),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Starts a command and streams its events; the stream always ends with `exit` or `error`.
    pub async fn exec_stream(
        &self,
        key: &str,
        req: api::ExecRequest,
    ) -> Result<impl Stream<Item = api::ExecEvent> + Send + 'static, ServiceError> {
        let start = Self::start_request(&req)?;
        let in_flight = self.inner.in_flight.subscribe();
        let (id, client) = self.agent(key, req.user.as_deref()).await?;
        let paused = paused_message(in_flight, id);
        let timeout = req.timeout_ms.map(Duration::from_millis);
        let events = client
            .start_with_timeout(start, timeout)
            .await
            .map_err(agent_error)?;
        let b64 = |b: &Bytes| base64::engine::general_purpose::STANDARD.encode(b);
        // Ends after `exit` or `error`; a stream that stops without an end event is reported as an
        // error, never silently truncated, and a pause of the sandbox ends it with an `error`
        // naming the pause.
        Ok(futures::stream::unfold(
            Some((Box::pin(events), paused)),
            move |state| async move {
                let (mut events, mut paused) = state?;
                loop {
                    let next = tokio::select! {
                        next = events.next() => next,
                        message = &mut paused => {
                            return Some((api::ExecEvent::Error { message }, None));
                        }
                    };
                    let event = match next {
                        None => api::ExecEvent::Error {
                            message: "the command's output stream ended without an exit status"
                                .into(),
                        },
                        Some(Err(e)) => api::ExecEvent::Error {
                            message: crate::error::chain(&e),
                        },
                        Some(Ok(ProcessEvent::End(end))) => api::ExecEvent::Exit {
                            exit_code: exit_code(&end),
                        },
                        Some(Ok(ProcessEvent::Keepalive(_))) => continue,
                        Some(Ok(ProcessEvent::Start(s))) => {
                            let event = api::ExecEvent::Start { pid: s.pid };
                            return Some((event, Some((events, paused))));
                        }
                        Some(Ok(ProcessEvent::Data(DataEvent::Stderr(b)))) => {
                            let event = api::ExecEvent::Stderr { data: b64(&b) };
                            return Some((event, Some((events, paused))));
                        }
                        Some(Ok(ProcessEvent::Data(DataEvent::Stdout(b) | DataEvent::Pty(b)))) => {
                            let event = api::ExecEvent::Stdout { data: b64(&b) };
                            return Some((event, Some((events, paused))));
                        }
                    };
                    return Some((event, None));
                }
            },
        ))
    }

    /// Streams a file out of the sandbox.
    pub async fn read_file(
        &self,
        key: &str,
        path: &str,
        user: Option<&str>,
    ) -> Result<
        impl Stream<Item = Result<Bytes, sandboxd_envd::Error>> + Send + 'static,
        ServiceError,
    > {
        validate::sandbox_path(path)?;
        let (_, client) = self.agent(key, None).await?;
        let user = user.unwrap_or("user");
        validate::user(user)?;
        client
            .read_file_stream(path, Some(user))
            .await
            .map_err(agent_error)
    }

    /// Writes a file into the sandbox from a stream, creating parent directories.
    pub async fn write_file<S>(
        &self,
        key: &str,
        path: &str,
        user: Option<&str>,
        data: S,
    ) -> Result<(), ServiceError>
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static,
    {
        validate::sandbox_path(path)?;
        if path.ends_with('/') {
            return Err(ServiceError::InvalidRequest("path must name a file".into()));
        }
        let (_, client) = self.agent(key, None).await?;
        let user = user.unwrap_or("user");
        validate::user(user)?;
        client
            .write_file_stream(path, Some(user), data)
            .await
            .map_err(agent_error)?;
        Ok(())
    }

    /// Lists a directory of the sandbox.
    pub async fn list_files(&self, key: &str, path: &str) -> Result<api::FileList, ServiceError> {
        validate::sandbox_path(path)?;
        let (_, client) = self.agent(key, None).await?;
        let mut entries: Vec<api::FileEntry> = client
            .list_dir(path, 1)
            .await
            .map_err(agent_error)?
            .into_iter()
            .map(|e| api::FileEntry {
                name: e.name,
                path: e.path,
                kind: match e.file_type {
                    sandboxd_envd::filesystem::FileType::Directory => "dir",
                    sandboxd_envd::filesystem::FileType::Symlink => "symlink",
                    _ if e.is_symlink => "symlink",
                    _ => "file",
                }
                .to_string(),
                size: e.size.max(0) as u64,
                permissions: e.permissions,
                modified_at: e.modified_time.unwrap_or_default(),
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(api::FileList { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_become_shell_style_exit_codes() {
        let end = |code, exited, status: &str| EndEvent {
            exit_code: code,
            exited,
            status: status.into(),
            error: None,
        };
        assert_eq!(exit_code(&end(3, true, "exit status 3")), 3);
        assert_eq!(exit_code(&end(-1, false, "signal: killed")), 137);
        assert_eq!(exit_code(&end(-1, false, "signal: terminated")), 143);
    }
}
