//! The E2B surface's one error shape, `{"code": <HTTP status>, "message": "..."}`, and the one place
//! service errors become it.
//!
//! E2B SDKs parse every error body as that shape (a string `code` crashes them), so it holds for every
//! answer of this surface: [`E2bError`] for the handlers' own errors, and [`shape_errors`] for the rest
//! (authentication, unknown routes and methods, extractor rejections) which other layers answer in the
//! native shape or as plain text.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_service::e2b_templates::FileError;
use sandboxd_service::ServiceError;

/// An error answer of the E2B surface.
#[derive(Debug)]
pub struct E2bError {
    /// HTTP status, also sent as `code`.
    pub status: StatusCode,
    /// Human-readable explanation.
    pub message: String,
    /// Seconds for a `Retry-After` header.
    pub retry_after: Option<u64>,
}

impl E2bError {
    /// Any status.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// A 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({ "code": self.status.as_u16(), "message": self.message })
    }
}

/// Statuses are the native API's ([`sandboxd_surface::error::Error`]'s mapping), so both surfaces agree on what
/// each service error means; only the shape differs.
impl From<ServiceError> for E2bError {
    fn from(e: ServiceError) -> Self {
        sandboxd_surface::error::Error::from(e).into()
    }
}

/// The native error in E2B's shape (a body [`sandboxd_surface::error::parse_json`] refused, say).
impl From<sandboxd_surface::error::Error> for E2bError {
    fn from(native: sandboxd_surface::error::Error) -> Self {
        Self {
            status: native.status,
            message: native.message,
            retry_after: native.retry_after,
        }
    }
}

/// The file store's refusals: a bad hash or body is the client's (400, 413), a URL that does not
/// authorize the upload a 403.
impl From<FileError> for E2bError {
    fn from(e: FileError) -> Self {
        let status = match &e {
            FileError::BadHash(_) | FileError::NotATar(_) | FileError::Incomplete(_) => {
                StatusCode::BAD_REQUEST
            }
            FileError::BadSignature | FileError::Expired => StatusCode::FORBIDDEN,
            FileError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            FileError::NoStore => StatusCode::SERVICE_UNAVAILABLE,
            FileError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, sandboxd_service::error::chain(&e))
    }
}

impl IntoResponse for E2bError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, secs.into());
        }
        response
    }
}

/// Whether `path` belongs to the native surface (which keeps its own error shape).
fn is_native(path: &str) -> bool {
    // `/api` is Daytona's, which has an error shape of its own; `/mcp` answers in the native one.
    path == "/v1"
        || path.starts_with("/v1/")
        || path == "/mcp"
        || path.starts_with("/mcp/")
        || path == "/api"
        || path.starts_with("/api/")
        || path == "/health"
        || path == "/metrics"
}

/// Largest error body re-read to reshape it.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Middleware: every 4xx/5xx answer outside the native surface leaves in the E2B shape (see
/// [`reshape`]).
pub async fn shape_errors(req: Request, next: Next) -> Response {
    let native = is_native(req.uri().path());
    let response = next.run(req).await;
    if native {
        response
    } else {
        reshape(response).await
    }
}

/// An error answer in the E2B shape: a body that already is `{code: <int>, message}` passes unchanged;
/// a native `{code: "<str>", message}` keeps its message; anything else (plain-text rejections)
/// becomes the message. Headers such as `Retry-After` are kept; success answers pass untouched.
pub async fn reshape(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, ERROR_BODY_LIMIT)
        .await
        .unwrap_or_default();
    let parsed = serde_json::from_slice::<serde_json::Value>(&bytes).ok();
    let already = parsed
        .as_ref()
        .is_some_and(|v| v["code"].is_u64() && v["message"].is_string());
    if already {
        return Response::from_parts(parts, Body::from(bytes));
    }
    let message = parsed
        .as_ref()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .or_else(|| {
            let text = String::from_utf8_lossy(&bytes).trim().to_string();
            (!text.is_empty()).then_some(text)
        })
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_string());
    let body = serde_json::to_vec(&E2bError::new(status, message).body()).unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn reshaped(response: Response) -> (StatusCode, Option<String>, serde_json::Value) {
        let resp = reshape(response).await;
        let status = resp.status();
        let retry = resp
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_string());
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            retry,
            serde_json::from_slice(&bytes).unwrap_or_default(),
        )
    }

    #[tokio::test]
    async fn every_error_leaves_as_code_and_message() {
        use serde_json::json;
        let plain = (StatusCode::PAYLOAD_TOO_LARGE, "length limit exceeded").into_response();
        let native = sandboxd_surface::error::Error::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "invalid token",
        )
        .into_response();
        let mut in_flight =
            sandboxd_surface::error::Error::new(StatusCode::CONFLICT, "request_in_flight", "wait");
        in_flight.retry_after = Some(3);
        let empty = StatusCode::METHOD_NOT_ALLOWED.into_response();
        let own = E2bError::not_found("sandbox x not found").into_response();
        let ok = Json(json!({"code": "not an error"})).into_response();
        let cases = [
            (
                plain,
                413,
                None,
                json!({"code": 413, "message": "length limit exceeded"}),
            ),
            (
                native,
                401,
                None,
                json!({"code": 401, "message": "invalid token"}),
            ),
            (
                in_flight.into_response(),
                409,
                Some("3"),
                json!({"code": 409, "message": "wait"}),
            ),
            (
                empty,
                405,
                None,
                json!({"code": 405, "message": "Method Not Allowed"}),
            ),
            (
                own,
                404,
                None,
                json!({"code": 404, "message": "sandbox x not found"}),
            ),
            (ok, 200, None, json!({"code": "not an error"})),
        ];
        for (response, status, retry, body) in cases {
            let want = (
                StatusCode::from_u16(status).unwrap(),
                retry.map(str::to_string),
                body,
            );
            assert_eq!(reshaped(response).await, want);
        }
    }

    #[test]
    fn only_v1_health_and_metrics_are_native() {
        for native in ["/v1", "/v1/sandboxes", "/health", "/metrics"] {
            assert!(is_native(native), "{native}");
        }
        for e2b in ["/sandboxes", "/v2/sandboxes", "/v1x", "/", "/healthz"] {
            assert!(!is_native(e2b), "{e2b}");
        }
    }
}
