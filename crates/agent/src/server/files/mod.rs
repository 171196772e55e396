//! `GET /files` (download) and `POST /files` (upload), envd-compatible.
//!
//! Both stream: a download sends the file in 64 KiB chunks as the client reads; an upload writes each
//! body chunk as it arrives. The file is opened (and, for uploads, created with its missing parent
//! directories) on a thread holding the caller's filesystem identity, so the kernel applies the user's
//! permissions and new entries belong to the user; the data is then moved on the open descriptor.
//! Uploads: `application/octet-stream` to `path`, or `multipart/*` where each `file` part goes to
//! `path` or, without it, to the part's filename (so one request can write several files). A body may
//! be gzip (`Content-Encoding`), and a download is gzip when `Accept-Encoding` prefers it
//! ([`encoding`]). `X-Metadata-*` headers set metadata on every file an upload writes (see
//! [`super::fs::xattr`]), echoed in the answer. A full disk answers 507. Not supported: Range
//! requests.

mod encoding;

use super::auth::{check_files_access, Caller};
use super::error::ServerError;
use super::fs::{create_dirs, creds, resolve_path, xattr};
use super::AppState;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use sandboxd_envd::files::{FilesError, FilesQuery, Operation, WriteInfo, WriteType};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio_util::io::ReaderStream;

const READ_CHUNK: usize = 64 << 10;

pub fn routes() -> Router<AppState> {
    Router::new().route(sandboxd_envd::files::PATH, get(download).post(upload))
}

/// A `/files` failure: the status and `{"code": <status>, "message": ...}`.
pub fn error_response(err: &ServerError) -> Response {
    let status = err.files_status();
    let message = err.message();
    if status >= 500 {
        tracing::error!(status, error = %message, "files call failed");
    } else {
        tracing::debug!(status, error = %message, "files call refused");
    }
    let body = serde_json::to_vec(&FilesError {
        code: status,
        message,
    })
    .unwrap_or_default();
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

fn parse_query(uri: &Uri) -> Result<FilesQuery, ServerError> {
    Query::<FilesQuery>::try_from_uri(uri)
        .map(|Query(q)| q)
        .map_err(|e| ServerError::InvalidArgument(format!("invalid query: {e}")))
}

async fn download(State(state): State<AppState>, headers: HeaderMap, uri: Uri) -> Response {
    match try_download(&state, &headers, &uri).await {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    }
}

async fn try_download(
    state: &AppState,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<Response, ServerError> {
    let q = parse_query(uri)?;
    check_files_access(state, headers, &q, Operation::Read)?;
    let caller = Caller::named(state, q.username.as_deref())?;
    let path = resolve_path(q.path.as_deref().unwrap_or(""), &caller.user)?;
    let (file, len) = creds::run_as(&caller.user, move || open_for_read(path)).await?;
    let gzip = encoding::wants_gzip(headers);
    let body = if gzip {
        encoding::gzip_file(file)
    } else {
        Body::from_stream(ReaderStream::with_capacity(
            tokio::fs::File::from_std(file),
            READ_CHUNK,
        ))
    };
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if gzip {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    } else {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    Ok(resp)
}

/// Opens a regular file for reading (never blocking on a FIFO) and returns it with its size.
fn open_for_read(path: PathBuf) -> Result<(File, u64), ServerError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                ServerError::NotFound(format!("path '{}' does not exist", path.display()))
            }
            _ => ServerError::io("open", path.display())(e),
        })?;
    let md = file
        .metadata()
        .map_err(ServerError::io("stat", path.display()))?;
    if md.is_dir() {
        return Err(ServerError::InvalidArgument(format!(
            "path '{}' is a directory",
            path.display()
        )));
    }
    if !md.is_file() {
        return Err(ServerError::InvalidArgument(format!(
            "path '{}' is not a regular file",
            path.display()
        )));
    }
    Ok((file, md.len()))
}

async fn upload(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    body: Body,
) -> Response {
    match try_upload(&state, &headers, &uri, body).await {
        Ok(written) => match serde_json::to_vec(&written) {
            Ok(json) => (
                StatusCode::OK,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                json,
            )
                .into_response(),
            Err(e) => error_response(&ServerError::Internal(format!(
                "cannot encode the answer: {e}"
            ))),
        },
        Err(e) => error_response(&e),
    }
}

