//! Throughput through the proxy relative to hitting the upstream directly (ignored by default: it is a
//! measurement, and debug builds are meaningless for it).
//!
//! `cargo test -p sandboxd-proxy --release --test throughput -- --ignored --nocapture`
//!
//! Prints requests/s for small responses and MiB/s for 1 MiB responses, direct and proxied, and asserts the
//! proxied/direct ratio is at least `PROXY_MIN_RATIO` (default 0.0, i.e. report only; the daemon's
//! benchmark target is 0.8 on its own workload).

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use sandboxd_proxy::{ProxyConfig, Upstream};
use support::*;

const CLIENTS: usize = 16;
const DURATION: Duration = Duration::from_secs(3);

/// Runs `CLIENTS` keep-alive connections against `addr` for `DURATION`; returns (requests, bytes) per second.
async fn load(addr: SocketAddr, host: &str, path: &'static str) -> (f64, f64) {
    let requests = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + DURATION;
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (requests, bytes, host) = (requests.clone(), bytes.clone(), host.to_owned());
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .unwrap();
            tokio::spawn(conn);
            while Instant::now() < deadline {
                sender.ready().await.unwrap();
                let req = http::Request::get(path)
                    .header("host", &host)
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                let resp = sender.send_request(req).await.unwrap();
                assert!(resp.status().is_success());
                let mut body = resp.into_body();
                while let Some(frame) = body.frame().await {
                    if let Ok(data) = frame.unwrap().into_data() {
                        bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                    }
                }
                requests.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let secs = DURATION.as_secs_f64();
    (
        requests.load(Ordering::Relaxed) as f64 / secs,
        bytes.load(Ordering::Relaxed) as f64 / secs,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run in release with --ignored --nocapture"]
async fn proxied_throughput_relative_to_direct() {
    let min_ratio: f64 = std::env::var("PROXY_MIN_RATIO")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let up = start_upstreams().await;
    let resolver = Arc::new(StaticResolverForTests::default());
    resolver.route("abc", 8000, Upstream::Tcp(up.tcp));
    let (proxy_addr, _proxy) = start_proxy(resolver, ProxyConfig::default()).await;
    let direct_host = up.tcp.to_string();
    let proxy_host = format!("8000-abc.localhost:{}", proxy_addr.port());

    for (name, path) in [("small", "/hello"), ("1MiB", "/download?bytes=1048576")] {
        let (d_rps, d_bps) = load(up.tcp, &direct_host, path).await;
        let (p_rps, p_bps) = load(proxy_addr, &proxy_host, path).await;
        let ratio = p_rps / d_rps;
        println!(
            "{name}: direct {d_rps:.0} req/s {:.0} MiB/s; proxied {p_rps:.0} req/s {:.0} MiB/s; ratio {ratio:.2}",
            d_bps / 1048576.0,
            p_bps / 1048576.0
        );
        assert!(ratio >= min_ratio, "{name}: ratio {ratio:.2} < {min_ratio}");
    }
}
