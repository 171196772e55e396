//! E2B's volumes: the control API (`/volumes`, behind the API key) and the volume content API
//! (`/volumecontent/{volumeID}/…`, behind the volume's own bearer token), translated onto the shared
//! volume flows ([`sandboxd_service::volumes`]). No file operation of its own: every one is
//! `sandboxd_volumes`', which never follows a link out of the volume.
//!
//! Wire facts (the SDK's generated client): a volume is `{volumeID, name}`, with its `token` where
//! the SDK needs it (create, get); an entry is `{name, type, path, size, mode, uid, gid, atime,
//! mtime, ctime, target?}` with `type` one of `file`, `directory`, `symlink`, `unknown`, `mode` the
//! permission bits as an integer; `force` on a write replaces a file that is there (without it,
//! 409) and on a mkdir makes the missing parents (and takes a directory that is there); errors are
//! `{code, message}`.

use super::error::E2bError;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::TryStreamExt;
use sandboxd_service::timestamps::rfc3339;
use sandboxd_service::volumes::VolumeFiles;
use sandboxd_service::Service;
use sandboxd_store::VolumeRecord;
use sandboxd_volumes::files::Attrs;
use sandboxd_volumes::{Entry, EntryKind};
use serde::Deserialize;
use serde_json::{json, Value};

/// `POST /volumes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewVolume {
    pub name: String,
}

fn with_token(v: &VolumeRecord) -> Value {
    json!({"volumeID": v.id, "name": v.name, "token": v.token})
}

/// `POST /volumes`: 201 with the volume and its token.
pub async fn create(
    State(service): State<Service>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), E2bError> {
    let req: NewVolume = serde_json::from_slice(&body)
        .map_err(|e| E2bError::bad_request(format!("invalid body: {e}")))?;
    let volume = service.create_named_volume(req.name).await?;
    Ok((StatusCode::CREATED, Json(with_token(&volume))))
}

/// `GET /volumes`.
pub async fn list(State(service): State<Service>) -> Result<Json<Value>, E2bError> {
    let volumes = service.list_volumes().await?;
    Ok(Json(Value::Array(
        volumes
            .iter()
            .map(|v| json!({"volumeID": v.id, "name": v.name}))
            .collect(),
    )))
}

