//! Errors of the toolbox's file, git and code-run routes, as Daytona's in-sandbox daemon answers
//! them: `{"statusCode", "message", "code", "source": "DAYTONA_DAEMON", "path", "timestamp"}`. The code is one of
//! the daemon's (`FILE_NOT_FOUND`, `INVALID_FILE_PATH`, `FILE_ACCESS_DENIED`, `GIT_AUTH_FAILED`, …)
//! when the path or the repository is at fault, so the SDK raises its precise class
//! (`DaytonaFileNotFoundError`, `DaytonaGitAuthFailedError`, …, each a subclass of the class of its
//! status); a fault of the sandbox itself (unknown, not running) keeps [`DaytonaError`]'s status and
//! code, which the SDK maps by status.
//!
//! Git's failures ([`GitError`], from the service's git flow) get the daemon's git codes here, in
//! one place: 401 `GIT_AUTH_FAILED`, 403 `FORBIDDEN`, 404 `GIT_REPO_NOT_FOUND` /
//! `GIT_BRANCH_NOT_FOUND` / `FILE_NOT_FOUND`, 409 `GIT_BRANCH_EXISTS` / `GIT_PUSH_REJECTED` /
//! `GIT_DIRTY_WORKTREE` / `GIT_MERGE_CONFLICT` / `CONFLICT`, 422 `GIT_REMOTE_REJECTED`, 502
//! `GIT_TRANSPORT_FAILED`; a bad path is a 400 `INVALID_FILE_PATH`, anything else git refused a 400
//! `BAD_REQUEST` with git's words (a password, if one was given, never among them).

use super::error::DaytonaError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_service::files::FileError;
use sandboxd_service::git::{GitError, GitFailure};
use sandboxd_service::ServiceError;

/// The `source` Daytona's SDK keys the daemon's codes by.
pub const SOURCE: &str = "DAYTONA_DAEMON";

/// An error answer of the toolbox's file and git routes.
#[derive(Debug)]
pub struct ToolboxError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// The toolbox route that answered (the SDK's model requires one; empty when not told).
    pub path: &'static str,
}

impl ToolboxError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            path: "",
        }
    }

    /// The same error, naming the route that answered it.
    pub fn at(self, path: &'static str) -> Self {
        Self { path, ..self }
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
            "path": self.path,
            "timestamp": sandboxd_service::timestamps::rfc3339(sandboxd_store::unix_millis_now()),
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
        match e {
            ServiceError::Git(e) => Self::from(e),
            e => Self::from(DaytonaError::from(e)),
        }
    }
}

impl From<GitError> for ToolboxError {
    fn from(e: GitError) -> Self {
        use GitFailure as G;
        use StatusCode as S;
        let (status, code) = match e.kind {
            G::Invalid | G::Refused => (S::BAD_REQUEST, "BAD_REQUEST"),
            G::InvalidPath => (S::BAD_REQUEST, "INVALID_FILE_PATH"),
            G::AuthFailed => (S::UNAUTHORIZED, "GIT_AUTH_FAILED"),
            G::Forbidden => (S::FORBIDDEN, "FORBIDDEN"),
            G::RemoteRejected => (S::UNPROCESSABLE_ENTITY, "GIT_REMOTE_REJECTED"),
            G::PushRejected => (S::CONFLICT, "GIT_PUSH_REJECTED"),
            G::RepoNotFound => (S::NOT_FOUND, "GIT_REPO_NOT_FOUND"),
            G::BranchExists => (S::CONFLICT, "GIT_BRANCH_EXISTS"),
            G::BranchNotFound => (S::NOT_FOUND, "GIT_BRANCH_NOT_FOUND"),
            G::FileNotFound => (S::NOT_FOUND, "FILE_NOT_FOUND"),
            G::DirtyWorktree => (S::CONFLICT, "GIT_DIRTY_WORKTREE"),
            G::MergeConflict => (S::CONFLICT, "GIT_MERGE_CONFLICT"),
            G::Conflict => (S::CONFLICT, "CONFLICT"),
            G::TransportFailed => (S::BAD_GATEWAY, "GIT_TRANSPORT_FAILED"),
        };
        Self::new(status, code, e.message)
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
    fn failures_get_the_daemons_git_codes() {
        let classify = |said: &str, exit_code| {
            ToolboxError::from(ServiceError::from(sandboxd_service::git::classify(
                said, exit_code,
            )))
        };
        let code = |said: &str| classify(said, 128).code;
        assert_eq!(
            code("fatal: could not read Username for 'http://h': terminal prompts disabled"),
            "GIT_AUTH_FAILED"
        );
        assert_eq!(
            code("fatal: Authentication failed for 'http://h/r'"),
            "GIT_AUTH_FAILED"
        );
        assert_eq!(
            code("fatal: repository 'http://h/nope.git/' not found"),
            "GIT_REPO_NOT_FOUND"
        );
        assert_eq!(
            code("fatal: not a git repository (or any of the parent directories): .git"),
            "GIT_REPO_NOT_FOUND"
        );
        assert_eq!(
            code("error: pathspec 'nope' did not match any file(s) known to git"),
            "GIT_BRANCH_NOT_FOUND"
        );
        assert_eq!(
            code("fatal: a branch named 'x' already exists"),
            "GIT_BRANCH_EXISTS"
        );
        assert_eq!(
            code(
                " ! [rejected]        main -> main (fetch first)\nerror: failed to push some refs"
            ),
            "GIT_PUSH_REJECTED"
        );
        assert_eq!(
            code("fatal: Not possible to fast-forward, aborting."),
            "GIT_MERGE_CONFLICT"
        );
        assert_eq!(
            code("fatal: unable to connect to 10.0.0.1:\n10.0.0.1[0: 10.0.0.1]: errno=Connection refused"),
            "GIT_TRANSPORT_FAILED"
        );
        assert_eq!(
            code("fatal: pathspec 'x' did not match any files"),
            "FILE_NOT_FOUND"
        );
        let e = classify("hint: x\nfatal: bad thing\n", 128);
        assert_eq!(
            (e.status.as_u16(), e.message.as_str()),
            (400, "fatal: bad thing")
        );
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
