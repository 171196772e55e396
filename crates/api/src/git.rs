//! `/v1/sandboxes/{id}/git/…`: git in a sandbox, each route a translation onto the service's git
//! flow ([`sandboxd_service::git`], the one Daytona's toolbox git and the MCP tools use too).
//!
//! - `POST clone` → 201 `{path}`; `GET status?path=` → `GitStatus`; `POST add` → 204;
//!   `POST commit` → 201 `{hash}`.
//! - `GET branches?path=` → `{branches, current}`; `POST branches` → 201 (created at HEAD and
//!   checked out); `DELETE branches/{name}?path=` → 204; `POST checkout` → 204.
//! - `POST push` → 204; `POST pull` → 204 (fast-forward only).
//!
//! A repository's `path` is absolute or relative to the sandbox user's home. `username`/`password`
//! in a clone, push or pull body serve that one git command through a credential helper: never
//! written to the sandbox's disk, the remote's URL or a log. Failures are the native error shape
//! with `git_*` codes ([`crate::error`]): `git_auth_failed` (401), `git_forbidden` (403),
//! `git_repo_not_found` / `git_branch_not_found` / `git_file_not_found` (404), `git_conflict` /
//! `git_branch_exists` / `git_push_rejected` / `git_dirty_worktree` / `git_merge_conflict` (409),
//! `git_remote_rejected` (422), `git_transport_failed` (502), `git_refused` (400, git's words);
//! a name git would read as an option is a 400 `invalid_request` before anything runs.

use crate::error::{parse_json, Error};
use crate::v1::required_path;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use sandboxd_api_types as api;
use sandboxd_service::Service;

/// The routes, to be merged into the authenticated `/v1` router.
pub fn router() -> Router<Service> {
    let g = "/sandboxes/{id}/git";
    Router::new()
        .route(&format!("{g}/clone"), post(clone))
        .route(&format!("{g}/status"), get(status))
        .route(&format!("{g}/add"), post(add))
        .route(&format!("{g}/commit"), post(commit))
        .route(&format!("{g}/branches"), get(branches).post(create_branch))
        .route(&format!("{g}/branches/{{name}}"), delete(delete_branch))
        .route(&format!("{g}/checkout"), post(checkout))
        .route(&format!("{g}/push"), post(push))
        .route(&format!("{g}/pull"), post(pull))
}

/// Clone a repository into the sandbox (default path: the URL's last segment, in the user's home).
#[utoipa::path(post, path = "/v1/sandboxes/{id}/git/clone", operation_id = "git_clone", params(("id" = String, Path)),
    request_body = api::GitClone,
    responses((status = 201, body = api::GitCloned),
        (status = 400, body = api::ApiError, description = "a bad name or path (`invalid_request`), or git refused (`git_refused`)"),
        (status = 401, body = api::ApiError, description = "no API key (`unauthorized`), or the remote wants credentials or refused them (`git_auth_failed`)"),
        (status = 403, body = api::ApiError, description = "the remote forbids it (`git_forbidden`)"),
        (status = 404, body = api::ApiError, description = "no such sandbox, repository or branch"),
        (status = 409, body = api::ApiError, description = "the target is not an empty directory (`git_conflict`), or the sandbox's state"),
        (status = 502, body = api::ApiError, description = "the remote cannot be reached (`git_transport_failed`), or the sandbox's agent failed")))]
pub async fn clone(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<api::GitCloned>), Error> {
    let req: api::GitClone = parse_json(&body)?;
    let path = service.git_clone(&id, req.into()).await?;
    Ok((StatusCode::CREATED, Json(api::GitCloned { path })))
}

/// A repository's branch, upstream, and every file that is not unmodified.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/git/status", operation_id = "git_status",
    params(("id" = String, Path), ("path" = String, Query, description = "the repository")),
    responses((status = 200, body = api::GitStatus), (status = 400, body = api::ApiError),
        (status = 404, body = api::ApiError, description = "no such sandbox, or no repository there (`git_repo_not_found`)"),
        (status = 502, body = api::ApiError, description = "the sandbox's agent failed")))]
