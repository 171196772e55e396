//! The gateway on loopback, against servers of the test's own (`sandboxd_test_support::tls`: plain
//! HTTP, and HTTPS with a certificate from a test CA that plays the public roots), which record the
//! `authorization` they were sent. The original destination is given rather than read from a
//! redirect, and the sandbox's connector connects directly: what is tested is what the gateway
//! does with the bytes.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use sandboxd_egress::gateway::{BoxFuture, OriginalDst};
use sandboxd_egress::policy::HeaderRule;
use sandboxd_egress::{AuditEntry, Connect, EgressCa, Gateway, Policy, Route, Routes, SecretUse};
use sandboxd_secrets::{HostPattern, SecretValue};
use sandboxd_test_support::tls::{self, answer, Seen, TestPki};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};

const VALUE: &str = "sk-test-value-981";
const LOCAL_VALUE: &str = "sk-local-value-314";

async fn serve_upstream(tls: Option<Arc<rustls::ServerConfig>>) -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    tls::serve(listener, tls, seen.clone());
    (addr, seen)
}

struct Direct;

impl Connect for Direct {
    fn connect(&self, dst: SocketAddr) -> BoxFuture<'_, std::io::Result<TcpStream>> {
        Box::pin(TcpStream::connect(dst))
    }
}

#[derive(Default)]
struct TestRoutes {
    audit: Mutex<Vec<AuditEntry>>,
    /// No address is a sandbox's.
    nobody: bool,
}

fn policy() -> Policy {
    Policy {
        rules: vec![(
            HostPattern::parse("rule.test").unwrap().into(),
            vec![HeaderRule {
                name: http::header::AUTHORIZATION,
                value: "Bearer ${e2b.secrets.k}".into(),
            }],
        )],
        secrets: vec![
            SecretUse {
                name: "k".into(),
                hosts: vec![HostPattern::parse("api.test").unwrap()],
                value: SecretValue::new(VALUE.into()),
            },
            SecretUse {
                name: "local".into(),
                hosts: vec![HostPattern::parse("127.0.0.1").unwrap()],
                value: SecretValue::new(LOCAL_VALUE.into()),
            },
        ],
    }
}

impl Routes for TestRoutes {
    fn route(&self, peer: IpAddr) -> BoxFuture<'_, Option<Route>> {
        Box::pin(async move {
            (peer.is_loopback() && !self.nobody).then(|| Route {
                sandbox: "sb-test".into(),
                policy: policy(),
                connector: Arc::new(Direct),
            })
        })
    }

    fn audit(&self, sandbox: &str, entry: AuditEntry) {
        assert_eq!(sandbox, "sb-test");
        self.audit.lock().unwrap().push(entry);
    }
}

/// A gateway whose every connection was going to `dst`; its address and its routes.
async fn gateway(
    dst: SocketAddr,
    ca: Arc<EgressCa>,
    roots: rustls::RootCertStore,
) -> (SocketAddr, Arc<TestRoutes>) {
    gateway_with(dst, ca, roots, TestRoutes::default()).await
}

async fn gateway_with(
    dst: SocketAddr,
    ca: Arc<EgressCa>,
    roots: rustls::RootCertStore,
    routes: TestRoutes,
) -> (SocketAddr, Arc<TestRoutes>) {
    let routes = Arc::new(routes);
    let original: OriginalDst = Arc::new(move |_| Ok(dst));
    let gw = Arc::new(Gateway::new(ca, roots, routes.clone(), original));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(gw.serve(listener));
    (addr, routes)
}

/// One request through `stream`: its answer's status and body.
async fn request<S>(stream: S, host: &str, auth: &str, body: Vec<u8>) -> (u16, String)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::post("/v1/things?q=1")
        .header("host", host)
        .header("authorization", auth)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&text).into_owned())
}

async fn tls_to(
    gw: SocketAddr,
    name: &str,
    roots: rustls::RootCertStore,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(gw).await?;
    let name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}

fn egress_roots(ca: &EgressCa) -> rustls::RootCertStore {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap())
        .unwrap();
    roots
}

