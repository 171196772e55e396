//! Errors of the toolbox's file and git routes, as Daytona's in-sandbox daemon answers them:
//! `{"statusCode", "message", "code", "source": "DAYTONA_DAEMON", "timestamp"}`. The code is one of
//! the daemon's (`FILE_NOT_FOUND`, `INVALID_FILE_PATH`, `FILE_ACCESS_DENIED`, `GIT_AUTH_FAILED`, …)
//! when the path or the repository is at fault, so the SDK raises its precise class
//! (`DaytonaFileNotFoundError`, `DaytonaGitAuthFailedError`, …, each a subclass of the class of its
//! status); a fault of the sandbox itself (unknown, not running) keeps [`DaytonaError`]'s status and
//! code, which the SDK maps by status.

use super::error::DaytonaError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_service::files::FileError;
use sandboxd_service::ServiceError;

/// The `source` Daytona's SDK keys the daemon's codes by.
pub const SOURCE: &str = "DAYTONA_DAEMON";

/// An error answer of the toolbox's file and git routes.
#[derive(Debug)]
pub struct ToolboxError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ToolboxError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// A 400 `BAD_REQUEST`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BAD_REQUEST", message)
    }

    /// The JSON body (also the payload of a bulk download's `error` part).
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "statusCode": self.status.as_u16(),
            "message": self.message,
            "code": self.code,
            "source": SOURCE,
            "timestamp": sandboxd_service::sandboxes::rfc3339(sandboxd_store::unix_millis_now()),
        })
    }
}

impl From<FileError> for ToolboxError {
    fn from(e: FileError) -> Self {
        let (status, code) = match &e {
            FileError::NotFound(_) => (StatusCode::NOT_FOUND, "FILE_NOT_FOUND"),
            FileError::InvalidPath(_) => (StatusCode::BAD_REQUEST, "INVALID_FILE_PATH"),
            FileError::Invalid(_) => (StatusCode::BAD_REQUEST, "BAD_REQUEST"),
            FileError::Conflict(_) => (StatusCode::CONFLICT, "CONFLICT"),
            FileError::Denied(_) => (StatusCode::FORBIDDEN, "FILE_ACCESS_DENIED"),
            FileError::Service(_) => (StatusCode::INTERNAL_SERVER_ERROR, ""),
        };
        match e {
            FileError::Service(e) => Self::from(e),
            e => Self::new(status, code, e.to_string()),
        }
    }
}

impl From<ServiceError> for ToolboxError {
    fn from(e: ServiceError) -> Self {
        Self::from(DaytonaError::from(e))
    }
}

impl From<DaytonaError> for ToolboxError {
    fn from(e: DaytonaError) -> Self {
        Self::new(e.status, e.code, e.message)
    }
}

impl IntoResponse for ToolboxError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_faults_carry_the_daemons_codes() {
        let e = ToolboxError::from(FileError::NotFound("no /x".into()));
        assert_eq!((e.status.as_u16(), e.code), (404, "FILE_NOT_FOUND"));
        let body = e.body();
        assert_eq!(body["statusCode"], 404);
        assert_eq!(body["source"], SOURCE);
        assert_eq!(body["message"], "no /x");
        let e = ToolboxError::from(FileError::InvalidPath("relative".into()));
        assert_eq!((e.status.as_u16(), e.code), (400, "INVALID_FILE_PATH"));
        let e = ToolboxError::from(FileError::Denied("/root".into()));
        assert_eq!((e.status.as_u16(), e.code), (403, "FILE_ACCESS_DENIED"));
    }

    #[test]
    fn sandbox_faults_keep_their_status() {
        let e = ToolboxError::from(FileError::Service(ServiceError::NotFound(
            "sandbox x not found".into(),
        )));
        assert_eq!(e.status.as_u16(), 404);
        assert_ne!(e.code, "FILE_NOT_FOUND");
    }
}
