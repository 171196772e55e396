//! Daytona's file transfers (`/api/toolbox/{id}/files/…`), streamed both ways through the agent
//! (no file is held whole in the daemon):
//! - `POST /files/bulk-upload`: `multipart/form-data` where file `i` is a text field
//!   `files[i].path` (its destination) before a file field `files[i].file`; each file is written
//!   as it arrives. 200 `{files: [{path, bytes}]}`; when some file failed, 400 `{errors: [...],
//!   files}` (the SDK joins `errors`); a fault of the sandbox itself is a [`ToolboxError`].
//! - `POST /files/bulk-download {"paths": [...]}` → 200 `multipart/form-data; boundary=…`
//!   ([`super::multipart`]): per path, in order, a part `name="file"; filename="<path as
//!   requested>"` with its bytes, or a part `name="error"` with the JSON of a [`ToolboxError`]
//!   (`{statusCode, message, code, source}`, `FILE_NOT_FOUND` for a missing file). A read that
//!   breaks mid-file ends that part and adds an `error` part for the same path.
//! - `GET /files/download?path=` → the bytes; `POST /files/upload-v2?path=` (multipart, field
//!   `file`) → `{name, path, type}`: the generated client's single-file calls, with the daemon's
//!   token. (The SDK's signed URLs for them, `sandbox.download_url`/`upload_url`, need a
//!   per-sandbox signing key from the control API, which sandboxd does not issue.)

use super::files::absolute;
use super::multipart;
use super::toolbox_error::ToolboxError;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::{Stream, StreamExt};
use sandboxd_service::files::FileError;
use sandboxd_service::Service;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use tokio::sync::mpsc;

/// Chunks in flight between the request and the agent, each way.
const CHANNEL: usize = 8;

/// A `Sync` stream fed by a channel (the agent client wants one).
fn channel_stream<T: Send + 'static>(
    rx: mpsc::Receiver<T>,
) -> impl Stream<Item = T> + Send + Sync + 'static {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
}

/// The index of a bulk-upload field `files[<i>]<suffix>`.
pub fn field_index<'a>(name: &'a str, suffix: &str) -> Option<&'a str> {
    name.strip_prefix("files[")?
        .strip_suffix(suffix)?
        .strip_suffix(']')
}

fn boundary_of(headers: &HeaderMap) -> Result<String, ToolboxError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    multer::parse_boundary(content_type)
        .map_err(|e| ToolboxError::bad_request(format!("invalid multipart form: {e}")))
}

/// Writes one multipart field to `path` as it arrives; the bytes written.
async fn save_field(
    service: &Service,
    id: &str,
    path: &str,
    field: &mut multer::Field<'static>,
) -> Result<u64, FileError> {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(CHANNEL);
    let pump = async move {
        let mut written = 0u64;
        loop {
            match field.chunk().await {
                Ok(Some(chunk)) => {
                    written += chunk.len() as u64;
                    if tx.send(Ok(chunk)).await.is_err() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let _ = tx.send(Err(std::io::Error::other(e))).await;
                    break;
                }
            }
        }
        written
    };
    let (written, saved) = futures::join!(pump, service.save_file(id, path, channel_stream(rx)));
    saved.map(|()| written)
}

/// `POST /files/bulk-upload`.
pub async fn bulk_upload(
    State(service): State<Service>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ToolboxError> {
    let boundary = boundary_of(&headers)?;
    let mut form = multer::Multipart::new(body.into_data_stream(), boundary);
    let mut destinations: HashMap<String, String> = HashMap::new();
    let (mut files, mut errors) = (Vec::<Value>::new(), Vec::<String>::new());
    loop {
        let mut field = match form.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => {
                errors.push(format!("reading part: {e}"));
                break;
            }
        };
        let name = field.name().unwrap_or_default().to_string();
        if let Some(i) = field_index(&name, ".path") {
            let i = i.to_string();
            match field.text().await {
                Ok(path) => {
                    destinations.insert(i, path);
                }
                Err(e) => errors.push(format!("path[{i}]: {e}")),
            }
        } else if let Some(i) = field_index(&name, ".file") {
            let Some(dest) = destinations.get(i) else {
                errors.push(format!("file[{i}]: missing .path metadata"));
                continue;
            };
            let path = absolute(dest);
            match save_field(&service, &id, &path, &mut field).await {
                Ok(bytes) => files.push(json!({ "path": path, "bytes": bytes })),
                Err(FileError::Service(e)) => return Err(e.into()),
                Err(e) => errors.push(format!("{path}: {e}")),
            }
        }
    }
    if errors.is_empty() {
        Ok(Json(json!({ "files": files })).into_response())
    } else {
        Ok((
            StatusCode::BAD_REQUEST,
            Json(json!({ "errors": errors, "files": files })),
        )
            .into_response())
    }
}

