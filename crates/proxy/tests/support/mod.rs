//! Fixtures for the proxy's integration tests: a static resolver, real upstream servers (TCP and unix
//! socket), the proxy mounted in an axum server next to a stand-in API, and a bare hyper client.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::serve::ListenerExt;
use axum::Router;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use sandboxd_proxy::{Proxy, ProxyConfig, Resolver, RouteError, Target, Upstream};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::sync::Notify;

/// A resolver with a fixed route table: unknown sandbox → `SandboxNotFound`, known sandbox but unmapped
/// port → `PortNotOpen`. Its closing signal fires for every exchange to a sandbox once
/// [`StaticResolverForTests::close`] named it (the daemon's is a pause).
#[derive(Default)]
pub struct StaticResolverForTests {
    routes: Mutex<HashMap<(String, u16), Upstream>>,
    closed: tokio::sync::watch::Sender<Vec<String>>,
}

impl StaticResolverForTests {
    /// Ends the exchanges open to `sandbox_id` (and any made later).
    pub fn close(&self, sandbox_id: &str) {
        self.closed
            .send_modify(|closed| closed.push(sandbox_id.to_owned()));
    }

    pub fn route(&self, sandbox_id: &str, port: u16, upstream: Upstream) {
        self.routes
            .lock()
            .unwrap()
            .insert((sandbox_id.to_owned(), port), upstream);
    }
}

#[async_trait::async_trait]
impl Resolver for StaticResolverForTests {
    fn closing(&self, target: &Target) -> Option<sandboxd_proxy::Closing> {
        let mut closed = self.closed.subscribe();
        let id = target.sandbox_id.clone();
        Some(Box::pin(async move {
            let _ = closed.wait_for(|closed| closed.contains(&id)).await;
        }))
    }

    async fn upstream(&self, target: &Target) -> Result<Upstream, RouteError> {
        let routes = self.routes.lock().unwrap();
        if let Some(up) = routes.get(&(target.sandbox_id.clone(), target.port)) {
            return Ok(up.clone());
        }
        if routes.keys().any(|(id, _)| *id == target.sandbox_id) {
            return Err(RouteError::PortNotOpen {
                sandbox_id: target.sandbox_id.clone(),
                port: target.port,
            });
        }
        Err(RouteError::SandboxNotFound(target.sandbox_id.clone()))
    }
}

/// 50 MiB of deterministic pseudo-random bytes, shared by uploads, downloads and their checks.
pub const BIG: usize = 50 * 1024 * 1024;
pub const CHUNK: usize = 64 * 1024;

pub fn big_data() -> &'static Bytes {
    static DATA: OnceLock<Bytes> = OnceLock::new();
    DATA.get_or_init(|| {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut data = Vec::with_capacity(BIG);
        while data.len() < BIG {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            data.extend_from_slice(&state.to_le_bytes());
        }
        Bytes::from(data)
    })
}

/// What an upstream test server shares with its test.
pub struct Upstreams {
    pub tcp: SocketAddr,
    pub unix: PathBuf,
    /// Connections accepted by the TCP upstream.
    pub tcp_connections: Arc<AtomicUsize>,
    /// Lets `/sse` send its second event.
    pub sse_release: Arc<Notify>,
    _dir: tempfile::TempDir,
}

#[derive(Clone)]
struct UpstreamState {
    name: &'static str,
    sse_release: Arc<Notify>,
}

fn upstream_router(state: UpstreamState) -> Router {
    Router::new()
        .route("/hello", get(hello))
        .route("/headers", any(headers))
        .route("/echo", post(echo))
        .route("/download", get(download))
        .route("/sse", get(sse))
        .route("/ws", get(ws))
        .route("/health", any(|| async { "upstream health" }))
        .with_state(state)
}

async fn hello(State(state): State<UpstreamState>) -> String {
    format!("hello from {}", state.name)
}

