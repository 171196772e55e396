//! Git in a sandbox: the one flow every surface's git goes through — the native routes
//! (`/v1/sandboxes/{id}/git/…`, and `sbx git` through them), the MCP tools, and the Daytona
//! toolbox's git routes. A surface parses its request, calls one of these, and renders the answer
//! and the [`GitError`] in its own shape.
//!
//! **How git runs.** Each operation is one or a few `git -C <repo> …` commands run in the sandbox
//! through [`Service::exec`](crate::Service::exec) ([`command`]): the sandbox's own git, as the
//! sandbox's `user`, with `GIT_TERMINAL_PROMPT=0` (a missing credential fails at once) and
//! `LC_ALL=C`. Network operations (clone, push, pull, an add-remote that fetches) may run 15
//! minutes, the others 2.
//!
//! **Credentials never touch disk.** [`Credentials`] given to a clone, push or pull reach git only
//! through a credential helper passed with `-c` to that one command, which prints them from two
//! environment variables of that command: they are never in the repository's config, the remote's
//! URL, a command line or a log; a `user:password@` in an http(s) URL is moved into that helper
//! ([`strip_userinfo`]); any password is masked (`***`) in what git says back. The one exception
//! is [`Service::git_store_credentials`](crate::Service::git_store_credentials), whose purpose is
//! to store them (Daytona's `dangerously_authenticate`). Proved by
//! `command::tests::credentials_never_reach_the_command_line` and, against a real git server
//! behind basic auth, by `crates/sandboxd/tests/git.rs` (a clone's `.git/config` holds no
//! password, the daemon's log never shows it) and `crates/sandboxd/tests/daytona_files.rs`.
//!
//! **What a request may name** ([`check`]): a repository path is absolute or relative to the
//! user's home, without `..`; a branch, remote, revision or URL never starts with `-` (git would
//! read an option) nor holds whitespace. These are [`GitFailure::Invalid`] /
//! [`GitFailure::InvalidPath`] before anything runs.
//!
//! **Errors.** A failure git reports is a [`GitError`]: its [`GitFailure`] kind, read from git's
//! words ([`classify()`]), and git's `fatal:`/`error:` lines. A fault of the sandbox itself
//! (unknown, not running, its agent down) stays the [`ServiceError`](crate::ServiceError) exec
//! gave. Each surface maps the kinds to its codes and statuses in one place: the native API in
//! `crates/api/src/error.rs`, Daytona in `crates/api/src/daytona/toolbox_error.rs`.

pub mod check;
pub mod classify;
pub mod command;
mod flows;
mod more;
pub mod status;

pub use check::{ref_name, repo_path};
pub use classify::classify;
pub use command::{strip_userinfo, Credentials, GitRun};
pub use more::{GitAddRemote, GitReset, GitRestore, GitStoredCredentials};
pub use status::{parse_status, FileStatus, GitStatus};

use sandboxd_api_types as api;

/// What went wrong with a git request, in git's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitFailure {
    /// The request cannot be given to git: a name that would be an option, a missing field.
    Invalid,
    /// The repository's path is unusable (`..`, NUL).
    InvalidPath,
    /// The remote wants credentials, or refused the ones given.
    AuthFailed,
    /// The remote accepted the credentials but forbids this (HTTP 403).
    Forbidden,
    /// The remote refused the push itself (a hook, a protected branch).
    RemoteRejected,
    /// The push is not a fast-forward of the remote branch.
    PushRejected,
    /// No repository there (locally or on the remote).
    RepoNotFound,
    /// The branch to create exists.
    BranchExists,
    /// No such branch or revision.
    BranchNotFound,
    /// A path given matches no file.
    FileNotFound,
    /// Local changes would be overwritten.
    DirtyWorktree,
    /// The branches diverged or conflict (pulls are fast-forward only).
    MergeConflict,
    /// Something is in the way: a non-empty clone target, an existing remote, nothing to commit.
    Conflict,
    /// The remote could not be reached.
    TransportFailed,
    /// git refused for another reason (its words say which).
    Refused,
}

