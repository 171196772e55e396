//! `sbx git ID clone|status|add|commit|branches|branch|checkout|push|pull`, through the daemon's
//! `/v1/sandboxes/{id}/git/…` routes.
//!
//! Contract: text output is for people (a clone's path, a status as `key: value` lines and a table
//! of changed files, a commit's hash, the branches with `*` on the checked-out one; nothing for the
//! rest); `--json` prints the API's bodies (`GitCloned`, `GitStatus`, `GitCommitted`,
//! `GitBranches`; `{}` for the calls that answer none). A remote's password is read from the first
//! line of stdin (`--password-stdin`), else from `SBX_GIT_PASSWORD`, never from a flag's value,
//! and is sent in that one request's body only.

use crate::cli::{GitArgs, GitAuth, GitCommand};
use crate::error::SbxError;
use crate::images::password_from_stdin;
use crate::output::Output;
use sandboxd_client::types::{
    GitAdd, GitCheckout, GitClone, GitCommit, GitCreateBranch, GitStatus, GitSync, Secret,
};
use sandboxd_client::Client;
use std::process::ExitCode;

/// Where the password comes from without `--password-stdin`.
pub const PASSWORD_ENV: &str = "SBX_GIT_PASSWORD";

/// The username and password for the remote.
fn credentials(auth: GitAuth) -> Result<(Option<String>, Option<Secret>), SbxError> {
    let password = if auth.password_stdin {
        Some(password_from_stdin()?)
    } else {
        std::env::var(PASSWORD_ENV).ok()
    };
    Ok((
        auth.username,
        password.filter(|p| !p.is_empty()).map(Secret),
    ))
}

/// The body of a push or pull.
fn sync(
    path: String,
    remote: Option<String>,
    branch: Option<String>,
    set_upstream: bool,
    auth: GitAuth,
) -> Result<GitSync, SbxError> {
    let (username, password) = credentials(auth)?;
    Ok(GitSync {
        path,
        remote,
        branch,
        set_upstream: set_upstream.then_some(true),
        username,
        password,
    })
}

/// `sbx git …`.
pub async fn run(client: &Client, out: Output, args: GitArgs) -> Result<ExitCode, SbxError> {
    let id = args.id.as_str();
    match args.command {
        GitCommand::Clone {
            url,
            path,
            branch,
            depth,
            auth,
        } => {
            let (username, password) = credentials(auth)?;
            let body = GitClone {
                url,
                path,
                branch,
                depth,
                username,
                password,
                ..Default::default()
            };
            let cloned = client.git_clone(id, &body).await?;
            print(out, &cloned, &cloned.path)?;
        }
        GitCommand::Status { path } => {
            let status = client.git_status(id, &path).await?;
            if out.json {
                out.json(&status)?;
            } else {
                print_status(out, &status)?;
            }
        }
        GitCommand::Add { path, files } => {
            client.git_add(id, &GitAdd { path, files }).await?;
            done(out)?;
        }
        GitCommand::Commit {
            path,
            message,
            author,
            email,
            allow_empty,
        } => {
            let body = GitCommit {
                path,
                message,
                author,
                email,
                allow_empty: allow_empty.then_some(true),
            };
            let committed = client.git_commit(id, &body).await?;
            print(out, &committed, &committed.hash)?;
        }
        GitCommand::Branches { path } => {
            let listed = client.git_branches(id, &path).await?;
            let lines: Vec<String> = listed
                .branches
                .iter()
                .map(|b| format!("{} {b}", if *b == listed.current { '*' } else { ' ' }))
                .collect();
            print(out, &listed, &lines.join("\n"))?;
        }
        GitCommand::Branch { path, name, delete } => {
            if delete {
                client.git_delete_branch(id, &path, &name).await?;
            } else {
                let body = GitCreateBranch { path, name };
                client.git_create_branch(id, &body).await?;
            }
            done(out)?;
        }
        GitCommand::Checkout { path, branch } => {
            client
                .git_checkout(id, &GitCheckout { path, branch })
                .await?;
            done(out)?;
        }
        GitCommand::Push {
            path,
            remote,
            branch,
            set_upstream,
            auth,
        } => {
            let body = sync(path, remote, branch, set_upstream, auth)?;
            client.git_push(id, &body).await?;
            done(out)?;
        }
        GitCommand::Pull {
            path,
            remote,
            branch,
            auth,
        } => {
            let body = sync(path, remote, branch, false, auth)?;
            client.git_pull(id, &body).await?;
            done(out)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `body` under `--json`, else `text` (when there is some).
fn print<T: serde::Serialize>(out: Output, body: &T, text: &str) -> Result<(), SbxError> {
    if out.json {
        out.json(body)
    } else if text.is_empty() {
        Ok(())
    } else {
        out.line(text)
    }
}

/// What a call that answers no body prints: `{}` under `--json`, nothing otherwise.
fn done(out: Output) -> Result<(), SbxError> {
    print(out, &serde_json::json!({}), "")
}

/// A status for people: the branch and its upstream, then the files that changed.
fn print_status(out: Output, status: &GitStatus) -> Result<(), SbxError> {
    let branch = if status.detached {
        "HEAD (detached)".to_string()
    } else {
        status.current_branch.clone()
    };
    let upstream = if status.branch_published {
        format!(
            "{} (ahead {}, behind {})",
            status.upstream, status.ahead, status.behind
        )
    } else {
        "none".to_string()
    };
    out.key_values(&[("branch", branch), ("upstream", upstream)])?;
    if status.file_status.is_empty() {
        return out.line("no changes");
    }
    let rows: Vec<Vec<String>> = status
        .file_status
        .iter()
        .map(|f| {
            let name = if f.extra.is_empty() {
                f.name.clone()
            } else {
                format!("{} <- {}", f.name, f.extra)
            };
            vec![f.staging.clone(), f.worktree.clone(), name]
        })
        .collect();
    out.table(&["STAGED", "WORKTREE", "FILE"], &rows)
}
