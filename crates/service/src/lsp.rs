//! Language servers in a sandbox (Daytona's `LspServer`): start one for a language and a project,
//! tell it which files are open, ask it for completions and symbols, stop it.
//!
//! The server is an agent process of the sandbox, tagged `lsp:<language>:<project>`, run as the
//! sandbox's default user in the project's directory with its stdin a pipe; the daemon holds
//! nothing of it between calls (a restarted daemon, or another node, serves the next call the
//! same). Each call joins the server's output by its tag, writes its messages to the server's
//! stdin and, for a request, reads until the answer with its own random id ([`sandboxd_lsp`]),
//! answering with `null` any request of the server's it reads meanwhile.
//!
//! Contract:
//! - Languages: `python` runs `pylsp`; `typescript` and `javascript` run
//!   `typescript-language-server --stdio`. Another language is a 400. The server must be installed
//!   in the sandbox's image: one that cannot start is a 409 at once, naming the program and how to
//!   install it.
//! - `start` answers once the server answered `initialize`; starting one that runs already does
//!   nothing (two starts at the same instant may both start one: the agent keeps no lock; the
//!   first found serves). A project directory that does not exist is a 400.
//! - Any other call on a server that is not running is a 404 that says to start it first.
//! - Invariant: callers sharing one server never take each other's answers (each request's id is
//!   its caller's own, random); and a restarted daemon serves a server started before
//!   (`crates/sandboxd/tests/daytona_lsp.rs` proves both, with 40 parallel calls and a kill -9).
//! - `stop` asks the server to shut down and exit, kills it if it has not within
//!   [`STOP_WAIT`], and is a no-op when none runs.
//! - Paths and URIs: a relative project is relative to the sandbox's working directory; a file's
//!   `file://` URI may hold a path relative to the project. Servers get absolute `file://` URIs.
//! - A request the server does not offer (`workspace/symbol` of `pylsp`) is a 400 that says so.
//! - Every exchange has a deadline ([`CALL_DEADLINE`], [`START_DEADLINE`]); a server that does not
//!   answer within it, answers with an error or exits is a 502 with the server's own words (its
//!   error, or the last of its stderr).

use crate::exec::{agent_error, exit_code};
use crate::{validate, Service, ServiceError};
use bytes::Bytes;
use futures::StreamExt;
use sandboxd_envd::process::{
    DataEvent, ProcessConfig, ProcessEvent, ProcessSelector, Signal, StartRequest,
};
use sandboxd_envd::{EnvdClient, ProcessStream};
use sandboxd_lsp::{Decoder, Incoming};
use serde_json::{json, Value};
use std::time::Duration;

/// How long a request may wait for the server's answer.
pub const CALL_DEADLINE: Duration = Duration::from_secs(30);
/// How long a server may take to start and answer `initialize`.
pub const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long a stopped server has to exit before it is killed.
pub const STOP_WAIT: Duration = Duration::from_secs(3);
/// JSON-RPC's error code for a method the server does not have.
const METHOD_NOT_FOUND: i64 = -32601;
/// How much of a server's stderr an error quotes.
const STDERR_TAIL: usize = 1024;

/// A language a server can be started for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Python,
    TypeScript,
    JavaScript,
}

impl Language {
    /// The language named `id` (`python`, `typescript`, `javascript`).
    pub fn parse(id: &str) -> Result<Self, ServiceError> {
        match id {
            "python" => Ok(Self::Python),
            "typescript" => Ok(Self::TypeScript),
            "javascript" => Ok(Self::JavaScript),
            other => Err(ServiceError::InvalidRequest(format!(
                "unsupported language {other:?}: language servers run for python, typescript \
                 and javascript"
            ))),
        }
    }

    /// LSP's language id.
    pub fn id(self) -> &'static str {
        match self {
            Self::Python => "python",
            Self::TypeScript => "typescript",
            Self::JavaScript => "javascript",
        }
    }

    fn command(self) -> (&'static str, &'static [&'static str]) {
        match self {
            Self::Python => ("pylsp", &[]),
            Self::TypeScript | Self::JavaScript => ("typescript-language-server", &["--stdio"]),
        }
    }

    fn install_hint(self) -> &'static str {
        match self {
            Self::Python => {
                "install it in the sandbox's image (Debian: apt install python3-pylsp; \
                             pip: pip install python-lsp-server)"
            }
            Self::TypeScript | Self::JavaScript => {
                "install it in the sandbox's image (npm install -g typescript-language-server \
                 typescript)"
            }
        }
    }
}

