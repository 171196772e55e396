//! Authentication: every `/v1` call carries a token (`Authorization: Bearer <token>`, or `X-API-KEY`
//! as the E2B SDK sends it). Tokens are kept only as SHA-256 hashes and compared in constant time.

use crate::error::Error;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The accepted token hashes.
#[derive(Clone)]
pub struct Auth {
    hashes: Arc<Vec<[u8; 32]>>,
}

impl Auth {
    /// Accepts exactly these tokens.
    pub fn new<'a>(tokens: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            hashes: Arc::new(tokens.into_iter().map(hash).collect()),
        }
    }

    /// Whether `token` is one of the accepted ones. Every stored hash is compared, in constant time.
    pub fn accepts(&self, token: &str) -> bool {
        let presented = hash(token);
        self.hashes
            .iter()
            .fold(subtle::Choice::from(0), |ok, h| ok | h.ct_eq(&presented))
            .into()
    }
}

fn hex_prefix(hash: &[u8; 32]) -> String {
    hash[..16].iter().map(|b| format!("{b:02x}")).collect()
}

fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The token a request presents, if any.
pub fn presented(req: &Request) -> Option<&str> {
    let headers = req.headers();
    if let Some(v) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        return v.strip_prefix("Bearer ").map(str::trim);
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Who is calling: a hash of their token, to scope what they own (e.g. idempotency keys).
#[derive(Debug, Clone)]
pub struct Caller(pub String);

/// Middleware refusing requests without an accepted token (401); accepted requests carry a [`Caller`].
pub async fn require(State(auth): State<Auth>, mut req: Request, next: Next) -> Response {
    match presented(&req) {
        Some(token) if auth.accepts(token) => {
            let caller = Caller(hex_prefix(&hash(token)));
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Some(_) => {
            Error::new(StatusCode::UNAUTHORIZED, "unauthorized", "invalid token").into_response()
        }
        None => Error::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing token: send Authorization: Bearer <token>",
        )
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_configured_tokens_are_accepted() {
        let auth = Auth::new(["secret-one", "secret-two"]);
        assert!(auth.accepts("secret-one"));
        assert!(auth.accepts("secret-two"));
        assert!(!auth.accepts("secret-on"));
        assert!(!auth.accepts(""));
        assert!(!Auth::new([]).accepts(""));
    }
}
