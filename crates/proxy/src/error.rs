//! The proxy's errors and their single mapping onto HTTP responses.
//!
//! Guarantees: every error a client sees is a JSON body `{"code": <status>, "message": <str>, ...}` with
//! `Content-Type: application/json` and the same status, in the shape the E2B SDK parses. Two messages are
//! load-bearing because the SDK matches on them verbatim:
//! - unknown sandbox → 502 `The sandbox <id> was not found`;
//! - nothing listening on the port → 502 `The sandbox is running but port is not open` (plus `sandboxId`
//!   and `port` fields).
//!
//! A connect that does not finish within the configured timeout is a 504; every other upstream failure is
//! a 502 whose message names the sandbox and port and chains the cause.

use std::io;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use serde_json::json;

/// Why a [`crate::Resolver`] could not name an upstream for a target.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// No such sandbox (or it is gone).
    #[error("sandbox {0} was not found")]
    SandboxNotFound(String),
    /// The sandbox exists but nothing serves this port.
    #[error("port {port} of sandbox {sandbox_id} is not open")]
    PortNotOpen { sandbox_id: String, port: u16 },
    /// The sandbox exists but cannot be reached right now (paused, starting, runtime error...).
    #[error("sandbox unavailable: {0}")]
    Unavailable(String),
    /// The sandbox is not public and the request carries none of the credentials that open it.
    #[error("{0}")]
    Unauthorized(String),
}

/// Everything that can go wrong while forwarding one request.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The resolver refused the target.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// Connecting to the upstream took longer than the connect timeout.
    #[error("timed out after {timeout:?} connecting to port {port} of sandbox {sandbox_id}")]
    ConnectTimeout {
        sandbox_id: String,
        port: u16,
        timeout: Duration,
    },
    /// Connecting to the upstream failed.
    #[error("could not connect to port {port} of sandbox {sandbox_id}")]
    Connect {
        sandbox_id: String,
        port: u16,
        #[source]
        source: io::Error,
    },
    /// The HTTP/1.1 exchange with the upstream failed before a response head arrived.
    #[error("port {port} of sandbox {sandbox_id} failed to answer")]
    Upstream {
        sandbox_id: String,
        port: u16,
        #[source]
        source: hyper::Error,
    },
    /// The upstream switched protocols although the client asked for no upgrade.
    #[error("port {port} of sandbox {sandbox_id} switched protocols without being asked to")]
    UnexpectedUpgrade { sandbox_id: String, port: u16 },
    /// The resolver ended the exchange ([`crate::Resolver::closing`]) before it was answered.
    #[error("sandbox {sandbox_id} was paused before port {port} answered")]
    Closed { sandbox_id: String, port: u16 },
}

/// E2B's message for a port nobody listens on; the SDK matches it verbatim.
pub const PORT_NOT_OPEN_MESSAGE: &str = "The sandbox is running but port is not open";

/// Whether a connect failure means "nothing listens there" (TCP refused, or no unix socket file).
pub(crate) fn is_not_listening(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
    )
}

impl ProxyError {
    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::ConnectTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::Route(RouteError::Unauthorized(_)) => StatusCode::UNAUTHORIZED,
            _ => StatusCode::BAD_GATEWAY,
        }
    }

    /// The JSON body this error is answered with (the one place errors become wire data).
    pub fn body(&self) -> serde_json::Value {
        let code = self.status().as_u16();
        match self {
            ProxyError::Route(RouteError::SandboxNotFound(id)) => {
                json!({"code": code, "message": format!("The sandbox {id} was not found")})
            }
            ProxyError::Route(RouteError::PortNotOpen { sandbox_id, port }) => {
                port_not_open(code, sandbox_id, *port)
            }
            ProxyError::Connect {
                sandbox_id,
                port,
                source,
            } if is_not_listening(source) => port_not_open(code, sandbox_id, *port),
            ProxyError::Route(RouteError::Unavailable(_) | RouteError::Unauthorized(_)) => {
                json!({"code": code, "message": sandboxd_errors::chain(self)})
            }
            ProxyError::ConnectTimeout {
                sandbox_id, port, ..
            }
            | ProxyError::Connect {
                sandbox_id, port, ..
            }
            | ProxyError::Upstream {
                sandbox_id, port, ..
            }
            | ProxyError::UnexpectedUpgrade { sandbox_id, port }
            | ProxyError::Closed { sandbox_id, port } => {
                json!({"code": code, "message": sandboxd_errors::chain(self), "sandboxId": sandbox_id, "port": port})
            }
        }
    }
}

fn port_not_open(code: u16, sandbox_id: &str, port: u16) -> serde_json::Value {
    json!({"code": code, "message": PORT_NOT_OPEN_MESSAGE, "sandboxId": sandbox_id, "port": port})
}

impl IntoResponse for ProxyError {
    fn into_response(self) -> Response {
        let body = self.body().to_string();
        let mut resp = Response::new(axum::body::Body::from(body));
        *resp.status_mut() = self.status();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_sandbox_has_the_e2b_message() {
        let err = ProxyError::from(RouteError::SandboxNotFound("abc".into()));
        assert_eq!(err.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(
            err.body(),
            json!({"code": 502, "message": "The sandbox abc was not found"})
        );
    }

    #[test]
    fn a_refused_admission_is_401_with_its_reason() {
        let err = ProxyError::from(RouteError::Unauthorized("send the token".into()));
        assert_eq!(err.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            err.body(),
            json!({"code": 401, "message": "send the token"})
        );
    }

    #[test]
    fn refused_connect_is_port_not_open() {
        let err = ProxyError::Connect {
            sandbox_id: "abc".into(),
            port: 8000,
            source: io::Error::from(io::ErrorKind::ConnectionRefused),
        };
        assert_eq!(
            err.body(),
            json!({"code": 502, "message": PORT_NOT_OPEN_MESSAGE, "sandboxId": "abc", "port": 8000})
        );
    }

    #[test]
    fn connect_timeout_is_504_and_other_connect_errors_chain_the_cause() {
        let timeout = ProxyError::ConnectTimeout {
            sandbox_id: "abc".into(),
            port: 1,
            timeout: Duration::from_secs(5),
        };
        assert_eq!(timeout.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(timeout.body()["code"], 504);

        let other = ProxyError::Connect {
            sandbox_id: "abc".into(),
            port: 1,
            source: io::Error::new(io::ErrorKind::PermissionDenied, "nope"),
        };
        assert_eq!(other.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(
            other.body()["message"],
            "could not connect to port 1 of sandbox abc: nope"
        );
    }
}
