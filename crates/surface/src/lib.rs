//! What every HTTP surface of the daemon shares, so that no surface depends on another: who is
//! calling ([`auth`]: keys, scopes, the [`auth::Caller`] a request carries), the native error shape
//! and the one place service errors become HTTP statuses ([`error`]), which the vendor facades
//! (`sandboxd-facade-e2b`, `sandboxd-facade-daytona`) and MCP (`sandboxd-mcp`) reshape into their
//! own, a template's build log as a body ([`logs`]), and what the cluster's forwarding layer needs
//! to know of a surface's sandbox routes ([`routes`]).
//!
//! The surfaces themselves — `/v1` and the server in `sandboxd-api`, each facade in its own crate —
//! parse their requests, call one flow of `sandboxd-service`, and render its answer with these.

pub mod auth;
pub mod error;
pub mod logs;
pub mod routes;

use axum::Extension;

/// Largest JSON body a surface accepts.
pub const JSON_LIMIT: usize = 1024 * 1024;

/// The id of the caller's API key, whose limits its creates count against (`""` without one).
pub fn key_id(caller: Option<&Extension<auth::Caller>>) -> String {
    caller.map_or_else(String::new, |Extension(c)| c.key.id.0.clone())
}