/// One language server: its language and its project's absolute directory.
#[derive(Debug, Clone)]
pub struct LspServer {
    pub language: Language,
    pub project: String,
}

impl LspServer {
    fn tag(&self) -> String {
        format!("lsp:{}:{}", self.language.id(), self.project)
    }

    fn not_running(&self) -> ServiceError {
        ServiceError::NotFound(format!(
            "no {} language server runs for {}: start it first",
            self.language.id(),
            self.project
        ))
    }

    /// The absolute `file://` URI of `uri` (a `file://` URI or a path, either relative to the
    /// project), and the path it names.
    pub fn document(&self, uri: &str) -> Result<(String, String), ServiceError> {
        let path = uri.strip_prefix("file://").unwrap_or(uri);
        if path.is_empty() {
            return Err(ServiceError::InvalidRequest("uri is required".into()));
        }
        let path = if path.starts_with('/') {
            path.to_string()
        } else {
            format!(
                "{}/{}",
                self.project.trim_end_matches('/'),
                path.trim_start_matches("./")
            )
        };
        validate::sandbox_path(&path)?;
        Ok((file_uri(&path), path))
    }
}

/// What a path in a `file://` URI keeps as it is: RFC 3986's unreserved characters and `/`.
const PATH_KEPT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// `file://` and `path`, percent-encoded where a URI needs it.
fn file_uri(path: &str) -> String {
    format!(
        "file://{}",
        percent_encoding::utf8_percent_encode(path, PATH_KEPT)
    )
}

impl Service {
    /// The server of `language_id` for `project` (relative to the working directory of sandbox
    /// `key`), validated.
    pub async fn lsp_server(
        &self,
        key: &str,
        language_id: &str,
        project: &str,
    ) -> Result<LspServer, ServiceError> {
        let language = Language::parse(language_id)?;
        let project = match project.trim() {
            "/" => "/",
            other => other.trim_end_matches('/'),
        };
        if project.is_empty() {
            return Err(ServiceError::InvalidRequest(
                "pathToProject is required".into(),
            ));
        }
        let project = if project.starts_with('/') {
            project.to_string()
        } else {
            format!("{}/{}", self.work_dir(key).await?, project)
        };
        validate::sandbox_path(&project)?;
        Ok(LspServer { language, project })
    }

    /// Starts `server` in sandbox `key` (see the module's contract).
    pub async fn lsp_start(&self, key: &str, server: &LspServer) -> Result<(), ServiceError> {
        let (_, client) = self.agent(key, None).await?;
        let tag = server.tag();
        let running = client.list().await.map_err(agent_error)?;
        if running
            .iter()
            .any(|p| p.tag.as_deref() == Some(tag.as_str()))
        {
            return Ok(());
        }
        match client.stat(&server.project).await {
            Ok(entry) if entry.file_type == sandboxd_envd::filesystem::FileType::Directory => {}
            Ok(_) => {
                return Err(ServiceError::InvalidRequest(format!(
                    "pathToProject {} is not a directory",
                    server.project
                )))
            }
            Err(e) => {
                return Err(match agent_error(e) {
                    ServiceError::NotFound(_) => ServiceError::InvalidRequest(format!(
                        "pathToProject {} does not exist in the sandbox",
                        server.project
                    )),
                    other => other,
                })
            }
        }
        let (program, args) = server.language.command();
        let start = StartRequest {
            process: ProcessConfig {
                cmd: program.into(),
                args: args.iter().map(|a| a.to_string()).collect(),
                envs: Default::default(),
                cwd: Some(server.project.clone()),
            },
            stdin: Some(true),
            tag: Some(tag),
            ..Default::default()
        };
        let cannot_start = |why: String| {
            ServiceError::Conflict(format!(
                "the {} language server `{program}` cannot start in this sandbox ({why}): {}",
                server.language.id(),
                server.language.install_hint()
            ))
        };
        // The agent refuses a program it cannot run at once, or as the first event of its stream.
        let opened = match client.start(start).await {
            Ok(events) => Exchange::open(client.clone(), events, Decoder::from_start()).await,
            Err(e) => Err(agent_error(e)),
        };
        let mut exchange = opened.map_err(|e| cannot_start(crate::error::chain(&e)))?;
        let init = json!({
            "processId": null,
            "clientInfo": {"name": "sandboxd"},
            "rootUri": file_uri(&server.project),
            "workspaceFolders": [{"uri": file_uri(&server.project), "name": "project"}],
            "capabilities": {
                "textDocument": {
                    "completion": {"completionItem": {"documentationFormat": ["markdown", "plaintext"]}},
                    "documentSymbol": {},
                },
                "workspace": {"symbol": {}},
            },
        });
        let answered = match exchange.request("initialize", init, START_DEADLINE).await {
            Ok(_) => exchange.notify("initialized", json!({})).await,
            Err(e) => Err(e),
        };
        if let Err(e) = answered {
            exchange.kill().await;
            return Err(match e {
                ServiceError::LanguageServer(why) if exchange.exited => cannot_start(why),
                other => other,
            });
        }
        Ok(())
    }

