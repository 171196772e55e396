//! Volume calls: create, list, get, delete, and the volume's files without a sandbox.
//!
//! Contract: a volume name in a path is one percent-encoded segment; a path inside the volume is
//! the `path` query parameter, untouched (the daemon refuses `..` and never follows links). File
//! bytes travel raw and are streamed from and to local files.

use crate::{Client, ClientError};
use reqwest::Method;
use sandboxd_api_types::{CreateVolume, Volume, VolumeEntries, VolumeEntry, VolumeList};
use std::path::Path;
use url::Url;

impl Client {
    fn volume_files(&self, name: &str, rest: &[&str], path: &str) -> Result<Url, ClientError> {
        let mut segments = vec!["volumes", name, "files"];
        segments.extend_from_slice(rest);
        let mut url = self.endpoint(&segments)?;
        url.query_pairs_mut().append_pair("path", path);
        Ok(url)
    }

    /// `POST /v1/volumes`.
    pub async fn create_volume(&self, body: &CreateVolume) -> Result<Volume, ClientError> {
        let request = self
            .request(Method::POST, self.endpoint(&["volumes"])?)
            .json(body);
        self.send_json(request, "volume").await
    }

    /// `GET /v1/volumes`.
    pub async fn volumes(&self) -> Result<VolumeList, ClientError> {
        let url = self.endpoint(&["volumes"])?;
        self.send_json(self.request(Method::GET, url), "volume list")
            .await
    }

    /// `GET /v1/volumes/{name}`: with its usage and the sandboxes that mount it.
    pub async fn volume(&self, name: &str) -> Result<Volume, ClientError> {
        let url = self.endpoint(&["volumes", name])?;
        self.send_json(self.request(Method::GET, url), "volume")
            .await
    }

    /// `DELETE /v1/volumes/{name}`.
    pub async fn delete_volume(&self, name: &str) -> Result<(), ClientError> {
        let url = self.endpoint(&["volumes", name])?;
        self.send(self.request(Method::DELETE, url)).await?;
        Ok(())
    }

    /// `GET /v1/volumes/{name}/files?path=&depth=`.
    pub async fn volume_entries(
        &self,
        name: &str,
        path: &str,
        depth: u32,
    ) -> Result<VolumeEntries, ClientError> {
        let mut url = self.volume_files(name, &[], path)?;
        url.query_pairs_mut()
            .append_pair("depth", &depth.to_string());
        self.send_json(self.request(Method::GET, url), "volume entries")
            .await
    }

    /// `PUT /v1/volumes/{name}/files/content?path=&parents=true`: streams local file `local` there.
    pub async fn upload_to_volume(
        &self,
        name: &str,
        path: &str,
        local: &Path,
    ) -> Result<VolumeEntry, ClientError> {
        let file = tokio::fs::File::open(local)
            .await
            .map_err(ClientError::Io)?;
        let meta = file.metadata().await.map_err(ClientError::Io)?;
        if !meta.is_file() {
            return Err(ClientError::InvalidArgument(format!(
                "{} is not a regular file; only files can be copied",
                local.display()
            )));
        }
        let chunks = tokio_util::io::ReaderStream::new(file);
        self.upload_stream_to_volume(name, path, chunks, Some(meta.len()))
            .await
    }

    /// `PUT /v1/volumes/{name}/files/content?path=&parents=true` from a stream of chunks; `len`,
    /// when known, is sent as `Content-Length` (and must be exact).
    pub async fn upload_stream_to_volume<S>(
        &self,
        name: &str,
        path: &str,
        chunks: S,
        len: Option<u64>,
    ) -> Result<VolumeEntry, ClientError>
    where
        S: futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static,
    {
        let mut url = self.volume_files(name, &["content"], path)?;
        url.query_pairs_mut().append_pair("parents", "true");
        let request = self.put_stream(url, chunks, len);
        self.send_json(request, "volume entry").await
    }

    /// `GET /v1/volumes/{name}/files/content?path=`: streams the file into `out`; returns the
    /// number of bytes.
    pub async fn download_from_volume<W: tokio::io::AsyncWrite + Unpin>(
        &self,
        name: &str,
        path: &str,
        out: &mut W,
    ) -> Result<u64, ClientError> {
        let url = self.volume_files(name, &["content"], path)?;
        let response = self.send(self.request(Method::GET, url)).await?;
        crate::files::copy_body(response, out).await
    }
}
