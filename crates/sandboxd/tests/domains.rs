//! Custom domains against the real daemon: a hostname is bound to at most one sandbox (the store's
//! primary key decides), the proxy routes it by Host, and the TLS listener picks its certificate by SNI.
//!
//! After an unbind (or the sandbox's delete) the hostname is no proxy host any more: the request falls
//! through to the API router, which answers a JSON 404 (no such route).

mod common;

use common::{e2e, serve_port, Daemon};
use futures::future::join_all;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn send(req: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn bind(d: &Daemon, id: &str, hostname: &str, port: u32) -> (u16, Value) {
    let path = format!("/v1/sandboxes/{id}/domains");
    let req = d
        .http()
        .post(d.endpoint(&path))
        .json(&json!({"hostname": hostname, "port": port}));
    send(req).await
}

async fn domains_of(d: &Daemon, id: &str) -> Vec<Value> {
    let path = format!("/v1/sandboxes/{id}/domains");
    let (status, v) = send(d.http().get(d.endpoint(&path))).await;
    assert_eq!(status, 200, "{v}");
    v.as_array().cloned().expect("a list")
}

/// `GET /` at the daemon with `Host: {host}` (no token: the proxy needs none). Status and body.
async fn get_host(d: &Daemon, host: &str) -> (u16, String) {
    let resp = reqwest::Client::new()
        .get(d.endpoint("/"))
        .header(reqwest::header::HOST, format!("{host}:{}", d.port()))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("proxy request");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

/// Invariant: a bound hostname routes to its sandbox port; another sandbox cannot take it (409), and
/// the first binding keeps routing.
#[test]
fn bound_hostname_routes_to_its_sandbox_and_another_sandbox_gets_409() {
    e2e(|| async {
        let d = Daemon::start().await;
        let a = d.create_id().await;
        let b = d.create_id().await;
        serve_port(&d, &a, 8000).await;
        let (status, v) = bind(&d, &a, "App.Example.Test", 8000).await;
        assert_eq!(status, 201, "{v}");
        assert_eq!(v["hostname"], "app.example.test");
        assert_eq!(v["port"], 8000);
        assert_eq!(
            v["url"],
            format!("http://app.example.test:{}", d.port()),
            "{v}"
        );
        // Binding again is idempotent; moving it to another port is a 200 as well.
        let (status, again) = bind(&d, &a, "app.example.test", 8000).await;
        assert_eq!((status, &again), (200, &v));
        let (status, moved) = bind(&d, &a, "app.example.test", 8001).await;
        assert_eq!((status, moved["port"].as_u64()), (200, Some(8001)));
        let (status, _) = bind(&d, &a, "app.example.test", 8000).await;
        assert_eq!(status, 200);

        let (status, page) = get_host(&d, "app.example.test").await;
        assert_eq!(status, 200, "{page}");
        assert!(page.contains("Directory listing"), "{page}");
        // Case and a trailing dot do not matter.
        let (status, page) = get_host(&d, "APP.example.test.").await;
        assert!(
            status == 200 && page.contains("Directory listing"),
            "{page}"
        );

        let (status, v) = bind(&d, &b, "app.example.test", 8000).await;
        assert_eq!(status, 409, "{v}");
        assert_eq!(v["code"], "hostname_conflict", "{v}");
        assert!(domains_of(&d, &b).await.is_empty());
        let (status, page) = get_host(&d, "app.example.test").await;
        assert!(
            status == 200 && page.contains("Directory listing"),
            "{page}"
        );
        let listed = domains_of(&d, &a).await;
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0]["hostname"], "app.example.test");
        // An unbound hostname is no proxy host.
        let (status, _) = get_host(&d, "other.example.test").await;
        assert_eq!(status, 404);
    });
}

