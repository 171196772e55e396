//! `FakeDaemonForTests`: an in-process HTTP test double of the sandboxd `/v1` API with canned answers.
//!
//! It is NOT the daemon: it implements just enough of the routes, with the real wire types, to drive
//! the client and the `sbx` binary. Shared by `crates/client/tests` and `crates/sbx/tests` (included
//! with `#[path]`). It runs on its own thread and runtime, so blocking tests (spawning `sbx`) and async
//! tests can both use it; dropping it stops the server.
//!
//! Canned behaviour:
//! - every request needs `Authorization: Bearer test-token`, else 401 `{"code":"unauthorized",...}`;
//! - `GET /v1/sandboxes/sb-teapot` answers 503 with a plain-text (non-JSON) body;
//! - listing pages by `page_size` (default 2), cursors are offsets;
//! - exec runs a tiny script given as the command words: `out:TEXT` / `err:TEXT` emit TEXT plus a
//!   newline on stdout / stderr, `exit:N` ends with exit code N, `fail:MSG` ends with an `error` event,
//!   `cut` ends the body without a terminal event, `hold` waits for [`FakeDaemonForTests::release`],
//!   any other word is echoed on stdout; without a terminal word the script ends with `exit:0`. The NDJSON body is sent in 7-byte chunks
//!   with a pause between them, so lines are split across chunk boundaries on the wire.
//! - `POST /v1/sandboxes/{id}/git/{op}` records `(op, body)` in [`FakeState::git_calls`] and
//!   answers a clone with 201 `{"path": "/home/user/cloned"}`, anything else with 204.
#![allow(dead_code)] // each test crate uses a different part of the double

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use base64::Engine as _;
use futures::StreamExt;
use sandboxd_client::types::{
    ApiError, CreateSandbox, ExecEvent, ExecRequest, ExecResult, ExposePort, ExposedPort,
    FileEntry, FileList, Sandbox, SandboxList,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The token the double accepts.
pub const TOKEN: &str = "test-token";

/// What the double has seen and holds.
#[derive(Default)]
pub struct FakeState {
    /// Sandboxes by id.
    pub sandboxes: BTreeMap<String, Sandbox>,
    /// File contents by (sandbox id, path).
    pub files: HashMap<(String, String), Vec<u8>>,
    /// `Content-Length` of the last upload, if it had one.
    pub last_upload_len: Option<Option<u64>>,
    /// Exposed ports by (sandbox id, port).
    pub ports: BTreeMap<(String, u16), ExposedPort>,
    /// The last create body and its idempotency key.
    pub last_create: Option<(CreateSandbox, Option<String>)>,
    /// The last exec request (either route).
    pub last_exec: Option<ExecRequest>,
    /// Raw query strings of list requests.
    pub list_queries: Vec<String>,
    /// Page size of listings.
    pub page_size: usize,
    /// Git calls: the operation (`clone`, `push`, …) and its JSON body.
    pub git_calls: Vec<(String, serde_json::Value)>,
    next_id: u32,
}

struct Shared {
    state: Mutex<FakeState>,
    release: tokio::sync::Notify,
}

/// The running double.
pub struct FakeDaemonForTests {
    /// Base URL, e.g. `http://127.0.0.1:34567`.
    pub url: String,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeDaemonForTests {
    /// Starts the double on a free loopback port.
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.set_nonblocking(true).expect("nonblocking");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        let shared = Arc::new(Shared {
            state: Mutex::new(FakeState {
                page_size: 2,
                ..FakeState::default()
            }),
            release: tokio::sync::Notify::new(),
        });
        let app = router(shared.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                tokio::select! {
                    served = axum::serve(listener, app) => served.expect("serve"),
                    _ = stopped => {}
                }
            });
        });
        FakeDaemonForTests {
            url,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The double's state, for setting up and asserting.
    pub fn state(&self) -> MutexGuard<'_, FakeState> {
        self.shared.state.lock().expect("fake state lock")
    }

    /// Adds a running sandbox with this id and name.
    pub fn add_sandbox(&self, id: &str, name: &str) -> Sandbox {
        let sandbox = sandbox(id, name, BTreeMap::new());
        self.state()
            .sandboxes
            .insert(id.to_string(), sandbox.clone());
        sandbox
    }

    /// Lets every exec waiting at `hold` go on.
    pub fn release(&self) {
        self.shared.release.notify_waiters();
        self.shared.release.notify_one();
    }
}

