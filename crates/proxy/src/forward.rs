//! Forwarding one HTTP request to its upstream and streaming the answer back.
//!
//! Guarantees (the header policy is stated in the crate docs): bodies are passed through as streams,
//! never collected; the request goes out as HTTP/1.1 in origin form with the original `Host`; the
//! response keeps the upstream's status and end-to-end headers; every failure becomes a JSON error
//! response via [`ProxyError`], never a panic.

use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::{IntoResponse, Response};
use http::header::{self, HeaderName, CONNECTION, HOST};
use http::{HeaderMap, HeaderValue, StatusCode, Uri, Version};
use tracing::Instrument;

use crate::error::ProxyError;
use crate::pool::PooledBody;
use crate::route::Target;
use crate::{upgrade, Proxy};

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Hop-by-hop headers (RFC 9110 §7.6.1) plus the legacy ones proxies drop.
const HOP_BY_HOP: [HeaderName; 8] = [
    CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

impl Proxy {
    /// Forwards the request to `target` and streams the answer back; errors become JSON responses.
    pub async fn forward(&self, target: Target, req: Request) -> Response {
        // The daemon's request span (if any) names the sandbox the proxy resolved.
        tracing::Span::current().record("sandbox", target.sandbox_id.as_str());
        let target = match self.resolver.admit(target, req.headers()).await {
            Ok(target) => target,
            Err(refused) => return ProxyError::from(refused).into_response(),
        };
        let span =
            tracing::debug_span!("proxy", sandbox_id = %target.sandbox_id, port = target.port);
        match self
            .try_forward(&target, req)
            .instrument(span.clone())
            .await
        {
            Ok(resp) => resp,
            Err(err) => {
                span.in_scope(
                    || tracing::debug!(error = %err, status = %err.status(), "proxy error"),
                );
                err.into_response()
            }
        }
    }

    /// [`Proxy::forward`] without the error mapping.
    pub async fn try_forward(
        &self,
        target: &Target,
        mut req: Request,
    ) -> Result<Response, ProxyError> {
        let mut closing = self.resolver.closing(target);
        let upstream = self.resolver.upstream(target).await?;
        let client_version = req.version();
        let upgrade = upgrade::requested(req.headers());
        let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
        let req = self.upstream_request(req, upgrade);

        let sent = self.pool.send(target, &upstream, req);
        let (resp, sender) = match closing.as_mut() {
            None => sent.await?,
            Some(closing) => tokio::select! {
                sent = sent => sent?,
                () = closing => return Err(ProxyError::Closed {
                    sandbox_id: target.sandbox_id.clone(),
                    port: target.port,
                }),
            },
        };

        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            return match client_upgrade {
                Some(client) => Ok(upgrade::switch(client, resp, target, closing)),
                None => Err(ProxyError::UnexpectedUpgrade {
                    sandbox_id: target.sandbox_id.clone(),
                    port: target.port,
                }),
            };
        }
        let (mut parts, body) = resp.into_parts();
        // Read before the hop-by-hop headers go: whether the upstream keeps this connection open.
        let reusable = keeps_alive(parts.version, &parts.headers);
        strip_hop_by_hop(&mut parts.headers);
        parts.version = client_version;
        let body = match client_upgrade {
            Some(_) => PooledBody::unpooled(body),
            // A connection the upstream closes after this answer (HTTP/1.0, `Connection: close`) must
            // not be pooled: the next request would wait on it before redialing.
            None if !reusable => PooledBody::unpooled(body),
            None => self.pool.body(upstream, sender, body),
        };
        let body = match closing {
            None => Body::new(body),
            Some(closing) => Body::new(ClosableBody {
                inner: body,
                closing: Some(closing),
            }),
        };
        Ok(Response::from_parts(parts, body))
    }

    /// Rewrites a client request into the request sent upstream.
    fn upstream_request(&self, req: Request, upgrade: Option<HeaderValue>) -> Request {
        let (mut parts, body) = req.into_parts();
        let headers = &mut parts.headers;

        let host = match headers.get(HOST) {
            Some(host) => Some(host.clone()),
            None => parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok()),
        };
        strip_hop_by_hop(headers);
        if let Some(protocol) = upgrade {
            upgrade::restore_headers(headers, protocol);
        }
        if let Some(host) = host {
            headers.insert(X_FORWARDED_HOST, host.clone());
            headers.insert(HOST, host);
        }
        headers.insert(X_FORWARDED_PROTO, self.forwarded_proto.clone());
        if let Some(ConnectInfo(peer)) = parts.extensions.get::<ConnectInfo<SocketAddr>>() {
            append_forwarded_for(headers, peer.ip());
        }

        if parts.uri.scheme().is_some() || parts.uri.authority().is_some() {
            parts.uri = origin_form(&parts.uri);
        }
        parts.version = Version::HTTP_11;
        Request::from_parts(parts, body)
    }
}