#[tokio::test]
async fn plain_http_is_matched_by_its_address_never_by_its_host_header() {
    let (upstream, seen) = serve_upstream(None).await;
    let ca = Arc::new(EgressCa::ephemeral().unwrap());
    let (gw, routes) = gateway(upstream, ca, rustls::RootCertStore::empty()).await;
    // A Host header proves nothing: a secret of a name is never sent over plain HTTP, nor a rule
    // of a name applied.
    let placeholder = "Bearer ${sandboxd.secrets.k}";
    for host in ["api.test", "rule.test:80"] {
        let conn = TcpStream::connect(gw).await.unwrap();
        let (_, text) = request(conn, host, placeholder, vec![]).await;
        assert_eq!(text, answer(placeholder, 0), "{host}");
    }
    // A secret of the destination's address is; a body of 1 MiB streams through with it.
    let conn = TcpStream::connect(gw).await.unwrap();
    let local = "Bearer ${sandboxd.secrets.local} ${sandboxd.secrets.k}";
    let (status, text) = request(conn, "anything.test", local, vec![7; 1 << 20]).await;
    assert_eq!(status, 200, "{text}");
    let sent = format!("Bearer {LOCAL_VALUE} ${{sandboxd.secrets.k}}");
    assert_eq!(text, answer(&sent, 1 << 20));
    assert_eq!(seen.lock().unwrap().len(), 3);
    let audit = routes.audit.lock().unwrap().clone();
    assert_eq!(audit.len(), 1, "{audit:?}");
    let first = &audit[0];
    assert_eq!(
        (
            first.host.as_str(),
            first.method.as_str(),
            first.path.as_str()
        ),
        ("127.0.0.1", "POST", "/v1/things")
    );
    assert_eq!(
        (first.status, first.applied.secrets.clone()),
        (200, vec!["local".to_string()])
    );
    // Counted both ways once the answer ended: the 1 MiB sent up, the answer's body back.
    let back = answer(&sent, 1 << 20).len() as u64;
    assert_eq!((first.sent, first.received), (1 << 20, back));
    assert!(!format!("{audit:?}").contains(LOCAL_VALUE));
}

#[tokio::test]
async fn tls_is_terminated_only_for_hosts_the_policy_rewrites() {
    let public = TestPki::new(&["api.test", "other.test", "rule.test"]);
    let (upstream, _) = serve_upstream(Some(public.server.clone())).await;
    let ca = Arc::new(EgressCa::ephemeral().unwrap());
    let (gw, routes) = gateway(upstream, ca.clone(), public.roots.clone()).await;
    let placeholder = "Bearer ${e2b.secrets.k}";
    // Intercepted: the client trusts the gateway's CA; the gateway verifies the upstream against
    // the public roots.
    let tls = tls_to(gw, "api.test", egress_roots(&ca)).await.unwrap();
    let (status, text) = request(tls, "api.test", placeholder, b"hello".to_vec()).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(text, answer(&format!("Bearer {VALUE}"), 5));
    // Not intercepted: the upstream's own certificate reaches the client, placeholder untouched.
    let tls = tls_to(gw, "other.test", public.roots.clone())
        .await
        .unwrap();
    let (_, text) = request(tls, "other.test", placeholder, vec![]).await;
    assert_eq!(text, answer(placeholder, 0));
    // A rule's host gets the rule's header, whatever the client sent.
    let tls = tls_to(gw, "rule.test", egress_roots(&ca)).await.unwrap();
    let (_, text) = request(tls, "rule.test", "Bearer mine", vec![]).await;
    assert_eq!(text, answer(&format!("Bearer {VALUE}"), 0));
    // A client that does not trust the gateway's CA cannot be given a value: the handshake fails.
    assert!(tls_to(gw, "api.test", public.roots).await.is_err());
    let audit = routes.audit.lock().unwrap().clone();
    assert_eq!(audit.len(), 2, "{audit:?}");
    assert_eq!(audit[1].applied.rule.as_deref(), Some("rule.test"));
    let back = answer(&format!("Bearer {VALUE}"), 5).len() as u64;
    assert_eq!((audit[0].sent, audit[0].received), (5, back));
}

#[tokio::test]
async fn an_upstream_that_fails_is_a_502_naming_no_value() {
    // Nothing listens where the connection was going.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dst = closed.local_addr().unwrap();
    drop(closed);
    let ca = Arc::new(EgressCa::ephemeral().unwrap());
    let (gw, routes) = gateway(dst, ca, rustls::RootCertStore::empty()).await;
    let conn = TcpStream::connect(gw).await.unwrap();
    let (status, text) = request(conn, "api.test", "${sandboxd.secrets.local}", vec![]).await;
    assert_eq!(status, 502, "{text}");
    assert!(
        text.contains("127.0.0.1") && !text.contains(LOCAL_VALUE),
        "{text}"
    );
    assert_eq!(routes.audit.lock().unwrap()[0].status, 502);
}

#[tokio::test]
async fn a_connection_from_no_sandbox_is_closed_and_reaches_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (upstream, seen) = serve_upstream(None).await;
    let ca = Arc::new(EgressCa::ephemeral().unwrap());
    let nobody = TestRoutes {
        nobody: true,
        ..Default::default()
    };
    let (gw, _) = gateway_with(upstream, ca, rustls::RootCertStore::empty(), nobody).await;
    let mut conn = TcpStream::connect(gw).await.unwrap();
    conn.write_all(b"GET / HTTP/1.1\r\nhost: api.test\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), conn.read(&mut buf))
        .await
        .expect("the gateway closes the connection at once");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(seen.lock().unwrap().is_empty(), "the upstream was reached");
}
