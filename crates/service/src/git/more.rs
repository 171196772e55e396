//! The rest of what Daytona's SDK asks of git: init, remotes, reset, restore, config, and storing
//! credentials in the sandbox (the one operation that writes them down, as its caller asked).
//!
//! Config calls act in a scope: `global` (default, the user's `~/.gitconfig`), `local` (needs the
//! repository's path) or `system`.

use super::check::{ref_name, repo_path, repo_url};
use super::classify::classify;
use super::command::{masked, GitRun};
use super::{GitError, GitFailure};
use crate::{Service, ServiceError};
use std::collections::BTreeMap;

/// A remote to add (or, with `overwrite`, to point elsewhere).
#[derive(Debug, Clone, Default)]
pub struct GitAddRemote {
    pub path: String,
    pub name: String,
    pub url: String,
    /// Fetch from it once added.
    pub fetch: bool,
    /// Replace the URL of an existing remote of that name (else that is a conflict).
    pub overwrite: bool,
}

/// `git reset`: of HEAD to `target` (`mode` soft, mixed, hard, merge or keep), or of `files` in
/// the index (mode mixed only).
#[derive(Debug, Clone, Default)]
pub struct GitReset {
    pub path: String,
    pub mode: Option<String>,
    pub target: Option<String>,
    pub files: Vec<String>,
}

/// `git restore` of `files`, in the index (`staged`) and/or the worktree, from `source`.
#[derive(Debug, Clone, Default)]
pub struct GitRestore {
    pub path: String,
    pub files: Vec<String>,
    pub staged: bool,
    pub worktree: bool,
    pub source: Option<String>,
}

/// Credentials to store for `protocol://host` (default `https://github.com`).
#[derive(Clone, Default)]
pub struct GitStoredCredentials {
    pub username: String,
    pub password: String,
    pub host: Option<String>,
    pub protocol: Option<String>,
}

impl std::fmt::Debug for GitStoredCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitStoredCredentials")
            .field("username", &self.username)
            .field("host", &self.host)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

/// Where a config call acts: the repository to run in and the scope option.
fn scope(scope: Option<&str>, path: Option<&str>) -> Result<(String, &'static str), GitError> {
    let path = path.filter(|p| !p.is_empty());
    match scope.filter(|s| !s.is_empty()).unwrap_or("global") {
        "global" => Ok((
            path.map(repo_path).transpose()?.unwrap_or("/".into()),
            "--global",
        )),
        "system" => Ok(("/".into(), "--system")),
        "local" => match path {
            Some(p) => Ok((repo_path(p)?, "--local")),
            None => Err(GitError::invalid(
                "a local scope needs the repository's path",
            )),
        },
        other => Err(GitError::invalid(format!(
            "scope {other:?} is not one of global, local, system"
        ))),
    }
}

fn config_key(key: &str) -> Result<(), GitError> {
    let ok = key.contains('.')
        && !key.starts_with(['-', '.'])
        && !key
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '=');
    if ok {
        Ok(())
    } else {
        Err(GitError::invalid(format!("invalid config key {key:?}")))
    }
}

impl Service {
    /// `git init` of `path` (made if missing), bare or not, on `initial_branch`.
    pub async fn git_init(
        &self,
        id: &str,
        path: &str,
        bare: bool,
        initial_branch: Option<&str>,
    ) -> Result<(), ServiceError> {
        let repo = repo_path(path)?;
        let mut run = GitRun::new("/", &["init", "--quiet"]);
        if bare {
            run.args.push("--bare".into());
        }
        if let Some(branch) = initial_branch.filter(|b| !b.is_empty()) {
            ref_name("branch", branch)?;
            run.args.extend(["--initial-branch".into(), branch.into()]);
        }
        run.args.extend(["--".into(), repo]);
        run.run(self, id).await?;
        Ok(())
    }

    /// The remotes, each `(name, url)`.
    pub async fn git_remotes(
        &self,
        id: &str,
        path: &str,
    ) -> Result<Vec<(String, String)>, ServiceError> {
        let repo = repo_path(path)?;
        let out = GitRun::new(&repo, &["remote"]).run(self, id).await?;
        let mut remotes = Vec::new();
        for name in out.lines().filter(|l| !l.is_empty()) {
            let url = GitRun::new(&repo, &["remote", "get-url", "--", name])
                .run(self, id)
                .await?;
            remotes.push((name.to_string(), url.trim().to_string()));
        }
        Ok(remotes)
    }

    /// Adds a remote (an existing name is a [`GitFailure::Conflict`] unless `overwrite`).
    pub async fn git_add_remote(&self, id: &str, req: GitAddRemote) -> Result<(), ServiceError> {
        let repo = repo_path(&req.path)?;
        ref_name("remote", &req.name)?;
        repo_url(&req.url)?;
        let exists = GitRun::new(&repo, &["remote", "get-url", "--", &req.name])
            .run(self, id)
            .await
            .is_ok();
        let args = match (exists, req.overwrite) {
            (true, false) => {
                return Err(GitError::new(
                    GitFailure::Conflict,
                    format!("remote {} already exists", req.name),
                )
                .into())
            }
            (true, true) => ["remote", "set-url", "--", &req.name, &req.url],
            (false, _) => ["remote", "add", "--", &req.name, &req.url],
        };
        GitRun::new(&repo, &args).run(self, id).await?;
        if req.fetch {
            let mut fetch = GitRun::new(&repo, &["fetch", "--quiet", "--", &req.name]);
            fetch.network = true;
            fetch.run(self, id).await?;
        }
        Ok(())
    }

