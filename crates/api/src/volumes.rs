//! The native `/v1/volumes` handlers: volumes, and their files without a sandbox. Parse, call the
//! shared flow in [`sandboxd_service::volumes`], shape the answer.

use crate::error::{parse_json, Error};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::TryStreamExt;
use sandboxd_api_types as api;
use sandboxd_service::volumes::{entry_to_api, volume_to_api};
use sandboxd_service::Service;
use sandboxd_volumes::files::Attrs;

fn param(raw: &Option<String>, key: &str) -> Option<String> {
    raw.as_deref().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    })
}

fn flag(raw: &Option<String>, key: &str) -> Result<bool, Error> {
    match param(raw, key).as_deref() {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") | Some("") => Ok(true),
        Some(other) => Err(Error::invalid(format!(
            "query parameter `{key}` must be true or false, not {other:?}"
        ))),
    }
}

fn number(raw: &Option<String>, key: &str) -> Result<Option<u32>, Error> {
    param(raw, key)
        .map(|v| {
            v.parse::<u32>().map_err(|_| {
                Error::invalid(format!(
                    "query parameter `{key}` must be a number, not {v:?}"
                ))
            })
        })
        .transpose()
}

fn path_of(raw: &Option<String>) -> String {
    param(raw, "path").unwrap_or_else(|| "/".into())
}

/// Create a volume.
#[utoipa::path(post, path = "/v1/volumes", request_body = api::CreateVolume,
    responses((status = 201, body = api::Volume), (status = 400, body = api::ApiError),
              (status = 401, body = api::ApiError), (status = 409, body = api::ApiError)))]
pub async fn create(
    State(service): State<Service>,
    body: Bytes,
) -> Result<(StatusCode, Json<api::Volume>), Error> {
    let req: api::CreateVolume = parse_json(&body)?;
    let volume = service.create_volume(req).await?;
    Ok((StatusCode::CREATED, Json(volume_to_api(&volume))))
}

/// List the volumes.
#[utoipa::path(get, path = "/v1/volumes",
    responses((status = 200, body = api::VolumeList), (status = 401, body = api::ApiError)))]
pub async fn list(State(service): State<Service>) -> Result<Json<api::VolumeList>, Error> {
    let volumes = service.list_volumes().await?;
    Ok(Json(api::VolumeList {
        volumes: volumes.iter().map(volume_to_api).collect(),
    }))
}

/// One volume, with its usage and the sandboxes that mount it.
#[utoipa::path(get, path = "/v1/volumes/{name}", params(("name" = String, Path, description = "name or id")),
    responses((status = 200, body = api::Volume), (status = 401, body = api::ApiError),
              (status = 404, body = api::ApiError)))]
pub async fn get(
    State(service): State<Service>,
    Path(name): Path<String>,
) -> Result<Json<api::Volume>, Error> {
    Ok(Json(service.volume_detail(&name).await?))
}

/// Delete a volume and its files; 409 while a sandbox mounts it.
#[utoipa::path(delete, path = "/v1/volumes/{name}", params(("name" = String, Path, description = "name or id")),
    responses((status = 204), (status = 401, body = api::ApiError), (status = 404, body = api::ApiError),
              (status = 409, body = api::ApiError)))]
pub async fn delete(
    State(service): State<Service>,
    Path(name): Path<String>,
) -> Result<StatusCode, Error> {
    service.delete_volume(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The entries of a directory of the volume (`?path=`, default `/`; `?depth=`, default 1), or with
/// `?stat=true` the entry at `path` itself. Links are described, never followed.
#[utoipa::path(get, path = "/v1/volumes/{name}/files",
    params(("name" = String, Path), ("path" = Option<String>, Query), ("depth" = Option<u32>, Query),
           ("stat" = Option<bool>, Query)),
    responses((status = 200, body = api::VolumeEntries), (status = 400, body = api::ApiError),
              (status = 401, body = api::ApiError), (status = 404, body = api::ApiError)))]
pub async fn list_files(
    State(service): State<Service>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<api::VolumeEntries>, Error> {
    let path = path_of(&raw);
    let depth = number(&raw, "depth")?.unwrap_or(1);
    if !(1..=64).contains(&depth) {
        return Err(Error::invalid("depth must be between 1 and 64"));
    }
    let files = service.volume_files(&name).await?;
    let entries = if flag(&raw, "stat")? {
        vec![files.run(move |v| v.stat(&path)).await?]
    } else {
        files.run(move |v| v.list(&path, depth)).await?
    };
    Ok(Json(api::VolumeEntries {
        entries: entries.iter().map(entry_to_api).collect(),
    }))
}

/// Download file `?path=` of the volume.
#[utoipa::path(get, path = "/v1/volumes/{name}/files/content",
    params(("name" = String, Path), ("path" = String, Query)),
    responses((status = 200, content_type = "application/octet-stream", body = Vec<u8>),
              (status = 400, body = api::ApiError), (status = 401, body = api::ApiError),
              (status = 404, body = api::ApiError)))]
