//! [`EnvdClient`]: a Rust client for an agent's envd surface over its unix socket.
//!
//! Contract: every call carries the access token, over an HTTP/1.1 connection of its own, or one kept
//! from an earlier call when the client was given [`AgentConnections`] (whose contract says when a
//! connection may carry another call: never after one that broke off); the client is an `Arc` inside,
//! cheap to clone and share.
//! [`EnvdClient::as_user`] picks the user calls run as (sent as `Authorization: Basic user:` on RPCs
//! and `username=` on `/files`, like the E2B SDK); without it the agent's default user applies.
//! Server streams are read incrementally: a [`ProcessStream`] or [`WatchStream`] holds at most one
//! envelope at a time; the `StreamInput` client stream sends each input as it comes.

mod connections;
mod stream;
mod wire;

pub use connections::{AgentConnections, IDLE_TIMEOUT, MAX_IDLE_PER_AGENT};
pub use stream::{ProcessStream, WatchStream};

use self::wire::{collect_limited, empty, files_error, full, percent_encode, rpc_error};
use crate::connect::{self, STREAM_CONTENT_TYPE};
use crate::files::{self, FilesQuery, WriteInfo};
use crate::filesystem::{self as fs, EntryInfo, FilesystemEvent, WatchDirRequest};
use crate::process::{
    self as proc, DataEvent, EndEvent, ProcessEvent, ProcessInput, ProcessSelector, PtySize,
    StartRequest,
};
use crate::{Error, ACCESS_TOKEN_HEADER, KEEPALIVE_HEADER, TIMEOUT_HEADER};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixStream;

type Body = BoxBody<Bytes, std::io::Error>;

/// A client of one agent. See the module docs.
#[derive(Clone)]
pub struct EnvdClient {
    socket: Arc<PathBuf>,
    token: Arc<str>,
    user: Option<Arc<str>>,
    keepalive_secs: Option<u64>,
    /// Kept connections to use instead of one per call.
    connections: Option<AgentConnections>,
}

/// Options of [`EnvdClient::exec`].
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    pub envs: HashMap<String, String>,
    pub cwd: Option<String>,
    pub tag: Option<String>,
    /// Deadline after which the agent kills the process (`Connect-Timeout-Ms`).
    pub timeout: Option<Duration>,
}

/// The collected result of [`EnvdClient::exec`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    pub pid: u32,
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The full end event (`status`, `exited`, `error`).
    pub end: EndEvent,
}

impl EnvdClient {
    /// A client for the agent listening on `socket_path`, authenticating with `token`.
    pub fn new(socket_path: impl Into<PathBuf>, token: impl Into<String>) -> Self {
        EnvdClient {
            socket: Arc::new(socket_path.into()),
            token: Arc::from(token.into()),
            user: None,
            keepalive_secs: None,
            connections: None,
        }
    }

    /// The same client, opening a connection of each call's own.
    pub fn connection_per_call(&self) -> Self {
        EnvdClient {
            connections: None,
            ..self.clone()
        }
    }

    /// The same client, sending its calls on `connections`' kept connections.
    pub fn with_connections(&self, connections: &AgentConnections) -> Self {
        EnvdClient {
            connections: Some(connections.clone()),
            ..self.clone()
        }
    }

    /// The same client, running calls as `user`.
    pub fn as_user(&self, user: impl Into<String>) -> Self {
        EnvdClient {
            user: Some(Arc::from(user.into())),
            ..self.clone()
        }
    }

    /// The same client, asking for keepalive events every `secs` seconds on idle streams.
    pub fn with_keepalive_interval(&self, secs: u64) -> Self {
        EnvdClient {
            keepalive_secs: Some(secs),
            ..self.clone()
        }
    }