fn origin_form(uri: &Uri) -> Uri {
    match uri.path_and_query() {
        Some(pq) => Uri::from(pq.clone()),
        None => Uri::from_static("/"),
    }
}

fn append_forwarded_for(headers: &mut HeaderMap, ip: IpAddr) {
    let mut value = String::new();
    for prev in headers.get_all(&X_FORWARDED_FOR) {
        if let Ok(prev) = prev.to_str() {
            value.push_str(prev);
            value.push_str(", ");
        }
    }
    value.push_str(&ip.to_string());
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(X_FORWARDED_FOR, value);
    }
}

/// Removes hop-by-hop headers: the fixed list, `Upgrade`, any `Proxy-*`, and whatever `Connection` names
/// (except `Host`, which the upstream always needs).
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .filter(|name| *name != HOST)
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
    if headers.keys().any(|k| k.as_str().starts_with("proxy-")) {
        let proxy: Vec<HeaderName> = headers
            .keys()
            .filter(|k| k.as_str().starts_with("proxy-"))
            .cloned()
            .collect();
        for name in proxy {
            headers.remove(name);
        }
    }
}

/// A response body cut short with an error once its exchange's [`crate::Closing`] fires (and
/// ended after that error).
struct ClosableBody {
    inner: PooledBody,
    /// `None` once it fired.
    closing: Option<crate::Closing>,
}

/// Why a [`ClosableBody`] was cut short.
#[derive(Debug, thiserror::Error)]
#[error("the exchange was closed before its answer ended (the sandbox was paused)")]
struct ClosedMidAnswer;

impl hyper::body::Body for ClosableBody {
    type Data = bytes::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let Some(closing) = self.closing.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        if closing.as_mut().poll(cx).is_ready() {
            self.closing = None;
            return std::task::Poll::Ready(Some(Err(ClosedMidAnswer.into())));
        }
        std::pin::Pin::new(&mut self.inner)
            .poll_frame(cx)
            .map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.closing.is_none() || hyper::body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::Body::size_hint(&self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_connection_named_ones_are_dropped() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-private, host"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic x"),
            ("proxy-foo", "1"),
            ("te", "trailers"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("x-private", "secret"),
            ("host", "8000-abc.localhost"),
            ("content-type", "text/plain"),
            ("content-length", "3"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(left, ["content-length", "content-type", "host"]);
    }

    #[test]
    fn forwarded_for_appends_to_existing_chain() {
        let mut h = HeaderMap::new();
        h.insert(X_FORWARDED_FOR, HeaderValue::from_static("10.0.0.1"));
        append_forwarded_for(&mut h, "127.0.0.1".parse().unwrap());
        assert_eq!(h[X_FORWARDED_FOR], "10.0.0.1, 127.0.0.1");
    }

    #[test]
    fn absolute_uris_become_origin_form() {
        let uri: Uri = "http://8000-abc.localhost:21212/a/b?c=d".parse().unwrap();
        assert_eq!(origin_form(&uri), "/a/b?c=d");
    }
}

/// Whether an upstream connection stays open after a response with this version and these headers:
/// HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`.
fn keeps_alive(version: http::Version, headers: &http::HeaderMap) -> bool {
    let connection_has = |token: &str| {
        headers
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    match version {
        http::Version::HTTP_10 | http::Version::HTTP_09 => connection_has("keep-alive"),
        _ => !connection_has("close"),
    }
}

#[cfg(test)]
mod keep_alive_tests {
    use super::keeps_alive;
    use http::{HeaderMap, HeaderValue, Version};

    #[test]
    fn closing_upstream_connections_are_not_reused() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::CONNECTION, HeaderValue::from_str(v).unwrap());
            h
        };
        assert!(keeps_alive(Version::HTTP_11, &HeaderMap::new()));
        assert!(!keeps_alive(Version::HTTP_11, &with("close")));
        assert!(!keeps_alive(Version::HTTP_11, &with("Upgrade, Close")));
        assert!(!keeps_alive(Version::HTTP_10, &HeaderMap::new()));
        assert!(keeps_alive(Version::HTTP_10, &with("keep-alive")));
    }
}
