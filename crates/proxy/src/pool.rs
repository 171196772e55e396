//! A small keep-alive pool of HTTP/1.1 client connections, per upstream.
//!
//! Guarantees:
//! - A connection is handed out to one request at a time. It returns to the pool only once its response
//!   body has been read to the end (see [`PooledBody`]); a response dropped half-read, an upgrade, or a
//!   connection hyper marks closed never comes back.
//! - Idle connections are reused most-recent-first and dropped after `idle_timeout`, when the upstream
//!   closes them, or when there are already `max_idle_per_upstream` idle ones.
//! - A request that a stale pooled connection could not even start to send is retried once on a fresh
//!   connection (hyper hands the unsent request back). A request that was (partly) sent is retried only if
//!   it is a body-less GET/HEAD/OPTIONS (the upstream closing an idle connection just as we reuse it);
//!   anything else fails with 502, since its body is gone and the upstream may have acted on it.
//! - Connecting is bounded by `connect_timeout`; the connection task is spawned on the current runtime and
//!   supports upgrades.
//!
//! Assumes: not self-driving. Expired connections are pruned on check-in (at most every half idle timeout)
//! and skipped on checkout; there is no background task.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;

use crate::error::ProxyError;
use crate::route::Target;
use crate::upstream::Upstream;

pub(crate) type Sender = http1::SendRequest<Body>;

/// How long a pooled connection may take to become ready before we give up on it and dial a new one.
const READY_WAIT: Duration = Duration::from_millis(100);

#[derive(Clone, Debug)]
pub(crate) struct PoolConfig {
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_idle_per_upstream: usize,
}

#[derive(Clone)]
pub(crate) struct Pool {
    shared: Arc<Shared>,
}

struct Shared {
    config: PoolConfig,
    idle: Mutex<Idle>,
}

struct Idle {
    by_upstream: HashMap<Upstream, Vec<IdleConn>>,
    last_prune: Instant,
}

struct IdleConn {
    sender: Sender,
    since: Instant,
}

impl Pool {
    pub(crate) fn new(config: PoolConfig) -> Self {
        Pool {
            shared: Arc::new(Shared {
                config,
                idle: Mutex::new(Idle {
                    by_upstream: HashMap::new(),
                    last_prune: Instant::now(),
                }),
            }),
        }
    }