pub async fn download(
    State(service): State<Service>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, Error> {
    let path =
        param(&raw, "path").ok_or_else(|| Error::invalid("query parameter `path` is required"))?;
    let (bytes, size) = service.volume_files(&name).await?.read(path).await?;
    let body = Body::from_stream(bytes);
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        body,
    )
        .into_response())
}

/// Write file `?path=` of the volume from the request body, replacing it (`?overwrite=false`: a file
/// there is a 409); `?parents=true` makes missing directories; a new file is owned by
/// `?uid=`/`?gid=` (default 1000, the sandbox user) with `?mode=` (octal, default 644).
#[utoipa::path(put, path = "/v1/volumes/{name}/files/content",
    params(("name" = String, Path), ("path" = String, Query), ("parents" = Option<bool>, Query),
           ("overwrite" = Option<bool>, Query),
           ("uid" = Option<u32>, Query), ("gid" = Option<u32>, Query), ("mode" = Option<String>, Query)),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, body = api::VolumeEntry), (status = 400, body = api::ApiError),
              (status = 401, body = api::ApiError), (status = 404, body = api::ApiError),
              (status = 409, description = "a file is there and overwrite is false", body = api::ApiError),
              (status = 507, description = "the volume is full", body = api::ApiError)))]
pub async fn upload(
    State(service): State<Service>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
    body: Body,
) -> Result<(StatusCode, Json<api::VolumeEntry>), Error> {
    let path =
        param(&raw, "path").ok_or_else(|| Error::invalid("query parameter `path` is required"))?;
    let attrs = attrs(&raw)?;
    let parents = flag(&raw, "parents")?;
    let files = service.volume_files(&name).await?;
    let stream = body.into_data_stream().map_err(std::io::Error::other);
    let opts = sandboxd_volumes::WriteOpts {
        parents,
        overwrite: param(&raw, "overwrite").is_none() || flag(&raw, "overwrite")?,
        attrs,
    };
    let entry = files.write(path, stream, opts).await?;
    Ok((StatusCode::CREATED, Json(entry_to_api(&entry))))
}

fn attrs(raw: &Option<String>) -> Result<Attrs, Error> {
    let mode = param(raw, "mode")
        .map(|m| {
            u32::from_str_radix(&m, 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| {
                    Error::invalid(format!("mode must be octal permission bits, not {m:?}"))
                })
        })
        .transpose()?;
    Ok(Attrs {
        uid: number(raw, "uid")?,
        gid: number(raw, "gid")?,
        mode,
    })
}

/// Make directory `?path=` in the volume (`?parents=true`: and the missing ones above it).
#[utoipa::path(post, path = "/v1/volumes/{name}/files/mkdir",
    params(("name" = String, Path), ("path" = String, Query), ("parents" = Option<bool>, Query),
           ("uid" = Option<u32>, Query), ("gid" = Option<u32>, Query), ("mode" = Option<String>, Query)),
    responses((status = 201, body = api::VolumeEntry), (status = 400, body = api::ApiError),
              (status = 401, body = api::ApiError), (status = 404, body = api::ApiError),
              (status = 409, body = api::ApiError)))]
pub async fn mkdir(
    State(service): State<Service>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<(StatusCode, Json<api::VolumeEntry>), Error> {
    let path =
        param(&raw, "path").ok_or_else(|| Error::invalid("query parameter `path` is required"))?;
    let (attrs, parents) = (attrs(&raw)?, flag(&raw, "parents")?);
    let files = service.volume_files(&name).await?;
    let entry = files.run(move |v| v.mkdir(&path, parents, attrs)).await?;
    Ok((StatusCode::CREATED, Json(entry_to_api(&entry))))
}

/// Remove `?path=` from the volume (a directory with everything in it).
#[utoipa::path(delete, path = "/v1/volumes/{name}/files",
    params(("name" = String, Path), ("path" = String, Query)),
    responses((status = 204), (status = 400, body = api::ApiError), (status = 401, body = api::ApiError),
              (status = 404, body = api::ApiError)))]
pub async fn remove(
    State(service): State<Service>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<StatusCode, Error> {
    let path =
        param(&raw, "path").ok_or_else(|| Error::invalid("query parameter `path` is required"))?;
    let files = service.volume_files(&name).await?;
    files.run(move |v| v.remove(&path)).await?;
    Ok(StatusCode::NO_CONTENT)
}
