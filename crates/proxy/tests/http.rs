//! The HTTP proxy end to end: a real axum server with the proxy middleware in front of a stand-in API,
//! real upstream servers on TCP and on a unix socket, and a static resolver.

mod support;

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::StatusCode;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use sandboxd_proxy::{port_is_listening, ProxyConfig, Upstream, PORT_NOT_OPEN_MESSAGE};
use support::*;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const T: Duration = Duration::from_secs(10);

struct Env {
    proxy_addr: std::net::SocketAddr,
    proxy: Arc<sandboxd_proxy::Proxy>,
    up: Upstreams,
    resolver: Arc<StaticResolverForTests>,
}

impl Env {
    /// `abc:8000` → TCP upstream, `abc:49983` → unix-socket upstream (the agent), `abc:9` → a closed port.
    async fn start() -> Env {
        Self::start_with(ProxyConfig::default()).await
    }

    async fn start_with(config: ProxyConfig) -> Env {
        let up = start_upstreams().await;
        let resolver = Arc::new(StaticResolverForTests::default());
        resolver.route("abc", 8000, Upstream::Tcp(up.tcp));
        resolver.route("abc", 49983, Upstream::Unix(up.unix.clone()));
        resolver.route("abc", 9, Upstream::Tcp(closed_port().await));
        resolver.route(
            "abc",
            10,
            Upstream::Unix(up.unix.with_file_name("missing.sock")),
        );
        let (proxy_addr, proxy) = start_proxy(resolver.clone(), config).await;
        Env {
            proxy_addr,
            proxy,
            up,
            resolver,
        }
    }

    fn host(&self, port: u16) -> String {
        format!("{port}-abc.localhost:{}", self.proxy_addr.port())
    }
}

fn json(body: &Bytes) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"))
}

#[tokio::test]
async fn get_routes_by_host_pattern_to_tcp_and_unix_upstreams() {
    let env = Env::start().await;
    let (status, _, body) = http_get(
        env.proxy_addr,
        "/hello",
        &[("host", env.host(8000).as_str())],
    )
    .await;
    assert_eq!(
        (status, &body[..]),
        (StatusCode::OK, &b"hello from tcp"[..])
    );

    let (status, _, body) = http_get(
        env.proxy_addr,
        "/hello",
        &[("host", env.host(49983).as_str())],
    )
    .await;
    assert_eq!(
        (status, &body[..]),
        (StatusCode::OK, &b"hello from unix"[..])
    );
}

#[tokio::test]
async fn get_routes_by_e2b_headers() {
    let env = Env::start().await;
    let host = env.proxy_addr.to_string();
    let (status, _, body) = http_get(
        env.proxy_addr,
        "/hello",
        &[
            ("host", host.as_str()),
            ("E2b-Sandbox-Id", "abc"),
            ("E2b-Sandbox-Port", "49983"),
        ],
    )
    .await;
    assert_eq!(
        (status, &body[..]),
        (StatusCode::OK, &b"hello from unix"[..])
    );
}

#[tokio::test]
async fn non_proxy_requests_reach_the_api_and_proxy_requests_never_do() {
    let env = Env::start().await;
    let host = env.proxy_addr.to_string();
    let (status, _, body) = http_get(env.proxy_addr, "/health", &[("host", &host)]).await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"api health"[..]));
    let (status, _, body) =
        http_get(env.proxy_addr, "/nope", &[("host", "8000-abc.example.com")]).await;
    assert_eq!(
        (status, &body[..]),
        (StatusCode::NOT_FOUND, &b"api fallback"[..])
    );

    // Same path as an API route, but addressed to a sandbox.
    let (status, _, body) = http_get(
        env.proxy_addr,
        "/health",
        &[("host", env.host(8000).as_str())],
    )
    .await;
    assert_eq!(
        (status, &body[..]),
        (StatusCode::OK, &b"upstream health"[..])
    );
}

