//! Every request runs in a `request` span, so each line the daemon logs while serving it carries the
//! request's id and the sandbox it names.
//!
//! Contract:
//! - The request id is the caller's `X-Request-Id` when it is 1 to [`MAX_ID_LEN`] visible ASCII
//!   characters, else a new random one; the answer carries it back in `X-Request-Id`, so a client's
//!   report and the daemon's log meet on one string.
//! - The span's fields: `request_id`, `method`, `path` (never the query, which may hold signed
//!   tokens), and `sandbox` — the key a surface's path names (its declared routes, as the cluster's
//!   forwarding layer reads them), or, for proxied requests, the sandbox the proxy resolved (it
//!   records the field itself).
//! - Answers of 5xx are logged at `warn` with their status and time; every other answer at `debug`
//!   (`SB_LOG=info,sandboxd_api::request_log=debug` shows them all).

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use sandboxd_surface::routes::{sandbox_key_in, SurfaceRoutes};
use std::time::Instant;
use tracing::Instrument;

/// The header that carries a request's id, both ways.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// Longest caller-given request id kept; a longer one is replaced.
pub const MAX_ID_LEN: usize = 128;

/// The middleware: see the module doc.
pub async fn request_span(
    State(surfaces): State<&'static [&'static SurfaceRoutes]>,
    mut req: Request,
    next: Next,
) -> Response {
    let id = request_id(req.headers().get(REQUEST_ID_HEADER));
    let path = req.uri().path().to_owned();
    let sandbox = sandbox_key_in(surfaces, &path);
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %req.method(),
        path = %path,
        sandbox = tracing::field::Empty,
    );
    if let Some(key) = sandbox {
        span.record("sandbox", key);
    }
    let value = HeaderValue::from_str(&id).expect("request ids are visible ASCII");
    req.headers_mut().insert(REQUEST_ID_HEADER, value.clone());
    let started = Instant::now();
    let mut resp = next.run(req).instrument(span.clone()).await;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let status = resp.status().as_u16();
    span.in_scope(|| {
        if resp.status().is_server_error() {
            tracing::warn!(status, ms, "answered");
        } else {
            tracing::debug!(status, ms, "answered");
        }
    });
    resp.headers_mut().insert(REQUEST_ID_HEADER, value);
    resp
}

/// The caller's id when it is one we keep, else a new one.
fn request_id(given: Option<&HeaderValue>) -> String {
    given
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= MAX_ID_LEN)
        .filter(|v| v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_id_is_kept_only_when_it_is_short_visible_ascii() {
        let kept = HeaderValue::from_static("req-42.abc");
        assert_eq!(request_id(Some(&kept)), "req-42.abc");
        let spaced = HeaderValue::from_static("two words");
        let long = HeaderValue::from_str(&"x".repeat(MAX_ID_LEN + 1)).unwrap();
        let empty = HeaderValue::from_static("");
        for refused in [Some(&spaced), Some(&long), Some(&empty), None] {
            let made = request_id(refused);
            assert_eq!(made.len(), 32, "{made}");
            assert!(made.bytes().all(|b| b.is_ascii_hexdigit()), "{made}");
        }
        assert_ne!(request_id(None), request_id(None));
    }

    #[test]
    fn the_sandbox_is_the_key_a_surface_path_names() {
        let surfaces = crate::SURFACES;
        assert_eq!(
            sandbox_key_in(&surfaces, "/v1/sandboxes/sb1/exec"),
            Some("sb1")
        );
        assert_eq!(sandbox_key_in(&surfaces, "/v1/sandboxes/"), None);
        assert_eq!(sandbox_key_in(&surfaces, "/v1/volumes/data"), None);
        assert_eq!(sandbox_key_in(&surfaces, "/health"), None);
    }
}
