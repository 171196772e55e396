//! Exposing ports of a sandbox.
//!
//! Contract: `expose` returns the daemon's [`ExposedPort`] (with its `publicUrl`); `unexpose` succeeds
//! only on a 2xx answer (an unknown port or sandbox is an error answer).

use crate::{Client, ClientError};
use reqwest::Method;
use sandboxd_api_types::{ExposePort, ExposedPort};

impl Client {
    /// `POST /v1/sandboxes/{id}/ports`.
    pub async fn expose(
        &self,
        id: &str,
        port: u16,
        protocol: &str,
    ) -> Result<ExposedPort, ClientError> {
        let url = self.sandbox_endpoint(id, &["ports"])?;
        let body = ExposePort {
            port,
            protocol: protocol.to_string(),
            skip_listen_check: false,
        };
        self.send_json(self.request(Method::POST, url).json(&body), "exposed port")
            .await
    }

    /// `GET /v1/sandboxes/{id}/ports`.
    pub async fn ports(&self, id: &str) -> Result<Vec<ExposedPort>, ClientError> {
        let url = self.sandbox_endpoint(id, &["ports"])?;
        self.send_json(self.request(Method::GET, url), "exposed ports")
            .await
    }

    /// `DELETE /v1/sandboxes/{id}/ports/{port}`.
    pub async fn unexpose(&self, id: &str, port: u16) -> Result<(), ClientError> {
        let port = port.to_string();
        let url = self.sandbox_endpoint(id, &["ports", &port])?;
        self.send(self.request(Method::DELETE, url)).await?;
        Ok(())
    }
}
