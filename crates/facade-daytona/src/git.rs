//! Daytona's toolbox git (`/api/toolbox/{id}/git/…`; bodies snake_case as the SDK sends them),
//! each call one or two `git` commands in the sandbox ([`super::git_cmd`]: credentials through a
//! one-command helper, failures with the daemon's git codes). Paths are the repository's
//! directory, relative ones from the user's home.
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

use super::files::absolute;
use super::git_cmd::{strip_userinfo, Credentials, GitRun};
use super::git_status::{parse_status, GitStatus};
use super::toolbox_error::ToolboxError;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
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

/// The repository directory of a request, absolute.
pub fn repo_path(path: &str) -> Result<String, ToolboxError> {
    let path = absolute(path);
    sandboxd_service::files::checked(&path)?;
    Ok(path)
}

/// A branch, remote or revision name: not empty, not an option, no whitespace or control
/// characters (git checks the rest).
pub fn ref_name(what: &str, name: &str) -> Result<(), ToolboxError> {
    let ok = !name.is_empty()
        && !name.starts_with('-')
        && !name.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(ToolboxError::bad_request(format!(
            "invalid {what} {name:?}"
        )))
    }
}

fn path_query(q: &BTreeMap<String, String>) -> Result<String, ToolboxError> {
    repo_path(q.get("path").map(String::as_str).unwrap_or_default())
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
    let target = repo_path(&req.path)?;
    if req.url.is_empty() || req.url.starts_with('-') || req.url.contains(char::is_control) {
        return Err(ToolboxError::bad_request("url must be a repository URL"));
    }
    let (url, in_url) = strip_userinfo(&req.url);
    let credentials = Credentials::of(req.username.as_deref(), req.password.as_deref()).or(in_url);
    let mut args = vec!["clone".to_string(), "--quiet".to_string()];
    if let Some(branch) = req.branch.as_deref().filter(|b| !b.is_empty()) {
        ref_name("branch", branch)?;
        args.extend(["--branch".into(), branch.into()]);
    }
    if let Some(depth) = req.depth.filter(|d| *d > 0) {
        args.extend(["--depth".into(), depth.to_string()]);
    }
    args.extend(["--".into(), url, target.clone()]);
    let mut run = GitRun::new("/", &[]);
    run.args = args;
    run.credentials = credentials.as_ref();
    run.network = true;
    if req.insecure_skip_tls == Some(true) {
        run.config.push("http.sslVerify=false".into());
    }
    run.run(&service, &id).await?;
    if let Some(commit) = req.commit_id.as_deref().filter(|c| !c.is_empty()) {
        ref_name("commit", commit)?;
        GitRun::new(&target, &["checkout", "--quiet", "--detach", commit])
            .run(&service, &id)
            .await?;
    }
    Ok(StatusCode::OK)
}

