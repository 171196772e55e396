//! `git` run inside a sandbox for the toolbox's git routes ([`super::git`]), through the service's
//! exec (so it is the sandbox's own `git`, as the sandbox's `user`), and what its output means.
//!
//! - Every run is `git -C <repo> …` with `GIT_TERMINAL_PROMPT=0` (a missing credential fails at
//!   once instead of waiting for a terminal) and `LC_ALL=C` (messages are classified by their text).
//! - Credentials ([`Credentials`]) reach git only through a credential helper given with `-c` for
//!   that one command, which prints `username=`/`password=` from two environment variables of that
//!   command: nothing is written to the repository's config, the URL, the command line or a log.
//!   Other configured helpers are cleared for the command. [`strip_userinfo`] moves credentials
//!   written into an `http(s)://user:pass@` URL into the helper the same way.
//! - A failure becomes a [`ToolboxError`] with the daemon's git codes ([`classify`]): 401
//!   `GIT_AUTH_FAILED`, 404 `GIT_REPO_NOT_FOUND` / `GIT_BRANCH_NOT_FOUND`, 409 `GIT_BRANCH_EXISTS`
//!   / `GIT_PUSH_REJECTED` / `GIT_DIRTY_WORKTREE` / `GIT_MERGE_CONFLICT`, 422
//!   `GIT_REMOTE_REJECTED`, 502 `GIT_TRANSPORT_FAILED`; anything else git refused is a 400 with
//!   git's words (a password, if one was given, never among them).

use super::toolbox_error::ToolboxError;
use axum::http::StatusCode;
use sandboxd_api_types as api;
use sandboxd_service::Service;
use std::collections::BTreeMap;

/// Longest a network operation (clone, push, pull) may run.
const NETWORK_TIMEOUT_MS: u64 = 15 * 60 * 1000;
/// Longest a local operation may run.
const LOCAL_TIMEOUT_MS: u64 = 2 * 60 * 1000;
/// The environment variables the helper reads.
const USER_VAR: &str = "SANDBOXD_GIT_USERNAME";
const PASSWORD_VAR: &str = "SANDBOXD_GIT_PASSWORD";
/// The helper: answers `get` from the two variables, ignores `store` and `erase`.
const HELPER: &str = "credential.helper=!f() { test \"$1\" = get || exit 0; \
    printf 'username=%s\\npassword=%s\\n' \"$SANDBOXD_GIT_USERNAME\" \"$SANDBOXD_GIT_PASSWORD\"; }; f";

/// A username and password for one command.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({:?}, ***)", self.username)
    }
}

impl Credentials {
    /// Credentials from a request's optional fields: a password alone is a token (GitHub style,
    /// any username works), a username alone has an empty password.
    pub fn of(username: Option<&str>, password: Option<&str>) -> Option<Self> {
        match (
            username.filter(|u| !u.is_empty()),
            password.filter(|p| !p.is_empty()),
        ) {
            (None, None) => None,
            (u, p) => Some(Self {
                username: u.unwrap_or("x-access-token").to_string(),
                password: p.unwrap_or_default().to_string(),
            }),
        }
    }
}

/// One git command in a sandbox.
pub struct GitRun<'a> {
    pub repo: &'a str,
    pub args: Vec<String>,
    pub credentials: Option<&'a Credentials>,
    /// `-c key=value` settings for this command alone.
    pub config: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub network: bool,
}

impl<'a> GitRun<'a> {
    pub fn new(repo: &'a str, args: &[&str]) -> Self {
        Self {
            repo,
            args: args.iter().map(|a| a.to_string()).collect(),
            credentials: None,
            config: Vec::new(),
            env: BTreeMap::new(),
            network: false,
        }
    }

    /// The command line and environment.
    pub fn command(&self) -> (Vec<String>, BTreeMap<String, String>) {
        let mut cmd = vec!["git".to_string()];
        let mut env = self.env.clone();
        env.insert("GIT_TERMINAL_PROMPT".into(), "0".into());
        env.insert("LC_ALL".into(), "C".into());
        if let Some(c) = self.credentials {
            cmd.extend([
                "-c".into(),
                "credential.helper=".into(),
                "-c".into(),
                HELPER.into(),
            ]);
            env.insert(USER_VAR.into(), c.username.clone());
            env.insert(PASSWORD_VAR.into(), c.password.clone());
        }
        for setting in &self.config {
            cmd.extend(["-c".into(), setting.clone()]);
        }
        cmd.extend(["-C".into(), self.repo.to_string()]);
        cmd.extend(self.args.iter().cloned());
        (cmd, env)
    }