/// Invariant: racing binds of one hostname by two sandboxes end with exactly one owner; every other
/// answer is a typed 409 (the winner's own retries are 200s).
#[test]
fn hundred_concurrent_binds_by_two_sandboxes_yield_one_owner() {
    e2e(|| async {
        let d = Daemon::start().await;
        let a = d.create_id().await;
        let b = d.create_id().await;
        let d = &d;
        let answers = join_all((0..100).map(|i| {
            let id = if i % 2 == 0 { a.clone() } else { b.clone() };
            async move { (id.clone(), bind(d, &id, "race.example.test", 8000).await) }
        }))
        .await;
        let created: Vec<_> = answers.iter().filter(|(_, (s, _))| *s == 201).collect();
        assert_eq!(created.len(), 1, "{answers:?}");
        let owner = &created[0].0;
        for (id, (status, v)) in &answers {
            if id == owner {
                assert!(*status == 201 || *status == 200, "{v}");
            } else {
                assert_eq!(*status, 409, "{v}");
                assert_eq!(v["code"], "hostname_conflict", "{v}");
            }
        }
        let loser = if owner == &a { &b } else { &a };
        assert_eq!(domains_of(d, owner).await.len(), 1);
        assert!(domains_of(d, loser).await.is_empty());
    });
}

/// Invariant: an unbound hostname stops routing at once (JSON 404 from the API router), and deleting
/// a sandbox frees its hostnames for another sandbox.
#[test]
fn unbind_and_sandbox_delete_free_the_hostname() {
    e2e(|| async {
        let d = Daemon::start().await;
        let a = d.create_id().await;
        let b = d.create_id().await;
        serve_port(&d, &a, 8000).await;
        assert_eq!(bind(&d, &a, "gone.example.test", 8000).await.0, 201);
        assert_eq!(get_host(&d, "gone.example.test").await.0, 200);

        let path = format!("/v1/sandboxes/{a}/domains/gone.example.test");
        let (status, _) = send(d.http().delete(d.endpoint(&path))).await;
        assert_eq!(status, 204);
        let (status, body) = get_host(&d, "gone.example.test").await;
        assert_eq!(status, 404, "{body}");
        assert!(!body.contains("Directory listing"));
        let (status, v) = send(d.http().delete(d.endpoint(&path))).await;
        assert_eq!(status, 404, "{v}");
        assert_eq!(v["code"], "not_found");

        // Deleting the sandbox takes its bindings with it.
        assert_eq!(bind(&d, &a, "kept.example.test", 8000).await.0, 201);
        assert_eq!(bind(&d, &b, "kept.example.test", 8000).await.0, 409);
        let (status, _) = send(d.http().delete(d.endpoint(&format!("/v1/sandboxes/{a}")))).await;
        assert_eq!(status, 204);
        assert_eq!(get_host(&d, "kept.example.test").await.0, 404);
        let (status, v) = bind(&d, &b, "kept.example.test", 8000).await;
        assert_eq!(status, 201, "{v}");
        // Binding to a sandbox that does not exist is a 404.
        let (status, v) = bind(&d, &a, "new.example.test", 8000).await;
        assert_eq!(
            (status, v["code"].as_str()),
            (404, Some("not_found")),
            "{v}"
        );
    });
}

/// Invariant: only RFC 1123 hostnames outside the daemon's own domain are bound; the rest are 400s
/// that say why, and leave nothing behind.
#[test]
fn invalid_hostnames_and_ports_are_400() {
    e2e(|| async {
        let d = Daemon::start().await;
        let id = d.create_id().await;
        let long = format!("{}.test", vec!["a".repeat(62); 4].join("."));
        assert_eq!(long.len(), 256);
        let just_over = &long[long.len() - 254..];
        assert!(!just_over.starts_with('.') && just_over.len() == 254);
        for bad in [
            "*.x.test",
            "a..b",
            "-a.test",
            just_over,
            "1.2.3.4",
            "8000-sbxyz.localhost",
            "localhost",
            "single",
            "",
        ] {
            let (status, v) = bind(&d, &id, bad, 8000).await;
            assert_eq!(status, 400, "{bad:?}: {v}");
            assert_eq!(v["code"], "invalid_request", "{bad:?}: {v}");
            assert!(!v["message"].as_str().unwrap_or("").is_empty(), "{v}");
        }
        for port in [0, 65536] {
            let (status, v) = bind(&d, &id, "ok.example.test", port).await;
            assert_eq!(status, 400, "port {port}: {v}");
        }
        assert!(domains_of(&d, &id).await.is_empty());
        let (status, v) = bind(&d, &id, &long[long.len() - 253..], 8000).await;
        assert_eq!(status, 201, "253 characters are allowed: {v}");
    });
}

