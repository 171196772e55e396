//! The everyday operations: clone, status, add, commit, branches, checkout, push, pull. Each
//! checks what the request names ([`super::check`]) before it runs anything.

use super::check::{ref_name, repo_path, repo_url};
use super::command::{strip_userinfo, GitRun};
use super::status::{parse_status, GitStatus};
use super::{clone_dir, GitClone, GitCommit, GitError, GitSync};
use crate::{Service, ServiceError};
use sandboxd_api_types as api;

/// The remote and branch of a push or pull, checked.
fn remote_and_branch(req: &GitSync) -> Result<(Option<&str>, Option<&str>), GitError> {
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

impl Service {
    /// `git clone` (`--branch`, `--depth`) into `req.path` (default [`clone_dir`] of the URL), then a detached checkout of
    /// `req.commit` when given; the remote's URL is kept without credentials. Returns the clone's
    /// absolute path.
    pub async fn git_clone(&self, id: &str, req: GitClone) -> Result<String, ServiceError> {
        let target = repo_path(&req.path.unwrap_or_else(|| clone_dir(&req.url)))?;
        if req.url.contains(char::is_control) {
            return Err(GitError::invalid("url must be a repository URL").into());
        }
        repo_url(&req.url)?;
        let (url, in_url) = strip_userinfo(&req.url);
        let credentials = req.credentials.or(in_url);
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
        if req.insecure_skip_tls {
            run.config.push("http.sslVerify=false".into());
        }
        run.run(self, id).await?;
        if let Some(commit) = req.commit.as_deref().filter(|c| !c.is_empty()) {
            ref_name("commit", commit)?;
            GitRun::new(&target, &["checkout", "--quiet", "--detach", commit])
                .run(self, id)
                .await?;
        }
        Ok(target)
    }

    /// The repository's branch, upstream, and every file not unmodified.
    pub async fn git_status(&self, id: &str, path: &str) -> Result<GitStatus, ServiceError> {
        let repo = repo_path(path)?;
        let out = GitRun::new(&repo, &["status", "--porcelain=v2", "--branch", "-z"])
            .run(self, id)
            .await?;
        Ok(parse_status(&out))
    }

    /// Stages `files` (`.` for all), deletions included.
    pub async fn git_add(
        &self,
        id: &str,
        path: &str,
        files: Vec<String>,
    ) -> Result<(), ServiceError> {
        let repo = repo_path(path)?;
        if files.is_empty() {
            return Err(GitError::invalid("files must name at least one file").into());
        }
        let mut run = GitRun::new(&repo, &["add", "-A", "--"]);
        run.args.extend(files);
        run.run(self, id).await?;
        Ok(())
    }

    /// Commits what is staged, as `author <email>` (author and committer both); the new hash.
    pub async fn git_commit(&self, id: &str, req: GitCommit) -> Result<String, ServiceError> {
        let repo = repo_path(&req.path)?;
        if req.author.trim().is_empty() || req.email.trim().is_empty() {
            return Err(GitError::invalid("author and email are required").into());
        }
        let mut run = GitRun::new(&repo, &["commit", "--quiet", "-m", &req.message]);
        if req.allow_empty {
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
        run.run(self, id).await?;
        let hash = GitRun::new(&repo, &["rev-parse", "HEAD"])
            .run(self, id)
            .await?;
        Ok(hash.trim().to_string())
    }

    /// The local branches and the checked-out one.
    pub async fn git_branches(
        &self,
        id: &str,
        path: &str,
    ) -> Result<api::GitBranches, ServiceError> {
        let repo = repo_path(path)?;
        let out = GitRun::new(
            &repo,
            &[
                "for-each-ref",
                "--format=%(HEAD)%(refname:short)",
                "refs/heads",
            ],
        )
        .run(self, id)
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
        Ok(api::GitBranches { branches, current })
    }

    /// Runs `git <verb…> <name>` for a branch.
    async fn git_branch_command(
        &self,
        id: &str,
        path: &str,
        name: &str,
        verb: &[&str],
    ) -> Result<(), ServiceError> {
        let repo = repo_path(path)?;
        ref_name("branch", name)?;
        let mut args = verb.to_vec();
        args.push(name);
        GitRun::new(&repo, &args).run(self, id).await?;
        Ok(())
    }

    /// Creates branch `name` at HEAD and checks it out.
    pub async fn git_create_branch(
        &self,
        id: &str,
        path: &str,
        name: &str,
    ) -> Result<(), ServiceError> {
        self.git_branch_command(id, path, name, &["checkout", "--quiet", "-b"])
            .await
    }

    /// Deletes branch `name`, merged or not.
    pub async fn git_delete_branch(
        &self,
        id: &str,
        path: &str,
        name: &str,
    ) -> Result<(), ServiceError> {
        self.git_branch_command(id, path, name, &["branch", "--quiet", "-D"])
            .await
    }

    /// Checks out a branch, or any revision (detached).
    pub async fn git_checkout(
        &self,
        id: &str,
        path: &str,
        branch: &str,
    ) -> Result<(), ServiceError> {
        let repo = repo_path(path)?;
        ref_name("branch", branch)?;
        GitRun::new(&repo, &["checkout", "--quiet", branch, "--"])
            .run(self, id)
            .await?;
        Ok(())
    }

    /// Pushes the branch (default the current one) to the remote (default `origin`).
    pub async fn git_push(&self, id: &str, req: GitSync) -> Result<(), ServiceError> {
        let repo = repo_path(&req.path)?;
        let (remote, branch) = remote_and_branch(&req)?;
        let mut run = GitRun::new(&repo, &["push", "--quiet"]);
        if req.set_upstream {
            run.args.push("--set-upstream".into());
        }
        run.args.push(remote.unwrap_or("origin").into());
        run.args.push(branch.unwrap_or("HEAD").into());
        run.credentials = req.credentials.as_ref();
        run.network = true;
        run.run(self, id).await?;
        Ok(())
    }

    /// Pulls, fast-forward only (a diverged branch is a [`super::GitFailure::MergeConflict`]).
    pub async fn git_pull(&self, id: &str, req: GitSync) -> Result<(), ServiceError> {
        let repo = repo_path(&req.path)?;
        let (remote, branch) = remote_and_branch(&req)?;
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
        run.credentials = req.credentials.as_ref();
        run.network = true;
        run.run(self, id).await?;
        Ok(())
    }
}
