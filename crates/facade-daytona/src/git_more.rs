//! The rest of the SDK's `Git` on the toolbox (see [`super::git`] for the core):
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

use super::git::{body, ref_name, repo_path};
use super::git_cmd::{classify, GitRun};
use super::toolbox_error::ToolboxError;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
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
    let repo = repo_path(&req.path)?;
    let mut run = GitRun::new("/", &["init", "--quiet"]);
    if req.bare == Some(true) {
        run.args.push("--bare".into());
    }
    if let Some(branch) = req.initial_branch.as_deref().filter(|b| !b.is_empty()) {
        ref_name("branch", branch)?;
        run.args.extend(["--initial-branch".into(), branch.into()]);
    }
    run.args.extend(["--".into(), repo]);
    run.run(&service, &id).await?;
    Ok(StatusCode::CREATED)
}

/// `GET /git/remotes`.
pub async fn remotes(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ToolboxError> {
    let repo = repo_path(q.get("path").map(String::as_str).unwrap_or_default())?;
    let out = GitRun::new(&repo, &["remote"]).run(&service, &id).await?;
    let mut remotes = Vec::new();
    for name in out.lines().filter(|l| !l.is_empty()) {
        let url = GitRun::new(&repo, &["remote", "get-url", "--", name])
            .run(&service, &id)
            .await?;
        remotes.push(json!({ "name": name, "url": url.trim() }));
    }
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
    let repo = repo_path(&req.path)?;
    ref_name("remote", &req.name)?;
    if req.url.is_empty() || req.url.starts_with('-') {
        return Err(ToolboxError::bad_request("url must be a repository URL"));
    }
    let exists = GitRun::new(&repo, &["remote", "get-url", "--", &req.name])
        .run(&service, &id)
        .await
        .is_ok();
    let args = match (exists, req.overwrite == Some(true)) {
        (true, false) => {
            return Err(ToolboxError::new(
                StatusCode::CONFLICT,
                "CONFLICT",
                format!("remote {} already exists", req.name),
            ))
        }
        (true, true) => ["remote", "set-url", "--", &req.name, &req.url],
        (false, _) => ["remote", "add", "--", &req.name, &req.url],
    };
    GitRun::new(&repo, &args).run(&service, &id).await?;
    if req.fetch == Some(true) {
        let mut fetch = GitRun::new(&repo, &["fetch", "--quiet", "--", &req.name]);
        fetch.network = true;
        fetch.run(&service, &id).await?;
    }
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
    let repo = repo_path(&req.path)?;
    let files = req.files.unwrap_or_default();
    let mut run = GitRun::new(&repo, &["reset", "--quiet"]);
    match req.mode.as_deref().filter(|m| !m.is_empty()) {
        None => {}
        Some(mode @ ("soft" | "mixed" | "hard" | "merge" | "keep")) if files.is_empty() => {
            run.args.push(format!("--{mode}"))
        }
        Some("mixed") => {}
        Some(other) => {
            return Err(ToolboxError::bad_request(format!(
                "mode {other:?} is not one of soft, mixed, hard, merge, keep (with files: mixed)"
            )))
        }
    }
    if let Some(target) = req.target.as_deref().filter(|t| !t.is_empty()) {
        ref_name("target", target)?;
        run.args.push(target.into());
    }
    run.args.push("--".into());
    run.args.extend(files);
    run.run(&service, &id).await?;
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
    let repo = repo_path(&req.path)?;
    if req.files.is_empty() {
        return Err(ToolboxError::bad_request(
            "files must name at least one file",
        ));
    }
    let mut run = GitRun::new(&repo, &["restore"]);
    if req.staged == Some(true) {
        run.args.push("--staged".into());
    }
    if req.worktree == Some(true) {
        run.args.push("--worktree".into());
    }
    if let Some(source) = req.source.as_deref().filter(|s| !s.is_empty()) {
        ref_name("source", source)?;
        run.args.push(format!("--source={source}"));
    }
    run.args.push("--".into());
    run.args.extend(req.files);
    run.run(&service, &id).await?;
    Ok(StatusCode::OK)
}

/// Where a config call acts: the repository to run in and the scope option.
fn scope(scope: Option<&str>, path: Option<&str>) -> Result<(String, &'static str), ToolboxError> {
    let path = path.filter(|p| !p.is_empty());
    match scope.filter(|s| !s.is_empty()).unwrap_or("global") {
        "global" => Ok((
            path.map(repo_path).transpose()?.unwrap_or("/".into()),
            "--global",
        )),
        "system" => Ok(("/".into(), "--system")),
        "local" => match path {
            Some(p) => Ok((repo_path(p)?, "--local")),
            None => Err(ToolboxError::bad_request(
                "a local scope needs the repository's path",
            )),
        },
        other => Err(ToolboxError::bad_request(format!(
            "scope {other:?} is not one of global, local, system"
        ))),
    }
}

fn config_key(key: &str) -> Result<(), ToolboxError> {
    let ok = key.contains('.')
        && !key.starts_with(['-', '.'])
        && !key
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '=');
    if ok {
        Ok(())
    } else {
        Err(ToolboxError::bad_request(format!(
            "invalid config key {key:?}"
        )))
    }
}

