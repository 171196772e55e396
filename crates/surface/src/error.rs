//! The native API's one error shape, `{code, message}`, and the one place service errors become HTTP
//! statuses. A client mistake is always a 4xx; a 500 means the daemon itself failed. Rejections that
//! axum's extractors answer on their own (a body over its limit, a path that is not UTF-8) leave in
//! the same shape ([`shape_rejections`]).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_api_types::ApiError;
use sandboxd_service::error::chain;
use sandboxd_service::git::GitFailure;
use sandboxd_service::ServiceError;

/// An error response of the native API.
#[derive(Debug)]
pub struct Error {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// Human-readable explanation.
    pub message: String,
    /// Seconds for a `Retry-After` header.
    pub retry_after: Option<u64>,
}

impl Error {
    /// A 400 `invalid_request`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// Any status and code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
}

impl From<ServiceError> for Error {
    fn from(e: ServiceError) -> Self {
        use StatusCode as S;
        let (status, code) = match &e {
            ServiceError::InvalidRequest(_) => (S::BAD_REQUEST, "invalid_request"),
            ServiceError::InvalidCursor(_) => (S::BAD_REQUEST, "invalid_cursor"),
            ServiceError::NotFound(_) => (S::NOT_FOUND, "not_found"),
            ServiceError::NameConflict(_) => (S::CONFLICT, "name_conflict"),
            ServiceError::Conflict(_) => (S::CONFLICT, "conflict"),
            ServiceError::HostnameConflict(_) => (S::CONFLICT, "hostname_conflict"),
            ServiceError::PortNotListening(_) => (S::CONFLICT, "port_not_listening"),
            ServiceError::InFlight { .. } => (S::CONFLICT, "request_in_flight"),
            ServiceError::LimitExceeded { .. } => (S::TOO_MANY_REQUESTS, "limit_exceeded"),
            ServiceError::KeyReused => (S::UNPROCESSABLE_ENTITY, "idempotency_key_reused"),
            ServiceError::Exhausted(_) => (S::SERVICE_UNAVAILABLE, "pool_exhausted"),
            ServiceError::ClusterUnavailable(_) => (S::SERVICE_UNAVAILABLE, "cluster_unavailable"),
            ServiceError::Agent(_) => (S::BAD_GATEWAY, "agent_error"),
            ServiceError::Interpreter(_) => (S::BAD_GATEWAY, "interpreter_error"),
            ServiceError::LanguageServer(_) => (S::BAD_GATEWAY, "language_server_error"),
            ServiceError::Unauthorized(_) => (S::UNAUTHORIZED, "unauthorized"),
            ServiceError::StartFailed { .. } => (S::INTERNAL_SERVER_ERROR, "sandbox_failed"),
            ServiceError::Runtime(_)
            | ServiceError::Store(_)
            | ServiceError::Objects(_)
            | ServiceError::Seal(_) => (S::INTERNAL_SERVER_ERROR, "internal"),
            ServiceError::Image(e) => image_status(e),
            ServiceError::Git(e) => git_status(e.kind),
            ServiceError::Volume(e) => volume_status(e),
        };
        if status.is_server_error() {
            tracing::error!(error = %chain(&e), "request failed");
        }
        let retry_after = match &e {
            ServiceError::InFlight { retry_after_secs }
            | ServiceError::LimitExceeded {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            ServiceError::ClusterUnavailable(_) => Some(1),
            _ => None,
        };
        Self {
            retry_after,
            ..Self::new(status, code, chain(&e))
        }
    }
}

/// Where an image came from decides who is at fault: a reference that does not parse is the
/// client's; what a registry said is passed on as the registry's; a layer that is refused makes the
/// image unusable (422), never the daemon's failure.
fn image_status(e: &sandboxd_images::ImageError) -> (StatusCode, &'static str) {
    use sandboxd_images::{ImageError as I, RegistryError as R};
    use StatusCode as S;
    match e {
        I::Reference(_) => (S::BAD_REQUEST, "invalid_request"),
        I::Archive(_) => (S::BAD_REQUEST, "invalid_archive"),
        I::Registry(R::NotFound { .. }) => (S::NOT_FOUND, "image_not_found"),
        I::Registry(R::AuthFailed { .. }) => (S::FORBIDDEN, "registry_auth_failed"),
        I::Registry(R::Unavailable { .. }) => (S::BAD_GATEWAY, "registry_unavailable"),
        I::Unpack {
            source: sandboxd_images::unpack::UnpackError::Io { .. },
            ..
        } => (S::INTERNAL_SERVER_ERROR, "internal"),
        I::Registry(R::Invalid { .. } | R::Digest(_))
        | I::Config(_)
        | I::Unpack { .. }
        | I::DigestMismatch { .. }
        | I::MediaType { .. }
        | I::UnsupportedDigest(_) => (S::UNPROCESSABLE_ENTITY, "image_invalid"),
        I::Read { .. } => (S::BAD_GATEWAY, "registry_unavailable"),
        I::Io { .. } | I::Task(_) | I::Pack(_) => (S::INTERNAL_SERVER_ERROR, "internal"),
    }
}

/// A volume file operation's status: what the caller asked for is the caller's mistake (a missing
/// path, a link, a name taken), a full volume is 507, only the host's own failure is 500.
fn volume_status(e: &sandboxd_volumes::VolumeError) -> (StatusCode, &'static str) {
    use sandboxd_volumes::VolumeError as V;
    use StatusCode as S;
    match e {
        V::NotFound(_) => (S::NOT_FOUND, "not_found"),
        V::Exists(_) => (S::CONFLICT, "conflict"),
        V::NoSpace(_) => (S::INSUFFICIENT_STORAGE, "volume_full"),
        V::Io { .. } => (S::INTERNAL_SERVER_ERROR, "internal"),
        V::BadPath(_)
        | V::Link(_)
        | V::NotADirectory(_)
        | V::IsADirectory(_)
        | V::NotAFile(_)
        | V::Root => (S::BAD_REQUEST, "invalid_request"),
    }
}

/// A git failure's status and code: the status Daytona's toolbox answers for the same failure, a
/// `git_*` code of the native API's own (a request git cannot be given is `invalid_request`).
fn git_status(kind: GitFailure) -> (StatusCode, &'static str) {
    use GitFailure as G;
    use StatusCode as S;
    match kind {
        G::Invalid | G::InvalidPath => (S::BAD_REQUEST, "invalid_request"),
        G::AuthFailed => (S::UNAUTHORIZED, "git_auth_failed"),
        G::Forbidden => (S::FORBIDDEN, "git_forbidden"),
        G::RemoteRejected => (S::UNPROCESSABLE_ENTITY, "git_remote_rejected"),
        G::PushRejected => (S::CONFLICT, "git_push_rejected"),
        G::RepoNotFound => (S::NOT_FOUND, "git_repo_not_found"),
        G::BranchExists => (S::CONFLICT, "git_branch_exists"),
        G::BranchNotFound => (S::NOT_FOUND, "git_branch_not_found"),
        G::FileNotFound => (S::NOT_FOUND, "git_file_not_found"),
        G::DirtyWorktree => (S::CONFLICT, "git_dirty_worktree"),
        G::MergeConflict => (S::CONFLICT, "git_merge_conflict"),
        G::Conflict => (S::CONFLICT, "git_conflict"),
        G::TransportFailed => (S::BAD_GATEWAY, "git_transport_failed"),
        G::Refused => (S::BAD_REQUEST, "git_refused"),
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let body = ApiError {
            code: self.code.to_string(),
            message: self.message,
        };
        with_retry_after((self.status, Json(body)).into_response(), self.retry_after)
    }
}

/// `response` with `Retry-After: secs` when there is a wait to tell.
pub fn with_retry_after(mut response: Response, secs: Option<u64>) -> Response {
    if let Some(secs) = secs {
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, secs.into());
    }
    response
}

