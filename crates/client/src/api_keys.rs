//! API key calls: create (the answer is the only one that carries the secret), list, delete.
//!
//! Contract: these need an admin key; a user key gets [`ClientError::Api`] with code `forbidden`
//! (403). An id in a path is one percent-encoded segment.

use crate::{Client, ClientError};
use reqwest::Method;
use sandboxd_api_types::{ApiKeyList, CreateApiKey, CreatedApiKey};

impl Client {
    /// `POST /v1/api-keys`.
    pub async fn create_api_key(&self, body: &CreateApiKey) -> Result<CreatedApiKey, ClientError> {
        let request = self
            .request(Method::POST, self.endpoint(&["api-keys"])?)
            .json(body);
        self.send_json(request, "API key").await
    }

    /// `GET /v1/api-keys`.
    pub async fn api_keys(&self) -> Result<ApiKeyList, ClientError> {
        let url = self.endpoint(&["api-keys"])?;
        self.send_json(self.request(Method::GET, url), "API key list")
            .await
    }

    /// `DELETE /v1/api-keys/{id}`.
    pub async fn delete_api_key(&self, id: &str) -> Result<(), ClientError> {
        if id.is_empty() {
            return Err(ClientError::InvalidArgument("empty API key id".into()));
        }
        let url = self.endpoint(&["api-keys", id])?;
        self.send(self.request(Method::DELETE, url)).await?;
        Ok(())
    }
}