/// Invariant: wildcards are bound only with `--allow-wildcard-domains`, and then route their
/// subdomains; Idempotency-Key replays the first answer.
#[test]
fn wildcards_with_the_flag_route_subdomains_and_keys_replay() {
    e2e(|| async {
        let d = Daemon::start_with(&["--allow-wildcard-domains"], &[]).await;
        let id = d.create_id().await;
        serve_port(&d, &id, 8000).await;
        let path = format!("/v1/sandboxes/{id}/domains");
        let post = |key: &'static str| {
            d.http()
                .post(d.endpoint(&path))
                .header("Idempotency-Key", key)
                .json(&json!({"hostname": "*.wild.test", "port": 8000}))
        };
        let first = post("k-1").send().await.unwrap();
        assert_eq!(first.status(), 201);
        let replay = post("k-1").send().await.unwrap();
        assert_eq!(replay.status(), 201, "a replay answers as the first did");
        assert!(replay.headers().get("idempotent-replayed").is_some());
        let (status, page) = get_host(&d, "any.wild.test").await;
        assert!(
            status == 200 && page.contains("Directory listing"),
            "{page}"
        );
        // One label only: the wildcard does not cover deeper names or its own parent.
        assert_eq!(get_host(&d, "a.b.wild.test").await.0, 404);
        assert_eq!(get_host(&d, "wild.test").await.0, 404);
    });
}

/// A self-signed certificate for `name`: (certificate PEM, key PEM, DER for a client's roots).
fn self_signed(name: &str) -> (String, String, Vec<u8>) {
    let key = rcgen::KeyPair::generate().expect("key pair");
    let cert = rcgen::CertificateParams::new(vec![name.to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("self-signed certificate");
    (cert.pem(), key.serialize_pem(), cert.der().to_vec())
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// `GET /` over TLS to `addr` with SNI and Host `sni`, trusting `root`. The response, or the
/// handshake's error.
async fn https_get(addr: SocketAddr, sni: &str, root: &[u8]) -> Result<String, std::io::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(root.to_vec()))
        .expect("root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).expect("server name");
    let mut tls = connector.connect(name, tcp).await?;
    let request = format!("GET / HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    // Servers may close without close_notify; what was read is the answer.
    let _ = tls.read_to_end(&mut response).await;
    Ok(String::from_utf8_lossy(&response).into_owned())
}

/// Invariant: the TLS listener serves a bound hostname with the certificate its SNI names, and fails
/// the handshake for a name without a certificate.
#[test]
fn tls_listener_serves_bound_hostname_by_sni_and_refuses_unknown_names() {
    e2e(|| async {
        let tls_port = free_port();
        let tls_addr = SocketAddr::from(([127, 0, 0, 1], tls_port));
        let listen = tls_addr.to_string();
        // The fixture makes the data dir when it spawns the daemon, so the certificate is written
        // right after start; the daemon reads certificates at handshake time.
        let d = Daemon::start_with(&["--tls-listen", &listen], &[]).await;
        let certs = d.data_dir().join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        let (crt, key, der) = self_signed("secure.example.test");
        std::fs::write(certs.join("secure.example.test.crt"), crt).unwrap();
        std::fs::write(certs.join("secure.example.test.key"), key).unwrap();

        let id = d.create_id().await;
        serve_port(&d, &id, 8000).await;
        assert_eq!(bind(&d, &id, "secure.example.test", 8000).await.0, 201);

        let page = https_get(tls_addr, "secure.example.test", &der)
            .await
            .expect("TLS request");
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
        assert!(page.contains("Directory listing"), "{page}");

        // No certificate for this name: the server refuses the handshake.
        let (_, _, other) = self_signed("nocert.example.test");
        let err = https_get(tls_addr, "nocert.example.test", &other)
            .await
            .expect_err("a handshake without a certificate must fail");
        assert!(
            !err.to_string().is_empty(),
            "handshake error for an unknown name"
        );

        // The plain listener routes the same hostname.
        let (status, page) = get_host(&d, "secure.example.test").await;
        assert!(
            status == 200 && page.contains("Directory listing"),
            "{page}"
        );
    });
}
