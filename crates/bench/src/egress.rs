//! `bench egress`: HTTPS requests through the egress gateway to a host its rules and secrets concern
//! (TLS ended with the gateway's CA, headers rewritten, TLS again to the server) against the same
//! requests straight to the server, on loopback, in one run.
//!
//! The server is `sandboxd_test_support::tls`'s, with a certificate from a test CA; the gateway is
//! `sandboxd_egress::Gateway` with one route (a secret for the server's host) and a connector that
//! connects directly, its original destination the server. Figures: a request on a kept-alive
//! connection (goal: p50 within [`KEPT_ALIVE_GOAL`]× of direct) and a request on a new connection
//! (TLS handshakes included: two through the gateway, one direct), after [`WARMUP`] untimed ones.

use crate::report::{Latency, Versus};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use sandboxd_egress::gateway::BoxFuture;
use sandboxd_egress::{AuditEntry, Connect, EgressCa, Gateway, Policy, Route, Routes, SecretUse};
use sandboxd_test_support::tls::{self, Seen, TestPki};
use serde::Serialize;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

/// The goal for kept-alive requests through the gateway against direct ones (p50 ratio).
pub const KEPT_ALIVE_GOAL: f64 = 1.5;
/// Untimed requests first, each way.
const WARMUP: usize = 20;
/// The server's name.
const HOST: &str = "api.bench.test";

/// Options of `bench egress`.
#[derive(Debug, Clone, clap::Args)]
pub struct EgressArgs {
    /// Timed requests on one kept-alive connection, each way.
    #[arg(long, default_value_t = 300)]
    pub kept_alive: usize,
    /// Timed requests on a new connection each, each way.
    #[arg(long, default_value_t = 60)]
    pub new_connections: usize,
}

/// The figures.
#[derive(Debug, Clone, Serialize)]
pub struct EgressReport {
    pub kept_alive: Versus,
    pub new_connection: Versus,
}

impl EgressReport {
    /// Lines for people.
    pub fn print(&self) {
        println!("egress gateway, HTTPS to a rule host on loopback (ours = through the gateway, peer = direct)");
        for (label, v) in [
            ("kept-alive", &self.kept_alive),
            ("new connection", &self.new_connection),
        ] {
            println!("  {}", v.ours.line(&format!("{label} via gateway")));
            println!("  {}", v.peer.line(&format!("{label} direct")));
            println!("  {}", v.ratio_line(&format!("{label} gateway/direct")));
        }
    }
}

struct Direct;

impl Connect for Direct {
    fn connect(&self, dst: SocketAddr) -> BoxFuture<'_, std::io::Result<TcpStream>> {
        Box::pin(TcpStream::connect(dst))
    }
}

struct OneRoute;

impl Routes for OneRoute {
    fn route(&self, _: IpAddr) -> BoxFuture<'_, Option<Route>> {
        Box::pin(async {
            Some(Route {
                sandbox: "bench".into(),
                policy: Policy {
                    rules: Vec::new(),
                    secrets: vec![SecretUse {
                        name: "k".into(),
                        hosts: sandboxd_secrets::check_hosts(&[HOST]).expect("a host"),
                        value: sandboxd_secrets::SecretValue::new("sk-bench-value".into()),
                    }],
                },
                connector: Arc::new(Direct),
            })
        })
    }

    fn audit(&self, _: &str, _: AuditEntry) {}
}

fn client(roots: rustls::RootCertStore) -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring's versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(to: SocketAddr, tls: &tokio_rustls::TlsConnector) -> anyhow::Result<Sender> {
    let tcp = TcpStream::connect(to).await?;
    tcp.set_nodelay(true)?;
    let name = rustls::pki_types::ServerName::try_from(HOST)?;
    let stream = tls.connect(name, tcp).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn request(sender: &mut Sender) -> anyhow::Result<()> {
    sender.ready().await?;
    let req = hyper::Request::get("/v1/models")
        .header("host", HOST)
        .header("authorization", "Bearer ${sandboxd.secrets.k}")
        .body(Full::new(Bytes::new()))?;
    let resp = sender.send_request(req).await?;
    anyhow::ensure!(
        resp.status() == 200,
        "the server answered {}",
        resp.status()
    );
    resp.into_body().collect().await?;
    Ok(())
}

/// Timed requests to `to`: on one connection, then on a new one each.
async fn measure(
    to: SocketAddr,
    tls: &tokio_rustls::TlsConnector,
    args: &EgressArgs,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let mut sender = connect(to, tls).await?;
    let mut kept = Vec::with_capacity(args.kept_alive);
    for i in 0..WARMUP + args.kept_alive {
        let started = Instant::now();
        request(&mut sender).await?;
        if i >= WARMUP {
            kept.push(started.elapsed());
        }
    }
    let mut fresh = Vec::with_capacity(args.new_connections);
    for _ in 0..args.new_connections {
        let started = Instant::now();
        let mut sender = connect(to, tls).await?;
        request(&mut sender).await?;
        fresh.push(started.elapsed());
    }
    Ok((kept, fresh))
}

/// Runs `bench egress`.
pub async fn run(args: &EgressArgs) -> anyhow::Result<EgressReport> {
    let public = TestPki::new(&[HOST]);
    let server = TcpListener::bind("127.0.0.1:0").await?;
    let server_addr = server.local_addr()?;
    tls::serve(server, Some(public.server.clone()), Seen::default());
    let ca = Arc::new(EgressCa::ephemeral()?);
    let mut gateway_roots = rustls::RootCertStore::empty();
    {
        use rustls::pki_types::pem::PemObject;
        gateway_roots.add(rustls::pki_types::CertificateDer::from_pem_slice(
            ca.cert_pem().as_bytes(),
        )?)?;
    }
    let gateway = Arc::new(Gateway::new(
        ca,
        public.roots.clone(),
        Arc::new(OneRoute),
        Arc::new(move |_| Ok(server_addr)),
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let gateway_addr = listener.local_addr()?;
    let serving = tokio::spawn(gateway.serve(listener));
    let direct = measure(server_addr, &client(public.roots), args).await;
    let through = measure(gateway_addr, &client(gateway_roots), args).await;
    serving.abort();
    let ((direct_kept, direct_fresh), (kept, fresh)) = (direct?, through?);
    Ok(EgressReport {
        kept_alive: Versus::new(
            Latency::new("kept-alive via gateway", &kept, None)?,
            Latency::new("kept-alive direct", &direct_kept, None)?,
            KEPT_ALIVE_GOAL,
        ),
        new_connection: Versus::new(
            Latency::new("new connection via gateway", &fresh, None)?,
            Latency::new("new connection direct", &direct_fresh, None)?,
            // Two handshakes against one: no goal beyond the kept-alive one; shown for scale.
            f64::INFINITY,
        ),
    })
}
