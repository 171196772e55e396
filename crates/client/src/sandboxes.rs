//! Sandbox lifecycle calls: create, list, get, delete.
//!
//! Contract: `create` sends the optional `Idempotency-Key` header untouched (the daemon replays the
//! first answer for a repeated key); `list` fetches one page, `list_all` follows `nextCursor` until the
//! last page and fails with [`ClientError::Protocol`] if the daemon hands back a cursor it already gave
//! (so a buggy server cannot loop the client forever); `delete` succeeds only on a 2xx answer (404 for
//! an unknown id is an error — see [`ClientError::is_not_found`]).

use crate::{Client, ClientError};
use reqwest::Method;
use sandboxd_api_types::{CreateSandbox, Sandbox, SandboxList};
use std::collections::HashSet;
use url::Url;

/// Filters and paging of `GET /v1/sandboxes`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListQuery {
    /// Only sandboxes carrying all these labels (`metadata=k=v`, repeated).
    pub metadata: Vec<(String, String)>,
    /// Only sandboxes in this state.
    pub state: Option<String>,
    /// Continue after this cursor (from a previous page's `nextCursor`).
    pub cursor: Option<String>,
    /// Page size.
    pub limit: Option<u32>,
}

impl ListQuery {
    /// Appends this query's parameters to `url`.
    pub fn apply(&self, url: &mut Url) {
        let mut pairs = url.query_pairs_mut();
        for (key, value) in &self.metadata {
            pairs.append_pair("metadata", &format!("{key}={value}"));
        }
        if let Some(state) = &self.state {
            pairs.append_pair("state", state);
        }
        if let Some(cursor) = &self.cursor {
            pairs.append_pair("cursor", cursor);
        }
        if let Some(limit) = self.limit {
            pairs.append_pair("limit", &limit.to_string());
        }
        drop(pairs);
        if url.query() == Some("") {
            url.set_query(None);
        }
    }
}

impl Client {
    /// `POST /v1/sandboxes`.
    pub async fn create(
        &self,
        body: &CreateSandbox,
        idempotency_key: Option<&str>,
    ) -> Result<Sandbox, ClientError> {
        let mut request = self
            .request(Method::POST, self.endpoint(&["sandboxes"])?)
            .json(body);
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        self.send_json(request, "sandbox").await
    }

    /// [`Client::create`], with the steps the daemon's create took.
    pub async fn create_timed(
        &self,
        body: &CreateSandbox,
    ) -> Result<crate::timing::Timed<Sandbox>, ClientError> {
        let request = self
            .request(Method::POST, self.endpoint(&["sandboxes"])?)
            .json(body);
        self.send_json_timed(request, "sandbox").await
    }

    /// `GET /v1/sandboxes`: one page.
    pub async fn list(&self, query: &ListQuery) -> Result<SandboxList, ClientError> {
        let mut url = self.endpoint(&["sandboxes"])?;
        query.apply(&mut url);
        self.send_json(self.request(Method::GET, url), "sandbox list")
            .await
    }

    /// `GET /v1/sandboxes`, following cursors from `query.cursor` to the last page.
    pub async fn list_all(&self, query: &ListQuery) -> Result<Vec<Sandbox>, ClientError> {
        let mut query = query.clone();
        let mut seen = HashSet::new();
        let mut all = Vec::new();
        loop {
            let page = self.list(&query).await?;
            all.extend(page.sandboxes);
            match page.next_cursor {
                None => return Ok(all),
                Some(cursor) if !seen.insert(cursor.clone()) => {
                    return Err(ClientError::Protocol(format!(
                        "the daemon repeated the list cursor {cursor:?}"
                    )))
                }
                Some(cursor) => query.cursor = Some(cursor),
            }
        }
    }

    /// `GET /v1/sandboxes/{idOrName}`.
    pub async fn get(&self, id_or_name: &str) -> Result<Sandbox, ClientError> {
        let url = self.sandbox_endpoint(id_or_name, &[])?;
        self.send_json(self.request(Method::GET, url), "sandbox")
            .await
    }