impl Drop for FakeDaemonForTests {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn sandbox(id: &str, name: &str, metadata: BTreeMap<String, String>) -> Sandbox {
    Sandbox {
        id: id.to_string(),
        name: name.to_string(),
        state: "running".into(),
        template: "base".into(),
        image: None,
        cpu: 1.0,
        memory_mb: 512,
        disk_mb: 0,
        isolation: "namespace".into(),
        created_at: "2026-01-02T03:04:05Z".into(),
        expires_at: None,
        metadata,
        failure_reason: None,
        network: Default::default(),
        lifecycle: Default::default(),
        paused_memory: None,
        volumes: Vec::new(),
    }
}

type App = Arc<Shared>;

fn router(shared: App) -> Router {
    Router::new()
        .route("/v1/sandboxes", post(create).get(list))
        .route("/v1/sandboxes/{id}", get(get_one).delete(delete_one))
        .route("/v1/sandboxes/{id}/exec", post(exec))
        .route("/v1/sandboxes/{id}/exec/stream", post(exec_stream))
        .route("/v1/sandboxes/{id}/files", get(download).put(upload))
        .route("/v1/sandboxes/{id}/files/list", get(list_files))
        .route("/v1/sandboxes/{id}/ports", post(expose).get(ports))
        .route("/v1/sandboxes/{id}/ports/{port}", delete(unexpose))
        .route("/v1/sandboxes/{id}/git/{op}", post(git_call))
        .layer(middleware::from_fn(auth))
        .with_state(shared)
}

async fn git_call(
    State(app): State<App>,
    Path((_id, op)): Path<(String, String)>,
    Json(body): Json<serde_json::Value>,
) -> Response {
    let answer = match op.as_str() {
        "clone" => (
            StatusCode::CREATED,
            Json(serde_json::json!({"path": "/home/user/cloned"})),
        )
            .into_response(),
        _ => StatusCode::NO_CONTENT.into_response(),
    };
    app.state
        .lock()
        .expect("fake state lock")
        .git_calls
        .push((op, body));
    answer
}

fn api_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = ApiError {
        code: code.into(),
        message: message.into(),
    };
    (status, Json(body)).into_response()
}

fn not_found(id: &str) -> Response {
    api_error(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("no sandbox {id}"),
    )
}

async fn auth(request: Request, next: Next) -> Response {
    let expected = format!("Bearer {TOKEN}");
    match request.headers().get(header::AUTHORIZATION) {
        Some(value) if value.as_bytes() == expected.as_bytes() => next.run(request).await,
        _ => api_error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or invalid token",
        ),
    }
}

fn query_pairs(query: &Option<String>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

fn lock(app: &App) -> MutexGuard<'_, FakeState> {
    app.state.lock().expect("fake state lock")
}

async fn create(
    State(app): State<App>,
    headers: HeaderMap,
    Json(body): Json<CreateSandbox>,
) -> Response {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut state = lock(&app);
    state.next_id += 1;
    let id = format!("sb-new{}", state.next_id);
    let mut created = sandbox(
        &id,
        body.name.as_deref().unwrap_or(""),
        body.metadata.clone().unwrap_or_default(),
    );
    created.template = body.template.clone().unwrap_or_else(|| "base".into());
    state.sandboxes.insert(id, created.clone());
    state.last_create = Some((body, key));
    (StatusCode::CREATED, Json(created)).into_response()
}