/// Echoes what the upstream received: method, path, and every header (multi-values joined by " | ").
async fn headers(req: Request) -> axum::Json<serde_json::Value> {
    let mut map = serde_json::Map::new();
    for name in req.headers().keys() {
        let values: Vec<&str> = req
            .headers()
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        map.insert(name.to_string(), values.join(" | ").into());
    }
    axum::Json(serde_json::json!({
        "method": req.method().as_str(),
        "uri": req.uri().to_string(),
        "headers": map,
    }))
}

/// Streams the request body back as it arrives.
async fn echo(req: Request) -> Response {
    Response::new(Body::new(req.into_body()))
}

async fn download(Query(q): Query<HashMap<String, usize>>) -> Response {
    let len = q.get("bytes").copied().unwrap_or(BIG).min(BIG);
    let data = big_data().slice(..len);
    let chunks = (0..len.div_ceil(CHUNK))
        .map(move |i| Ok::<_, Infallible>(data.slice(i * CHUNK..((i + 1) * CHUNK).min(len))));
    Response::new(Body::from_stream(futures::stream::iter(chunks)))
}

/// Sends one event, waits for the test to release it, then sends a second one.
async fn sse(State(state): State<UpstreamState>) -> Response {
    let release = state.sse_release.clone();
    let events = futures::stream::unfold(0u8, move |n| {
        let release = release.clone();
        async move {
            match n {
                0 => Some((Ok::<_, Infallible>(Bytes::from("data: one\n\n")), 1)),
                1 => {
                    release.notified().await;
                    Some((Ok(Bytes::from("data: two\n\n")), 2))
                }
                _ => None,
            }
        }
    });
    (
        [("content-type", "text/event-stream")],
        Body::from_stream(events),
    )
        .into_response()
}

async fn ws(upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(|mut socket: WebSocket| async move {
        while let Some(Ok(msg)) = socket.recv().await {
            if matches!(msg, Message::Close(_)) || socket.send(msg).await.is_err() {
                break;
            }
        }
    })
}

/// Starts the upstream on 127.0.0.1:0 and on a unix socket in a temp dir.
pub async fn start_upstreams() -> Upstreams {
    let sse_release = Arc::new(Notify::new());
    let tcp_connections = Arc::new(AtomicUsize::new(0));

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tcp = listener.local_addr().unwrap();
    let counter = tcp_connections.clone();
    let listener = listener.tap_io(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    let router = upstream_router(UpstreamState {
        name: "tcp",
        sse_release: sse_release.clone(),
    });
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let unix = dir.path().join("agent.sock");
    let listener = UnixListener::bind(&unix).unwrap();
    let router = upstream_router(UpstreamState {
        name: "unix",
        sse_release: sse_release.clone(),
    });
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    Upstreams {
        tcp,
        unix,
        tcp_connections,
        sse_release,
        _dir: dir,
    }
}

/// The daemon's shape: a stand-in API router with the proxy middleware in front of every route.
pub async fn start_proxy(
    resolver: Arc<StaticResolverForTests>,
    config: ProxyConfig,
) -> (SocketAddr, Arc<Proxy>) {
    let proxy = Arc::new(Proxy::with_config(config, resolver));
    let api = Router::new()
        .route("/health", get(|| async { "api health" }))
        .fallback(|| async { (axum::http::StatusCode::NOT_FOUND, "api fallback") })
        .layer(axum::middleware::from_fn_with_state(
            proxy.clone(),
            sandboxd_proxy::middleware,
        ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            api.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap()
    });
    (addr, proxy)
}

/// Sends one request on a fresh HTTP/1.1 connection to `addr`.
pub async fn send<B>(addr: SocketAddr, req: http::Request<B>) -> http::Response<Incoming>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender.send_request(req).await.unwrap()
}

/// GET `path` with the given headers; returns status, headers and the whole body.
pub async fn http_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (http::StatusCode, HeaderMap, Bytes) {
    let mut req = http::Request::get(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = send(
        addr,
        req.body(http_body_util::Empty::<Bytes>::new()).unwrap(),
    )
    .await;
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(10), body.collect())
        .await
        .expect("body in time")
        .unwrap()
        .to_bytes();
    (parts.status, parts.headers, body)
}

/// A loopback address nothing listens on.
pub async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}