async fn try_upload(
    state: &AppState,
    headers: &HeaderMap,
    uri: &Uri,
    body: Body,
) -> Result<Vec<WriteInfo>, ServerError> {
    let q = parse_query(uri)?;
    check_files_access(state, headers, &q, Operation::Write)?;
    let caller = Caller::named(state, q.username.as_deref())?;
    let body = match encoding::request_coding(headers)? {
        encoding::Coding::Identity => body,
        encoding::Coding::Gzip => encoding::gunzip_body(body),
    };
    let metadata = Arc::new(xattr::from_headers(headers)?);
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let media = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if media == "application/octet-stream" {
        let target = q.path.as_deref().ok_or_else(|| {
            ServerError::InvalidArgument(
                "path query parameter is required for raw body upload".into(),
            )
        })?;
        let path = resolve_path(target, &caller.user)?;
        let stream = body
            .into_data_stream()
            .map(|r| r.map_err(|e| e.to_string()));
        return Ok(vec![write_stream(&caller, path, stream, &metadata).await?]);
    }
    if !media.starts_with("multipart/") {
        return Err(ServerError::InvalidArgument(format!(
            "unsupported content type: '{content_type}', expected multipart/form-data or application/octet-stream"
        )));
    }
    let boundary = multer::parse_boundary(&content_type).map_err(|e| {
        ServerError::InvalidArgument(format!("invalid multipart content type: {e}"))
    })?;
    let mut form = multer::Multipart::new(body.into_data_stream(), boundary);
    let mut written: Vec<WriteInfo> = Vec::new();
    while let Some(field) = form
        .next_field()
        .await
        .map_err(|e| ServerError::InvalidArgument(format!("error reading form: {e}")))?
    {
        if field.name() != Some("file") {
            continue;
        }
        let target = match (&q.path, field.file_name()) {
            (Some(p), _) => p.clone(),
            (None, Some(name)) => name.to_owned(),
            (None, None) => {
                return Err(ServerError::InvalidArgument(
                    "a file part has neither a path query parameter nor a filename".into(),
                ))
            }
        };
        let path = resolve_path(&target, &caller.user)?;
        if written.iter().any(|w| w.path == path.to_string_lossy()) {
            return Err(ServerError::InvalidArgument(format!(
                "you cannot upload multiple files to the same path '{}' in one upload request",
                path.display()
            )));
        }
        let stream = field.map(|r| r.map_err(|e| e.to_string()));
        written.push(write_stream(&caller, path, stream, &metadata).await?);
    }
    Ok(written)
}

/// Creates/truncates `path` as the caller, sets `metadata` on it and copies `data` into it chunk by
/// chunk.
async fn write_stream<S>(
    caller: &Caller,
    path: PathBuf,
    data: S,
    metadata: &Arc<HashMap<String, String>>,
) -> Result<WriteInfo, ServerError>
where
    S: Stream<Item = Result<Bytes, String>>,
{
    let target = path.clone();
    let meta = metadata.clone();
    let file = creds::run_as(&caller.user, move || {
        let file = open_for_write(&target)?;
        xattr::write(&file, &target, &meta)?;
        Ok(file)
    })
    .await?;
    let mut file = tokio::fs::File::from_std(file);
    let mut data = std::pin::pin!(data);
    while let Some(chunk) = data.next().await {
        let chunk = chunk
            .map_err(|e| ServerError::InvalidArgument(format!("reading the upload failed: {e}")))?;
        file.write_all(&chunk)
            .await
            .map_err(ServerError::io("write", path.display()))?;
    }
    file.flush()
        .await
        .map_err(ServerError::io("write", path.display()))?;
    tracing::debug!(path = %path.display(), user = %caller.user.name, "file written");
    Ok(WriteInfo {
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        kind: WriteType::File,
        path: path.to_string_lossy().into_owned(),
        metadata: (**metadata).clone(),
    })
}

/// Creates missing parents, refuses directories and special files, opens `path` truncated.
fn open_for_write(path: &std::path::Path) -> Result<File, ServerError> {
    if let Some(parent) = path.parent() {
        create_dirs(parent)?;
    }
    match std::fs::metadata(path) {
        Ok(md) if md.is_dir() => {
            return Err(ServerError::InvalidArgument(format!(
                "path is a directory: {}",
                path.display()
            )))
        }
        Ok(md) if md.file_type().is_fifo() || md.file_type().is_socket() => {
            return Err(ServerError::InvalidArgument(format!(
                "path is not a regular file: {}",
                path.display()
            )))
        }
        _ => {}
    }
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o666)
        .open(path)
        .map_err(ServerError::io("open", path.display()))
}