/// A git request that failed, with what git said (any password masked).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct GitError {
    /// What kind of failure.
    pub kind: GitFailure,
    /// git's complaint, or what is wrong with the request.
    pub message: String,
}

impl GitError {
    /// An error of `kind`.
    pub fn new(kind: GitFailure, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// A request that cannot be given to git.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(GitFailure::Invalid, message)
    }
}

/// A clone (the native API's `GitClone` is one, `.into()`).
#[derive(Debug, Clone, Default)]
pub struct GitClone {
    /// The repository's URL (userinfo in an http(s) URL becomes credentials).
    pub url: String,
    /// Where to clone: absolute, or relative to the user's home (default: [`clone_dir`] of the
    /// URL).
    pub path: Option<String>,
    /// A branch to check out.
    pub branch: Option<String>,
    /// A commit to check out, detached, after the clone.
    pub commit: Option<String>,
    /// Shallow: this many commits.
    pub depth: Option<u32>,
    /// Accept any TLS certificate.
    pub insecure_skip_tls: bool,
    /// For the remote; win over userinfo in the URL.
    pub credentials: Option<Credentials>,
}

/// A commit of what is staged (the native API's `GitCommit` is one, `.into()`).
#[derive(Debug, Clone, Default)]
pub struct GitCommit {
    /// The repository.
    pub path: String,
    /// The message.
    pub message: String,
    /// Author and committer name.
    pub author: String,
    /// Author and committer email.
    pub email: String,
    /// Commit even with nothing staged.
    pub allow_empty: bool,
}

/// A push or a pull (the native API's `GitSync` is one, `.into()`).
#[derive(Debug, Clone, Default)]
pub struct GitSync {
    /// The repository.
    pub path: String,
    /// The remote (push: default `origin`; pull: default the upstream's, with a branch `origin`).
    pub remote: Option<String>,
    /// The branch (push: default the current one; pull: default the upstream's).
    pub branch: Option<String>,
    /// Push only: make the pushed branch the upstream.
    pub set_upstream: bool,
    /// For the remote.
    pub credentials: Option<Credentials>,
}

impl From<api::GitClone> for GitClone {
    fn from(req: api::GitClone) -> Self {
        GitClone {
            credentials: credentials(req.username.as_deref(), req.password.as_ref()),
            url: req.url,
            path: req.path,
            branch: req.branch,
            commit: req.commit,
            depth: req.depth,
            insecure_skip_tls: req.insecure_skip_tls == Some(true),
        }
    }
}

impl From<api::GitCommit> for GitCommit {
    fn from(req: api::GitCommit) -> Self {
        GitCommit {
            path: req.path,
            message: req.message,
            author: req.author,
            email: req.email,
            allow_empty: req.allow_empty == Some(true),
        }
    }
}

impl From<api::GitSync> for GitSync {
    fn from(req: api::GitSync) -> Self {
        GitSync {
            credentials: credentials(req.username.as_deref(), req.password.as_ref()),
            path: req.path,
            remote: req.remote,
            branch: req.branch,
            set_upstream: req.set_upstream == Some(true),
        }
    }
}

/// The credentials of a native request.
fn credentials(username: Option<&str>, password: Option<&api::Secret>) -> Option<Credentials> {
    Credentials::of(username, password.map(|p| p.0.as_str()))
}

/// Where a clone of `url` goes by default, as `git clone` decides: the URL's last segment without
/// `.git` (or `repo` when it has none).
pub fn clone_dir(url: &str) -> String {
    let name = url
        .trim_end_matches('/')
        .rsplit(['/', ':'])
        .next()
        .unwrap_or_default();
    let name = name.strip_suffix(".git").unwrap_or(name);
    if name.is_empty() || name.starts_with('.') {
        "repo".into()
    } else {
        name.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_go_where_git_would_put_them() {
        assert_eq!(clone_dir("http://h:8080/team/app.git"), "app");
        assert_eq!(clone_dir("https://h/app/"), "app");
        assert_eq!(clone_dir("git@host:team/tool.git"), "tool");
        assert_eq!(clone_dir("http://h/.git"), "repo");
        assert_eq!(clone_dir(""), "repo");
    }
}