    /// Sends `req` on a pooled or new connection; returns the response head and the connection's sender
    /// (to be checked in once the body is done, or dropped).
    pub(crate) async fn send(
        &self,
        target: &Target,
        upstream: &Upstream,
        mut req: http::Request<Body>,
    ) -> Result<(http::Response<Incoming>, Sender), ProxyError> {
        let upstream_err = |source| ProxyError::Upstream {
            sandbox_id: target.sandbox_id.clone(),
            port: target.port,
            source,
        };
        if let Some(mut sender) = self.checkout(upstream).await {
            let replay = replayable(&req).then(|| head_only_copy(&req));
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok((resp, sender)),
                Err(mut err) => match (err.take_message(), replay) {
                    (Some(unsent), _) | (None, Some(unsent)) => {
                        tracing::debug!(error = %err.error(), "pooled connection was stale; redialing");
                        req = unsent;
                    }
                    (None, None) => return Err(upstream_err(err.into_error())),
                },
            }
        }
        let mut sender = self.connect(target, upstream).await?;
        let resp = sender.send_request(req).await.map_err(upstream_err)?;
        Ok((resp, sender))
    }

    /// Wraps a response body so that its connection returns to the pool when the body ends.
    pub(crate) fn body(&self, upstream: Upstream, sender: Sender, inner: Incoming) -> PooledBody {
        let mut body = PooledBody {
            inner,
            checkin: Some(Checkin {
                pool: self.clone(),
                upstream,
                sender,
            }),
        };
        if body.inner.is_end_stream() {
            body.release();
        }
        body
    }

    /// Drops every idle connection to `upstream` (e.g. when its sandbox stops).
    pub(crate) fn evict(&self, upstream: &Upstream) {
        self.lock().by_upstream.remove(upstream);
    }

    /// Number of idle connections to `upstream` (for tests and metrics).
    pub(crate) fn idle_count(&self, upstream: &Upstream) -> usize {
        self.lock().by_upstream.get(upstream).map_or(0, Vec::len)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        // The critical sections never panic halfway through a change, so a poisoned map is still sound.
        self.shared
            .idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn checkout(&self, upstream: &Upstream) -> Option<Sender> {
        let idle_timeout = self.shared.config.idle_timeout;
        loop {
            let conn = {
                let mut idle = self.lock();
                let list = idle.by_upstream.get_mut(upstream)?;
                let conn = list.pop();
                if list.is_empty() {
                    idle.by_upstream.remove(upstream);
                }
                conn?
            };
            let IdleConn { mut sender, since } = conn;
            if since.elapsed() > idle_timeout || sender.is_closed() {
                continue;
            }
            if sender.is_ready() {
                return Some(sender);
            }
            // Just checked in: the connection task may not have noticed the finished exchange yet.
            if let Ok(Ok(())) = tokio::time::timeout(READY_WAIT, sender.ready()).await {
                return Some(sender);
            }
        }
    }

    async fn connect(&self, target: &Target, upstream: &Upstream) -> Result<Sender, ProxyError> {
        let timeout = self.shared.config.connect_timeout;
        let stream = match tokio::time::timeout(timeout, upstream.connect()).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(source)) => {
                return Err(ProxyError::Connect {
                    sandbox_id: target.sandbox_id.clone(),
                    port: target.port,
                    source,
                })
            }
            Err(_elapsed) => {
                return Err(ProxyError::ConnectTimeout {
                    sandbox_id: target.sandbox_id.clone(),
                    port: target.port,
                    timeout,
                })
            }
        };
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|source| ProxyError::Upstream {
                sandbox_id: target.sandbox_id.clone(),
                port: target.port,
                source,
            })?;
        tokio::spawn(async move {
            if let Err(err) = conn.with_upgrades().await {
                tracing::debug!(error = %err, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }

    fn checkin(&self, upstream: Upstream, sender: Sender) {
        if sender.is_closed() || self.shared.config.max_idle_per_upstream == 0 {
            return;
        }
        let config = &self.shared.config;
        let now = Instant::now();
        let mut idle = self.lock();
        if now.duration_since(idle.last_prune) > config.idle_timeout / 2 {
            idle.last_prune = now;
            idle.by_upstream.retain(|_, list| {
                list.retain(|c| {
                    now.duration_since(c.since) <= config.idle_timeout && !c.sender.is_closed()
                });
                !list.is_empty()
            });
        }
        let list = idle.by_upstream.entry(upstream).or_default();
        if list.len() < config.max_idle_per_upstream {
            list.push(IdleConn { sender, since: now });
        }
    }
}

/// Whether a request may be sent again after a reused connection failed mid-exchange: a safe method, no
/// body, no upgrade. (The upstream may have seen it; for these methods that is harmless.)
fn replayable(req: &http::Request<Body>) -> bool {
    use http::Method;
    matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        && req.body().is_end_stream()
        && !req.headers().contains_key(http::header::UPGRADE)
}

fn head_only_copy(req: &http::Request<Body>) -> http::Request<Body> {
    let mut copy = http::Request::new(Body::empty());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy
}

struct Checkin {
    pool: Pool,
    upstream: Upstream,
    sender: Sender,
}

/// An upstream response body that returns its connection to the pool once read to the end.
pub(crate) struct PooledBody {
    inner: Incoming,
    checkin: Option<Checkin>,
}

impl PooledBody {
    /// A body whose connection must not be reused (e.g. it carried an upgrade request).
    pub(crate) fn unpooled(inner: Incoming) -> Self {
        PooledBody {
            inner,
            checkin: None,
        }
    }

    fn release(&mut self) {
        if let Some(Checkin {
            pool,
            upstream,
            sender,
        }) = self.checkin.take()
        {
            pool.checkin(upstream, sender);
        }
    }
}

impl hyper::body::Body for PooledBody {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        match &frame {
            None => self.release(),
            Some(Err(_)) => self.checkin = None,
            Some(Ok(_)) if self.inner.is_end_stream() => self.release(),
            Some(Ok(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.release();
        }
    }
}
