//! Template calls: create (from an image or a Dockerfile), list, get, delete, read the build log,
//! snapshot a sandbox.
//!
//! Contract: a template name in a path is one percent-encoded segment; `template_log` reads the
//! lines from `offset` that exist now (NDJSON, decoded), so a caller follows a build by asking again
//! from the next line number until the template is no longer `building`.

use crate::ndjson::LineSplitter;
use crate::{Client, ClientError};
use reqwest::Method;
use sandboxd_api_types::{CreateSnapshot, CreateTemplate, LogLine, Template, TemplateList};

impl Client {
    /// `POST /v1/templates`: answers at once with the `building` template.
    pub async fn create_template(&self, body: &CreateTemplate) -> Result<Template, ClientError> {
        let request = self
            .request(Method::POST, self.endpoint(&["templates"])?)
            .json(body);
        self.send_json(request, "template").await
    }

    /// `GET /v1/templates`.
    pub async fn templates(&self) -> Result<TemplateList, ClientError> {
        let url = self.endpoint(&["templates"])?;
        self.send_json(self.request(Method::GET, url), "template list")
            .await
    }

    /// `GET /v1/templates/{name}`.
    pub async fn template(&self, name: &str) -> Result<Template, ClientError> {
        let url = self.endpoint(&["templates", name])?;
        self.send_json(self.request(Method::GET, url), "template")
            .await
    }

    /// `DELETE /v1/templates/{name}`.
    pub async fn delete_template(&self, name: &str) -> Result<(), ClientError> {
        let url = self.endpoint(&["templates", name])?;
        self.send(self.request(Method::DELETE, url)).await?;
        Ok(())
    }

    /// `GET /v1/templates/{name}/logs?offset=N`: the lines there are now.
    pub async fn template_log(&self, name: &str, offset: u64) -> Result<Vec<LogLine>, ClientError> {
        let mut url = self.endpoint(&["templates", name, "logs"])?;
        url.query_pairs_mut()
            .append_pair("offset", &offset.to_string());
        let response = self.send(self.request(Method::GET, url)).await?;
        let body = response.bytes().await.map_err(ClientError::Transport)?;
        let mut lines = LineSplitter::default();
        let mut raw = lines.push(&body)?;
        raw.extend(lines.finish());
        raw.iter()
            .map(|l| {
                serde_json::from_slice(l)
                    .map_err(|e| ClientError::Protocol(format!("invalid log line: {e}")))
            })
            .collect()
    }

    /// `POST /v1/sandboxes/{id}/snapshot`.
    pub async fn snapshot(&self, id: &str, name: &str) -> Result<Template, ClientError> {
        let url = self.sandbox_endpoint(id, &["snapshot"])?;
        let body = CreateSnapshot {
            name: name.to_string(),
        };
        self.send_json(self.request(Method::POST, url).json(&body), "template")
            .await
    }
}
