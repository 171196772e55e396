//! The crate's one error type: what can go wrong talking to an agent through [`crate::EnvdClient`].

use crate::connect::{Code, ConnectError, EnvelopeError};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The agent's unix socket could not be reached.
    #[error("cannot connect to the agent socket {path}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP exchange broke (connection reset, malformed HTTP).
    #[error("HTTP exchange with the agent failed")]
    Http(#[source] hyper::Error),
    /// The HTTP exchange on a kept connection (`AgentConnections`) broke.
    #[error("HTTP exchange with the agent failed")]
    Exchange(#[source] hyper_util::client::legacy::Error),
    /// The agent answered an RPC with a Connect error.
    #[error("the agent refused the call ({0})")]
    Rpc(ConnectError),
    /// The agent answered a plain HTTP call (`/files`, `/health`) with a failure status.
    #[error("the agent answered HTTP {status}: {message}")]
    Status { status: u16, message: String },
    /// A message did not encode or decode as the expected JSON.
    #[error("malformed envd JSON message")]
    Json(#[from] serde_json::Error),
    /// A stream broke the Connect framing rules.
    #[error("malformed envd stream: {0}")]
    Protocol(String),
    /// A stream envelope could not be decoded.
    #[error("malformed envd envelope")]
    Envelope(#[from] EnvelopeError),
    /// The request could not be built (e.g. a header value with control characters).
    #[error("cannot build the request")]
    Request(#[from] http::Error),
    /// Reading the caller's upload stream failed.
    #[error("reading the upload body failed")]
    Upload(#[source] std::io::Error),
}

impl Error {
    /// The Connect code this failure corresponds to, when the agent gave an answer.
    pub fn code(&self) -> Option<Code> {
        match self {
            Error::Rpc(e) => Some(e.code),
            Error::Status { status, .. } => Some(match status {
                400 => Code::InvalidArgument,
                404 => Code::NotFound,
                409 => Code::AlreadyExists,
                507 => Code::ResourceExhausted,
                s => Code::from_http_status(*s),
            }),
            _ => None,
        }
    }
}
