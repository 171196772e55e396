//! The native API's one error shape, `{code, message}`, and the one place service errors become HTTP
//! statuses. A client mistake is always a 4xx; a 500 means the daemon itself failed.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_api_types::ApiError;
use sandboxd_service::error::chain;
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
            ServiceError::NotFound(_) => (S::NOT_FOUND, "not_found"),
            ServiceError::NameConflict(_) => (S::CONFLICT, "name_conflict"),
            ServiceError::Conflict(_) => (S::CONFLICT, "conflict"),
            ServiceError::HostnameConflict(_) => (S::CONFLICT, "hostname_conflict"),
            ServiceError::PortNotListening(_) => (S::CONFLICT, "port_not_listening"),
            ServiceError::InFlight { .. } => (S::CONFLICT, "request_in_flight"),
            ServiceError::LimitExceeded { .. } => (S::TOO_MANY_REQUESTS, "limit_exceeded"),
            ServiceError::KeyReused => (S::UNPROCESSABLE_ENTITY, "idempotency_key_reused"),
            ServiceError::Exhausted(_) => (S::SERVICE_UNAVAILABLE, "pool_exhausted"),
            ServiceError::Agent(_) => (S::BAD_GATEWAY, "agent_error"),
            ServiceError::Interpreter(_) => (S::BAD_GATEWAY, "interpreter_error"),
            ServiceError::Unauthorized(_) => (S::UNAUTHORIZED, "unauthorized"),
            ServiceError::StartFailed { .. } => (S::INTERNAL_SERVER_ERROR, "sandbox_failed"),
            ServiceError::Runtime(_) | ServiceError::Store(_) => {
                (S::INTERNAL_SERVER_ERROR, "internal")
            }
            ServiceError::Image(e) => image_status(e),
        };
        if status.is_server_error() {
            tracing::error!(error = %chain(&e), "request failed");
        }
        let retry_after = match &e {
            ServiceError::InFlight { retry_after_secs }
            | ServiceError::LimitExceeded {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
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

/// Parses a JSON body, turning every way it can be wrong into a 400 that says what was wrong.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Error> {
    if body.is_empty() {
        return Err(Error::invalid("the request body must be a JSON object"));
    }
    serde_json::from_slice(body).map_err(|e| Error::invalid(format!("invalid JSON body: {e}")))
}