/// `GET /volumes/{volumeID}`: the volume and its token.
pub async fn get(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<Value>, E2bError> {
    Ok(Json(with_token(&service.get_volume(&id).await?)))
}

/// `DELETE /volumes/{volumeID}`: 204; 409 while a sandbox mounts it.
pub async fn destroy(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    service.delete_volume(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The query of a content call.
struct Query(Vec<(String, String)>);

impl Query {
    fn of(raw: &Option<String>) -> Self {
        Query(
            raw.as_deref()
                .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
                .unwrap_or_default(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn path(&self) -> Result<String, E2bError> {
        self.get("path")
            .map(str::to_string)
            .ok_or_else(|| E2bError::bad_request("query parameter `path` is required"))
    }

    fn number(&self, key: &str) -> Result<Option<u32>, E2bError> {
        self.get(key)
            .map(|v| {
                v.parse().map_err(|_| {
                    E2bError::bad_request(format!("`{key}` must be a number, not {v:?}"))
                })
            })
            .transpose()
    }

    fn force(&self) -> Result<bool, E2bError> {
        match self.get("force") {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(v) => Err(E2bError::bad_request(format!(
                "`force` must be true or false, not {v:?}"
            ))),
        }
    }

    fn attrs(&self) -> Result<Attrs, E2bError> {
        Ok(Attrs {
            uid: self.number("uid")?,
            gid: self.number("gid")?,
            mode: self.number("mode")?,
        })
    }
}

/// The volume a content call names, if its bearer token is the volume's.
async fn volume(service: &Service, id: &str, headers: &HeaderMap) -> Result<VolumeFiles, E2bError> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            E2bError::new(
                StatusCode::UNAUTHORIZED,
                "the volume content API needs the volume's token as a bearer token",
            )
        })?;
    Ok(service.volume_files_with_token(id, token.trim()).await?)
}

fn stat(e: &Entry) -> Value {
    let kind = match e.kind {
        EntryKind::File => "file",
        EntryKind::Dir => "directory",
        EntryKind::Symlink => "symlink",
        EntryKind::Other => "unknown",
    };
    let mut v = json!({
        "name": e.name, "type": kind, "path": e.path, "size": e.size, "mode": e.mode,
        "uid": e.uid, "gid": e.gid, "atime": rfc3339(e.atime_ms), "mtime": rfc3339(e.mtime_ms),
        "ctime": rfc3339(e.ctime_ms),
    });
    if let Some(target) = &e.target {
        v["target"] = json!(target);
    }
    v
}

/// `GET /volumecontent/{volumeID}/dir?path=&depth=`: a directory's entries.
pub async fn list_dir(
    State(service): State<Service>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, E2bError> {
    let q = Query::of(&raw);
    let (path, depth) = (q.path()?, q.number("depth")?.unwrap_or(1).clamp(1, 64));
    let files = volume(&service, &id, &headers).await?;
    let entries = files.run(move |v| v.list(&path, depth)).await?;
    Ok(Json(Value::Array(entries.iter().map(stat).collect())))
}

/// `POST /volumecontent/{volumeID}/dir?path=&uid=&gid=&mode=&force=`: 201 with the new directory.
pub async fn make_dir(
    State(service): State<Service>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<(StatusCode, Json<Value>), E2bError> {
    let q = Query::of(&raw);
    let (path, attrs, force) = (q.path()?, q.attrs()?, q.force()?);
    let files = volume(&service, &id, &headers).await?;
    let entry = files.run(move |v| v.mkdir(&path, force, attrs)).await?;
    Ok((StatusCode::CREATED, Json(stat(&entry))))
}

/// `GET /volumecontent/{volumeID}/path?path=`: what is at `path`.
pub async fn get_path(
    State(service): State<Service>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, E2bError> {
    let path = Query::of(&raw).path()?;
    let files = volume(&service, &id, &headers).await?;
    Ok(Json(stat(&files.run(move |v| v.stat(&path)).await?)))
}

/// `PATCH /volumecontent/{volumeID}/path?path=` with `{uid?, gid?, mode?}`.
pub async fn patch_path(
    State(service): State<Service>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Result<Json<Value>, E2bError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Patch {
        uid: Option<u32>,
        gid: Option<u32>,
        mode: Option<u32>,
    }
    let path = Query::of(&raw).path()?;
    let p: Patch = serde_json::from_slice(&body)
        .map_err(|e| E2bError::bad_request(format!("invalid body: {e}")))?;
    let attrs = Attrs {
        uid: p.uid,
        gid: p.gid,
        mode: p.mode,
    };
    let files = volume(&service, &id, &headers).await?;
    Ok(Json(stat(
        &files.run(move |v| v.set_attrs(&path, attrs)).await?,
    )))
}

/// `DELETE /volumecontent/{volumeID}/path?path=`: 204.
pub async fn remove(
    State(service): State<Service>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<StatusCode, E2bError> {
    let path = Query::of(&raw).path()?;
    let files = volume(&service, &id, &headers).await?;
    files.run(move |v| v.remove(&path)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /volumecontent/{volumeID}/file?path=`: the file's bytes.
pub async fn read_file(
    State(service): State<Service>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, E2bError> {
    let path = Query::of(&raw).path()?;
    let (bytes, size) = volume(&service, &id, &headers).await?.read(path).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        Body::from_stream(bytes),
    )
        .into_response())
}

/// `PUT /volumecontent/{volumeID}/file?path=&uid=&gid=&mode=&force=`: 201 with the file written.
pub async fn write_file(
    State(service): State<Service>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Body,
) -> Result<(StatusCode, Json<Value>), E2bError> {
    let q = Query::of(&raw);
    let (path, attrs, force) = (q.path()?, q.attrs()?, q.force()?);
    let files = volume(&service, &id, &headers).await?;
    let stream = body.into_data_stream().map_err(std::io::Error::other);
    // E2B's `force` replaces a file that is there; parents are never made.
    let opts = sandboxd_volumes::WriteOpts {
        parents: false,
        overwrite: force,
        attrs,
    };
    let entry = files.write(path, stream, opts).await?;
    Ok((StatusCode::CREATED, Json(stat(&entry))))
}
