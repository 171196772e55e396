//! The Daytona API, served under `/api` on the daemon's listener, so that the real Daytona SDKs
//! (`daytona` on PyPI, `@daytonaio/sdk`) work unmodified with `DAYTONA_API_URL=http://HOST:PORT/api`
//! and `DAYTONA_API_KEY` set to a daemon token (sent as `Authorization: Bearer`, checked by
//! [`crate::auth::require`]; Daytona's organization headers are accepted and ignored).
//!
//! What is served so far (the rest of Daytona's surface answers 404 or, where a route exists but
//! the feature does not, 501):
//! - Control ([`control`]): `POST /api/sandbox`, `GET /api/sandbox` (`{items, nextCursor}`,
//!   `labels` filter), `GET|DELETE /api/sandbox/{idOrName}`, `POST …/start`, `POST …/stop`,
//!   `GET …/toolbox-proxy-url`.
//! - Toolbox ([`toolbox`]) at `/api/toolbox/{id}/…`: `process/execute`, `process/code-run`, the
//!   interpreter's contexts and `run_code` WebSocket, `user-home-dir`, `work-dir`; sessions
//!   ([`sessions`]: create, exec sync and async, command status, logs and their `follow` WebSocket,
//!   delete).
//! - The SDK's Socket.IO endpoint (`/api/socket.io/`) is a 404: the SDK then polls.
//!
//! Errors are `{statusCode, message, code}` ([`error`]) with the statuses the SDK maps.

pub mod control;
pub mod error;
pub mod models;
pub mod sessions;
pub mod toolbox;

use crate::auth::{self, Auth};
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};
use axum::{middleware, Router};
use sandboxd_service::Service;

/// Largest JSON body accepted.
const JSON_LIMIT: usize = 1024 * 1024;

/// The Daytona routes, authenticated, to merge into the daemon's router.
pub fn router(service: Service, auth: Auth) -> Router {
    Router::new()
        .route("/api/sandbox", post(control::create).get(control::list))
        .route(
            "/api/sandbox/{key}",
            get(control::get).delete(control::delete),
        )
        .route("/api/sandbox/{key}/start", post(control::start))
        .route("/api/sandbox/{key}/stop", post(control::stop))
        .route(
            "/api/sandbox/{key}/toolbox-proxy-url",
            get(control::toolbox_proxy_url),
        )
        .route("/api/toolbox/{id}/process/execute", post(toolbox::execute))
        .route(
            "/api/toolbox/{id}/process/code-run",
            post(toolbox::code_run),
        )
        .route(
            "/api/toolbox/{id}/process/interpreter/context",
            post(toolbox::create_context).get(toolbox::list_contexts),
        )
        .route(
            "/api/toolbox/{id}/process/interpreter/context/{context}",
            delete(toolbox::delete_context),
        )
        .route(
            "/api/toolbox/{id}/process/interpreter/execute",
            get(toolbox::run_code_socket),
        )
        .route(
            "/api/toolbox/{id}/process/session",
            post(sessions::create).get(sessions::list),
        )
        .route(
            "/api/toolbox/{id}/process/session/{sid}",
            get(sessions::get).delete(sessions::delete),
        )
        .route(
            "/api/toolbox/{id}/process/session/{sid}/exec",
            post(sessions::exec),
        )
        .route(
            "/api/toolbox/{id}/process/session/{sid}/command/{cid}",
            get(sessions::command),
        )
        .route(
            "/api/toolbox/{id}/process/session/{sid}/command/{cid}/logs",
            get(sessions::logs),
        )
        .route(
            "/api/toolbox/{id}/process/session/{sid}/command/{cid}/input",
            post(sessions::input),
        )
        .route(
            "/api/toolbox/{id}/user-home-dir",
            get(toolbox::user_home_dir),
        )
        .route("/api/toolbox/{id}/work-dir", get(toolbox::work_dir))
        .layer(DefaultBodyLimit::max(JSON_LIMIT))
        .route_layer(middleware::from_fn_with_state(auth, auth::require))
        .with_state(service)
}
