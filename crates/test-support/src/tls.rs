//! HTTP and HTTPS servers of a test's own, and a test CA that plays the public roots: for the egress
//! gateway's tests and its benchmark.
//!
//! A server records each request it was sent ([`Seen`]: its `host` and `authorization` headers) and
//! answers `auth-sha256: <hex>` of the `authorization` header and `body: <length>`, never the header
//! itself: a client (code in a sandbox) can tell which value arrived without ever seeing it.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use sha2::Digest;
use std::sync::{Arc, Mutex};

/// A request a server saw: its `host` and its `authorization` header (empty when absent).
pub type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A test CA and a server configuration with a certificate from it for some host names.
pub struct TestPki {
    /// The CA's certificate, PEM: what a client that trusts these servers adds.
    pub ca_pem: String,
    /// The CA as a root store.
    pub roots: rustls::RootCertStore,
    /// A server configuration with the hosts' certificate.
    pub server: Arc<rustls::ServerConfig>,
}

impl TestPki {
    /// A fresh CA, and a certificate from it naming `hosts`.
    pub fn new(hosts: &[&str]) -> Self {
        let ca_key = rcgen::KeyPair::generate().expect("a CA key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).expect("a CA certificate");
        let key = rcgen::KeyPair::generate().expect("a server key");
        let names: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        let leaf = rcgen::CertificateParams::new(names)
            .expect("server parameters")
            .signed_by(&key, &ca, &ca_key)
            .expect("a server certificate");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der().clone()).expect("the CA as a root");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring's versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .expect("the server's certificate and key");
        Self {
            ca_pem: ca.pem(),
            roots,
            server: Arc::new(server),
        }
    }
}

/// What a server answers for a request whose `authorization` header is `auth` and whose body is
/// `length` bytes long.
pub fn answer(auth: &str, length: usize) -> String {
    let digest = sha2::Sha256::digest(auth.as_bytes());
    format!("auth-sha256: {digest:x}\nbody: {length}\n")
}

/// Serves `listener` (over TLS with `tls`) until the runtime ends, recording into `seen`.
pub fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    seen: Seen,
) {
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                continue;
            };
            // An answer leaves in more than one write; none may wait for the client's ACK.
            let _ = conn.set_nodelay(true);
            let (tls, seen) = (tls.clone(), seen.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let header = |name: &str| {
                            req.headers()
                                .get(name)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_string()
                        };
                        let (host, auth) = (header("host"), header("authorization"));
                        let body = req.into_body().collect().await?.to_bytes();
                        let text = answer(&auth, body.len());
                        seen.lock().expect("the record").push((host, auth));
                        Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(text))))
                    }
                });
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(config) => {
                        let acceptor = tokio_rustls::TlsAcceptor::from(config);
                        if let Ok(conn) = acceptor.accept(conn).await {
                            let _ = http.serve_connection(TokioIo::new(conn), service).await;
                        }
                    }
                    None => {
                        let _ = http.serve_connection(TokioIo::new(conn), service).await;
                    }
                }
            });
        }
    });
}