#[tokio::test]
async fn upstream_sees_original_host_forwarded_headers_and_no_hop_by_hop_headers() {
    let env = Env::start().await;
    let host = env.host(8000);
    let (status, _, body) = http_get(
        env.proxy_addr,
        "/headers?x=1",
        &[
            ("host", host.as_str()),
            ("connection", "keep-alive, x-private"),
            ("x-private", "secret"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic eA=="),
            ("x-forwarded-for", "10.1.2.3"),
            ("x-app", "kept"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let seen = json(&body);
    let h = &seen["headers"];
    assert_eq!(seen["uri"], "/headers?x=1");
    assert_eq!(h["host"], host.as_str());
    assert_eq!(h["x-forwarded-host"], host.as_str());
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-for"], "10.1.2.3, 127.0.0.1");
    assert_eq!(h["x-app"], "kept");
    for dropped in ["x-private", "keep-alive", "proxy-authorization", "upgrade"] {
        assert!(h.get(dropped).is_none(), "{dropped} leaked: {h}");
    }
}

#[tokio::test]
async fn unknown_sandbox_is_502_with_the_e2b_message() {
    let env = Env::start().await;
    let (status, headers, body) =
        http_get(env.proxy_addr, "/", &[("host", "8000-nope.localhost")]).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(
        json(&body),
        serde_json::json!({"code": 502, "message": "The sandbox nope was not found"})
    );
}

#[tokio::test]
async fn closed_ports_are_502_port_not_open() {
    let env = Env::start().await;
    // Nothing listens on the TCP address; no socket file at the unix path; resolver knows no such port.
    for port in [9u16, 10, 3000] {
        let (status, headers, body) =
            http_get(env.proxy_addr, "/", &[("host", &env.host(port))]).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY, "port {port}");
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(
            json(&body),
            serde_json::json!({"code": 502, "message": PORT_NOT_OPEN_MESSAGE, "sandboxId": "abc", "port": port})
        );
    }
}

#[tokio::test]
async fn connect_timeout_is_504() {
    // A listener with a full accept queue: the kernel drops further SYNs, so connects hang.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let black_hole = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    loop {
        match timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(black_hole),
        )
        .await
        {
            Ok(Ok(stream)) => fillers.push(stream),
            Ok(Err(e)) => panic!("filler connect failed: {e}"),
            Err(_) => break,
        }
        assert!(fillers.len() < 64, "accept queue never filled");
    }

    let up = start_upstreams().await;
    let resolver = Arc::new(StaticResolverForTests::default());
    resolver.route("abc", 8000, Upstream::Tcp(black_hole));
    let config = ProxyConfig {
        connect_timeout: Duration::from_millis(300),
        ..ProxyConfig::default()
    };
    let (proxy_addr, _proxy) = start_proxy(resolver, config).await;
    let (status, _, body) = http_get(proxy_addr, "/", &[("host", "8000-abc.localhost")]).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    let body = json(&body);
    assert_eq!(body["code"], 504);
    assert!(
        body["message"].as_str().unwrap().contains("timed out"),
        "{body}"
    );
    drop((listener, fillers, up));
}

#[tokio::test]
async fn keep_alive_connections_are_reused() {
    let env = Env::start().await;
    for _ in 0..5 {
        let (status, _, _) = http_get(
            env.proxy_addr,
            "/hello",
            &[("host", env.host(8000).as_str())],
        )
        .await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(env.up.tcp_connections.load(Ordering::SeqCst), 1);
    assert_eq!(env.proxy.idle_connections(&Upstream::Tcp(env.up.tcp)), 1);

    env.proxy.evict(&Upstream::Tcp(env.up.tcp));
    let (status, _, _) = http_get(
        env.proxy_addr,
        "/hello",
        &[("host", env.host(8000).as_str())],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(env.up.tcp_connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn pooling_can_be_disabled() {
    let env = Env::start_with(ProxyConfig {
        max_idle_per_upstream: 0,
        ..ProxyConfig::default()
    })
    .await;
    for _ in 0..3 {
        http_get(
            env.proxy_addr,
            "/hello",
            &[("host", env.host(8000).as_str())],
        )
        .await;
    }
    assert_eq!(env.up.tcp_connections.load(Ordering::SeqCst), 3);
}

/// 50 MiB up and back through an echo upstream. The sender pauses after 256 KiB until echoed bytes come
/// back, so a proxy that buffered the request before forwarding it would time out here.
#[tokio::test]
async fn big_upload_streams_through_and_echoes_back_byte_exact() {
    let env = Env::start().await;
    let data = big_data().clone();
    let (mut tx, rx) = futures::channel::mpsc::channel::<Bytes>(4);
    let (first_seen_tx, first_seen_rx) = tokio::sync::oneshot::channel::<()>();
    let body = StreamBody::new(rx.map(|b| Ok::<_, Infallible>(Frame::data(b))));
    let req = http::Request::post("/echo")
        .header("host", env.host(8000))
        .body(body)
        .unwrap();

    let upload = {
        let data = data.clone();
        tokio::spawn(async move {
            let head = 256 * 1024;
            for start in (0..head).step_by(CHUNK) {
                tx.send(data.slice(start..start + CHUNK)).await.unwrap();
            }
            timeout(T, first_seen_rx)
                .await
                .expect("echo started before the upload finished")
                .unwrap();
            for start in (head..data.len()).step_by(CHUNK) {
                tx.send(data.slice(start..(start + CHUNK).min(data.len())))
                    .await
                    .unwrap();
            }
        })
    };

    let resp = timeout(T, send(env.proxy_addr, req))
        .await
        .expect("response head before the upload finished");
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut first_seen = Some(first_seen_tx);
    let mut received = 0usize;
    while let Some(frame) = timeout(T, body.frame()).await.expect("echo stalled") {
        let Ok(chunk) = frame.unwrap().into_data() else {
            continue;
        };
        assert_eq!(
            chunk,
            data.slice(received..received + chunk.len()),
            "at {received}"
        );
        received += chunk.len();
        if let Some(tx) = first_seen.take() {
            tx.send(()).unwrap();
        }
    }
    assert_eq!(received, BIG);
    upload.await.unwrap();
}

#[tokio::test]
async fn big_download_from_unix_upstream_is_byte_exact() {
    let env = Env::start().await;
    let (status, headers, body) = http_get(
        env.proxy_addr,
        "/download",
        &[("host", env.host(49983).as_str())],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.get("transfer-encoding").is_some() || headers.get("content-length").is_some());
    assert_eq!(body.len(), BIG);
    assert!(body == *big_data(), "downloaded bytes differ");
}

/// The second event is only produced after the client saw the first, so a buffering proxy deadlocks.
#[tokio::test]
async fn server_sent_events_stream_without_buffering() {
    let env = Env::start().await;
    let req = http::Request::get("/sse")
        .header("host", env.host(8000))
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let resp = timeout(T, send(env.proxy_addr, req)).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    let first = timeout(T, body.frame())
        .await
        .expect("first event was held back")
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    assert_eq!(first, "data: one\n\n");
    env.up.sse_release.notify_one();
    let rest = timeout(T, body.collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    assert_eq!(rest, "data: two\n\n");
}

/// A WebSocket to `/ws` of `port` of sandbox `sandbox` through the proxy, routed by its `Host` or
/// by E2B's headers.
async fn ws_connect(
    env: &Env,
    sandbox: &str,
    port: u16,
    route_by_host: bool,
) -> (
    tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    tokio_tungstenite::tungstenite::handshake::client::Response,
) {
    let stream = tokio::net::TcpStream::connect(env.proxy_addr)
        .await
        .unwrap();
    let mut req = format!("ws://{}/ws", env.proxy_addr)
        .into_client_request()
        .unwrap();
    let headers = req.headers_mut();
    if route_by_host {
        let host = format!("{port}-{sandbox}.localhost:{}", env.proxy_addr.port());
        headers.insert("host", host.parse().unwrap());
    } else {
        headers.insert("e2b-sandbox-id", sandbox.parse().unwrap());
        headers.insert("e2b-sandbox-port", port.to_string().parse().unwrap());
    }
    timeout(T, tokio_tungstenite::client_async(req, stream))
        .await
        .unwrap()
        .expect("websocket handshake through the proxy")
}

async fn assert_echoes(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    text: &str,
) {
    ws.send(Message::text(text)).await.unwrap();
    let echoed = timeout(T, ws.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(echoed, Message::text(text));
}

#[tokio::test]
async fn websocket_echo_through_the_proxy() {
    let env = Env::start().await;
    for (port, route_by_host) in [(8000u16, true), (49983, false)] {
        let (mut ws, resp) = ws_connect(&env, "abc", port, route_by_host).await;
        assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
        assert_echoes(&mut ws, "hello").await;

        let blob = big_data().slice(..1024 * 1024);
        ws.send(Message::binary(blob.clone())).await.unwrap();
        let echoed = timeout(T, ws.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(echoed.into_data(), blob);

        ws.close(None).await.unwrap();
    }
}

/// The resolver's closing signal (the daemon's: a pause) ends the exchanges open to its sandbox: a
/// WebSocket is dropped, a body streaming back is cut short with an error; exchanges to other
/// sandboxes go on.
#[tokio::test]
async fn closing_ends_upgraded_connections_and_streaming_bodies() {
    let env = Env::start().await;
    env.resolver.route("xyz", 8000, Upstream::Tcp(env.up.tcp));
    let (mut ws, _) = ws_connect(&env, "abc", 8000, true).await;
    assert_echoes(&mut ws, "before").await;
    let (mut other, _) = ws_connect(&env, "xyz", 8000, false).await;
    let req = http::Request::get("/sse")
        .header("host", env.host(8000))
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let resp = timeout(T, send(env.proxy_addr, req)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut sse = resp.into_body();
    let first = timeout(T, sse.frame()).await.unwrap().unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), "data: one\n\n");

    env.resolver.close("abc");
    match timeout(T, ws.next()).await.expect("the websocket ends") {
        None | Some(Err(_)) => {}
        Some(Ok(Message::Close(_))) => {}
        Some(Ok(other)) => panic!("a frame after the close: {other:?}"),
    }
    let cut = timeout(T, sse.collect()).await.expect("the body ends");
    assert!(
        cut.is_err(),
        "the body is cut short with an error, not ended"
    );
    assert_echoes(&mut other, "another sandbox's goes on").await;
}

#[tokio::test]
async fn port_is_listening_probes_tcp_and_unix() {
    let up = start_upstreams().await;
    let t = Duration::from_secs(1);
    assert!(port_is_listening(&Upstream::Tcp(up.tcp), t).await);
    assert!(port_is_listening(&Upstream::Unix(up.unix.clone()), t).await);
    assert!(!port_is_listening(&Upstream::Tcp(closed_port().await), t).await);
    assert!(!port_is_listening(&Upstream::Unix(up.unix.with_file_name("missing.sock")), t).await);
}

/// Reads one request head (through the blank line) from a raw connection; false on EOF.
async fn read_head(s: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await.unwrap_or(0) == 0 {
            return false;
        }
        buf.push(byte[0]);
    }
    true
}

/// The upstream answers the first request on each connection and closes the connection when the next
/// request arrives, as a server whose keep-alive timeout races our reuse would.
#[tokio::test]
async fn stale_pooled_connection_is_retried_for_get_but_not_for_post() {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                if read_head(&mut s).await {
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfresh")
                        .await;
                    read_head(&mut s).await;
                }
            });
        }
    });
    let resolver = Arc::new(StaticResolverForTests::default());
    resolver.route("abc", 7000, Upstream::Tcp(addr));
    let (proxy_addr, _proxy) = start_proxy(resolver, ProxyConfig::default()).await;
    let host = [("host", "7000-abc.localhost")];

    for _ in 0..3 {
        let (status, _, body) = http_get(proxy_addr, "/", &host).await;
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"fresh"[..]));
    }

    let req = http::Request::post("/")
        .header("host", "7000-abc.localhost")
        .body(http_body_util::Full::new(Bytes::from_static(b"x")))
        .unwrap();
    let resp = send(proxy_addr, req).await;
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    let body = json(&resp.into_body().collect().await.unwrap().to_bytes());
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("failed to answer"),
        "{body}"
    );
}
