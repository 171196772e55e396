//! The gateway's connections: what a sandbox's redirected TCP connection becomes.
//!
//! Contract, for a connection from a sandbox's address to the gateway, whose original destination
//! was `dst` (`SO_ORIGINAL_DST` of the redirect, [`so_original_dst`]):
//! - A connection from an address no sandbox with a policy holds is closed at once.
//! - **TLS** (its first byte a handshake record): the client's SNI is read without consuming
//!   anything. A host the sandbox's policy rewrites ([`Policy::intercepts`]) is terminated with a
//!   leaf of the daemon's CA ([`EgressCa`]) and its requests rewritten, then sent to `dst` over TLS
//!   verified against the upstream roots for that same name. Any other host's bytes pass through
//!   untouched, both ways: its own certificate reaches the client, so pinned clients keep working.
//! - **Plain HTTP**: nothing proves the name a request's `Host` header gives (a sandbox could send
//!   `Host: api.example.com` to any address), so plain HTTP is matched by its destination address
//!   alone: a connection to an address the policy rewrites for (a secret's or a rule's IP address)
//!   is served as HTTP/1.1 (keep-alive, bodies streamed both ways, never buffered); every other
//!   connection passes through untouched, placeholders and all. Names are for TLS, whose upstream
//!   certificate proves them.
//! - Upstream connections are opened by the sandbox's own [`Connect`] (from its network, under its
//!   egress rules), never from the host's; each has a deadline, and so has every wait for a client.
//! - A request a rewrite refuses ([`crate::policy::RewriteError`]) or whose upstream fails is
//!   answered 502 with a one-line reason that names no value. Each rewritten request is reported to
//!   [`Routes::audit`]: host, method, path, status, the rule and secrets applied (names), the body
//!   bytes each way and the duration — once its answer's body has ended (its last bytes handed to
//!   the client) or broken off ([`crate::metered`]).

use crate::ca::EgressCa;
use crate::metered::{Meter, Metered};
use crate::policy::{Applied, Policy};
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

/// How long a client has to send its first bytes (a ClientHello, a request head).
const FIRST_BYTES: Duration = Duration::from_secs(10);
/// How long an upstream connection (and its TLS handshake) may take.
const UPSTREAM: Duration = Duration::from_secs(15);
/// The most of a client's first bytes read to find its host.
const HEAD_MAX: usize = 64 * 1024;

/// A boxed future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Opens a sandbox's upstream connections.
pub trait Connect: Send + Sync {
    /// A connection to `dst` from the sandbox's network.
    fn connect(&self, dst: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>>;
}

/// The sandbox a connection comes from.
pub struct Route {
    /// Its id.
    pub sandbox: String,
    /// Its policy as of now.
    pub policy: Policy,
    /// How its upstream connections are opened.
    pub connector: Arc<dyn Connect>,
}

/// One rewritten request, by name only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub host: String,
    pub method: String,
    pub path: String,
    /// The answer's status (502 when the gateway answered).
    pub status: u16,
    pub applied: Applied,
    /// Bytes of the request's body sent upstream.
    pub sent: u64,
    /// Bytes of the answer's body passed back to the sandbox.
    pub received: u64,
    /// From the request's head to the end of its answer's body, milliseconds.
    pub millis: u64,
}

/// What the gateway asks of the daemon.
pub trait Routes: Send + Sync {
    /// The route of a connection from `peer`, if a sandbox with a policy holds that address.
    fn route(&self, peer: IpAddr) -> BoxFuture<'_, Option<Route>>;
    /// Records a rewritten request of `sandbox`.
    fn audit(&self, sandbox: &str, entry: AuditEntry);
}

/// The original destination of an accepted connection.
pub type OriginalDst = Arc<dyn Fn(&TcpStream) -> io::Result<SocketAddr> + Send + Sync>;

/// The gateway.
pub struct Gateway {
    ca: Arc<EgressCa>,
    upstream: Arc<rustls::ClientConfig>,
    routes: Arc<dyn Routes>,
    original_dst: OriginalDst,
}

/// `getsockopt(SO_ORIGINAL_DST)`: where a connection redirected by netfilter was going.
pub fn so_original_dst(stream: &TcpStream) -> io::Result<SocketAddr> {
    use std::os::fd::AsRawFd;
    // SAFETY: getsockopt writes at most `len` bytes into `addr`, a plain sockaddr_in.
    unsafe {
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let rc = libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_IP,
            libc::SO_ORIGINAL_DST,
            (&mut addr as *mut libc::sockaddr_in).cast(),
            &mut len,
        );
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let ip = std::net::Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr));
        Ok(SocketAddr::new(ip.into(), u16::from_be(addr.sin_port)))
    }
}

