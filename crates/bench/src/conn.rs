//! One keep-alive HTTP/1.1 connection to the daemon, for round trips measured without a client
//! library's own overhead (pools, retries): requests go out one at a time on the same socket.

use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};

/// A connection to the daemon at `api`.
pub struct KeepAlive {
    sender: tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
    host: String,
}

impl KeepAlive {
    /// Connects to the daemon of URL `api` (`http://host:port`).
    pub async fn connect(api: &str) -> anyhow::Result<KeepAlive> {
        let uri: hyper::Uri = api.parse().context("--api")?;
        let host = uri.authority().context("--api has no host")?.to_string();
        let stream = tokio::net::TcpStream::connect(&host)
            .await
            .with_context(|| format!("connecting to {host}"))?;
        stream.set_nodelay(true)?;
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(KeepAlive {
            sender: tokio::sync::Mutex::new(sender),
            host,
        })
    }

    /// `POST path` with `body` as JSON and `headers`; the whole answer's body, when it is a 2xx.
    pub async fn post_json(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: &serde_json::Value,
    ) -> anyhow::Result<Bytes> {
        let mut request = hyper::Request::post(path)
            .header("host", &self.host)
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::from(serde_json::to_vec(body)?)))?;
        let mut sender = self.sender.lock().await;
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!(
                "POST {path} answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(body)
    }
}
