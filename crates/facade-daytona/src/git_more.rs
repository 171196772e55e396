//! The rest of the SDK's `Git` on the toolbox (see [`super::git`] for the core), each route a
//! translation onto the service's git flow ([`sandboxd_service::git`]):
//! - `POST /git/init {path, bare?, initial_branch?}` → 201 (the directory is made).
//! - `GET /git/remotes?path=` → `{remotes: [{name, url}]}`; `POST /git/remotes {path, name, url,
//!   fetch?, overwrite?}` → 201 (an existing name is a 409 unless `overwrite`).
//! - `POST /git/reset {path, mode?, target?, files?}`; `POST /git/restore {path, files, staged?,
//!   worktree?, source?}` → 200.
//! - `GET /git/config?key=&scope=&path=` → `{value}` (`null` when unset); `POST /git/config
//!   {key, value, scope?, path?}` and `POST /git/config/user {name, email, scope?, path?}` → 200;
//!   scope `global` (default, the user's `~/.gitconfig`), `local` (needs `path`) or `system`.
//! - `POST /git/credentials` (`dangerously_authenticate`) stores a password in the sandbox user's
//!   git credential store, as its name warns; credentials given to clone, push and pull are
//!   never stored.

use super::git::{body, path_query};
use super::toolbox_error::ToolboxError;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use sandboxd_service::git::{GitAddRemote, GitReset, GitRestore, GitStoredCredentials};
use sandboxd_service::Service;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

#[derive(Debug, Deserialize)]
struct InitRequest {
    path: String,
    #[serde(default)]
    bare: Option<bool>,
    #[serde(default)]
    initial_branch: Option<String>,
}

/// `POST /git/init` → 201.
pub async fn init(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: InitRequest = body(&bytes)?;
    let bare = req.bare == Some(true);
    service
        .git_init(&id, &req.path, bare, req.initial_branch.as_deref())
        .await?;
    Ok(StatusCode::CREATED)
}

/// `GET /git/remotes`.
pub async fn remotes(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ToolboxError> {
    let remotes: Vec<Value> = service
        .git_remotes(&id, path_query(&q))
        .await?
        .into_iter()
        .map(|(name, url)| json!({ "name": name, "url": url }))
        .collect();
    Ok(Json(json!({ "remotes": remotes })))
}

#[derive(Debug, Deserialize)]
struct AddRemoteRequest {
    path: String,
    name: String,
    url: String,
    #[serde(default)]
    fetch: Option<bool>,
    #[serde(default)]
    overwrite: Option<bool>,
}

/// `POST /git/remotes` → 201.
pub async fn add_remote(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: AddRemoteRequest = body(&bytes)?;
    let remote = GitAddRemote {
        path: req.path,
        name: req.name,
        url: req.url,
        fetch: req.fetch == Some(true),
        overwrite: req.overwrite == Some(true),
    };
    service.git_add_remote(&id, remote).await?;
    Ok(StatusCode::CREATED)
}

#[derive(Debug, Deserialize)]
struct ResetRequest {
    path: String,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    files: Option<Vec<String>>,
}

/// `POST /git/reset`.
pub async fn reset(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: ResetRequest = body(&bytes)?;
    let reset = GitReset {
        path: req.path,
        mode: req.mode,
        target: req.target,
        files: req.files.unwrap_or_default(),
    };
    service.git_reset(&id, reset).await?;
    Ok(StatusCode::OK)
}

#[derive(Debug, Deserialize)]
struct RestoreRequest {
    path: String,
    files: Vec<String>,
    #[serde(default)]
    staged: Option<bool>,
    #[serde(default)]
    worktree: Option<bool>,
    #[serde(default)]
    source: Option<String>,
}

/// `POST /git/restore`.
pub async fn restore(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: RestoreRequest = body(&bytes)?;
    let restore = GitRestore {
        path: req.path,
        files: req.files,
        staged: req.staged == Some(true),
        worktree: req.worktree == Some(true),
        source: req.source,
    };
    service.git_restore(&id, restore).await?;
    Ok(StatusCode::OK)
}

/// `GET /git/config`.
pub async fn get_config(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ToolboxError> {
    let get = |k: &str| q.get(k).map(String::as_str);
    let value = service
        .git_config_get(
            &id,
            get("key").unwrap_or_default(),
            get("scope"),
            get("path"),
        )
        .await?;
    Ok(Json(json!({ "value": value })))
}

#[derive(Debug, Deserialize)]
struct SetConfigRequest {
    key: String,
    value: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    path: Option<String>,
}

/// `POST /git/config`.
pub async fn set_config(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: SetConfigRequest = body(&bytes)?;
    service
        .git_config_set(
            &id,
            &req.key,
            &req.value,
            req.scope.as_deref(),
            req.path.as_deref(),
        )
        .await?;
    Ok(StatusCode::OK)
}

#[derive(Debug, Deserialize)]
struct ConfigureUserRequest {
    name: String,
    email: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    path: Option<String>,
}

/// `POST /git/config/user`.
pub async fn configure_user(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: ConfigureUserRequest = body(&bytes)?;
    service
        .git_configure_user(
            &id,
            &req.name,
            &req.email,
            req.scope.as_deref(),
            req.path.as_deref(),
        )
        .await?;
    Ok(StatusCode::OK)
}

/// `POST /git/credentials {username, password, host?, protocol?}` (the SDK's
/// `dangerously_authenticate`): the service stores them for `protocol://host` (default
/// `https://github.com`) in the sandbox user's git credential store.
pub async fn authenticate(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    #[derive(Deserialize)]
    struct Req {
        username: String,
        password: String,
        host: Option<String>,
        protocol: Option<String>,
    }
    let req: Req = body(&bytes)?;
    let stored = GitStoredCredentials {
        username: req.username,
        password: req.password,
        host: req.host,
        protocol: req.protocol,
    };
    service.git_store_credentials(&id, stored).await?;
    Ok(StatusCode::OK)
}
