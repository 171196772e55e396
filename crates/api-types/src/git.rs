//! Bodies of `/v1/sandboxes/{id}/git/…`: git in a sandbox (clone, status, add, commit, branches,
//! checkout, push, pull).
//!
//! A repository's `path` is absolute or relative to the sandbox user's home (`/home/user`).
//! Credentials (`username`, `password`) ride in the body of the call that needs them and serve that
//! one git command only: they are never stored in the sandbox, the remote's URL or the repository's
//! config, and a password's `Debug` is redacted ([`Secret`]).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A password or access token: a plain string on the wire, never shown by `Debug`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// `POST /v1/sandboxes/{id}/git/clone`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitClone {
    /// The repository's URL. Credentials written into an `http(s)://user:password@` URL are used
    /// like `username`/`password` and not kept in the clone's remote.
    pub url: String,
    /// Where to clone; default the URL's last segment without `.git`, in the user's home.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The branch to check out (default the remote's HEAD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// A commit to check out, detached, after the clone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// A shallow clone of this many commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
    /// Accept any TLS certificate for this clone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_tls: Option<bool>,
    /// User name for the remote (default `x-access-token` when only a password is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Password or access token for the remote; used for this command only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = Password)]
    pub password: Option<Secret>,
}

/// The answer to a clone.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GitCloned {
    /// The clone's absolute path.
    pub path: String,
}

/// `GET /v1/sandboxes/{id}/git/status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GitStatus {
    /// The checked-out branch; `HEAD` when detached.
    pub current_branch: String,
    /// Every file that is not unmodified in both the index and the worktree.
    pub file_status: Vec<GitFileStatus>,
    /// Commits the branch has that its upstream lacks (0 without an upstream).
    pub ahead: u64,
    /// Commits the upstream has that the branch lacks (0 without an upstream).
    pub behind: u64,
    /// Whether the branch has an upstream.
    pub branch_published: bool,
    /// The upstream (`origin/main`), empty without one.
    pub upstream: String,
    /// Whether HEAD is detached.
    pub detached: bool,
}

/// One file of a [`GitStatus`]. States are `Unmodified`, `Untracked`, `Modified` (a type change
/// too), `Added`, `Deleted`, `Renamed`, `Copied` and `Updated but unmerged`; an untracked file is
/// `Untracked` in both.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GitFileStatus {
    /// Its path in the repository.
    pub name: String,
    /// Its state in the index.
    pub staging: String,
    /// Its state in the worktree.
    pub worktree: String,
    /// A rename's or copy's original path, else empty.
    pub extra: String,
}

/// `POST /v1/sandboxes/{id}/git/add`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitAdd {
    /// The repository.
    pub path: String,
    /// Paths in the repository to stage (`.` for all), deletions included.
    pub files: Vec<String>,
}

/// `POST /v1/sandboxes/{id}/git/commit`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitCommit {
    /// The repository.
    pub path: String,
    /// The commit message.
    pub message: String,
    /// Author (and committer) name.
    pub author: String,
    /// Author (and committer) email.
    pub email: String,
    /// Commit even when nothing is staged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_empty: Option<bool>,
}

/// The answer to a commit.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GitCommitted {
    /// The new commit's hash.
    pub hash: String,
}

/// `GET /v1/sandboxes/{id}/git/branches`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GitBranches {
    /// The local branches.
    pub branches: Vec<String>,
    /// The checked-out one (empty when HEAD is detached).
    pub current: String,
}

/// `POST /v1/sandboxes/{id}/git/branches`: a new branch at HEAD, checked out.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitCreateBranch {
    /// The repository.
    pub path: String,
    /// The branch's name.
    pub name: String,
}

/// `POST /v1/sandboxes/{id}/git/checkout`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitCheckout {
    /// The repository.
    pub path: String,
    /// A branch, or any revision (checked out detached).
    pub branch: String,
}

/// `POST /v1/sandboxes/{id}/git/push` and `POST /v1/sandboxes/{id}/git/pull` (fast-forward
/// only).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitSync {
    /// The repository.
    pub path: String,
    /// The remote (push: default `origin`; pull: default the branch's upstream's, else `origin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// The branch (push: default the checked-out one; pull: default the upstream's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Push only: make the pushed branch the local one's upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_upstream: Option<bool>,
    /// User name for the remote (default `x-access-token` when only a password is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Password or access token for the remote; used for this command only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = Password)]
    pub password: Option<Secret>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A password travels as a plain string and never shows in `Debug`.
    #[test]
    fn passwords_are_strings_on_the_wire_and_hidden_in_debug() {
        let push: GitSync =
            serde_json::from_str(r#"{"path": "r", "username": "u", "password": "s3cret"}"#)
                .unwrap();
        assert_eq!(push.password, Some(Secret("s3cret".into())));
        assert!(!format!("{push:?}").contains("s3cret"));
        let wire = serde_json::to_value(&push).unwrap();
        assert_eq!(wire["password"], "s3cret");
        assert!(serde_json::from_str::<GitSync>(r#"{"path": "r", "pasword": "x"}"#).is_err());
    }
}
