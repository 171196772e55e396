//! The code interpreter: E2B's Code Interpreter protocol (port 49999) served by the agent's binary
//! inside a sandbox, on real Jupyter kernels.
//!
//! `sandboxd-agent interpreter` is started by the templates that carry it (`code-interpreter-v1`)
//! as their start command; `sandboxd-agent interpreter --probe` is their ready command.
//!
//! Contract:
//! - Listens only once the default Python context's kernel is warm (or failed to start: then the
//!   failure is reported by each execution), so a sandbox whose ready command passed answers its
//!   first `run_code` without a kernel start.
//! - `POST /execute {code, context_id?, language?, env_vars?}` → 200 and one JSON object per line
//!   ([`output`]), ending with `end_of_execution`; `keepalive` lines while the code is silent.
//!   `context_id` with `language` → 400; an unknown context → 404; an unsupported language → 400
//!   naming the supported ones; neither → the default Python context. A client that goes away
//!   interrupts the code.
//! - `POST /contexts {language?, cwd?}` → `{id, language, cwd}`; `GET /contexts` → the list;
//!   `POST /contexts/{id}/restart` and `DELETE /contexts/{id}` → 200 (404 for an unknown id).
//! - `GET /health` → `OK`.
//! - Error bodies are the message as plain text (the SDKs show the body).

pub mod contexts;
pub mod kernel;
pub mod output;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use contexts::{ContextError, Contexts, Language};
use futures::StreamExt;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// The port E2B's SDKs reach the interpreter on.
pub const PORT: u16 = 49999;

/// The error chain of `e`, outermost first.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Serves the interpreter on `listen` until killed; returns the process exit code.
pub fn run(listen: SocketAddr) -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandboxd-agent interpreter: cannot build a runtime: {e}");
            return 1;
        }
    };
    runtime.block_on(async move {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|h| h.is_dir())
            .unwrap_or_else(|| PathBuf::from("/"));
        let runtime_dir =
            std::env::temp_dir().join(format!(".sandboxd-kernels-{}", std::process::id()));
        let made = {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(&runtime_dir)
        };
        if let Err(e) = made {
            eprintln!(
                "sandboxd-agent interpreter: cannot create {}: {e}",
                runtime_dir.display()
            );
            return 1;
        }
        let contexts = Arc::new(Contexts::new(runtime_dir, home));
        // Warm before listening: the ready command passes only once the first run_code is fast.
        if let Err(e) = contexts.default_for(Language::Python).await {
            tracing::error!(error = %chain(&e), "the default Python kernel did not start");
        }
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("sandboxd-agent interpreter: cannot listen on {listen}: {e}");
                return 1;
            }
        };
        // Small writes (one line each) go out at once, not after the peer's delayed ACK.
        use axum::serve::ListenerExt;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        match axum::serve(listener, router(contexts)).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("sandboxd-agent interpreter: {e}");
                1
            }
        }
    })
}

/// Exit code 0 when an interpreter on `addr` answers `/health` (the templates' ready command).
pub fn probe(addr: SocketAddr) -> i32 {
    use std::io::{Read, Write};
    let attempt = || -> std::io::Result<bool> {
        let timeout = std::time::Duration::from_secs(2);
        let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.write_all(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"))
    };
    match attempt() {
        Ok(true) => 0,
        _ => 1,
    }
}

fn router(contexts: Arc<Contexts>) -> Router {
    Router::new()
        .route("/health", get(|| async { "OK" }))
        .route("/execute", post(execute))
        .route("/contexts", post(create_context).get(list_contexts))
        .route("/contexts/{id}/restart", post(restart_context))
        .route("/contexts/{id}", axum::routing::delete(remove_context))
        .with_state(contexts)
}

/// A failed call: its status and message.
struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (
            self.0,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            self.1,
        )
            .into_response()
    }
}

impl From<ContextError> for Failure {
    fn from(e: ContextError) -> Failure {
        let status = match &e {
            ContextError::NotFound(_) => StatusCode::NOT_FOUND,
            ContextError::Invalid(_) => StatusCode::BAD_REQUEST,
            ContextError::Kernel(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Failure(status, chain(&e))
    }
}

fn parse_body<T: serde::de::DeserializeOwned + Default>(body: &Bytes) -> Result<T, Failure> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| {
        Failure(
            StatusCode::BAD_REQUEST,
            format!("invalid request body: {e}"),
        )
    })
}

#[derive(Deserialize, Default)]
struct ExecuteRequest {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
}

async fn execute(State(contexts): State<Arc<Contexts>>, body: Bytes) -> Result<Response, Failure> {
    let req: ExecuteRequest = parse_body(&body)?;
    let code = req
        .code
        .ok_or_else(|| Failure(StatusCode::BAD_REQUEST, "code is required".into()))?;
    let context = match (req.context_id, req.language) {
        (Some(_), Some(_)) => {
            return Err(Failure(
                StatusCode::BAD_REQUEST,
                "give context_id or language, not both".into(),
            ))
        }
        (Some(id), None) => contexts.get(&id)?,
        (None, language) => {
            let language = match language.as_deref() {
                Some(l) => Language::parse(l).map_err(|e| Failure(StatusCode::BAD_REQUEST, e))?,
                None => Language::Python,
            };
            contexts.default_for(language).await?
        }
    };
    let envs = req.env_vars.unwrap_or_default();
    contexts::check_envs(context.language, &envs)
        .map_err(|e| Failure(StatusCode::BAD_REQUEST, e))?;
    let lines = contexts.execute(context, code, envs);
    let body = tokio_stream_lines(lines);
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(Body::from_stream(body))
        .expect("static response parts"))
}

/// Each value as one line of JSON.
fn tokio_stream_lines(
    mut lines: tokio::sync::mpsc::Receiver<serde_json::Value>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::poll_fn(move |cx| lines.poll_recv(cx)).map(|line| {
        let mut bytes = serde_json::to_vec(&line).expect("values serialize");
        bytes.push(b'\n');
        Ok(Bytes::from(bytes))
    })
}

#[derive(Deserialize, Default)]
struct CreateContext {
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
}

async fn create_context(
    State(contexts): State<Arc<Contexts>>,
    body: Bytes,
) -> Result<Response, Failure> {
    let req: CreateContext = parse_body(&body)?;
    let language = match req.language.as_deref() {
        Some(l) => Language::parse(l).map_err(|e| Failure(StatusCode::BAD_REQUEST, e))?,
        None => Language::Python,
    };
    let context = contexts.create(language, req.cwd.as_deref()).await?;
    Ok(axum::Json(context.to_json()).into_response())
}

async fn list_contexts(State(contexts): State<Arc<Contexts>>) -> Response {
    let all: Vec<_> = contexts.list().iter().map(|c| c.to_json()).collect();
    axum::Json(all).into_response()
}

async fn restart_context(
    State(contexts): State<Arc<Contexts>>,
    Path(id): Path<String>,
) -> Result<Response, Failure> {
    contexts.restart(&id).await?;
    Ok(StatusCode::OK.into_response())
}

async fn remove_context(
    State(contexts): State<Arc<Contexts>>,
    Path(id): Path<String>,
) -> Result<Response, Failure> {
    contexts.remove(&id).await?;
    Ok(StatusCode::OK.into_response())
}