/// Parses a JSON body, turning every way it can be wrong into a 400 that says what was wrong. Every
/// body is a JSON object (serde would also take a struct as an array of its fields); a number with no
/// fraction is the integer it equals (`512.0` is `512`, as JSON Schema's `integer` says).
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Error> {
    let invalid = |e: serde_json::Error| Error::invalid(format!("invalid JSON body: {e}"));
    let mut value: serde_json::Value = match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => serde_json::from_slice(body).map_err(invalid)?,
        _ => return Err(Error::invalid("the request body must be a JSON object")),
    };
    integral_floats_as_integers(&mut value);
    serde_json::from_value(value).map_err(invalid)
}

fn integral_floats_as_integers(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            if f.fract() == 0.0 && f.abs() < 9.0e15 {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_as_integers),
        Value::Object(map) => map.values_mut().for_each(integral_floats_as_integers),
        _ => {}
    }
}

/// Largest plain-text rejection re-read to reshape it.
const REJECTION_BODY_LIMIT: usize = 64 * 1024;

/// Middleware: every answer leaves through [`reshape_rejection`].
pub async fn shape_rejections(req: Request, next: Next) -> Response {
    reshape_rejection(next.run(req).await).await
}

/// An error answer that is not JSON (axum's plain-text rejections) as an [`ApiError`] whose code names
/// its status and whose message is the rejection's text; JSON answers and successes pass untouched,
/// headers (`Allow`, `Retry-After`) are kept.
pub async fn reshape_rejection(response: Response) -> Response {
    let status = response.status();
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, REJECTION_BODY_LIMIT)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).trim().to_string();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let body = ApiError {
        code: rejection_code(status).to_string(),
        message,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(
        parts,
        Body::from(serde_json::to_vec(&body).unwrap_or_default()),
    )
}

