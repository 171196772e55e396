//! Secret calls: create, list, get, update, delete. A value is sent, never received: no answer
//! carries one.

use crate::{Client, ClientError};
use reqwest::Method;
use sandboxd_api_types::{CreateSecret, SecretInfo, SecretList, UpdateSecret};

impl Client {
    /// `POST /v1/secrets`.
    pub async fn create_secret(&self, body: &CreateSecret) -> Result<SecretInfo, ClientError> {
        let request = self
            .request(Method::POST, self.endpoint(&["secrets"])?)
            .json(body);
        self.send_json(request, "secret").await
    }

    /// `GET /v1/secrets`.
    pub async fn secrets(&self) -> Result<SecretList, ClientError> {
        let url = self.endpoint(&["secrets"])?;
        self.send_json(self.request(Method::GET, url), "secret list")
            .await
    }

    /// `GET /v1/secrets/{name}`.
    pub async fn secret(&self, name: &str) -> Result<SecretInfo, ClientError> {
        let url = self.endpoint(&["secrets", name])?;
        self.send_json(self.request(Method::GET, url), "secret")
            .await
    }

    /// `PATCH /v1/secrets/{name}`.
    pub async fn update_secret(
        &self,
        name: &str,
        body: &UpdateSecret,
    ) -> Result<SecretInfo, ClientError> {
        let url = self.endpoint(&["secrets", name])?;
        self.send_json(self.request(Method::PATCH, url).json(body), "secret")
            .await
    }

    /// `DELETE /v1/secrets/{name}`.
    pub async fn delete_secret(&self, name: &str) -> Result<(), ClientError> {
        let url = self.endpoint(&["secrets", name])?;
        self.send(self.request(Method::DELETE, url)).await?;
        Ok(())
    }
}