/// `GET /git/config`.
pub async fn get_config(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ToolboxError> {
    let key = q.get("key").map(String::as_str).unwrap_or_default();
    config_key(key)?;
    let (repo, scope) = scope(
        q.get("scope").map(String::as_str),
        q.get("path").map(String::as_str),
    )?;
    let (exit_code, value, said) = GitRun::new(&repo, &["config", scope, "--get", key])
        .output(&service, &id)
        .await?;
    match exit_code {
        0 => Ok(Json(json!({ "value": value.trim_end_matches('\n') }))),
        // `git config --get` exits 1 when the key is not set.
        1 => Ok(Json(json!({ "value": null }))),
        code => Err(classify(&said, code)),
    }
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
    config_key(&req.key)?;
    let (repo, scope) = scope(req.scope.as_deref(), req.path.as_deref())?;
    GitRun::new(&repo, &["config", scope, "--", &req.key, &req.value])
        .run(&service, &id)
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
    let (repo, scope) = scope(req.scope.as_deref(), req.path.as_deref())?;
    for (key, value) in [("user.name", &req.name), ("user.email", &req.email)] {
        GitRun::new(&repo, &["config", scope, "--", key, value])
            .run(&service, &id)
            .await?;
    }
    Ok(StatusCode::OK)
}

/// `POST /git/credentials {username, password, host?, protocol?}` (the SDK's
/// `dangerously_authenticate`): stores the credentials for `protocol://host` (default
/// `https://github.com`) in the sandbox user's git credential store (`~/.git-credentials`, with
/// `credential.helper store` in its global config), where every later git command of that user
/// finds them. The values reach git on its standard input only, never a command line.
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
    let host = req
        .host
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "github.com".into());
    let protocol = req
        .protocol
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "https".into());
    if !matches!(protocol.as_str(), "http" | "https") {
        return Err(ToolboxError::bad_request("protocol must be http or https"));
    }
    if host.contains(|c: char| c.is_whitespace() || c.is_control() || c == '/' || c == '@') {
        return Err(ToolboxError::bad_request(format!("invalid host {host:?}")));
    }
    if [&req.username, &req.password]
        .iter()
        .any(|v| v.contains(['\n', '\0']))
    {
        return Err(ToolboxError::bad_request(
            "username and password cannot hold newlines or NUL bytes",
        ));
    }
    let script = "git config --global credential.helper store && \
        printf 'protocol=%s\\nhost=%s\\nusername=%s\\npassword=%s\\n\\n' \
        \"$GIT_P\" \"$GIT_H\" \"$GIT_U\" \"$GIT_W\" | git credential approve";
    let env = BTreeMap::from([
        ("GIT_P".to_string(), protocol),
        ("GIT_H".to_string(), host),
        ("GIT_U".to_string(), req.username),
        ("GIT_W".to_string(), req.password.clone()),
        ("GIT_TERMINAL_PROMPT".to_string(), "0".to_string()),
    ]);
    let result = service
        .exec(
            &id,
            sandboxd_api_types::ExecRequest {
                cmd: vec!["/bin/sh".into(), "-c".into(), script.into()],
                env: Some(env),
                timeout_ms: Some(60_000),
                ..Default::default()
            },
        )
        .await?;
    if result.exit_code != 0 {
        let said = format!("{}\n{}", result.stderr, result.stdout);
        let said = if req.password.is_empty() {
            said
        } else {
            said.replace(&req.password, "***")
        };
        return Err(classify(&said, result.exit_code));
    }
    Ok(StatusCode::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_scopes_and_keys_are_checked() {
        assert_eq!(scope(None, None).unwrap(), ("/".into(), "--global"));
        assert_eq!(
            scope(Some("local"), Some("r")).unwrap(),
            ("/home/user/r".into(), "--local")
        );
        assert!(scope(Some("local"), None).is_err());
        assert!(scope(Some("worktree"), None).is_err());
        config_key("user.name").unwrap();
        for bad in ["name", "-x.y", "a.b c", "a=b.c"] {
            assert!(config_key(bad).is_err(), "{bad}");
        }
    }
}
