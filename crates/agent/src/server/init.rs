//! `POST /init` and `POST /env`: the environment every later command starts with.
//!
//! Contract: a sandbox of a warm pool boots before any create names its environment; the create
//! that takes it sends its environment to `/init` (with the token, like every call) before it
//! answers, so every command started afterwards sees it; that body replaces the environment whole.
//! `/env` changes it ([`sandboxd_envd::files::EnvChange`]: removals, then the variables set), as a
//! running sandbox's environment or secrets are updated. Processes already running keep theirs.
//! Both are answered 204; a body of the wrong shape is a 400.

use super::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use sandboxd_envd::files::{EnvChange, InitRequest, ENV_PATH, INIT_PATH};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route(INIT_PATH, post(init))
        .route(ENV_PATH, post(change))
}

async fn change(State(state): State<AppState>, Json(change): Json<EnvChange>) -> StatusCode {
    let mut envs = state
        .envs
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    *envs = change.applied(std::mem::take(&mut *envs));
    tracing::info!(
        set = change.set.len(),
        unset = change.unset.len(),
        "changed the environment of later commands"
    );
    StatusCode::NO_CONTENT
}

async fn init(State(state): State<AppState>, Json(req): Json<InitRequest>) -> StatusCode {
    *state
        .envs
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = req.env_vars;
    tracing::info!("took the environment of the sandbox that took this agent");
    StatusCode::NO_CONTENT
}