#[derive(Debug, Deserialize)]
struct DownloadRequest {
    paths: Vec<String>,
}

/// `POST /files/bulk-download`.
pub async fn bulk_download(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ToolboxError> {
    let req: DownloadRequest = serde_json::from_slice(&body).map_err(|e| {
        ToolboxError::bad_request(format!("the body must be {{\"paths\": [...]}}: {e}"))
    })?;
    if req.paths.is_empty() {
        return Err(ToolboxError::bad_request("paths must not be empty"));
    }
    // An unknown sandbox fails the whole request, not each part.
    service.get(&id).await?;
    let boundary = multipart::boundary();
    let content_type = multipart::content_type(&boundary);
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(CHANNEL);
    tokio::spawn(async move {
        let send = |bytes: Vec<u8>| {
            let tx = tx.clone();
            async move { tx.send(Ok(Bytes::from(bytes))).await.is_ok() }
        };
        let error_part = |path: &str, e: ToolboxError| {
            let mut part = multipart::part_head(&boundary, "error", path, "application/json");
            part.extend_from_slice(e.body().to_string().as_bytes());
            part.extend_from_slice(multipart::PART_END);
            part
        };
        for path in &req.paths {
            let mut stream = match service.open_file(&id, &absolute(path)).await {
                Ok(stream) => Box::pin(stream),
                Err(e) => {
                    if !send(error_part(path, e.into())).await {
                        return;
                    }
                    continue;
                }
            };
            let head = multipart::part_head(&boundary, "file", path, "application/octet-stream");
            if !send(head).await {
                return;
            }
            let mut broke = None;
            while let Some(chunk) = stream.next().await {
                match chunk {
                    Ok(chunk) => {
                        if tx.send(Ok(chunk)).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        broke = Some(e);
                        break;
                    }
                }
            }
            let mut end = multipart::PART_END.to_vec();
            if let Some(e) = broke {
                let e = ToolboxError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "FILE_READ_FAILED",
                    format!("reading {path} failed: {e}"),
                );
                end.extend(error_part(path, e));
            }
            if !send(end).await {
                return;
            }
        }
        let _ = send(multipart::closing(&boundary)).await;
    });
    Ok((
        [(header::CONTENT_TYPE, content_type)],
        Body::from_stream(channel_stream(rx)),
    )
        .into_response())
}

/// `GET /files/download?path=`.
pub async fn download(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Result<Response, ToolboxError> {
    let path = q
        .get("path")
        .filter(|p| !p.is_empty())
        .ok_or_else(|| ToolboxError::bad_request("path is required"))?;
    let stream = service.open_file(&id, &absolute(path)).await?;
    let name = path.rsplit('/').next().unwrap_or_default();
    let disposition = format!("attachment; {}", multipart::filename_params(name));
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        Body::from_stream(stream.map(|c| c.map_err(std::io::Error::other))),
    )
        .into_response())
}

/// `POST /files/upload-v2?path=`.
pub async fn upload(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ToolboxError> {
    let path = absolute(
        q.get("path")
            .filter(|p| !p.is_empty())
            .ok_or_else(|| ToolboxError::bad_request("path is required"))?,
    );
    let mut form = multer::Multipart::new(body.into_data_stream(), boundary_of(&headers)?);
    while let Some(mut field) = form
        .next_field()
        .await
        .map_err(|e| ToolboxError::bad_request(format!("invalid multipart form: {e}")))?
    {
        if field.name() != Some("file") {
            continue;
        }
        save_field(&service, &id, &path, &mut field).await?;
        let name = path.rsplit('/').next().unwrap_or_default().to_string();
        return Ok(Json(json!({ "name": name, "path": path, "type": "file" })));
    }
    Err(ToolboxError::bad_request("the form has no file field"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_upload_fields_name_their_index() {
        assert_eq!(field_index("files[0].path", ".path"), Some("0"));
        assert_eq!(field_index("files[12].file", ".file"), Some("12"));
        assert_eq!(field_index("files[0].file", ".path"), None);
        assert_eq!(field_index("file", ".file"), None);
    }
}
