//! Routing HTTP (and raw TCP) into sandboxes.
//!
//! The daemon serves its API and this proxy on one listener. [`Proxy::maybe_forward`] (or the axum
//! [`middleware`]) decides per request: a request whose host is `{port}-{sandboxId}.{domain}`, or which
//! carries `E2b-Sandbox-Id` + `E2b-Sandbox-Port`, is forwarded to that sandbox port (the exact grammar is
//! in `route.rs`); otherwise the [`Resolver`] may still claim the host ([`Resolver::target_for_host`],
//! the daemon's custom domains); everything else is handed back untouched for the API router.
//!
//! Contract of [`Proxy::forward`]:
//! - The [`Resolver`] names the [`Upstream`] (TCP address or unix socket) each time; the proxy caches
//!   nothing about sandboxes, only idle keep-alive connections keyed by upstream address.
//! - The upstream speaks HTTP/1.1. Request and response bodies stream through frame by frame (uploads,
//!   downloads, chunked, server-sent events, long polls); nothing is buffered whole, and back-pressure
//!   flows both ways.
//! - Status and headers are preserved, except hop-by-hop headers (`Connection` and the headers it names,
//!   `Keep-Alive`, `Proxy-*`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`), which are dropped in both
//!   directions; `Connection: upgrade` + `Upgrade` are kept for upgrade requests (see `upgrade.rs`).
//! - **The original `Host` is kept** (apps inside the sandbox often check it or build absolute URLs from
//!   it); for HTTP/2 clients it is filled from the `:authority`. The `E2b-Sandbox-*` headers are forwarded
//!   as they came. The proxy sets `X-Forwarded-Host` (original host), `X-Forwarded-Proto`
//!   ([`ProxyConfig::forwarded_proto`]), and appends the client IP to `X-Forwarded-For` when the server
//!   was started with `into_make_service_with_connect_info::<SocketAddr>()`.
//! - The request URI is sent in origin form (`/path?query`).
//! - It never panics; failures become JSON responses in E2B's shape (see [`ProxyError`]).
//!
//! [`TcpForwarder`] is the L4 sibling: bytes both ways between a host port and an upstream.

mod error;
mod forward;
mod pool;
mod route;
mod tcp;
mod upgrade;
mod upstream;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderValue;

pub use error::{ProxyError, RouteError, PORT_NOT_OPEN_MESSAGE};
pub use route::{envd_access_token, host_of, Target, SANDBOX_ID_HEADER, SANDBOX_PORT_HEADER};
pub use tcp::TcpForwarder;
pub use upstream::{port_is_listening, Upstream, UpstreamStream};

/// A signal that ends a forwarded exchange early ([`Resolver::closing`]).
pub type Closing = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Default time allowed to connect to an upstream before answering 504.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time an idle upstream connection is kept for reuse.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default number of idle connections kept per upstream.
pub const DEFAULT_MAX_IDLE_PER_UPSTREAM: usize = 32;

/// Names the upstream of a target at request time.
#[async_trait::async_trait]
pub trait Resolver: Send + Sync + 'static {
    /// Where `target` is served right now (the daemon looks the sandbox up in its store and asks the
    /// runtime on a miss).
    async fn upstream(&self, target: &Target) -> Result<Upstream, RouteError>;

    /// The target of a request whose host matched neither `{port}-{id}.{domain}` nor carried the E2B
    /// headers: e.g. a custom domain bound to a sandbox port. `host` is lowercase, without the
    /// `:port` and trailing dot. `None` (the default) hands the request to the API router.
    async fn target_for_host(&self, _host: &str) -> Option<Target> {
        None
    }

    /// The target of an envd call ([`route::is_envd_call`]) that carries nothing but a sandbox's
    /// access token (`X-Access-Token`), as older E2B SDKs send after `connect`: the envd port of the
    /// sandbox that token belongs to. `None` (the default) hands the request to the API router.
    async fn target_for_access_token(&self, _token: &str) -> Option<Target> {
        None
    }

    /// A signal that ends the exchange forwarded to `target` if it is still open when it fires: a
    /// request not yet answered gets [`ProxyError::Closed`], a response body streaming back is cut
    /// short (the client sees the exchange fail, not end), an upgraded connection (a WebSocket) is
    /// dropped on both sides. Taken before [`Resolver::upstream`] names the upstream. The daemon's
    /// signal is its sandbox's pause: nothing in a frozen sandbox answers until it resumes. `None`
    /// (the default): an exchange ends on its own.
    fn closing(&self, _target: &Target) -> Option<Closing> {
        None
    }

    /// Whether a request for `target` with `headers` may go through, and where to: a resolver may
    /// refuse it ([`RouteError::Unauthorized`]: a sandbox that is not public, without the request
    /// carrying what opens it) or answer another target (a signed link naming a sandbox's port).
    /// Called before [`Resolver::upstream`] on every forwarded request. Default: as it is.
    async fn admit(
        &self,
        target: Target,
        _headers: &http::HeaderMap,
    ) -> Result<Target, RouteError> {
        Ok(target)
    }
}

/// Everything configurable about a [`Proxy`].
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// The domain of `{port}-{id}.{domain}` hosts (default `localhost`); case-insensitive, surrounding
    /// dots ignored.
    pub domain: String,
    /// Bound on connecting to an upstream; exceeding it answers 504 (default 5 s).
    pub connect_timeout: Duration,
    /// How long an idle keep-alive connection to an upstream is kept (default 30 s).
    pub idle_timeout: Duration,
    /// How many idle connections are kept per upstream (default 32; 0 disables pooling).
    pub max_idle_per_upstream: usize,
    /// The `X-Forwarded-Proto` value sent upstream (default `http`; `https` behind a TLS terminator).
    pub forwarded_proto: String,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            domain: "localhost".into(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_idle_per_upstream: DEFAULT_MAX_IDLE_PER_UPSTREAM,
            forwarded_proto: "http".into(),
        }
    }
}