async fn list(State(app): State<App>, RawQuery(query): RawQuery) -> Response {
    let pairs = query_pairs(&query);
    let mut state = lock(&app);
    state.list_queries.push(query.unwrap_or_default());
    let mut offset = 0usize;
    let mut limit = state.page_size;
    let mut filters = Vec::new();
    let mut wanted_state = None;
    for (key, value) in pairs {
        match key.as_str() {
            "cursor" => offset = value.parse().unwrap_or(0),
            "limit" => limit = value.parse().unwrap_or(limit),
            "state" => wanted_state = Some(value),
            "metadata" => match value.split_once('=') {
                Some((k, v)) => filters.push((k.to_string(), v.to_string())),
                None => return api_error(StatusCode::BAD_REQUEST, "invalid_request", "metadata"),
            },
            _ => {}
        }
    }
    let matching: Vec<Sandbox> = state
        .sandboxes
        .values()
        .filter(|s| wanted_state.as_ref().is_none_or(|w| &s.state == w))
        .filter(|s| filters.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
        .cloned()
        .collect();
    let page: Vec<Sandbox> = matching.iter().skip(offset).take(limit).cloned().collect();
    let next = offset + page.len();
    let next_cursor = (next < matching.len()).then(|| next.to_string());
    Json(SandboxList {
        sandboxes: page,
        next_cursor,
    })
    .into_response()
}

async fn get_one(State(app): State<App>, Path(id): Path<String>) -> Response {
    if id == "sb-teapot" {
        return (StatusCode::SERVICE_UNAVAILABLE, "upstream down\n").into_response();
    }
    let state = lock(&app);
    let found = state
        .sandboxes
        .values()
        .find(|s| s.id == id || (!s.name.is_empty() && s.name == id));
    match found {
        Some(s) => Json(s.clone()).into_response(),
        None => not_found(&id),
    }
}

async fn delete_one(State(app): State<App>, Path(id): Path<String>) -> Response {
    match lock(&app).sandboxes.remove(&id) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => not_found(&id),
    }
}

/// One step of an exec script.
enum Step {
    Event(ExecEvent),
    Hold,
    Cut,
}

fn script(cmd: &[String]) -> Vec<Step> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(format!("{s}\n"));
    let mut steps = vec![Step::Event(ExecEvent::Start { pid: 42 })];
    for word in cmd {
        let (op, arg) = word.split_once(':').unwrap_or((word.as_str(), ""));
        let step = match op {
            "out" => Step::Event(ExecEvent::Stdout { data: b64(arg) }),
            "err" => Step::Event(ExecEvent::Stderr { data: b64(arg) }),
            "exit" => Step::Event(ExecEvent::Exit {
                exit_code: arg.parse().unwrap_or(0),
            }),
            "fail" => Step::Event(ExecEvent::Error {
                message: arg.to_string(),
            }),
            "hold" => Step::Hold,
            "cut" => Step::Cut,
            _ => Step::Event(ExecEvent::Stdout { data: b64(word) }),
        };
        let terminal = matches!(
            step,
            Step::Cut | Step::Event(ExecEvent::Exit { .. } | ExecEvent::Error { .. })
        );
        steps.push(step);
        if terminal {
            return steps;
        }
    }
    steps.push(Step::Event(ExecEvent::Exit { exit_code: 0 }));
    steps
}

fn known(app: &App, id: &str, request: &ExecRequest) -> bool {
    let mut state = lock(app);
    state.last_exec = Some(request.clone());
    state.sandboxes.contains_key(id)
}

