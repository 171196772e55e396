//! Git in a sandbox: clone, status, add, commit, branches, checkout, push, pull
//! (`/v1/sandboxes/{id}/git/…`).
//!
//! Contract: bodies are the [`sandboxd_api_types`] git types, sent as given; a repository path is
//! sent untouched (the daemon reads a relative one from the sandbox user's home), as the `path`
//! query parameter where the call has no body. Credentials in a body serve that one call; the
//! client keeps none. A branch name in a URL is one percent-encoded segment (`feature%2Fx`).

use crate::{Client, ClientError};
use reqwest::Method;
use sandboxd_api_types::{
    GitAdd, GitBranches, GitCheckout, GitClone, GitCloned, GitCommit, GitCommitted,
    GitCreateBranch, GitStatus, GitSync,
};
use serde::Serialize;

impl Client {
    /// `POST /v1/sandboxes/{id}/git/<op>` with `body`, answered without a body.
    async fn git_post<T: Serialize>(
        &self,
        id: &str,
        op: &str,
        body: &T,
    ) -> Result<(), ClientError> {
        let url = self.sandbox_endpoint(id, &["git", op])?;
        self.send(self.request(Method::POST, url).json(body))
            .await?;
        Ok(())
    }

    /// `GET /v1/sandboxes/{id}/git/<op>?path=`.
    async fn git_get<T: serde::de::DeserializeOwned>(
        &self,
        id: &str,
        op: &str,
        path: &str,
        what: &'static str,
    ) -> Result<T, ClientError> {
        let mut url = self.sandbox_endpoint(id, &["git", op])?;
        url.query_pairs_mut().append_pair("path", path);
        self.send_json(self.request(Method::GET, url), what).await
    }

    /// `POST /v1/sandboxes/{id}/git/clone`: the clone's absolute path.
    pub async fn git_clone(&self, id: &str, body: &GitClone) -> Result<GitCloned, ClientError> {
        let url = self.sandbox_endpoint(id, &["git", "clone"])?;
        self.send_json(self.request(Method::POST, url).json(body), "clone")
            .await
    }

    /// `GET /v1/sandboxes/{id}/git/status?path=`.
    pub async fn git_status(&self, id: &str, path: &str) -> Result<GitStatus, ClientError> {
        self.git_get(id, "status", path, "git status").await
    }

    /// `POST /v1/sandboxes/{id}/git/add`.
    pub async fn git_add(&self, id: &str, body: &GitAdd) -> Result<(), ClientError> {
        self.git_post(id, "add", body).await
    }

    /// `POST /v1/sandboxes/{id}/git/commit`: the new commit's hash.
    pub async fn git_commit(
        &self,
        id: &str,
        body: &GitCommit,
    ) -> Result<GitCommitted, ClientError> {
        let url = self.sandbox_endpoint(id, &["git", "commit"])?;
        self.send_json(self.request(Method::POST, url).json(body), "commit")
            .await
    }

    /// `GET /v1/sandboxes/{id}/git/branches?path=`.
    pub async fn git_branches(&self, id: &str, path: &str) -> Result<GitBranches, ClientError> {
        self.git_get(id, "branches", path, "branch list").await
    }

    /// `POST /v1/sandboxes/{id}/git/branches`: creates the branch and checks it out.
    pub async fn git_create_branch(
        &self,
        id: &str,
        body: &GitCreateBranch,
    ) -> Result<(), ClientError> {
        self.git_post(id, "branches", body).await
    }

    /// `DELETE /v1/sandboxes/{id}/git/branches/{name}?path=`.
    pub async fn git_delete_branch(
        &self,
        id: &str,
        path: &str,
        name: &str,
    ) -> Result<(), ClientError> {
        let mut url = self.sandbox_endpoint(id, &["git", "branches", name])?;
        url.query_pairs_mut().append_pair("path", path);
        self.send(self.request(Method::DELETE, url)).await?;
        Ok(())
    }

    /// `POST /v1/sandboxes/{id}/git/checkout`.
    pub async fn git_checkout(&self, id: &str, body: &GitCheckout) -> Result<(), ClientError> {
        self.git_post(id, "checkout", body).await
    }

    /// `POST /v1/sandboxes/{id}/git/push`.
    pub async fn git_push(&self, id: &str, body: &GitSync) -> Result<(), ClientError> {
        self.git_post(id, "push", body).await
    }

    /// `POST /v1/sandboxes/{id}/git/pull`.
    pub async fn git_pull(&self, id: &str, body: &GitSync) -> Result<(), ClientError> {
        self.git_post(id, "pull", body).await
    }
}
