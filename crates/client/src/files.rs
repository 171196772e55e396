//! Files inside a sandbox: upload, download, list.
//!
//! Contract: the sandbox path is sent as the `path` query parameter, untouched (the daemon requires it
//! to be absolute and answers 400 otherwise). Bytes travel raw (`application/octet-stream`) and are
//! never held whole in memory by the streaming variants ([`Client::upload_file`],
//! [`Client::upload_stream`], [`Client::download_to`]); `download` and `upload` are for small files.
//! A local directory given to `upload_file` is refused (no directory copy yet).

use crate::{Client, ClientError};
use bytes::Bytes;
use futures::stream::{Stream, StreamExt};
use reqwest::{header, Body, Method};
use sandboxd_api_types::FileList;
use std::path::Path;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use url::Url;

impl Client {
    fn file_endpoint(&self, id: &str, rest: &[&str], path: &str) -> Result<Url, ClientError> {
        let mut url = self.sandbox_endpoint(id, rest)?;
        url.query_pairs_mut().append_pair("path", path);
        Ok(url)
    }

    /// `PUT /v1/sandboxes/{id}/files?path=`: writes `bytes` to `path`.
    pub async fn upload(
        &self,
        id: &str,
        path: &str,
        bytes: impl Into<Bytes>,
    ) -> Result<(), ClientError> {
        let url = self.file_endpoint(id, &["files"], path)?;
        let request = self
            .request(Method::PUT, url)
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(bytes.into());
        self.send(request).await?;
        Ok(())
    }

    /// Uploads a stream of chunks; `len`, when known, is sent as `Content-Length` (and must be exact).
    pub async fn upload_stream<S>(
        &self,
        id: &str,
        path: &str,
        chunks: S,
        len: Option<u64>,
    ) -> Result<(), ClientError>
    where
        S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    {
        let url = self.file_endpoint(id, &["files"], path)?;
        self.send(self.put_stream(url, chunks, len)).await?;
        Ok(())
    }

    /// A `PUT` of the raw bytes of `chunks` to `url`; `len`, when known, as `Content-Length`.
    pub(crate) fn put_stream<S>(
        &self,
        url: Url,
        chunks: S,
        len: Option<u64>,
    ) -> reqwest::RequestBuilder
    where
        S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    {
        let request = self
            .request(Method::PUT, url)
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(Body::wrap_stream(chunks));
        match len {
            Some(len) => request.header(header::CONTENT_LENGTH, len),
            None => request,
        }
    }

    /// Uploads the local file `local` to `path`, streaming it.
    pub async fn upload_file(&self, id: &str, path: &str, local: &Path) -> Result<(), ClientError> {
        let file = tokio::fs::File::open(local)
            .await
            .map_err(ClientError::Io)?;
        let meta = file.metadata().await.map_err(ClientError::Io)?;
        if meta.is_dir() {
            return Err(ClientError::InvalidArgument(format!(
                "{} is a directory; only files can be copied",
                local.display()
            )));
        }
        let len = meta.is_file().then_some(meta.len());
        let chunks = tokio_util::io::ReaderStream::new(file);
        self.upload_stream(id, path, chunks, len).await
    }

    /// `GET /v1/sandboxes/{id}/files?path=`: the whole file in memory.
    pub async fn download(&self, id: &str, path: &str) -> Result<Bytes, ClientError> {
        let url = self.file_endpoint(id, &["files"], path)?;
        let response = self.send(self.request(Method::GET, url)).await?;
        response.bytes().await.map_err(ClientError::Transport)
    }

    /// Streams the file at `path` into `out` (flushed at the end); returns the byte count.
    pub async fn download_to<W>(
        &self,
        id: &str,
        path: &str,
        out: &mut W,
    ) -> Result<u64, ClientError>
    where
        W: AsyncWrite + Unpin + ?Sized,
    {
        let url = self.file_endpoint(id, &["files"], path)?;
        let response = self.send(self.request(Method::GET, url)).await?;
        copy_body(response, out).await
    }

    /// `GET /v1/sandboxes/{id}/files/list?path=`.
    pub async fn list_files(&self, id: &str, path: &str) -> Result<FileList, ClientError> {
        let url = self.file_endpoint(id, &["files", "list"], path)?;
        self.send_json(self.request(Method::GET, url), "file list")
            .await
    }
}

/// Streams `response`'s body into `out` (flushed at the end); returns the byte count.
pub(crate) async fn copy_body<W>(
    response: reqwest::Response,
    out: &mut W,
) -> Result<u64, ClientError>
where
    W: AsyncWrite + Unpin + ?Sized,
{
    let mut body = response.bytes_stream();
    let mut written = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(ClientError::Transport)?;
        out.write_all(&chunk).await.map_err(ClientError::Io)?;
        written += chunk.len() as u64;
    }
    out.flush().await.map_err(ClientError::Io)?;
    Ok(written)
}