type Body = BoxBody<Bytes, hyper::Error>;
/// An upstream connection's sender; request bodies are counted on their way.
type Upstream = hyper::client::conn::http1::SendRequest<Metered<Incoming>>;

fn refusal(reason: String) -> Response<Body> {
    let body = Full::new(Bytes::from(format!("sandboxd egress gateway: {reason}\n")))
        .map_err(|never| match never {})
        .boxed();
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::BAD_GATEWAY;
    resp
}

/// What a client's first bytes say.
enum Opening {
    /// A TLS ClientHello, and the name it asks for.
    Tls(Option<String>),
    /// An HTTP request head.
    Http,
    /// Neither, or nothing within the deadline.
    Other,
}

/// Reads (without consuming) as much of the client's opening as says what it is (and, for TLS,
/// which name it asks for).
async fn opening(conn: &TcpStream) -> Opening {
    let mut buf = vec![0u8; HEAD_MAX];
    let deadline = tokio::time::Instant::now() + FIRST_BYTES;
    let mut seen = 0;
    loop {
        let n = match tokio::time::timeout_at(deadline, conn.peek(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return Opening::Other,
        };
        let head = &buf[..n];
        if head[0] == 0x16 {
            let mut acceptor = rustls::server::Acceptor::default();
            let mut reader: &[u8] = head;
            if acceptor.read_tls(&mut reader).is_err() {
                return Opening::Other;
            }
            match acceptor.accept() {
                Ok(Some(accepted)) => {
                    let name = accepted.client_hello().server_name().map(str::to_string);
                    return Opening::Tls(name);
                }
                Ok(None) => {}
                Err(_) => return Opening::Tls(None),
            }
        } else {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(head) {
                Ok(httparse::Status::Complete(_)) => return Opening::Http,
                Ok(httparse::Status::Partial) => {}
                Err(_) => return Opening::Other,
            }
        }
        if n == buf.len() {
            return Opening::Other;
        }
        if n == seen {
            // Nothing new yet: the rest of the opening is still on its way.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        seen = n;
    }
}

impl Gateway {
    /// A gateway terminating TLS with `ca`, verifying upstream hosts against `roots`, asking
    /// `routes` whose a connection is, and `original_dst` where it was going.
    pub fn new(
        ca: Arc<EgressCa>,
        roots: rustls::RootCertStore,
        routes: Arc<dyn Routes>,
        original_dst: OriginalDst,
    ) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut upstream = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring offers the default versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        upstream.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self {
            ca,
            upstream: Arc::new(upstream),
            routes,
            original_dst,
        }
    }

    /// Serves the connections `listener` accepts, each in a task of its own, until the task is
    /// dropped.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        loop {
            let conn = match listener.accept().await {
                Ok((conn, _)) => conn,
                Err(e) => {
                    // EMFILE and aborted handshakes must not end the loop.
                    tracing::warn!(error = %e, "egress gateway: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let gateway = self.clone();
            tokio::spawn(async move {
                if let Err(e) = gateway.handle(conn).await {
                    tracing::debug!(error = %e, "egress gateway: connection ended");
                }
            });
        }
    }

    async fn handle(self: Arc<Self>, conn: TcpStream) -> io::Result<()> {
        let _ = conn.set_nodelay(true);
        let peer = conn.peer_addr()?;
        let dst = (self.original_dst)(&conn)?;
        let Some(route) = self.routes.route(peer.ip()).await else {
            return Ok(());
        };
        let route = Arc::new(route);
        match opening(&conn).await {
            Opening::Tls(Some(host)) if route.policy.intercepts(&host, dst.port()) => {
                let config = self.ca.server_config(&host);
                let tls = tokio_rustls::TlsAcceptor::from(config);
                let client = tokio::time::timeout(FIRST_BYTES, tls.accept(conn))
                    .await
                    .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
                self.serve_http(client, dst, route, Some(host)).await
            }
            Opening::Http if route.policy.intercepts(&dst.ip().to_string(), dst.port()) => {
                self.serve_http(conn, dst, route, None).await
            }
            _ => splice(conn, dst, &route).await,
        }
    }

    /// Serves HTTP/1.1 on `client`, rewriting each request and sending it to `dst` (over TLS for
    /// `tls_host`).
    async fn serve_http<IO>(
        self: Arc<Self>,
        client: IO,
        dst: SocketAddr,
        route: Arc<Route>,
        tls_host: Option<String>,
    ) -> io::Result<()>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let upstream = Arc::new(tokio::sync::Mutex::new(None));
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let (gateway, route, tls_host, upstream) = (
                self.clone(),
                route.clone(),
                tls_host.clone(),
                upstream.clone(),
            );
            async move {
                Ok::<_, std::convert::Infallible>(
                    gateway
                        .forward(req, dst, &route, tls_host.as_deref(), &upstream)
                        .await,
                )
            }
        });
        hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(FIRST_BYTES)
            .serve_connection(TokioIo::new(client), service)
            .await
            .map_err(io::Error::other)
    }

    async fn forward(
        &self,
        mut req: Request<Incoming>,
        dst: SocketAddr,
        route: &Route,
        tls_host: Option<&str>,
        upstream: &tokio::sync::Mutex<Option<Upstream>>,
    ) -> Response<Body> {
        let started = Instant::now();
        // The name TLS proves, else the address (see the module doc), never the Host header.
        let host = tls_host
            .map(str::to_string)
            .unwrap_or_else(|| dst.ip().to_string());
        let (method, path) = (req.method().to_string(), req.uri().path().to_string());
        let applied = match route.policy.rewrite(&host, dst.port(), req.headers_mut()) {
            Ok(applied) => applied,
            Err(e) => return refusal(e.to_string()),
        };
        let sent = Meter::default();
        let req = req.map(|body| Metered::new(body, sent.clone()));
        let resp = async {
            let mut slot = upstream.lock().await;
            if slot.as_ref().is_none_or(|s| s.is_closed()) {
                *slot = Some(self.open(dst, route, tls_host).await?);
            }
            let sender = slot.as_mut().expect("opened above");
            sender.ready().await.map_err(io::Error::other)?;
            sender.send_request(req).await.map_err(io::Error::other)
        }
        .await;
        let resp = match resp {
            Ok(resp) => resp.map(|b| b.boxed()),
            Err(e) => refusal(format!("{host}: {e}")),
        };
        if applied == Applied::default() {
            return resp;
        }
        // Reported once the answer's body has ended or broken off, with the bytes both ways.
        let (routes, sandbox, status) = (self.routes.clone(), route.sandbox.clone(), resp.status());
        let received = Meter::default();
        let meter = received.clone();
        resp.map(move |body| {
            Metered::finishing(body, meter, move || {
                let entry = AuditEntry {
                    host,
                    method,
                    path,
                    status: status.as_u16(),
                    applied,
                    sent: sent.bytes(),
                    received: received.bytes(),
                    millis: started.elapsed().as_millis() as u64,
                };
                routes.audit(&sandbox, entry);
            })
            .boxed()
        })
    }

    /// A new upstream HTTP/1.1 connection to `dst` from the sandbox, over TLS for `tls_host`.
    async fn open(
        &self,
        dst: SocketAddr,
        route: &Route,
        tls_host: Option<&str>,
    ) -> io::Result<Upstream> {
        let opened = async {
            let tcp = route.connector.connect(dst).await?;
            let _ = tcp.set_nodelay(true);
            match tls_host {
                Some(host) => {
                    let name = rustls::pki_types::ServerName::try_from(host.to_string())
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                    let tls = tokio_rustls::TlsConnector::from(self.upstream.clone())
                        .connect(name, tcp)
                        .await?;
                    handshake(tls).await
                }
                None => handshake(tcp).await,
            }
        };
        tokio::time::timeout(UPSTREAM, opened)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the upstream did not answer"))?
    }
}

async fn handshake<IO>(io: IO) -> io::Result<Upstream>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(io::Error::other)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Passes `conn`'s bytes to `dst` and back, untouched.
async fn splice(mut conn: TcpStream, dst: SocketAddr, route: &Route) -> io::Result<()> {
    let mut upstream = tokio::time::timeout(UPSTREAM, route.connector.connect(dst))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
    let _ = upstream.set_nodelay(true);
    tokio::io::copy_bidirectional(&mut conn, &mut upstream).await?;
    Ok(())
}