    /// `GET /health`: `Ok` when the agent answers 2xx.
    pub async fn health(&self) -> Result<(), Error> {
        let req = self
            .builder(Method::GET, files::HEALTH_PATH)
            .body(empty())?;
        let resp = self.send(req).await?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(files_error(resp).await)
        }
    }

    /// `POST /init`: replaces the environment every later command starts with.
    pub async fn init(&self, env_vars: HashMap<String, String>) -> Result<(), Error> {
        self.post_json(files::INIT_PATH, &files::InitRequest { env_vars })
            .await
    }

    /// `POST /env`: changes the environment every later command starts with.
    pub async fn update_env(&self, change: &files::EnvChange) -> Result<(), Error> {
        self.post_json(files::ENV_PATH, change).await
    }

    /// `POST path` with `body` as JSON, answered with a success and nothing to read.
    async fn post_json(&self, path: &str, body: &impl serde::Serialize) -> Result<(), Error> {
        let body = serde_json::to_vec(body)?;
        let req = self
            .builder(Method::POST, path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(full(body))?;
        let resp = self.send(req).await?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(files_error(resp).await)
        }
    }

    /// `process.Process/Start`: starts a process and streams its events (`start` first, `end` last).
    pub async fn start(&self, req: StartRequest) -> Result<ProcessStream, Error> {
        self.start_with_timeout(req, None).await
    }

    /// [`start`](Self::start) with a deadline after which the agent kills the process.
    pub async fn start_with_timeout(
        &self,
        req: StartRequest,
        timeout: Option<Duration>,
    ) -> Result<ProcessStream, Error> {
        let body = self
            .server_stream(&proc::path("Start"), &req, timeout)
            .await?;
        Ok(ProcessStream::new(body))
    }

    /// `process.Process/Connect`: attaches to a running process (by pid or tag). The stream opens with
    /// `start` (its pid), carries its output from now on and ends with `end`; dropping it leaves the
    /// process running.
    pub async fn connect(&self, process: ProcessSelector) -> Result<ProcessStream, Error> {
        let req = proc::ConnectRequest { process };
        let body = self
            .server_stream(&proc::path("Connect"), &req, None)
            .await?;
        Ok(ProcessStream::new(body))
    }

    /// Runs `cmd[0]` with arguments `cmd[1..]` and collects its output and exit status.
    pub async fn exec(&self, cmd: &[String], opts: ExecOptions) -> Result<ExecOutput, Error> {
        let (prog, args) = cmd
            .split_first()
            .ok_or_else(|| Error::Protocol("exec needs a command".into()))?;
        let req = StartRequest {
            process: proc::ProcessConfig {
                cmd: prog.clone(),
                args: args.to_vec(),
                envs: opts.envs,
                cwd: opts.cwd,
            },
            pty: None,
            tag: opts.tag,
            stdin: Some(false),
        };
        let mut stream = self.start_with_timeout(req, opts.timeout).await?;
        let mut out = ExecOutput::default();
        while let Some(event) = stream.next().await {
            match event? {
                ProcessEvent::Start(s) => out.pid = s.pid,
                ProcessEvent::Data(DataEvent::Stdout(b))
                | ProcessEvent::Data(DataEvent::Pty(b)) => out.stdout.extend_from_slice(&b),
                ProcessEvent::Data(DataEvent::Stderr(b)) => out.stderr.extend_from_slice(&b),
                ProcessEvent::Keepalive(_) => {}
                ProcessEvent::End(end) => {
                    out.exit_code = end.exit_code;
                    out.end = end;
                    stream.finish().await;
                    return Ok(out);
                }
            }
        }
        Err(Error::Protocol("stream ended without an end event".into()))
    }

    /// `process.Process/SendSignal`.
    pub async fn send_signal(
        &self,
        process: ProcessSelector,
        signal: proc::Signal,
    ) -> Result<(), Error> {
        let _: proc::SendSignalResponse = self
            .unary(
                &proc::path("SendSignal"),
                &proc::SendSignalRequest { process, signal },
            )
            .await?;
        Ok(())
    }

    /// `process.Process/SendInput` to the process's stdin.
    pub async fn send_stdin(&self, process: ProcessSelector, data: Bytes) -> Result<(), Error> {
        let req = proc::SendInputRequest {
            process,
            input: proc::ProcessInput::Stdin(data),
        };
        let _: proc::SendInputResponse = self.unary(&proc::path("SendInput"), &req).await?;
        Ok(())
    }

    /// `process.Process/SendInput` to the process's terminal (a process started with `pty`).
    pub async fn send_pty(&self, process: ProcessSelector, data: Bytes) -> Result<(), Error> {
        let req = proc::SendInputRequest {
            process,
            input: proc::ProcessInput::Pty(data),
        };
        let _: proc::SendInputResponse = self.unary(&proc::path("SendInput"), &req).await?;
        Ok(())
    }

    /// `process.Process/StreamInput`: one request carrying `inputs` (stdin or pty bytes) as they come;
    /// returns once the stream is sent and the agent has written all of it.
    pub async fn stream_input<S>(&self, process: ProcessSelector, inputs: S) -> Result<(), Error>
    where
        S: Stream<Item = ProcessInput> + Send + Sync + 'static,
    {
        use proc::{StreamInputData, StreamInputEvent, StreamInputStart};
        let start = StreamInputEvent::Start(StreamInputStart { process });
        let first = futures::stream::iter([Ok(start)]);
        let data = inputs.map(|input| Ok(StreamInputEvent::Data(StreamInputData { input })));
        let frames = first.chain(data).map(|msg: Result<_, std::io::Error>| {
            let msg = msg?;
            connect::encode_message(&msg)
                .map(Frame::data)
                .map_err(std::io::Error::other)
        });
        let body = BodyExt::boxed(StreamBody::new(frames));
        let req = self
            .rpc_builder(&proc::path("StreamInput"))
            .header(header::CONTENT_TYPE, STREAM_CONTENT_TYPE)
            .body(body)?;
        let resp = self.send(req).await?;
        if resp.status() != StatusCode::OK {
            return Err(rpc_error(resp).await);
        }
        let _: proc::StreamInputResponse = stream::client_stream_answer(resp.into_body()).await?;
        Ok(())
    }

    /// `process.Process/Update`: resizes the terminal of a process started with `pty`.
    pub async fn resize_pty(&self, process: ProcessSelector, size: PtySize) -> Result<(), Error> {
        let req = proc::UpdateRequest {
            process,
            pty: Some(proc::Pty { size: Some(size) }),
        };
        let _: proc::UpdateResponse = self.unary(&proc::path("Update"), &req).await?;
        Ok(())
    }

    /// `process.Process/CloseStdin`.
    pub async fn close_stdin(&self, process: ProcessSelector) -> Result<(), Error> {
        let _: proc::CloseStdinResponse = self
            .unary(
                &proc::path("CloseStdin"),
                &proc::CloseStdinRequest { process },
            )
            .await?;
        Ok(())
    }

    /// `process.Process/List`: processes started through the agent that are still running.
    pub async fn list(&self) -> Result<Vec<proc::ProcessInfo>, Error> {
        let resp: proc::ListResponse = self
            .unary(&proc::path("List"), &proc::ListRequest {})
            .await?;
        Ok(resp.processes)
    }

    /// `filesystem.Filesystem/Stat`.
    pub async fn stat(&self, path: &str) -> Result<EntryInfo, Error> {
        let req = fs::StatRequest { path: path.into() };
        let resp: fs::StatResponse = self.unary(&fs::path("Stat"), &req).await?;
        Ok(resp.entry)
    }

    /// `filesystem.Filesystem/ListDir` down to `depth` levels (0 = 1).
    pub async fn list_dir(&self, path: &str, depth: u32) -> Result<Vec<EntryInfo>, Error> {
        let req = fs::ListDirRequest {
            path: path.into(),
            depth,
        };
        let resp: fs::ListDirResponse = self.unary(&fs::path("ListDir"), &req).await?;
        Ok(resp.entries)
    }

    /// `filesystem.Filesystem/MakeDir` with parents; `already_exists` when it is there.
    pub async fn make_dir(&self, path: &str) -> Result<EntryInfo, Error> {
        let req = fs::MakeDirRequest { path: path.into() };
        let resp: fs::MakeDirResponse = self.unary(&fs::path("MakeDir"), &req).await?;
        Ok(resp.entry)
    }

    /// `filesystem.Filesystem/Move`.
    pub async fn move_(&self, source: &str, destination: &str) -> Result<EntryInfo, Error> {
        let req = fs::MoveRequest {
            source: source.into(),
            destination: destination.into(),
        };
        let resp: fs::MoveResponse = self.unary(&fs::path("Move"), &req).await?;
        Ok(resp.entry)
    }

    /// `filesystem.Filesystem/Remove` (recursive; succeeds when nothing is there).
    pub async fn remove(&self, path: &str) -> Result<(), Error> {
        let req = fs::RemoveRequest { path: path.into() };
        let _: fs::RemoveResponse = self.unary(&fs::path("Remove"), &req).await?;
        Ok(())
    }

    /// `filesystem.Filesystem/WatchDir`: a stream of changes under a directory, opening with `start`
    /// once the watch is in place. Dropping the stream ends the watch.
    pub async fn watch_dir(&self, req: WatchDirRequest) -> Result<WatchStream, Error> {
        let body = self
            .server_stream(&fs::path("WatchDir"), &req, None)
            .await?;
        Ok(WatchStream::new(body))
    }

    /// `filesystem.Filesystem/CreateWatcher`: a watch whose events the agent buffers until
    /// [`get_watcher_events`](Self::get_watcher_events) collects them; returns the watcher id.
    pub async fn create_watcher(&self, req: WatchDirRequest) -> Result<String, Error> {
        let resp: fs::CreateWatcherResponse = self.unary(&fs::path("CreateWatcher"), &req).await?;
        Ok(resp.watcher_id)
    }

    /// `filesystem.Filesystem/GetWatcherEvents`: the events buffered since the last call.
    pub async fn get_watcher_events(
        &self,
        watcher_id: &str,
    ) -> Result<Vec<FilesystemEvent>, Error> {
        let req = fs::GetWatcherEventsRequest {
            watcher_id: watcher_id.into(),
        };
        let resp: fs::GetWatcherEventsResponse =
            self.unary(&fs::path("GetWatcherEvents"), &req).await?;
        Ok(resp.events)
    }

    /// `filesystem.Filesystem/RemoveWatcher`.
    pub async fn remove_watcher(&self, watcher_id: &str) -> Result<(), Error> {
        let req = fs::RemoveWatcherRequest {
            watcher_id: watcher_id.into(),
        };
        let _: fs::RemoveWatcherResponse = self.unary(&fs::path("RemoveWatcher"), &req).await?;
        Ok(())
    }

    /// `GET /files`: the whole file (up to 256 MiB; use [`read_file_stream`](Self::read_file_stream)
    /// beyond that).
    pub async fn read_file(&self, path: &str, user: Option<&str>) -> Result<Bytes, Error> {
        let body = self.read_file_response(path, user).await?.into_body();
        collect_limited(body).await
    }

    /// `GET /files` as a stream of chunks.
    pub async fn read_file_stream(
        &self,
        path: &str,
        user: Option<&str>,
    ) -> Result<impl Stream<Item = Result<Bytes, Error>> + Send + 'static, Error> {
        let body = self.read_file_response(path, user).await?.into_body();
        Ok(body.into_data_stream().map_err(Error::Http))
    }

    /// `POST /files` with an `application/octet-stream` body; parents are created.
    pub async fn write_file(
        &self,
        path: &str,
        user: Option<&str>,
        data: impl Into<Bytes>,
    ) -> Result<WriteInfo, Error> {
        self.write_body(path, user, full(data.into()), &HashMap::new())
            .await
    }

    /// [`write_file`](Self::write_file) attaching `metadata` to the file (`X-Metadata-*` headers;
    /// keys are stored lowercased).
    pub async fn write_file_with_metadata(
        &self,
        path: &str,
        user: Option<&str>,
        data: impl Into<Bytes>,
        metadata: &HashMap<String, String>,
    ) -> Result<WriteInfo, Error> {
        self.write_body(path, user, full(data.into()), metadata)
            .await
    }

    /// `POST /files` streaming the body from `data`.
    pub async fn write_file_stream<S>(
        &self,
        path: &str,
        user: Option<&str>,
        data: S,
    ) -> Result<WriteInfo, Error>
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static,
    {
        let body = BodyExt::boxed(StreamBody::new(data.map_ok(Frame::data)));
        self.write_body(path, user, body, &HashMap::new()).await
    }

    async fn write_body(
        &self,
        path: &str,
        user: Option<&str>,
        body: Body,
        metadata: &HashMap<String, String>,
    ) -> Result<WriteInfo, Error> {
        let uri = self.files_uri(path, user);
        let mut b = self
            .builder(Method::POST, &uri)
            .header(header::CONTENT_TYPE, "application/octet-stream");
        for (key, value) in metadata {
            b = b.header(format!("{}{key}", files::METADATA_HEADER_PREFIX), value);
        }
        let req = b.body(body)?;
        let resp = self.send(req).await?;
        if !resp.status().is_success() {
            return Err(files_error(resp).await);
        }
        let mut infos: Vec<WriteInfo> =
            serde_json::from_slice(&collect_limited(resp.into_body()).await?)?;
        infos
            .pop()
            .ok_or_else(|| Error::Protocol("upload answer lists no file".into()))
    }

    async fn read_file_response(
        &self,
        path: &str,
        user: Option<&str>,
    ) -> Result<Response<Incoming>, Error> {
        let uri = self.files_uri(path, user);
        let resp = self
            .send(self.builder(Method::GET, &uri).body(empty())?)
            .await?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            Err(files_error(resp).await)
        }
    }

    fn files_uri(&self, path: &str, user: Option<&str>) -> String {
        let q = FilesQuery {
            path: Some(path.into()),
            username: user
                .map(str::to_owned)
                .or_else(|| self.user.as_deref().map(str::to_owned)),
            ..Default::default()
        };
        let mut uri = format!(
            "{}?path={}",
            files::PATH,
            percent_encode(q.path.as_deref().unwrap_or(""))
        );
        if let Some(u) = q.username {
            uri.push_str("&username=");
            uri.push_str(&percent_encode(&u));
        }
        uri
    }

    /// Opens a server stream at `path` with the one request `msg`; returns the response body.
    async fn server_stream<Req: Serialize>(
        &self,
        path: &str,
        msg: &Req,
        timeout: Option<Duration>,
    ) -> Result<Incoming, Error> {
        let body = connect::encode_message(msg)?;
        let mut b = self
            .rpc_builder(path)
            .header(header::CONTENT_TYPE, STREAM_CONTENT_TYPE);
        if let Some(secs) = self.keepalive_secs {
            b = b.header(KEEPALIVE_HEADER, secs.to_string());
        }
        if let Some(t) = timeout {
            b = b.header(TIMEOUT_HEADER, t.as_millis().max(1).to_string());
        }
        let resp = self.send(b.body(full(body))?).await?;
        if resp.status() != StatusCode::OK {
            return Err(rpc_error(resp).await);
        }
        Ok(resp.into_body())
    }

    async fn unary<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        msg: &Req,
    ) -> Result<Resp, Error> {
        let body = Bytes::from(serde_json::to_vec(msg)?);
        let req = self
            .rpc_builder(path)
            .header(header::CONTENT_TYPE, connect::UNARY_CONTENT_TYPE)
            .body(full(body))?;
        let resp = self.send(req).await?;
        if resp.status() != StatusCode::OK {
            return Err(rpc_error(resp).await);
        }
        Ok(serde_json::from_slice(
            &collect_limited(resp.into_body()).await?,
        )?)
    }

    fn rpc_builder(&self, path: &str) -> http::request::Builder {
        let mut b = self
            .builder(Method::POST, path)
            .header("connect-protocol-version", "1");
        if let Some(user) = &self.user {
            let basic = STANDARD.encode(format!("{user}:"));
            b = b.header(header::AUTHORIZATION, format!("Basic {basic}"));
        }
        b
    }

    fn builder(&self, method: Method, uri: &str) -> http::request::Builder {
        Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, "localhost")
            .header(ACCESS_TOKEN_HEADER, &*self.token)
    }

    async fn send(&self, req: Request<Body>) -> Result<Response<Incoming>, Error> {
        if let Some(connections) = &self.connections {
            return connections.send(&self.socket, req).await;
        }
        let stream = connect(&self.socket).map_err(|source| Error::Connect {
            path: (*self.socket).clone(),
            source,
        })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(Error::Http)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "envd client connection ended with an error");
            }
        });
        sender.send_request(req).await.map_err(Error::Http)
    }
}

/// Connects to the unix socket at `path`. A unix socket's connect completes at once or fails at
/// once (`EAGAIN` when its listener's backlog is full, a frozen agent's, say), so the stream goes
/// to the reactor connected, without a round of it to learn that it is writable.
fn connect(path: &std::path::Path) -> std::io::Result<UnixStream> {
    use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
    use std::os::fd::AsRawFd;
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    let fd = socket::socket(AddressFamily::Unix, SockType::Stream, flags, None)?;
    socket::connect(fd.as_raw_fd(), &UnixAddr::new(path)?)?;
    UnixStream::from_std(std::os::unix::net::UnixStream::from(fd))
}