    /// Runs it; its stdout when it succeeds.
    pub async fn run(&self, service: &Service, id: &str) -> Result<String, ToolboxError> {
        let (exit_code, stdout, said) = self.output(service, id).await?;
        if exit_code == 0 {
            Ok(stdout)
        } else {
            Err(classify(&said, exit_code))
        }
    }

    /// Runs it: its exit code, stdout, and all it said (stderr then stdout, any password masked).
    pub async fn output(
        &self,
        service: &Service,
        id: &str,
    ) -> Result<(i32, String, String), ToolboxError> {
        let (cmd, env) = self.command();
        let timeout = if self.network {
            NETWORK_TIMEOUT_MS
        } else {
            LOCAL_TIMEOUT_MS
        };
        let result = service
            .exec(
                id,
                api::ExecRequest {
                    cmd,
                    env: Some(env),
                    timeout_ms: Some(timeout),
                    ..Default::default()
                },
            )
            .await?;
        let said = format!("{}\n{}", result.stderr, result.stdout);
        let said = match self.credentials {
            Some(c) if !c.password.is_empty() => said.replace(&c.password, "***"),
            _ => said,
        };
        Ok((result.exit_code, result.stdout, said))
    }
}

/// What a failed git said, as an error.
pub fn classify(said: &str, exit_code: i32) -> ToolboxError {
    let lower = said.to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
    let (status, code) = if has(&[
        "authentication failed",
        "could not read username",
        "could not read password",
        "terminal prompts disabled",
        "invalid username or password",
        "returned error: 401",
    ]) {
        (StatusCode::UNAUTHORIZED, "GIT_AUTH_FAILED")
    } else if has(&["returned error: 403"]) {
        (StatusCode::FORBIDDEN, "FORBIDDEN")
    } else if has(&["remote rejected"]) {
        (StatusCode::UNPROCESSABLE_ENTITY, "GIT_REMOTE_REJECTED")
    } else if has(&["[rejected]", "non-fast-forward", "failed to push some refs"]) {
        (StatusCode::CONFLICT, "GIT_PUSH_REJECTED")
    } else if has(&[
        "repository not found",
        "does not appear to be a git repository",
        "not a git repository",
        "cannot change to",
        "returned error: 404",
        "no such repository",
    ]) || (lower.contains("repository '") && lower.contains("' not found"))
    {
        (StatusCode::NOT_FOUND, "GIT_REPO_NOT_FOUND")
    } else if has(&["already exists and is not an empty directory"]) {
        (StatusCode::CONFLICT, "CONFLICT")
    } else if lower.contains("a branch named") && lower.contains("already exists") {
        (StatusCode::CONFLICT, "GIT_BRANCH_EXISTS")
    } else if has(&[
        "known to git",
        "invalid reference",
        "couldn't find remote ref",
        "unknown revision",
        "remote branch",
    ]) || (lower.contains("branch '") && lower.contains("not found"))
    {
        (StatusCode::NOT_FOUND, "GIT_BRANCH_NOT_FOUND")
    } else if has(&["did not match any files"]) {
        (StatusCode::NOT_FOUND, "FILE_NOT_FOUND")
    } else if has(&["would be overwritten", "commit your changes or stash them"]) {
        (StatusCode::CONFLICT, "GIT_DIRTY_WORKTREE")
    } else if has(&[
        "not possible to fast-forward",
        "diverging",
        "merge conflict",
        "conflict (",
    ]) {
        (StatusCode::CONFLICT, "GIT_MERGE_CONFLICT")
    } else if has(&["nothing to commit", "no changes added to commit"]) {
        (StatusCode::CONFLICT, "CONFLICT")
    } else if has(&[
        "could not resolve host",
        "connection refused",
        "unable to access",
        "failed to connect",
        "connection timed out",
        "unable to connect",
        "early eof",
        "could not read from remote repository",
    ]) {
        (StatusCode::BAD_GATEWAY, "GIT_TRANSPORT_FAILED")
    } else {
        (StatusCode::BAD_REQUEST, "BAD_REQUEST")
    };
    ToolboxError::new(status, code, summary(said, exit_code))
}

/// git's complaint: its `fatal:`/`error:` lines when it has some, else all it said (capped).
fn summary(said: &str, exit_code: i32) -> String {
    let lines: Vec<&str> = said
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("fatal:") || l.starts_with("error:") || l.starts_with("! ["))
        .collect();
    let text = if lines.is_empty() {
        said.trim().to_string()
    } else {
        lines.join("\n")
    };
    let mut text: String = text.chars().take(4096).collect();
    if text.is_empty() {
        text = format!("git exited with status {exit_code}");
    }
    text
}