/// The code of a rejection by its status.
fn rejection_code(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        s if s.is_server_error() => "internal",
        _ => "invalid_request",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn reshaped(response: Response) -> (StatusCode, Option<String>, serde_json::Value) {
        let resp = reshape_rejection(response).await;
        let status = resp.status();
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string());
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            content_type,
            serde_json::from_slice(&bytes).unwrap_or_default(),
        )
    }

    /// axum's plain-text rejections (a body over the limit, a path that is not UTF-8) leave in the
    /// API's own shape; the API's own errors and successes pass as they were.
    #[tokio::test]
    async fn rejections_leave_as_api_errors() {
        let too_large = (
            StatusCode::PAYLOAD_TOO_LARGE,
            "Failed to buffer the request body: length limit exceeded",
        )
            .into_response();
        let (status, content_type, body) = reshaped(too_large).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(content_type.as_deref(), Some("application/json"));
        assert_eq!(body["code"], "payload_too_large");
        assert_eq!(
            body["message"],
            "Failed to buffer the request body: length limit exceeded"
        );
        let bad_path = (
            StatusCode::BAD_REQUEST,
            "Invalid URL: Invalid UTF-8 in `id`",
        )
            .into_response();
        let (status, _, body) = reshaped(bad_path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["code"], "invalid_request");
        let own = Error::new(StatusCode::CONFLICT, "name_conflict", "taken").into_response();
        let (status, _, body) = reshaped(own).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::CONFLICT, Some("name_conflict"))
        );
        let ok = (StatusCode::OK, "plain success").into_response();
        assert_eq!(reshaped(ok).await.0, StatusCode::OK);
    }

    /// What git said becomes the native API's git codes, with the statuses Daytona's toolbox
    /// answers; git's words are the message, not wrapped.
    #[test]
    fn git_failures_get_the_native_git_codes() {
        use sandboxd_service::git::classify;
        let native = |said: &str| Error::from(ServiceError::from(classify(said, 128)));
        let cases = [
            (
                "fatal: Authentication failed for 'http://h/r'",
                401,
                "git_auth_failed",
            ),
            (
                "error: The requested URL returned error: 403",
                403,
                "git_forbidden",
            ),
            (
                " ! [remote rejected] main -> main (hook declined)",
                422,
                "git_remote_rejected",
            ),
            (
                " ! [rejected] main -> main (fetch first)",
                409,
                "git_push_rejected",
            ),
            (
                "fatal: repository 'http://h/x.git/' not found",
                404,
                "git_repo_not_found",
            ),
            (
                "fatal: a branch named 'x' already exists",
                409,
                "git_branch_exists",
            ),
            (
                "error: pathspec 'x' did not match any file(s) known to git",
                404,
                "git_branch_not_found",
            ),
            (
                "fatal: pathspec 'x' did not match any files",
                404,
                "git_file_not_found",
            ),
            (
                "error: Your local changes would be overwritten by checkout",
                409,
                "git_dirty_worktree",
            ),
            (
                "fatal: Not possible to fast-forward, aborting.",
                409,
                "git_merge_conflict",
            ),
            ("nothing to commit, working tree clean", 409, "git_conflict"),
            (
                "fatal: unable to access 'http://h/': Connection refused",
                502,
                "git_transport_failed",
            ),
            ("fatal: bad thing", 400, "git_refused"),
        ];
        for (said, status, code) in cases {
            let e = native(said);
            assert_eq!((e.status.as_u16(), e.code), (status, code), "{said:?}");
        }
        assert_eq!(
            native("hint: x\nfatal: bad thing").message,
            "fatal: bad thing"
        );
        let invalid = Error::from(ServiceError::from(
            sandboxd_service::git::ref_name("branch", "-D").unwrap_err(),
        ));
        assert_eq!(
            (invalid.status.as_u16(), invalid.code),
            (400, "invalid_request")
        );
    }

    /// A body is an object (never a struct spelt as an array of its fields), and `512.0` is the
    /// integer 512.
    #[test]
    fn bodies_are_objects_and_integral_numbers_are_integers() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Body {
            n: Option<u64>,
            cpu: Option<f64>,
        }
        for bad in ["[null, null]", "", "  ", "null", "3", "\"x\""] {
            let err = parse_json::<Body>(bad.as_bytes()).unwrap_err();
            assert_eq!(err.status, StatusCode::BAD_REQUEST, "{bad:?}");
        }
        let b: Body = parse_json(br#" {"n": 512.0, "cpu": 2.0}"#).unwrap();
        assert_eq!((b.n, b.cpu), (Some(512), Some(2.0)));
        assert!(parse_json::<Body>(br#"{"n": 1.5}"#).is_err());
    }
}