pub async fn status(
    State(service): State<Service>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<api::GitStatus>, Error> {
    let path = required_path(&raw)?;
    Ok(Json(service.git_status(&id, &path).await?.into()))
}

/// Stage files (`.` for all; deletions included).
#[utoipa::path(post, path = "/v1/sandboxes/{id}/git/add", operation_id = "git_add", params(("id" = String, Path)),
    request_body = api::GitAdd,
    responses((status = 204), (status = 400, body = api::ApiError),
        (status = 404, body = api::ApiError, description = "no such sandbox, repository (`git_repo_not_found`) or file (`git_file_not_found`)"),
        (status = 502, body = api::ApiError, description = "the sandbox's agent failed")))]
pub async fn add(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, Error> {
    let req: api::GitAdd = parse_json(&body)?;
    service.git_add(&id, &req.path, req.files).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Commit what is staged, as the author given (author and committer both).
#[utoipa::path(post, path = "/v1/sandboxes/{id}/git/commit", operation_id = "git_commit", params(("id" = String, Path)),
    request_body = api::GitCommit,
    responses((status = 201, body = api::GitCommitted), (status = 400, body = api::ApiError),
        (status = 404, body = api::ApiError, description = "no such sandbox or repository"),
        (status = 409, body = api::ApiError, description = "nothing to commit (`git_conflict`), or the sandbox's state"),
        (status = 502, body = api::ApiError, description = "the sandbox's agent failed")))]
pub async fn commit(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<api::GitCommitted>), Error> {
    let req: api::GitCommit = parse_json(&body)?;
    let hash = service.git_commit(&id, req.into()).await?;
    Ok((StatusCode::CREATED, Json(api::GitCommitted { hash })))
}

/// The local branches and the checked-out one.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/git/branches", operation_id = "git_branches",
    params(("id" = String, Path), ("path" = String, Query, description = "the repository")),
    responses((status = 200, body = api::GitBranches), (status = 400, body = api::ApiError),
        (status = 404, body = api::ApiError, description = "no such sandbox or repository"),
        (status = 502, body = api::ApiError, description = "the sandbox's agent failed")))]
pub async fn branches(
    State(service): State<Service>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<api::GitBranches>, Error> {
    let path = required_path(&raw)?;
    Ok(Json(service.git_branches(&id, &path).await?))
}

/// Create a branch at HEAD and check it out.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/git/branches", operation_id = "git_create_branch", params(("id" = String, Path)),
    request_body = api::GitCreateBranch,
    responses((status = 201, description = "created and checked out"), (status = 400, body = api::ApiError),
        (status = 404, body = api::ApiError, description = "no such sandbox or repository"),
        (status = 409, body = api::ApiError, description = "the branch exists (`git_branch_exists`), or the sandbox's state"),
        (status = 502, body = api::ApiError, description = "the sandbox's agent failed")))]
pub async fn create_branch(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, Error> {
    let req: api::GitCreateBranch = parse_json(&body)?;
    service.git_create_branch(&id, &req.path, &req.name).await?;
    Ok(StatusCode::CREATED)
}

/// Delete a branch, merged or not.
#[utoipa::path(delete, path = "/v1/sandboxes/{id}/git/branches/{name}", operation_id = "git_delete_branch",
    params(("id" = String, Path), ("name" = String, Path, description = "the branch"),
        ("path" = String, Query, description = "the repository")),
    responses((status = 204), (status = 400, body = api::ApiError),
        (status = 404, body = api::ApiError, description = "no such sandbox, repository or branch (`git_branch_not_found`)"),
        (status = 502, body = api::ApiError, description = "the sandbox's agent failed")))]
