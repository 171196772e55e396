//! Warm pool calls: list them, set one's size.

use crate::{Client, ClientError};
use reqwest::Method;
use sandboxd_api_types::{SetWarmPool, WarmPool, WarmPoolList};

impl Client {
    /// `GET /v1/warm-pools`.
    pub async fn warm_pools(&self) -> Result<WarmPoolList, ClientError> {
        let url = self.endpoint(&["warm-pools"])?;
        self.send_json(self.request(Method::GET, url), "warm pool list")
            .await
    }

    /// `PUT /v1/warm-pools/{template}`.
    pub async fn set_warm_pool(&self, template: &str, size: u32) -> Result<WarmPool, ClientError> {
        let url = self.endpoint(&["warm-pools", template])?;
        let request = self.request(Method::PUT, url).json(&SetWarmPool { size });
        self.send_json(request, "warm pool").await
    }
}