    /// `git reset` (see [`GitReset`]).
    pub async fn git_reset(&self, id: &str, req: GitReset) -> Result<(), ServiceError> {
        let repo = repo_path(&req.path)?;
        let mut run = GitRun::new(&repo, &["reset", "--quiet"]);
        match req.mode.as_deref().filter(|m| !m.is_empty()) {
            None => {}
            Some(mode @ ("soft" | "mixed" | "hard" | "merge" | "keep")) if req.files.is_empty() => {
                run.args.push(format!("--{mode}"))
            }
            Some("mixed") => {}
            Some(other) => {
                let message = format!(
                    "mode {other:?} is not one of soft, mixed, hard, merge, keep \
                     (with files: mixed)"
                );
                return Err(GitError::invalid(message).into());
            }
        }
        if let Some(target) = req.target.as_deref().filter(|t| !t.is_empty()) {
            ref_name("target", target)?;
            run.args.push(target.into());
        }
        run.args.push("--".into());
        run.args.extend(req.files);
        run.run(self, id).await?;
        Ok(())
    }

    /// `git restore` (see [`GitRestore`]).
    pub async fn git_restore(&self, id: &str, req: GitRestore) -> Result<(), ServiceError> {
        let repo = repo_path(&req.path)?;
        if req.files.is_empty() {
            return Err(GitError::invalid("files must name at least one file").into());
        }
        let mut run = GitRun::new(&repo, &["restore"]);
        if req.staged {
            run.args.push("--staged".into());
        }
        if req.worktree {
            run.args.push("--worktree".into());
        }
        if let Some(source) = req.source.as_deref().filter(|s| !s.is_empty()) {
            ref_name("source", source)?;
            run.args.push(format!("--source={source}"));
        }
        run.args.push("--".into());
        run.args.extend(req.files);
        run.run(self, id).await?;
        Ok(())
    }

    /// A config value of `scope` (`None` when it is not set).
    pub async fn git_config_get(
        &self,
        id: &str,
        key: &str,
        scope_name: Option<&str>,
        path: Option<&str>,
    ) -> Result<Option<String>, ServiceError> {
        config_key(key)?;
        let (repo, scope) = scope(scope_name, path)?;
        let (exit_code, value, said) = GitRun::new(&repo, &["config", scope, "--get", key])
            .output(self, id)
            .await?;
        match exit_code {
            0 => Ok(Some(value.trim_end_matches('\n').to_string())),
            // `git config --get` exits 1 when the key is not set.
            1 => Ok(None),
            code => Err(classify(&said, code).into()),
        }
    }

    /// Sets a config value in `scope`.
    pub async fn git_config_set(
        &self,
        id: &str,
        key: &str,
        value: &str,
        scope_name: Option<&str>,
        path: Option<&str>,
    ) -> Result<(), ServiceError> {
        config_key(key)?;
        let (repo, scope) = scope(scope_name, path)?;
        GitRun::new(&repo, &["config", scope, "--", key, value])
            .run(self, id)
            .await?;
        Ok(())
    }

    /// Sets `user.name` and `user.email` in `scope`.
    pub async fn git_configure_user(
        &self,
        id: &str,
        name: &str,
        email: &str,
        scope_name: Option<&str>,
        path: Option<&str>,
    ) -> Result<(), ServiceError> {
        let (repo, scope) = scope(scope_name, path)?;
        for (key, value) in [("user.name", name), ("user.email", email)] {
            GitRun::new(&repo, &["config", scope, "--", key, value])
                .run(self, id)
                .await?;
        }
        Ok(())
    }

    /// Stores the credentials for `protocol://host` in the sandbox user's git credential store
    /// (`~/.git-credentials`, with `credential.helper store` in its global config), where every
    /// later git command of that user finds them. The values reach git on its standard input only,
    /// never a command line.
    pub async fn git_store_credentials(
        &self,
        id: &str,
        req: GitStoredCredentials,
    ) -> Result<(), ServiceError> {
        let host = req
            .host
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "github.com".into());
        let protocol = req
            .protocol
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "https".into());
        if !matches!(protocol.as_str(), "http" | "https") {
            return Err(GitError::invalid("protocol must be http or https").into());
        }
        if host.contains(|c: char| c.is_whitespace() || c.is_control() || c == '/' || c == '@') {
            return Err(GitError::invalid(format!("invalid host {host:?}")).into());
        }
        if [&req.username, &req.password]
            .iter()
            .any(|v| v.contains(['\n', '\0']))
        {
            return Err(GitError::invalid(
                "username and password cannot hold newlines or NUL bytes",
            )
            .into());
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
        let result = self
            .exec(
                id,
                sandboxd_api_types::ExecRequest {
                    cmd: vec!["/bin/sh".into(), "-c".into(), script.into()],
                    env: Some(env),
                    timeout_ms: Some(60_000),
                    ..Default::default()
                },
            )
            .await?;
        if result.exit_code != 0 {
            let said = masked(
                format!("{}\n{}", result.stderr, result.stdout),
                &req.password,
            );
            return Err(classify(&said, result.exit_code).into());
        }
        Ok(())
    }
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