    /// `POST /v1/sandboxes/{idOrName}/pause {mode}`: `memory` keeps processes and memory,
    /// `filesystem` only the files (a stop).
    pub async fn pause(
        &self,
        id_or_name: &str,
        mode: crate::types::PauseMode,
    ) -> Result<Sandbox, ClientError> {
        let url = self.sandbox_endpoint(id_or_name, &["pause"])?;
        let body = crate::types::PauseRequest { mode };
        self.send_json(self.request(Method::POST, url).json(&body), "sandbox")
            .await
    }

    /// `POST /v1/sandboxes/{idOrName}/fork`: `count` copies of a running gVisor sandbox, memory
    /// and all; one result per fork.
    pub async fn fork(
        &self,
        id_or_name: &str,
        body: &crate::types::ForkRequest,
    ) -> Result<crate::types::ForkResults, ClientError> {
        let url = self.sandbox_endpoint(id_or_name, &["fork"])?;
        self.send_json(self.request(Method::POST, url).json(body), "sandbox")
            .await
    }

    /// `POST /v1/sandboxes/{idOrName}/resume`.
    pub async fn resume(&self, id_or_name: &str) -> Result<Sandbox, ClientError> {
        let url = self.sandbox_endpoint(id_or_name, &["resume"])?;
        self.send_json(self.request(Method::POST, url), "sandbox")
            .await
    }

    /// [`Client::resume`], with the steps the daemon's resume took.
    pub async fn resume_timed(
        &self,
        id_or_name: &str,
    ) -> Result<crate::timing::Timed<Sandbox>, ClientError> {
        let url = self.sandbox_endpoint(id_or_name, &["resume"])?;
        self.send_json_timed(self.request(Method::POST, url), "sandbox")
            .await
    }

    /// `POST /v1/sandboxes/{idOrName}/stop`.
    pub async fn stop(&self, id_or_name: &str) -> Result<Sandbox, ClientError> {
        let url = self.sandbox_endpoint(id_or_name, &["stop"])?;
        self.send_json(self.request(Method::POST, url), "sandbox")
            .await
    }

    /// `POST /v1/sandboxes/{idOrName}/start`.
    pub async fn start(&self, id_or_name: &str) -> Result<Sandbox, ClientError> {
        let url = self.sandbox_endpoint(id_or_name, &["start"])?;
        self.send_json(self.request(Method::POST, url), "sandbox")
            .await
    }

    /// `DELETE /v1/sandboxes/{id}`.
    pub async fn delete(&self, id: &str) -> Result<(), ClientError> {
        self.delete_timed(id).await.map(|_| ())
    }

    /// [`Client::delete`], with the steps the daemon timed ([`crate::timing`]).
    pub async fn delete_timed(&self, id: &str) -> Result<crate::timing::Timed<()>, ClientError> {
        let url = self.sandbox_endpoint(id, &[])?;
        self.send_timed(self.request(Method::DELETE, url)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_repeats_metadata_and_encodes_the_inner_equals_sign() {
        let mut url = Url::parse("http://h/v1/sandboxes").expect("url");
        ListQuery {
            metadata: vec![("team".into(), "a b".into()), ("k2".into(), "v=2".into())],
            state: Some("running".into()),
            cursor: Some("c/1".into()),
            limit: Some(5),
        }
        .apply(&mut url);
        assert_eq!(
            url.query(),
            Some("metadata=team%3Da+b&metadata=k2%3Dv%3D2&state=running&cursor=c%2F1&limit=5")
        );
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(pairs[1], ("metadata".into(), "k2=v=2".into()));
    }

    #[test]
    fn empty_query_leaves_no_question_mark() {
        let mut url = Url::parse("http://h/v1/sandboxes").expect("url");
        ListQuery::default().apply(&mut url);
        assert_eq!(url.as_str(), "http://h/v1/sandboxes");
    }
}
