//! The cluster call: the members as the answering node sees them.
//!
//! Contract: needs an admin key (403 otherwise); a daemon that runs as a single node answers
//! [`ClientError::Api`] with code `not_clustered` (404).

use crate::{Client, ClientError};
use reqwest::Method;
use sandboxd_api_types::ClusterStatus;

impl Client {
    /// `GET /v1/cluster`.
    pub async fn cluster_status(&self) -> Result<ClusterStatus, ClientError> {
        let url = self.endpoint(&["cluster"])?;
        self.send_json(self.request(Method::GET, url), "cluster status")
            .await
    }
}
