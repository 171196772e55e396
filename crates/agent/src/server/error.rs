//! The server's one error type, and the single place it becomes a wire answer: a Connect error for
//! RPCs ([`ServerError::to_connect`]) or a status plus JSON `message` for `/files`
//! ([`ServerError::files_status`]).

use sandboxd_envd::{Code, ConnectError};
use std::io;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The request is malformed or asks for something impossible.
    #[error("{0}")]
    InvalidArgument(String),
    /// The named process, file or user does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The entry to create is already there.
    #[error("{0}")]
    AlreadyExists(String),
    /// The caller's user may not do this.
    #[error("{0}")]
    PermissionDenied(String),
    /// The access token is missing or wrong, or the user is unknown.
    #[error("{0}")]
    Unauthenticated(String),
    /// The state of the target forbids the call (e.g. stdin already closed).
    #[error("{0}")]
    FailedPrecondition(String),
    /// A limit of the agent was reached (too many watchers, for one).
    #[error("{0}")]
    ResourceExhausted(String),
    /// The call or option is not implemented by this agent.
    #[error("{0}")]
    Unimplemented(String),
    /// The request's content type is not the protocol's.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// A filesystem or process operation failed; the errno decides the code.
    #[error("{op} {path}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
    /// Something inside the agent broke.
    #[error("{0}")]
    Internal(String),
}

impl ServerError {
    /// A closure for `map_err` wrapping an I/O error of `op` on `path`.
    pub fn io(
        op: &'static str,
        path: impl std::fmt::Display,
    ) -> impl FnOnce(io::Error) -> ServerError {
        let path = path.to_string();
        move |source| ServerError::Io { op, path, source }
    }

    /// The Connect code of this error.
    pub fn code(&self) -> Code {
        match self {
            ServerError::InvalidArgument(_) => Code::InvalidArgument,
            ServerError::NotFound(_) => Code::NotFound,
            ServerError::AlreadyExists(_) => Code::AlreadyExists,
            ServerError::PermissionDenied(_) => Code::PermissionDenied,
            ServerError::Unauthenticated(_) => Code::Unauthenticated,
            ServerError::FailedPrecondition(_) => Code::FailedPrecondition,
            ServerError::ResourceExhausted(_) => Code::ResourceExhausted,
            ServerError::Unimplemented(_) | ServerError::UnsupportedMediaType(_) => {
                Code::Unimplemented
            }
            ServerError::Internal(_) => Code::Internal,
            ServerError::Io { source, .. } => match source.raw_os_error() {
                Some(libc::ENOENT) => Code::NotFound,
                Some(libc::EEXIST) | Some(libc::ENOTEMPTY) => Code::AlreadyExists,
                Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => {
                    Code::PermissionDenied
                }
                Some(libc::ENOTDIR)
                | Some(libc::EISDIR)
                | Some(libc::EINVAL)
                | Some(libc::ENAMETOOLONG)
                | Some(libc::EXDEV) => Code::InvalidArgument,
                Some(libc::ELOOP) => Code::FailedPrecondition,
                Some(libc::ENOSPC) | Some(libc::EDQUOT) => Code::ResourceExhausted,
                _ if source.kind() == io::ErrorKind::InvalidInput => Code::InvalidArgument,
                _ => Code::Internal,
            },
        }
    }

    /// The message sent to the caller: this error and its causes.
    pub fn message(&self) -> String {
        sandboxd_errors::chain(self)
    }

    pub fn to_connect(&self) -> ConnectError {
        ConnectError::new(self.code(), self.message())
    }

    /// The HTTP status of this error on `/files` (507 for a full disk, as envd).
    pub fn files_status(&self) -> u16 {
        match self {
            ServerError::UnsupportedMediaType(_) => 415,
            _ => match self.code() {
                Code::ResourceExhausted => 507,
                Code::FailedPrecondition => 400,
                code => code.http_status(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_by_errno() {
        let e = ServerError::io("stat", "/x")(io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(e.code(), Code::NotFound);
        assert_eq!(e.files_status(), 404);
        assert!(e.message().starts_with("stat /x: "), "{}", e.message());
        let e = ServerError::io("open", "/x")(io::Error::from_raw_os_error(libc::EACCES));
        assert_eq!(e.code(), Code::PermissionDenied);
        assert_eq!(e.to_connect().code.http_status(), 403);
        let e = ServerError::io("write", "/x")(io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(e.files_status(), 507);
        assert_eq!(
            ServerError::AlreadyExists("x".into()).code().http_status(),
            409
        );
        assert_eq!(
            ServerError::UnsupportedMediaType("x".into()).files_status(),
            415
        );
    }
}
