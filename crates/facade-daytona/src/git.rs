//! Daytona's toolbox git (`/api/toolbox/{id}/git/…`; bodies snake_case as the SDK sends them):
//! each route parses Daytona's request, calls the service's git flow ([`sandboxd_service::git`]:
//! credentials through a one-command helper, paths relative to the user's home) and renders
//! Daytona's answer; failures get the daemon's git codes in [`super::toolbox_error`].
//!
//! - `POST /git/clone {url, path, branch?, commit_id?, depth?, insecure_skip_tls?, username?,
//!   password?}` → 200: `git clone` (`--branch`, `--depth`), then a detached checkout of
//!   `commit_id` when given; the remote's URL is kept without credentials.
//! - `GET /git/status?path=` → `{currentBranch, fileStatus: [{name, staging, worktree, extra}],
//!   ahead, behind, branchPublished, upstream, detached}`.
//! - `POST /git/add {path, files}` (`.` for all; deletions included) → 200; `POST /git/commit
//!   {path, message, author, email, allow_empty?}` → `{hash}` (author and committer both).
//! - `GET /git/branches?path=` → `{branches, current}`; `POST /git/branches {path, name}` → 201
//!   (created and checked out, as Daytona does); `DELETE /git/branches {path, name}` → 204;
//!   `POST /git/checkout {path, branch}` → 200 (a branch or any revision).
//! - `POST /git/push {path, branch?, remote?, set_upstream?, username?, password?}` → 200 (the
//!   current branch to `origin` by default); `POST /git/pull {path, branch?, remote?, username?,
//!   password?}` → 200, fast-forward only (a diverged branch is a 409 `GIT_MERGE_CONFLICT`).
//! - The rest of the SDK's `Git` ([`super::git_more`]): init, remotes, reset, restore, config.

use super::toolbox_error::ToolboxError;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use sandboxd_service::git::{Credentials, GitClone, GitCommit, GitStatus, GitSync};
use sandboxd_service::Service;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A JSON body.
pub fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, ToolboxError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ToolboxError::bad_request(format!("invalid JSON body: {e}")))
}

/// The `path` query parameter (`""` when absent: the user's home).
pub fn path_query(q: &BTreeMap<String, String>) -> &str {
    q.get("path").map(String::as_str).unwrap_or_default()
}

#[derive(Debug, Deserialize)]
struct CloneRequest {
    url: String,
    path: String,
    #[serde(default)]
    branch: Option<String>,
    #[serde(default)]
    commit_id: Option<String>,
    #[serde(default)]
    depth: Option<u32>,
    #[serde(default)]
    insecure_skip_tls: Option<bool>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// `POST /git/clone`.
pub async fn clone(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: CloneRequest = body(&bytes)?;
    let clone = GitClone {
        credentials: Credentials::of(req.username.as_deref(), req.password.as_deref()),
        url: req.url,
        path: Some(req.path),
        branch: req.branch,
        commit: req.commit_id,
        depth: req.depth,
        insecure_skip_tls: req.insecure_skip_tls == Some(true),
    };
    service.git_clone(&id, clone).await?;
    Ok(StatusCode::OK)
}

/// `GET /git/status`.
pub async fn status(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Result<Json<GitStatus>, ToolboxError> {
    Ok(Json(service.git_status(&id, path_query(&q)).await?))
}

#[derive(Debug, Deserialize)]
struct AddRequest {
    path: String,
    files: Vec<String>,
}

/// `POST /git/add`.
pub async fn add(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: AddRequest = body(&bytes)?;
    service.git_add(&id, &req.path, req.files).await?;
    Ok(StatusCode::OK)
}

#[derive(Debug, Deserialize)]
struct CommitRequest {
    path: String,
    message: String,
    author: String,
    email: String,
    #[serde(default)]
    allow_empty: Option<bool>,
}

/// `POST /git/commit`.
pub async fn commit(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>, ToolboxError> {
    let req: CommitRequest = body(&bytes)?;
    let commit = GitCommit {
        path: req.path,
        message: req.message,
        author: req.author,
        email: req.email,
        allow_empty: req.allow_empty == Some(true),
    };
    let hash = service.git_commit(&id, commit).await?;
    Ok(Json(json!({ "hash": hash })))
}

/// `GET /git/branches`.
pub async fn branches(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ToolboxError> {
    let listed = service.git_branches(&id, path_query(&q)).await?;
    Ok(Json(
        json!({ "branches": listed.branches, "current": listed.current }),
    ))
}

#[derive(Debug, Deserialize)]
struct BranchRequest {
    path: String,
    name: String,
}

/// `POST /git/branches` → 201 (the new branch is checked out, as Daytona does).
pub async fn create_branch(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: BranchRequest = body(&bytes)?;
    service.git_create_branch(&id, &req.path, &req.name).await?;
    Ok(StatusCode::CREATED)
}

/// `DELETE /git/branches` → 204.
pub async fn delete_branch(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: BranchRequest = body(&bytes)?;
    service.git_delete_branch(&id, &req.path, &req.name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
struct CheckoutRequest {
    path: String,
    branch: String,
}

/// `POST /git/checkout`.
pub async fn checkout(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: CheckoutRequest = body(&bytes)?;
    service.git_checkout(&id, &req.path, &req.branch).await?;
    Ok(StatusCode::OK)
}

#[derive(Debug, Deserialize)]
struct SyncRequest {
    path: String,
    #[serde(default)]
    branch: Option<String>,
    #[serde(default)]
    remote: Option<String>,
    #[serde(default)]
    set_upstream: Option<bool>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

impl From<SyncRequest> for GitSync {
    fn from(req: SyncRequest) -> Self {
        GitSync {
            credentials: Credentials::of(req.username.as_deref(), req.password.as_deref()),
            path: req.path,
            remote: req.remote,
            branch: req.branch,
            set_upstream: req.set_upstream == Some(true),
        }
    }
}

/// `POST /git/push`.
pub async fn push(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: SyncRequest = body(&bytes)?;
    service.git_push(&id, req.into()).await?;
    Ok(StatusCode::OK)
}

/// `POST /git/pull`.
pub async fn pull(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: SyncRequest = body(&bytes)?;
    service.git_pull(&id, req.into()).await?;
    Ok(StatusCode::OK)
}
