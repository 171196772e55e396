//! `POST /init`: the environment of the sandbox that takes this agent.
//!
//! Contract: a sandbox of a warm pool boots before any create names its environment; the create
//! that takes it sends its environment here (with the token, like every call) before it answers, so
//! every command started afterwards sees it. The body replaces the environment whole; processes
//! already running keep theirs. Answered 204; a body that is not an
//! [`sandboxd_envd::files::InitRequest`] is a 400.

use super::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use sandboxd_envd::files::{InitRequest, INIT_PATH};

pub(super) fn routes() -> Router<AppState> {
    Router::new().route(INIT_PATH, post(init))
}

async fn init(State(state): State<AppState>, Json(req): Json<InitRequest>) -> StatusCode {
    *state
        .envs
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = req.env_vars;
    tracing::info!("took the environment of the sandbox that took this agent");
    StatusCode::NO_CONTENT
}