pub async fn delete_branch(
    State(service): State<Service>,
    Path((id, name)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<StatusCode, Error> {
    let path = required_path(&raw)?;
    service.git_delete_branch(&id, &path, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Check out a branch, or any revision (detached).
#[utoipa::path(post, path = "/v1/sandboxes/{id}/git/checkout", operation_id = "git_checkout", params(("id" = String, Path)),
    request_body = api::GitCheckout,
    responses((status = 204), (status = 400, body = api::ApiError),
        (status = 404, body = api::ApiError, description = "no such sandbox, repository or branch (`git_branch_not_found`)"),
        (status = 409, body = api::ApiError, description = "local changes would be overwritten (`git_dirty_worktree`), or the sandbox's state"),
        (status = 502, body = api::ApiError, description = "the sandbox's agent failed")))]
pub async fn checkout(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, Error> {
    let req: api::GitCheckout = parse_json(&body)?;
    service.git_checkout(&id, &req.path, &req.branch).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Push a branch (default the current one) to a remote (default `origin`).
#[utoipa::path(post, path = "/v1/sandboxes/{id}/git/push", operation_id = "git_push", params(("id" = String, Path)),
    request_body = api::GitSync,
    responses((status = 204), (status = 400, body = api::ApiError),
        (status = 401, body = api::ApiError, description = "no API key (`unauthorized`), or the remote wants credentials or refused them (`git_auth_failed`)"),
        (status = 403, body = api::ApiError, description = "the remote forbids it (`git_forbidden`)"),
        (status = 404, body = api::ApiError, description = "no such sandbox, repository or remote"),
        (status = 409, body = api::ApiError, description = "not a fast-forward of the remote branch (`git_push_rejected`), or the sandbox's state"),
        (status = 422, body = api::ApiError, description = "the remote refused the push (`git_remote_rejected`)"),
        (status = 502, body = api::ApiError, description = "the remote cannot be reached (`git_transport_failed`), or the sandbox's agent failed")))]
pub async fn push(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, Error> {
    let req: api::GitSync = parse_json(&body)?;
    service.git_push(&id, req.into()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Pull, fast-forward only (`setUpstream` has no effect).
#[utoipa::path(post, path = "/v1/sandboxes/{id}/git/pull", operation_id = "git_pull", params(("id" = String, Path)),
    request_body = api::GitSync,
    responses((status = 204), (status = 400, body = api::ApiError),
        (status = 401, body = api::ApiError, description = "no API key (`unauthorized`), or the remote wants credentials or refused them (`git_auth_failed`)"),
        (status = 403, body = api::ApiError, description = "the remote forbids it (`git_forbidden`)"),
        (status = 404, body = api::ApiError, description = "no such sandbox, repository, remote or branch"),
        (status = 409, body = api::ApiError, description = "the branches diverged (`git_merge_conflict`), local changes would be overwritten (`git_dirty_worktree`), or the sandbox's state"),
        (status = 502, body = api::ApiError, description = "the remote cannot be reached (`git_transport_failed`), or the sandbox's agent failed")))]
pub async fn pull(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, Error> {
    let req: api::GitSync = parse_json(&body)?;
    service.git_pull(&id, req.into()).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use crate::ApiDoc;
    use utoipa::OpenApi;

    /// Every git route is in the document, under an id of its own, with its credentials' failure
    /// where a remote is involved.
    #[test]
    fn the_git_routes_are_documented() {
        let doc =
            crate::openapi::document(&sandboxd_service::ServiceConfig::default(), &["namespace"]);
        let base = "/v1/sandboxes/{id}/git";
        let routes = [
            ("clone", "post", "git_clone", "201"),
            ("status", "get", "git_status", "200"),
            ("add", "post", "git_add", "204"),
            ("commit", "post", "git_commit", "201"),
            ("branches", "get", "git_branches", "200"),
            ("branches", "post", "git_create_branch", "201"),
            ("branches/{name}", "delete", "git_delete_branch", "204"),
            ("checkout", "post", "git_checkout", "204"),
            ("push", "post", "git_push", "204"),
            ("pull", "post", "git_pull", "204"),
        ];
        for (path, method, id, success) in routes {
            let op = &doc["paths"][format!("{base}/{path}")][method];
            assert_eq!(op["operationId"], id, "{method} {path}");
            for status in [success, "400", "401", "404", "502"] {
                assert!(op["responses"][status].is_object(), "{id}: {status}");
            }
        }
        for id in ["clone", "push", "pull"] {
            let op = &doc["paths"][format!("{base}/{id}")]["post"];
            assert!(op["responses"]["403"].is_object(), "{id}");
        }
        let raw = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let password = &raw["components"]["schemas"]["GitSync"]["properties"]["password"];
        assert_eq!(password["format"], "password", "{password}");
    }
}