/// The HTTP proxy into sandboxes. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct Proxy {
    domain: String,
    resolver: Arc<dyn Resolver>,
    pool: pool::Pool,
    forwarded_proto: HeaderValue,
}

impl Proxy {
    /// A proxy for `{port}-{id}.{domain}` with default settings.
    pub fn new(domain: impl Into<String>, resolver: Arc<dyn Resolver>) -> Self {
        Self::with_config(
            ProxyConfig {
                domain: domain.into(),
                ..ProxyConfig::default()
            },
            resolver,
        )
    }

    /// A proxy with explicit settings.
    pub fn with_config(config: ProxyConfig, resolver: Arc<dyn Resolver>) -> Self {
        let domain = config.domain.trim_matches('.').to_ascii_lowercase();
        let forwarded_proto = HeaderValue::from_str(&config.forwarded_proto).unwrap_or_else(|_| {
            tracing::warn!(value = %config.forwarded_proto, "invalid forwarded_proto; using http");
            HeaderValue::from_static("http")
        });
        Proxy {
            domain,
            resolver,
            pool: pool::Pool::new(pool::PoolConfig {
                connect_timeout: config.connect_timeout,
                idle_timeout: config.idle_timeout,
                max_idle_per_upstream: config.max_idle_per_upstream,
            }),
            forwarded_proto,
        }
    }

    /// The routing domain (lowercase, no surrounding dots).
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The proxy target of a request, if it is one (host pattern first, then the E2B headers).
    pub fn target_of(&self, req: &http::request::Parts) -> Option<Target> {
        route::target_of(&self.domain, &req.headers, &req.uri)
    }

    /// [`Proxy::target_of`] for callers holding a whole request.
    pub fn target_of_request<B>(&self, req: &http::Request<B>) -> Option<Target> {
        route::target_of(&self.domain, req.headers(), req.uri())
    }

    /// If `req` is a proxy request, forwards it and returns the answer; otherwise hands `req` back.
    pub async fn maybe_forward(&self, req: Request) -> Result<Response, Request> {
        if let Some(target) = self.target_of_request(&req) {
            return Ok(self.forward(target, req).await);
        }
        if let Some(host) = route::host_of(req.headers(), req.uri()) {
            if let Some(target) = self.resolver.target_for_host(&host).await {
                return Ok(self.forward(target, req).await);
            }
        }
        if let Some(token) = route::envd_access_token(req.headers(), req.uri()) {
            if let Some(target) = self.resolver.target_for_access_token(token).await {
                return Ok(self.forward(target, req).await);
            }
        }
        Err(req)
    }

    /// Drops idle pooled connections to `upstream` (call when a sandbox stops or moves).
    pub fn evict(&self, upstream: &Upstream) {
        self.pool.evict(upstream);
    }

    /// Idle pooled connections to `upstream` right now.
    pub fn idle_connections(&self, upstream: &Upstream) -> usize {
        self.pool.idle_count(upstream)
    }
}

/// Axum middleware: forwards proxy requests, passes everything else to `next`.
///
/// Mount it so it sees every request, e.g. after all routes and the fallback:
/// `router.layer(axum::middleware::from_fn_with_state(proxy, sandboxd_proxy::middleware))`.
pub async fn middleware(State(proxy): State<Arc<Proxy>>, req: Request, next: Next) -> Response {
    match proxy.maybe_forward(req).await {
        Ok(resp) => resp,
        Err(req) => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Knows one custom host; every upstream is "not found" (so the proxy answers without a socket).
    #[derive(Default)]
    struct CustomHosts {
        asked: Mutex<Vec<String>>,
    }

    #[async_trait::async_trait]
    impl Resolver for CustomHosts {
        async fn upstream(&self, target: &Target) -> Result<Upstream, RouteError> {
            Err(RouteError::SandboxNotFound(target.sandbox_id.clone()))
        }

        async fn target_for_host(&self, host: &str) -> Option<Target> {
            self.asked.lock().unwrap().push(host.to_owned());
            (host == "app.example.test").then(|| Target {
                sandbox_id: "custom".into(),
                port: 8000,
            })
        }
    }

    fn request(host: &str) -> Request {
        http::Request::builder()
            .uri("/")
            .header(http::header::HOST, host)
            .body(axum::body::Body::empty())
            .unwrap()
    }

    #[tokio::test]
    async fn resolver_claims_custom_hosts_only_after_the_builtin_patterns() {
        let resolver = Arc::new(CustomHosts::default());
        let proxy = Proxy::new("localhost", resolver.clone());
        // A custom host is forwarded (here: to a sandbox the resolver cannot find → 502).
        let resp = proxy
            .maybe_forward(request("App.Example.TEST.:21212"))
            .await
            .expect("custom host is a proxy request");
        assert_eq!(resp.status(), http::StatusCode::BAD_GATEWAY);
        // Unknown hosts go back to the API router.
        assert!(proxy
            .maybe_forward(request("127.0.0.1:21212"))
            .await
            .is_err());
        // The `{port}-{id}` pattern never consults the resolver's hosts.
        proxy
            .maybe_forward(request("8000-abc.localhost"))
            .await
            .expect("pattern host is a proxy request");
        assert_eq!(
            *resolver.asked.lock().unwrap(),
            ["app.example.test", "127.0.0.1"]
        );
    }
}