    /// Stops `server` in sandbox `key`; nothing when none runs.
    pub async fn lsp_stop(&self, key: &str, server: &LspServer) -> Result<(), ServiceError> {
        let mut exchange = match self.lsp_join(key, server).await {
            Ok(exchange) => exchange,
            Err(ServiceError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let asked = exchange.request("shutdown", Value::Null, STOP_WAIT).await;
        if asked.is_ok() && exchange.notify("exit", Value::Null).await.is_ok() {
            let _ = tokio::time::timeout(STOP_WAIT, exchange.until_end()).await;
        }
        if !exchange.exited {
            exchange.kill().await;
        }
        Ok(())
    }

    /// Tells `server` that the file at `uri` is open, with its text as it is now.
    pub async fn lsp_did_open(
        &self,
        key: &str,
        server: &LspServer,
        uri: &str,
    ) -> Result<(), ServiceError> {
        let (uri, path) = server.document(uri)?;
        let mut exchange = self.lsp_join(key, server).await?;
        let text = exchange
            .client
            .read_file(&path, None)
            .await
            .map_err(agent_error)?;
        let params = json!({"textDocument": {
            "uri": uri, "languageId": server.language.id(), "version": 1,
            "text": String::from_utf8_lossy(&text),
        }});
        exchange.notify("textDocument/didOpen", params).await
    }

    /// Tells `server` that the file at `uri` is closed.
    pub async fn lsp_did_close(
        &self,
        key: &str,
        server: &LspServer,
        uri: &str,
    ) -> Result<(), ServiceError> {
        let (uri, _) = server.document(uri)?;
        let mut exchange = self.lsp_join(key, server).await?;
        exchange
            .notify(
                "textDocument/didClose",
                json!({"textDocument": {"uri": uri}}),
            )
            .await
    }

    /// `{isIncomplete, items}`: the completions at `position` (`{line, character}`) of `uri`.
    pub async fn lsp_completions(
        &self,
        key: &str,
        server: &LspServer,
        uri: &str,
        position: Value,
        context: Option<Value>,
    ) -> Result<Value, ServiceError> {
        let (uri, _) = server.document(uri)?;
        let mut params = json!({"textDocument": {"uri": uri}, "position": position});
        if let Some(context) = context {
            params["context"] = context;
        }
        let mut exchange = self.lsp_join(key, server).await?;
        let result = exchange
            .request("textDocument/completion", params, CALL_DEADLINE)
            .await?;
        Ok(sandboxd_lsp::completion_list(&result))
    }

    /// The symbols of the document at `uri`, flat.
    pub async fn lsp_document_symbols(
        &self,
        key: &str,
        server: &LspServer,
        uri: &str,
    ) -> Result<Vec<Value>, ServiceError> {
        let (uri, _) = server.document(uri)?;
        let mut exchange = self.lsp_join(key, server).await?;
        let result = exchange
            .request(
                "textDocument/documentSymbol",
                json!({"textDocument": {"uri": uri}}),
                CALL_DEADLINE,
            )
            .await?;
        Ok(sandboxd_lsp::flat_symbols(&result, Some(&uri)))
    }

    /// The symbols of the whole project that match `query`.
    pub async fn lsp_workspace_symbols(
        &self,
        key: &str,
        server: &LspServer,
        query: &str,
    ) -> Result<Vec<Value>, ServiceError> {
        let mut exchange = self.lsp_join(key, server).await?;
        let result = exchange
            .request("workspace/symbol", json!({"query": query}), CALL_DEADLINE)
            .await?;
        Ok(sandboxd_lsp::flat_symbols(&result, None))
    }

    /// Joins the output of `server`, running in sandbox `key`.
    async fn lsp_join(&self, key: &str, server: &LspServer) -> Result<Exchange, ServiceError> {
        let (_, client) = self.agent(key, None).await?;
        let events = match client.connect(ProcessSelector::Tag(server.tag())).await {
            Ok(events) => events,
            Err(e) => {
                return Err(match agent_error(e) {
                    ServiceError::NotFound(_) => server.not_running(),
                    other => other,
                })
            }
        };
        Exchange::open(client, events, Decoder::default())
            .await
            .map_err(|e| match e {
                ServiceError::NotFound(_) => server.not_running(),
                other => other,
            })
    }
}

/// One call's conversation with a server: its stdin, and its output from where the call joined.
struct Exchange {
    client: EnvdClient,
    pid: u32,
    events: ProcessStream,
    decoder: Decoder,
    stderr: Vec<u8>,
    exited: bool,
}

impl Exchange {
    /// The exchange over `events`, once they name the server's pid.
    async fn open(
        client: EnvdClient,
        mut events: ProcessStream,
        decoder: Decoder,
    ) -> Result<Self, ServiceError> {
        let pid = loop {
            match tokio::time::timeout(CALL_DEADLINE, events.next()).await {
                Ok(Some(Ok(ProcessEvent::Start(s)))) => break s.pid,
                Ok(Some(Ok(ProcessEvent::Keepalive(_)))) => continue,
                Ok(Some(Err(e))) => return Err(agent_error(e)),
                Ok(Some(Ok(ProcessEvent::End(_)))) | Ok(None) => {
                    return Err(ServiceError::NotFound("the language server ended".into()))
                }
                Ok(Some(Ok(other))) => {
                    return Err(ServiceError::LanguageServer(format!(
                        "its stream opened with {other:?} instead of its pid"
                    )))
                }
                Err(_) => {
                    return Err(ServiceError::LanguageServer(
                        "its agent did not answer in time".into(),
                    ))
                }
            }
        };
        Ok(Self {
            client,
            pid,
            events,
            decoder,
            stderr: Vec::new(),
            exited: false,
        })
    }

    async fn write(&mut self, data: Bytes) -> Result<(), ServiceError> {
        self.client
            .send_stdin(ProcessSelector::Pid(self.pid), data)
            .await
            .map_err(agent_error)
    }

    async fn notify(&mut self, method: &str, params: Value) -> Result<(), ServiceError> {
        self.write(sandboxd_lsp::notification(method, params)).await
    }

    /// Sends request `method` and waits up to `deadline` for its result.
    async fn request(
        &mut self,
        method: &str,
        params: Value,
        deadline: Duration,
    ) -> Result<Value, ServiceError> {
        let id = format!("sandboxd-{:016x}", rand::random::<u64>());
        self.write(sandboxd_lsp::request(&id, method, params))
            .await?;
        match tokio::time::timeout(deadline, self.answer(&id)).await {
            Ok(Ok(Ok(result))) => Ok(result),
            Ok(Ok(Err(sandboxd_lsp::Error::Server {
                code: METHOD_NOT_FOUND,
                ..
            }))) => Err(ServiceError::InvalidRequest(format!(
                "this language server does not offer {method}"
            ))),
            Ok(Ok(Err(e))) => Err(lsp_error(e)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ServiceError::LanguageServer(format!(
                "it did not answer {method} within {}s",
                deadline.as_secs()
            ))),
        }
    }

    /// Reads the server's output until the answer to request `id`: the server's result or error.
    async fn answer(
        &mut self,
        id: &str,
    ) -> Result<Result<Value, sandboxd_lsp::Error>, ServiceError> {
        loop {
            while let Some(body) = self.decoder.next_message().map_err(lsp_error)? {
                let message = match Incoming::parse(&body) {
                    Ok(message) => message,
                    Err(e) => {
                        tracing::debug!(error = %e, "skipped a message of a language server");
                        continue;
                    }
                };
                match message {
                    Incoming::Answer { id: theirs, result } if theirs.as_str() == Some(id) => {
                        return Ok(result)
                    }
                    Incoming::Request { id: theirs, .. } => {
                        self.write(sandboxd_lsp::answer_null(&theirs)).await?
                    }
                    _ => {}
                }
            }
            self.next_output().await?;
        }
    }

    /// Reads the next piece of output into the decoder (stderr into its tail).
    async fn next_output(&mut self) -> Result<(), ServiceError> {
        loop {
            match self.events.next().await {
                Some(Ok(ProcessEvent::Data(DataEvent::Stdout(b) | DataEvent::Pty(b)))) => {
                    self.decoder.feed(&b);
                    return Ok(());
                }
                Some(Ok(ProcessEvent::Data(DataEvent::Stderr(b)))) => {
                    self.stderr.extend_from_slice(&b);
                    let excess = self.stderr.len().saturating_sub(STDERR_TAIL);
                    self.stderr.drain(..excess);
                }
                Some(Ok(ProcessEvent::Start(_) | ProcessEvent::Keepalive(_))) => {}
                Some(Ok(ProcessEvent::End(end))) => {
                    self.exited = true;
                    return Err(ServiceError::LanguageServer(format!(
                        "it exited with code {}{}",
                        exit_code(&end),
                        self.stderr_said()
                    )));
                }
                Some(Err(e)) => return Err(agent_error(e)),
                None => {
                    self.exited = true;
                    return Err(ServiceError::LanguageServer(format!(
                        "its output ended{}",
                        self.stderr_said()
                    )));
                }
            }
        }
    }

    /// Waits for the server's exit.
    async fn until_end(&mut self) {
        while !self.exited {
            if self.next_output().await.is_err() {
                self.exited = true;
            }
        }
    }

    async fn kill(&mut self) {
        if let Err(e) = self
            .client
            .send_signal(ProcessSelector::Pid(self.pid), Signal::Sigkill)
            .await
        {
            tracing::debug!(pid = self.pid, error = %e, "kill of a language server that ended");
        }
    }

    fn stderr_said(&self) -> String {
        let text = String::from_utf8_lossy(&self.stderr);
        match text.trim() {
            "" => String::new(),
            said => format!("; its stderr ends: {said}"),
        }
    }
}

fn lsp_error(e: sandboxd_lsp::Error) -> ServiceError {
    ServiceError::LanguageServer(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> LspServer {
        LspServer {
            language: Language::Python,
            project: "/home/user/proj".into(),
        }
    }

    #[test]
    fn languages_are_the_three_servers_run_for() {
        assert_eq!(Language::parse("python").unwrap().command().0, "pylsp");
        assert_eq!(
            Language::parse("javascript").unwrap().command(),
            Language::parse("typescript").unwrap().command()
        );
        assert!(matches!(
            Language::parse("cobol"),
            Err(ServiceError::InvalidRequest(m)) if m.contains("cobol")
        ));
    }

    #[test]
    fn documents_resolve_against_the_project_and_encode_as_uris() {
        let s = server();
        assert_eq!(
            s.document("file:///home/user/proj/a.py").unwrap(),
            (
                "file:///home/user/proj/a.py".into(),
                "/home/user/proj/a.py".into()
            )
        );
        assert_eq!(
            s.document("file://src/b c.py").unwrap(),
            (
                "file:///home/user/proj/src/b%20c.py".into(),
                "/home/user/proj/src/b c.py".into()
            )
        );
        assert_eq!(s.document("./x.py").unwrap().1, "/home/user/proj/x.py");
        assert!(s.document("file://").is_err());
        assert!(s.document("file:///etc/../x").is_err());
    }

    #[test]
    fn a_tag_names_the_language_and_project() {
        assert_eq!(server().tag(), "lsp:python:/home/user/proj");
    }
}
