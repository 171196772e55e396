//! Rust client of the sandboxd native `/v1` API.
//!
//! Contract:
//! - [`Client`] talks plain HTTP to one daemon (`SB_API_URL`, default [`DEFAULT_API_URL`]) and sends
//!   `Authorization: Bearer <token>` (`SB_PAT_TOKEN`) on every request. It never follows redirects and
//!   ignores `HTTP_PROXY` & co.: the token travels in clear text and is handed to no one but the daemon.
//! - Bodies are the types of `sandboxd-api-types`, re-exported here as [`types`].
//! - Every call returns [`ClientError`]; an error answer of the daemon is [`ClientError::Api`] (its JSON
//!   `{code, message}`) or [`ClientError::Http`] (status and raw text, when the body is not that JSON).
//! - Ids and paths are percent-encoded into the URL; an empty (or `.`/`..`) id is refused before sending.
//! - No call retries: retrying a create is what [`Client::create`]'s idempotency key is for.
//!
//! The calls live beside the resource they touch: [`sandboxes`] (create/list/get/delete),
//! [`exec`] (collected and streamed commands), [`files`] (upload/download/list), [`ports`],
//! [`api_keys`], [`git`] (git in a sandbox).

pub mod api_keys;
pub mod cluster;
pub mod code;
mod error;
pub mod events;
pub mod exec;
pub mod files;
pub mod git;
pub mod images;
pub mod ndjson;
pub mod ports;
pub mod sandboxes;
pub mod secrets;
pub mod templates;
pub mod terminal;
pub mod timing;
pub mod volumes;
pub mod warm_pools;

pub use error::ClientError;
pub use exec::decode_data;
pub use sandboxd_api_types as types;
pub use sandboxes::ListQuery;

use reqwest::{Method, RequestBuilder, Response};
use serde::de::DeserializeOwned;
use std::time::Duration;
use url::Url;

/// The daemon's default address.
pub const DEFAULT_API_URL: &str = "http://127.0.0.1:21212";
/// Environment variable holding the daemon's address.
pub const ENV_API_URL: &str = "SB_API_URL";
/// Environment variable holding the bearer token.
pub const ENV_TOKEN: &str = "SB_PAT_TOKEN";

/// How long to wait for a TCP connection to the daemon.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A handle on one daemon; cheap to clone (clones share one connection pool).
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("token", &"<redacted>")
            .finish()
    }
}

impl Client {
    /// A client for the daemon at `base_url` (`http://host:port`, optionally with a path prefix).
    pub fn new(base_url: &str, token: impl Into<String>) -> Result<Self, ClientError> {
        let token = token.into();
        if token.is_empty() {
            return Err(ClientError::MissingToken);
        }
        let invalid = |reason: &str| ClientError::InvalidUrl {
            url: base_url.to_string(),
            reason: reason.to_string(),
        };
        let mut base = Url::parse(base_url).map_err(|e| invalid(&e.to_string()))?;
        if base.scheme() != "http" {
            return Err(invalid("only http:// URLs are supported"));
        }
        if base.cannot_be_a_base() || base.host().is_none() {
            return Err(invalid("no host"));
        }
        base.set_query(None);
        base.set_fragment(None);
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("sandboxd-client/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(ClientError::Transport)?;
        Ok(Client { http, base, token })
    }

    /// A client configured from `SB_API_URL` (default [`DEFAULT_API_URL`]) and `SB_PAT_TOKEN`.
    pub fn from_env() -> Result<Self, ClientError> {
        let url = std::env::var(ENV_API_URL).unwrap_or_else(|_| DEFAULT_API_URL.to_string());
        let token = std::env::var(ENV_TOKEN).map_err(|_| ClientError::MissingToken)?;
        Client::new(&url, token)
    }

    /// The base URL requests are made against.
    pub fn base_url(&self) -> &Url {
        &self.base
    }

    /// `base/v1/<segments...>`, each segment percent-encoded.
    fn endpoint(&self, segments: &[&str]) -> Result<Url, ClientError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| ClientError::InvalidUrl {
                url: self.base.to_string(),
                reason: "cannot carry a path".into(),
            })?
            .pop_if_empty()
            .push("v1")
            .extend(segments);
        Ok(url)
    }

    /// `base/v1/sandboxes/<id>/<rest...>`.
    fn sandbox_endpoint(&self, id: &str, rest: &[&str]) -> Result<Url, ClientError> {
        let id = check_id(id)?;
        let mut segments = vec!["sandboxes", id];
        segments.extend_from_slice(rest);
        self.endpoint(&segments)
    }

    fn request(&self, method: Method, url: Url) -> RequestBuilder {
        tracing::debug!(%method, %url, "sandboxd request");
        self.http.request(method, url).bearer_auth(&self.token)
    }

    /// Sends; turns a non-2xx answer into the error its body describes.
    async fn send(&self, request: RequestBuilder) -> Result<Response, ClientError> {
        let response = request.send().await.map_err(ClientError::Transport)?;
        check_status(response).await
    }

    /// Sends and decodes a JSON success body.
    async fn send_json<T: DeserializeOwned>(
        &self,
        request: RequestBuilder,
        what: &'static str,
    ) -> Result<T, ClientError> {
        let body = self
            .send(request)
            .await?
            .bytes()
            .await
            .map_err(ClientError::Transport)?;
        serde_json::from_slice(&body).map_err(|source| ClientError::Decode { what, source })
    }
}

/// Passes a 2xx answer through; reads any other into a [`ClientError`].
async fn check_status(response: Response) -> Result<Response, ClientError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = response.bytes().await.map_err(ClientError::Transport)?;
    Err(ClientError::from_error_body(status.as_u16(), &body))
}

fn check_id(id: &str) -> Result<&str, ClientError> {
    match id {
        "" => Err(ClientError::InvalidArgument("empty sandbox id".into())),
        "." | ".." => Err(ClientError::InvalidArgument(format!(
            "invalid sandbox id {id:?}"
        ))),
        _ => Ok(id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(base: &str) -> Client {
        Client::new(base, "t").expect("valid base URL")
    }

    #[test]
    fn endpoints_percent_encode_ids_and_keep_a_path_prefix() {
        let c = client("http://127.0.0.1:21212");
        let url = c.sandbox_endpoint("a/b c", &["files"]).expect("url");
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:21212/v1/sandboxes/a%2Fb%20c/files"
        );
        let c = client("http://h:1/prefix/?x=1#f");
        let url = c.endpoint(&["sandboxes"]).expect("url");
        assert_eq!(url.as_str(), "http://h:1/prefix/v1/sandboxes");
    }

    #[test]
    fn bad_ids_are_refused_before_sending() {
        let c = client("http://h:1");
        for id in ["", ".", ".."] {
            assert!(matches!(
                c.sandbox_endpoint(id, &[]),
                Err(ClientError::InvalidArgument(_))
            ));
        }
    }

    #[test]
    fn bad_configuration_is_refused() {
        assert!(matches!(
            Client::new("http://h:1", ""),
            Err(ClientError::MissingToken)
        ));
        for url in [
            "not a url",
            "https://h:1",
            "unix:/run/sock",
            "data:text/plain,x",
        ] {
            assert!(
                matches!(Client::new(url, "t"), Err(ClientError::InvalidUrl { .. })),
                "{url}"
            );
        }
    }

    #[test]
    fn debug_output_hides_the_token() {
        let c = Client::new("http://h:1", "s3cret").expect("client");
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
