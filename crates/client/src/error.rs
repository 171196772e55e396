//! The client's one error type.
//!
//! Contract: every failure of a [`crate::Client`] call is a [`ClientError`]. An error answer of the daemon
//! (status ≥ 400, or any non-2xx) becomes [`ClientError::Api`] when its body is the API's JSON
//! `{code, message}`, and [`ClientError::Http`] (status and raw text kept) when it is not. Variants
//! describe only their own layer and chain the cause through `#[source]`.

use sandboxd_api_types::ApiError;

/// At most this many bytes of a non-JSON error body are kept in [`ClientError::Http`].
const MAX_RAW_BODY: usize = 4096;

/// What can go wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The base URL could not be used.
    #[error("invalid API URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// No bearer token was configured.
    #[error("no API token: set SB_PAT_TOKEN")]
    MissingToken,
    /// An argument was refused before any request was sent (e.g. an empty sandbox id).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The daemon answered with its JSON error body.
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        /// HTTP status.
        status: u16,
        /// Stable machine-readable code, e.g. `not_found`.
        code: String,
        /// Human-readable explanation.
        message: String,
    },
    /// The daemon (or something in front of it) answered an error whose body is not the API's JSON.
    #[error("HTTP {status}: {body}")]
    Http {
        /// HTTP status.
        status: u16,
        /// The body as text (lossy UTF-8, truncated).
        body: String,
    },
    /// The request could not be sent or its answer not read.
    #[error("request to the daemon failed")]
    Transport(#[source] reqwest::Error),
    /// A success answer did not have the expected JSON shape.
    #[error("could not decode {what} from the daemon's answer")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// Exec output was not valid base64.
    #[error("exec output is not valid base64")]
    Base64(#[source] base64::DecodeError),
    /// The daemon broke the protocol (e.g. an exec stream ended without `exit` or `error`).
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// Reading or writing a local file or stream failed.
    #[error("local I/O failed")]
    Io(#[source] std::io::Error),
    /// A WebSocket (a terminal) could not be opened or broke.
    #[error("WebSocket to the daemon failed")]
    WebSocket(#[source] Box<tokio_tungstenite::tungstenite::Error>),
}

impl ClientError {
    /// Builds the error for a non-success answer from its status and body.
    pub fn from_error_body(status: u16, body: &[u8]) -> Self {
        match serde_json::from_slice::<ApiError>(body) {
            Ok(ApiError { code, message }) => ClientError::Api {
                status,
                code,
                message,
            },
            Err(_) => {
                let end = body.len().min(MAX_RAW_BODY);
                ClientError::Http {
                    status,
                    body: String::from_utf8_lossy(&body[..end]).trim().to_string(),
                }
            }
        }
    }

    /// The HTTP status of an error answer; `None` when no answer was received.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } | ClientError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// A stable code for this error: the daemon's code for [`ClientError::Api`], else one naming the
    /// variant (`http_error`, `transport`, `decode`, ...), so every error fits the `ApiError` shape.
    pub fn code(&self) -> &str {
        match self {
            ClientError::Api { code, .. } => code,
            ClientError::InvalidUrl { .. } => "invalid_url",
            ClientError::MissingToken => "missing_token",
            ClientError::InvalidArgument(_) => "invalid_argument",
            ClientError::Http { .. } => "http_error",
            ClientError::Transport(_) => "transport",
            ClientError::Decode { .. } => "decode",
            ClientError::Base64(_) => "decode",
            ClientError::Protocol(_) => "protocol",
            ClientError::Io(_) => "io",
            ClientError::WebSocket(_) => "websocket",
        }
    }

    /// Whether the daemon answered 404.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_error_body_becomes_api_error() {
        let err =
            ClientError::from_error_body(404, br#"{"code":"not_found","message":"no sandbox x"}"#);
        match err {
            ClientError::Api {
                status,
                code,
                message,
            } => {
                assert_eq!((status, code.as_str()), (404, "not_found"));
                assert_eq!(message, "no sandbox x");
            }
            other => panic!("expected Api, got {other:?}"),
        }
    }

    #[test]
    fn non_json_error_body_keeps_status_and_raw_text() {
        let err = ClientError::from_error_body(502, b"<html>bad gateway</html>\n");
        match &err {
            ClientError::Http { status, body } => {
                assert_eq!(*status, 502);
                assert_eq!(body, "<html>bad gateway</html>");
            }
            other => panic!("expected Http, got {other:?}"),
        }
        assert_eq!(err.code(), "http_error");
        assert_eq!(err.status(), Some(502));
    }

    #[test]
    fn json_of_another_shape_is_not_mistaken_for_an_api_error() {
        let err = ClientError::from_error_body(400, br#"{"error":"nope"}"#);
        assert!(
            matches!(err, ClientError::Http { status: 400, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn huge_raw_bodies_are_truncated_even_inside_a_multibyte_char() {
        let body = "é".repeat(MAX_RAW_BODY); // 2 bytes each: the cut lands mid-character or on one
        let err = ClientError::from_error_body(500, body.as_bytes());
        match err {
            ClientError::Http { body, .. } => assert!(body.len() <= MAX_RAW_BODY + 3),
            other => panic!("expected Http, got {other:?}"),
        }
    }
}
