//! Image calls: pull, list, get, remove, prune.
//!
//! Contract: a reference in a path is sent as one percent-encoded segment (`docker.io%2Flibrary%2F…`),
//! so any reference or digest names exactly one image; `pull` answers once the image is on the node
//! (a pull of a present tag fetches nothing).

use crate::{Client, ClientError};
use reqwest::Method;
use sandboxd_api_types::{Image, ImageList, PruneImages, PullImage};

impl Client {
    /// `POST /v1/images`.
    pub async fn pull_image(&self, body: &PullImage) -> Result<Image, ClientError> {
        let request = self
            .request(Method::POST, self.endpoint(&["images"])?)
            .json(body);
        self.send_json(request, "image").await
    }

    /// `GET /v1/images`.
    pub async fn images(&self) -> Result<ImageList, ClientError> {
        let url = self.endpoint(&["images"])?;
        self.send_json(self.request(Method::GET, url), "image list")
            .await
    }

    /// `GET /v1/images/{reference or digest}`.
    pub async fn image(&self, key: &str) -> Result<Image, ClientError> {
        let url = self.endpoint(&["images", key])?;
        self.send_json(self.request(Method::GET, url), "image")
            .await
    }

    /// `DELETE /v1/images/{reference or digest}`.
    pub async fn remove_image(&self, key: &str) -> Result<(), ClientError> {
        let url = self.endpoint(&["images", key])?;
        self.send(self.request(Method::DELETE, url)).await?;
        Ok(())
    }

    /// `POST /v1/images/prune`.
    pub async fn prune_images(&self) -> Result<PruneImages, ClientError> {
        let url = self.endpoint(&["images", "prune"])?;
        self.send_json(self.request(Method::POST, url), "prune report")
            .await
    }
}
