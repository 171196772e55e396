//! Who may call, and as whom.
//!
//! [`require_token`] guards every route except `GET /health` and `/files` (which checks the token or a
//! URL signature itself, in [`check_files_access`]). [`Caller`] is the user a call acts as, resolved
//! from `Authorization: Basic base64("<user>:")` or a `username`, else the default user.

use super::error::ServerError;
use super::users::{User, UserDb};
use super::{rpc, AppState};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::Response;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sandboxd_envd::files::{self, FilesQuery, Operation};
use sandboxd_envd::ACCESS_TOKEN_HEADER;
use subtle::ConstantTimeEq;

/// Middleware: 401 unless the request carries the access token (or is exempt, see module docs).
pub async fn require_token(
    State(state): State<AppState>,
    req: Request<Body>,
    next: Next,
) -> Response {
    let path = req.uri().path();
    let exempt = (req.method() == Method::GET && path == files::HEALTH_PATH) || path == files::PATH;
    if exempt || token_matches(&state, req.headers()) {
        return next.run(req).await;
    }
    let err = ServerError::Unauthenticated(
        "unauthorized access, please provide a valid access token".into(),
    );
    tracing::warn!(path, "call without a valid access token");
    if path.starts_with("/process.") || path.starts_with("/filesystem.") {
        rpc::error_response(&err)
    } else {
        super::files::error_response(&err)
    }
}

fn token_matches(state: &AppState, headers: &HeaderMap) -> bool {
    match headers.get(ACCESS_TOKEN_HEADER) {
        Some(v) => bool::from(v.as_bytes().ct_eq(state.token().as_bytes())),
        None => false,
    }
}

/// `/files` access: the token header when present (it must match), else a valid, unexpired signature.
pub fn check_files_access(
    state: &AppState,
    headers: &HeaderMap,
    q: &FilesQuery,
    op: Operation,
) -> Result<(), ServerError> {
    if headers.contains_key(ACCESS_TOKEN_HEADER) {
        return if token_matches(state, headers) {
            Ok(())
        } else {
            Err(ServerError::Unauthenticated(
                "access token present in header but does not match".into(),
            ))
        };
    }
    let Some(sig) = &q.signature else {
        return Err(ServerError::Unauthenticated(
            "missing access token or signature".into(),
        ));
    };
    let expected = files::signature(
        q.path.as_deref().unwrap_or(""),
        op,
        q.username.as_deref().unwrap_or(""),
        &state.token(),
        q.signature_expiration,
    );
    if !bool::from(expected.as_bytes().ct_eq(sig.as_bytes())) {
        return Err(ServerError::Unauthenticated("invalid signature".into()));
    }
    if let Some(exp) = q.signature_expiration {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(i64::MAX);
        if exp < now {
            return Err(ServerError::Unauthenticated(
                "signature is already expired".into(),
            ));
        }
    }
    Ok(())
}

/// The user a call acts as, with the user database it was resolved from.
pub struct Caller {
    pub user: User,
    pub db: UserDb,
}

impl Caller {
    /// The user named by `Authorization: Basic`, else the default user.
    pub fn from_headers(state: &AppState, headers: &HeaderMap) -> Result<Caller, ServerError> {
        let name = basic_auth_user(headers)?;
        Caller::named(state, name.as_deref())
    }

    /// The user `name`, else (None or empty) the default user.
    pub fn named(state: &AppState, name: Option<&str>) -> Result<Caller, ServerError> {
        let name = match name {
            Some(n) if !n.is_empty() => n,
            _ => state.default_user.as_str(),
        };
        let db = UserDb::load();
        let user = db
            .user(name)
            .ok_or_else(|| ServerError::Unauthenticated(format!("invalid username: '{name}'")))?;
        Ok(Caller { user, db })
    }
}

/// The user name in `Authorization: Basic base64("<user>:<anything>")`, if the header is there.
fn basic_auth_user(headers: &HeaderMap) -> Result<Option<String>, ServerError> {
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let bad = || ServerError::Unauthenticated("malformed Authorization header".into());
    let value = value.to_str().map_err(|_| bad())?;
    let Some(encoded) = value
        .strip_prefix("Basic ")
        .or_else(|| value.strip_prefix("basic "))
    else {
        // Another scheme (e.g. Bearer) names no user.
        return Ok(None);
    };
    let decoded = STANDARD.decode(encoded.trim()).map_err(|_| bad())?;
    let text = String::from_utf8(decoded).map_err(|_| bad())?;
    let user = text.split_once(':').map(|(u, _)| u).unwrap_or(&text);
    Ok(Some(user.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_auth(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::AUTHORIZATION,
            HeaderValue::from_str(v).unwrap(),
        );
        h
    }

    #[test]
    fn basic_auth_names_the_user() {
        let enc = STANDARD.encode("user:");
        assert_eq!(
            basic_auth_user(&with_auth(&format!("Basic {enc}")))
                .unwrap()
                .as_deref(),
            Some("user")
        );
        assert_eq!(basic_auth_user(&HeaderMap::new()).unwrap(), None);
        assert_eq!(basic_auth_user(&with_auth("Bearer x")).unwrap(), None);
        assert!(basic_auth_user(&with_auth("Basic !!!")).is_err());
    }
}
