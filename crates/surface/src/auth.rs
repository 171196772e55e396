//! Authentication and the two scopes of API keys, for every surface of the listener: `/v1`, the E2B
//! facade and the Daytona facade all layer [`require`].
//!
//! Contract:
//! - A request carries a key as `Authorization: Bearer <key>` or `X-API-KEY: <key>` (as the E2B SDK
//!   sends it); without one it is a 401.
//! - The daemon's configured admin token is compared in constant time against its SHA-256 held in
//!   memory; any other key is looked up by its SHA-256 in the store on every request
//!   ([`Service::verify_api_key`]), nothing cached, so a revoked key is a 401 from the next request
//!   on.
//! - An accepted request carries a [`Caller`]: the key's id and scope (what per-key limits hang off)
//!   and an owner string derived from the key, which scopes what the caller owns (idempotency keys).
//! - [`admin_only`] refuses `user` keys with 403 `forbidden`; the router layers it over the routes
//!   that manage keys, webhooks and the reconcilers.
//! - A store that cannot be read is a 500, never an accepted or a refused key.

use crate::error::Error;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sandboxd_service::Service;
use sandboxd_store::{KeyScope, TokenId};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The configured admin token and the store of minted keys.
#[derive(Clone)]
pub struct Auth {
    configured: Arc<Configured>,
    service: Service,
}

struct Configured {
    hash: [u8; 32],
    id: TokenId,
}

impl Auth {
    /// Accepts `admin_token` (stored as key `admin_id`) and every key stored through `service`.
    pub fn new(service: Service, admin_token: &str, admin_id: TokenId) -> Self {
        Self {
            configured: Arc::new(Configured {
                hash: hash(admin_token),
                id: admin_id,
            }),
            service,
        }
    }

    /// The key `token` is, if it is accepted.
    pub async fn check(&self, token: &str) -> Result<Option<Key>, Error> {
        let presented = hash(token);
        if bool::from(self.configured.hash.ct_eq(&presented)) {
            return Ok(Some(Key {
                id: self.configured.id.clone(),
                scope: KeyScope::Admin,
            }));
        }
        Ok(self.service.verify_api_key(token).await?.map(|found| Key {
            id: found.id,
            scope: found.scope,
        }))
    }
}

/// An accepted key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// Its id in the store.
    pub id: TokenId,
    /// What it may do.
    pub scope: KeyScope,
}

fn hex_prefix(hash: &[u8; 32]) -> String {
    hash[..16].iter().map(|b| format!("{b:02x}")).collect()
}

fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The token a request presents, if any.
pub fn presented(req: &Request) -> Option<&str> {
    presented_in(req.headers())
}

/// The token `headers` carry: a bearer in `Authorization` (which, when present, is the only place
/// looked at), else `X-API-KEY`, else — for a browser's WebSocket, which cannot set headers — a
/// `Sec-WebSocket-Protocol` entry [`WEBSOCKET_BEARER`]`<token>`.
fn presented_in(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        return v.strip_prefix("Bearer ").map(str::trim);
    }
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(key.trim());
    }
    headers
        .get(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())?
        .split(',')
        .find_map(|p| p.trim().strip_prefix(WEBSOCKET_BEARER))
}

/// The `Sec-WebSocket-Protocol` entry that carries a key (the console's terminal).
pub const WEBSOCKET_BEARER: &str = "sandboxd.bearer.";

/// Who is calling.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The key they called with.
    pub key: Key,
    /// A hash of their key, to scope what they own (e.g. idempotency keys).
    pub owner: String,
}

/// Middleware refusing requests without an accepted key (401); accepted requests carry a [`Caller`].
pub async fn require(State(auth): State<Auth>, req: Request, next: Next) -> Response {
    match authenticate(&auth, req).await {
        Ok(req) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// [`require`]'s check, for a surface that renders the refusal in its own shape: the request with
/// its [`Caller`], or why it is refused (401, or 500 when the store cannot be read).
pub async fn authenticate(auth: &Auth, mut req: Request) -> Result<Request, Error> {
    let Some(token) = presented(&req) else {
        return Err(Error::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing token: send Authorization: Bearer <token>",
        ));
    };
    let Some(key) = auth.check(token).await? else {
        return Err(Error::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "invalid token",
        ));
    };
    let caller = Caller {
        key,
        owner: hex_prefix(&hash(token)),
    };
    req.extensions_mut().insert(caller);
    Ok(req)
}

/// Middleware, inside [`require`]: only `admin` keys pass; `user` keys get 403 `forbidden`.
pub async fn admin_only(req: Request, next: Next) -> Response {
    match admit_admin(req.extensions().get::<Caller>()) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

fn admit_admin(caller: Option<&Caller>) -> Result<(), Error> {
    match caller.map(|c| c.key.scope) {
        Some(KeyScope::Admin) => Ok(()),
        Some(KeyScope::User) => Err(Error::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this API key's scope is user: managing API keys, webhooks, warm pools and the reconcilers \
             takes an admin key",
        )),
        // Not behind `require`: a wiring mistake, refused rather than let through.
        None => Err(Error::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing token: send Authorization: Bearer <token>",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, value.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_key_is_a_bearer_or_an_x_api_key() {
        assert_eq!(
            presented_in(&headers(&[("authorization", "Bearer k1")])),
            Some("k1")
        );
        assert_eq!(presented_in(&headers(&[("x-api-key", " k2 ")])), Some("k2"));
        assert_eq!(
            presented_in(&headers(&[
                ("authorization", "Bearer k1"),
                ("x-api-key", "k2")
            ])),
            Some("k1")
        );
        // Another scheme is no key at all (not a fallback to X-API-KEY).
        assert_eq!(
            presented_in(&headers(&[
                ("authorization", "Basic a2V5"),
                ("x-api-key", "k2")
            ])),
            None
        );
        assert_eq!(presented_in(&HeaderMap::new()), None);
    }

    #[test]
    fn a_browser_websocket_offers_its_key_as_a_subprotocol() {
        let mut h = HeaderMap::new();
        h.insert(
            "sec-websocket-protocol",
            "sandboxd.terminal, sandboxd.bearer.e2b_abc"
                .parse()
                .unwrap(),
        );
        assert_eq!(presented_in(&h), Some("e2b_abc"));
        h.insert("x-api-key", "header-wins".parse().unwrap());
        assert_eq!(presented_in(&h), Some("header-wins"));
        let mut other = HeaderMap::new();
        other.insert("sec-websocket-protocol", "chat, superchat".parse().unwrap());
        assert_eq!(presented_in(&other), None);
    }

    #[test]
    fn only_admin_keys_are_admitted_to_admin_routes() {
        let caller = |scope| Caller {
            key: Key {
                id: TokenId("k".into()),
                scope,
            },
            owner: String::new(),
        };
        assert!(admit_admin(Some(&caller(KeyScope::Admin))).is_ok());
        let refused = admit_admin(Some(&caller(KeyScope::User))).unwrap_err();
        assert_eq!(
            (refused.status, refused.code),
            (StatusCode::FORBIDDEN, "forbidden")
        );
        let unwired = admit_admin(None).unwrap_err();
        assert_eq!(unwired.status, StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn the_owner_is_a_hash_prefix_not_the_key() {
        let owner = hex_prefix(&hash("e2b_secret"));
        assert_eq!(owner.len(), 32);
        assert!(!owner.contains("secret"));
        assert_eq!(owner, hex_prefix(&hash("e2b_secret")));
        assert_ne!(owner, hex_prefix(&hash("e2b_secreu")));
    }
}