async fn exec(
    State(app): State<App>,
    Path(id): Path<String>,
    Json(request): Json<ExecRequest>,
) -> Response {
    if !known(&app, &id, &request) {
        return not_found(&id);
    }
    let decode = |data: &str| {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let mut result = ExecResult {
        exit_code: 0,
        stdout: String::new(),
        stderr: String::new(),
    };
    for step in script(&request.cmd) {
        match step {
            Step::Event(ExecEvent::Stdout { data }) => result.stdout += &decode(&data),
            Step::Event(ExecEvent::Stderr { data }) => result.stderr += &decode(&data),
            Step::Event(ExecEvent::Exit { exit_code }) => result.exit_code = exit_code,
            Step::Event(ExecEvent::Error { message }) => {
                return api_error(StatusCode::INTERNAL_SERVER_ERROR, "exec_failed", &message)
            }
            Step::Cut => return api_error(StatusCode::INTERNAL_SERVER_ERROR, "exec_failed", "cut"),
            Step::Event(ExecEvent::Start { .. }) | Step::Hold => {}
        }
    }
    Json(result).into_response()
}

async fn exec_stream(
    State(app): State<App>,
    Path(id): Path<String>,
    Json(request): Json<ExecRequest>,
) -> Response {
    if !known(&app, &id, &request) {
        return not_found(&id);
    }
    let steps = script(&request.cmd);
    let chunks = futures::stream::iter(steps).then(move |step| {
        let app = app.clone();
        async move {
            let line = match step {
                Step::Event(event) => {
                    let mut line = serde_json::to_vec(&event).expect("event JSON");
                    line.push(b'\n');
                    line
                }
                Step::Hold => {
                    app.release.notified().await;
                    Vec::new()
                }
                Step::Cut => Vec::new(),
            };
            let mut pieces = Vec::new();
            for piece in line.chunks(7) {
                pieces.push(Bytes::copy_from_slice(piece));
            }
            futures::stream::iter(pieces).then(|piece| async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                Ok::<_, std::convert::Infallible>(piece)
            })
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(Body::from_stream(chunks.flatten()))
        .expect("stream response")
}

/// The absolute `path` query parameter, if there is one.
fn file_path(query: &Option<String>) -> Option<String> {
    query_pairs(query)
        .into_iter()
        .find(|(k, _)| k == "path")
        .map(|(_, path)| path)
        .filter(|path| path.starts_with('/'))
}

fn bad_path() -> Response {
    api_error(
        StatusCode::BAD_REQUEST,
        "invalid_request",
        "path must be absolute",
    )
}

async fn upload(
    State(app): State<App>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(path) = file_path(&query) else {
        return bad_path();
    };
    let mut state = lock(&app);
    if !state.sandboxes.contains_key(&id) {
        return not_found(&id);
    }
    let len = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    state.last_upload_len = Some(len);
    state.files.insert((id, path), body.to_vec());
    StatusCode::NO_CONTENT.into_response()
}

async fn download(
    State(app): State<App>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(path) = file_path(&query) else {
        return bad_path();
    };
    match lock(&app).files.get(&(id, path.clone())) {
        Some(bytes) => (
            [(header::CONTENT_TYPE, "application/octet-stream")],
            bytes.clone(),
        )
            .into_response(),
        None => api_error(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("no file {path}"),
        ),
    }
}

async fn list_files(
    State(app): State<App>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(dir) = file_path(&query) else {
        return bad_path();
    };
    let prefix = format!("{}/", dir.trim_end_matches('/'));
    let state = lock(&app);
    let mut entries: Vec<FileEntry> = state
        .files
        .iter()
        .filter(|((sid, path), _)| *sid == id && path.starts_with(&prefix))
        .filter_map(|((_, path), bytes)| {
            let name = path.strip_prefix(&prefix)?;
            (!name.contains('/')).then(|| FileEntry {
                name: name.to_string(),
                path: path.clone(),
                kind: "file".into(),
                size: bytes.len() as u64,
                permissions: "-rw-r--r--".into(),
                modified_at: "2026-01-02T03:04:05Z".into(),
            })
        })
        .collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Json(FileList { entries }).into_response()
}

async fn expose(
    State(app): State<App>,
    Path(id): Path<String>,
    Json(body): Json<ExposePort>,
) -> Response {
    let mut state = lock(&app);
    if !state.sandboxes.contains_key(&id) {
        return not_found(&id);
    }
    let exposed = ExposedPort {
        port: body.port,
        protocol: body.protocol,
        public_url: format!("http://{}-{id}.sandbox.test", body.port),
        host_port: None,
    };
    state.ports.insert((id, body.port), exposed.clone());
    (StatusCode::CREATED, Json(exposed)).into_response()
}

async fn ports(State(app): State<App>, Path(id): Path<String>) -> Response {
    let state = lock(&app);
    if !state.sandboxes.contains_key(&id) {
        return not_found(&id);
    }
    let ports: Vec<ExposedPort> = state
        .ports
        .iter()
        .filter(|((sid, _), _)| *sid == id)
        .map(|(_, p)| p.clone())
        .collect();
    Json(ports).into_response()
}

async fn unexpose(State(app): State<App>, Path((id, port)): Path<(String, u16)>) -> Response {
    match lock(&app).ports.remove(&(id, port)) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => api_error(StatusCode::NOT_FOUND, "not_found", "port not exposed"),
    }
}

/// Sandboxes with labels, for list tests.
pub fn labelled(id: &str, labels: &[(&str, &str)]) -> Sandbox {
    let metadata = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    sandbox(id, "", metadata)
}