/// `GET /git/status`.
pub async fn status(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Result<Json<GitStatus>, ToolboxError> {
    let repo = path_query(&q)?;
    let out = GitRun::new(&repo, &["status", "--porcelain=v2", "--branch", "-z"])
        .run(&service, &id)
        .await?;
    Ok(Json(parse_status(&out)))
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
    let repo = repo_path(&req.path)?;
    if req.files.is_empty() {
        return Err(ToolboxError::bad_request(
            "files must name at least one file",
        ));
    }
    let mut run = GitRun::new(&repo, &["add", "-A", "--"]);
    run.args.extend(req.files);
    run.run(&service, &id).await?;
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
    let repo = repo_path(&req.path)?;
    if req.author.trim().is_empty() || req.email.trim().is_empty() {
        return Err(ToolboxError::bad_request("author and email are required"));
    }
    let mut run = GitRun::new(&repo, &["commit", "--quiet", "-m", &req.message]);
    if req.allow_empty == Some(true) {
        run.args.push("--allow-empty".into());
    }
    for (var, value) in [
        ("GIT_AUTHOR_NAME", &req.author),
        ("GIT_COMMITTER_NAME", &req.author),
        ("GIT_AUTHOR_EMAIL", &req.email),
        ("GIT_COMMITTER_EMAIL", &req.email),
    ] {
        run.env.insert(var.into(), value.clone());
    }
    run.run(&service, &id).await?;
    let hash = GitRun::new(&repo, &["rev-parse", "HEAD"])
        .run(&service, &id)
        .await?;
    Ok(Json(json!({ "hash": hash.trim() })))
}

/// `GET /git/branches`.
pub async fn branches(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ToolboxError> {
    let repo = path_query(&q)?;
    let out = GitRun::new(
        &repo,
        &[
            "for-each-ref",
            "--format=%(HEAD)%(refname:short)",
            "refs/heads",
        ],
    )
    .run(&service, &id)
    .await?;
    let (mut branches, mut current) = (Vec::new(), String::new());
    for line in out.lines() {
        let (head, name) = line.split_at(line.len().min(1));
        if head == "*" {
            current = name.to_string();
        }
        if !name.is_empty() {
            branches.push(name.to_string());
        }
    }
    Ok(Json(json!({ "branches": branches, "current": current })))
}

#[derive(Debug, Deserialize)]
struct BranchRequest {
    path: String,
    name: String,
}

/// Runs `git <verb…> <name>` for the branch a request names.
async fn branch_command(
    service: &Service,
    id: &str,
    bytes: &Bytes,
    verb: &[&str],
) -> Result<(), ToolboxError> {
    let req: BranchRequest = body(bytes)?;
    let repo = repo_path(&req.path)?;
    ref_name("branch", &req.name)?;
    let mut args = verb.to_vec();
    args.push(&req.name);
    GitRun::new(&repo, &args).run(service, id).await?;
    Ok(())
}

/// `POST /git/branches` → 201 (the new branch is checked out, as Daytona does).
pub async fn create_branch(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    branch_command(&service, &id, &bytes, &["checkout", "--quiet", "-b"]).await?;
    Ok(StatusCode::CREATED)
}

/// `DELETE /git/branches` → 204.
pub async fn delete_branch(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    branch_command(&service, &id, &bytes, &["branch", "--quiet", "-D"]).await?;
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
    let repo = repo_path(&req.path)?;
    ref_name("branch", &req.branch)?;
    GitRun::new(&repo, &["checkout", "--quiet", &req.branch, "--"])
        .run(&service, &id)
        .await?;
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

/// The remote and branch of a push or pull, checked.
fn remote_and_branch(req: &SyncRequest) -> Result<(Option<&str>, Option<&str>), ToolboxError> {
    let remote = req.remote.as_deref().filter(|r| !r.is_empty());
    let branch = req.branch.as_deref().filter(|b| !b.is_empty());
    if let Some(r) = remote {
        ref_name("remote", r)?;
    }
    if let Some(b) = branch {
        ref_name("branch", b)?;
    }
    Ok((remote, branch))
}

/// `POST /git/push`.
pub async fn push(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: SyncRequest = body(&bytes)?;
    let repo = repo_path(&req.path)?;
    let (remote, branch) = remote_and_branch(&req)?;
    let credentials = Credentials::of(req.username.as_deref(), req.password.as_deref());
    let mut run = GitRun::new(&repo, &["push", "--quiet"]);
    if req.set_upstream == Some(true) {
        run.args.push("--set-upstream".into());
    }
    run.args.push(remote.unwrap_or("origin").into());
    run.args.push(branch.unwrap_or("HEAD").into());
    run.credentials = credentials.as_ref();
    run.network = true;
    run.run(&service, &id).await?;
    Ok(StatusCode::OK)
}

/// `POST /git/pull`.
pub async fn pull(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ToolboxError> {
    let req: SyncRequest = body(&bytes)?;
    let repo = repo_path(&req.path)?;
    let (remote, branch) = remote_and_branch(&req)?;
    let credentials = Credentials::of(req.username.as_deref(), req.password.as_deref());
    let mut run = GitRun::new(&repo, &["pull", "--quiet", "--ff-only"]);
    match (remote, branch) {
        (None, None) => {}
        (remote, branch) => {
            run.args.push(remote.unwrap_or("origin").into());
            if let Some(b) = branch {
                run.args.push(b.into());
            }
        }
    }
    run.credentials = credentials.as_ref();
    run.network = true;
    run.run(&service, &id).await?;
    Ok(StatusCode::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_be_options_are_refused() {
        ref_name("branch", "feature/x").unwrap();
        for bad in ["", "-D", "a b", "a\nb"] {
            assert!(ref_name("branch", bad).is_err(), "{bad:?}");
        }
        assert_eq!(repo_path("repo").unwrap(), "/home/user/repo");
        assert!(repo_path("/a/../b").is_err());
    }
}