/// `url` without the `user:password@` of an `http(s)://` URL, and those credentials.
pub fn strip_userinfo(url: &str) -> (String, Option<Credentials>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_string(), None);
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return (url.to_string(), None);
    }
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return (url.to_string(), None);
    };
    let (user, password) = match rest[..at].split_once(':') {
        Some((u, p)) => (u, p),
        None => (&rest[..at], ""),
    };
    let decode = |s: &str| {
        form_urlencoded::parse(format!("v={}", s.replace('+', "%2B")).as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    let credentials = Credentials {
        username: decode(user),
        password: decode(password),
    };
    (format!("{scheme}://{}", &rest[at + 1..]), Some(credentials))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_get_the_daemons_git_codes() {
        let code = |said: &str| classify(said, 128).code;
        assert_eq!(
            code("fatal: could not read Username for 'http://h': terminal prompts disabled"),
            "GIT_AUTH_FAILED"
        );
        assert_eq!(
            code("fatal: Authentication failed for 'http://h/r'"),
            "GIT_AUTH_FAILED"
        );
        assert_eq!(
            code("fatal: repository 'http://h/nope.git/' not found"),
            "GIT_REPO_NOT_FOUND"
        );
        assert_eq!(
            code("fatal: not a git repository (or any of the parent directories): .git"),
            "GIT_REPO_NOT_FOUND"
        );
        assert_eq!(
            code("error: pathspec 'nope' did not match any file(s) known to git"),
            "GIT_BRANCH_NOT_FOUND"
        );
        assert_eq!(
            code("fatal: a branch named 'x' already exists"),
            "GIT_BRANCH_EXISTS"
        );
        assert_eq!(
            code(
                " ! [rejected]        main -> main (fetch first)\nerror: failed to push some refs"
            ),
            "GIT_PUSH_REJECTED"
        );
        assert_eq!(
            code("fatal: Not possible to fast-forward, aborting."),
            "GIT_MERGE_CONFLICT"
        );
        assert_eq!(
            code("fatal: unable to connect to 10.0.0.1:\n10.0.0.1[0: 10.0.0.1]: errno=Connection refused"),
            "GIT_TRANSPORT_FAILED"
        );
        assert_eq!(
            code("fatal: pathspec 'x' did not match any files"),
            "FILE_NOT_FOUND"
        );
        let e = classify("hint: x\nfatal: bad thing\n", 128);
        assert_eq!(
            (e.status.as_u16(), e.message.as_str()),
            (400, "fatal: bad thing")
        );
    }

    #[test]
    fn credentials_never_reach_the_command_line() {
        let creds = Credentials::of(Some("alice"), Some("s3cret")).unwrap();
        let mut run = GitRun::new("/repo", &["push", "origin", "HEAD"]);
        run.credentials = Some(&creds);
        let (cmd, env) = run.command();
        assert!(
            !cmd.iter()
                .any(|a| a.contains("s3cret") || a.contains("alice")),
            "{cmd:?}"
        );
        assert_eq!(env[PASSWORD_VAR], "s3cret");
        assert_eq!(env[USER_VAR], "alice");
        assert_eq!(&cmd[1..5], ["-c", "credential.helper=", "-c", HELPER]);
        assert!(!format!("{creds:?}").contains("s3cret"));
        let e = GitRun::new("/r", &["status"]).command().1;
        assert!(!e.contains_key(PASSWORD_VAR));
        assert_eq!(e["GIT_TERMINAL_PROMPT"], "0");
    }

    #[test]
    fn userinfo_leaves_urls() {
        let (url, creds) = strip_userinfo("https://bob:p%40ss@git.example/r.git");
        assert_eq!(url, "https://git.example/r.git");
        let creds = creds.unwrap();
        assert_eq!(
            (creds.username.as_str(), creds.password.as_str()),
            ("bob", "p@ss")
        );
        assert_eq!(
            strip_userinfo("git@host:r.git"),
            ("git@host:r.git".into(), None)
        );
        assert_eq!(
            strip_userinfo("http://host/a@b"),
            ("http://host/a@b".into(), None)
        );
        assert!(Credentials::of(None, None).is_none());
        assert_eq!(
            Credentials::of(None, Some("tok")).unwrap().username,
            "x-access-token"
        );
    }
}
