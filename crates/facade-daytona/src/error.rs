//! The Daytona surface's error shape, `{"statusCode": <HTTP status>, "message": "...", "code":
//! "<kind>"}`, and the one place service errors become it. Statuses are the native API's
//! ([`sandboxd_surface::error::Error`]'s mapping), so every surface agrees on what each service error means.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_service::ServiceError;

/// An error answer of the Daytona surface.
#[derive(Debug)]
pub struct DaytonaError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// `Retry-After` seconds (a per-key limit, a create in flight).
    pub retry_after: Option<u64>,
}

impl DaytonaError {
    /// Any status.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

impl From<ServiceError> for DaytonaError {
    fn from(e: ServiceError) -> Self {
        sandboxd_surface::error::Error::from(e).into()
    }
}

impl From<sandboxd_surface::error::Error> for DaytonaError {
    fn from(native: sandboxd_surface::error::Error) -> Self {
        Self {
            status: native.status,
            code: native.code,
            message: native.message,
            retry_after: native.retry_after,
        }
    }
}

impl IntoResponse for DaytonaError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "statusCode": self.status.as_u16(),
            "message": self.message,
            "code": self.code,
        });
        sandboxd_surface::error::with_retry_after(
            (self.status, Json(body)).into_response(),
            self.retry_after,
        )
    }
}
