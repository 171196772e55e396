//! The native `/v1/images` handlers: pull, list, inspect, remove, prune. Each calls one
//! [`Service`] method; a reference in a path is percent-encoded (`docker.io%2Flibrary%2Fpython%3A3.12`)
//! or a digest.

use crate::error::{parse_json, Error};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use futures::StreamExt;
use sandboxd_api_types as api;
use sandboxd_service::images::PruneReport;
use sandboxd_service::timestamps::rfc3339;
use sandboxd_service::Service;
use sandboxd_store::ImageRecord;

/// The API's view of a stored image.
pub fn image_to_api(image: &ImageRecord) -> api::Image {
    let config = Service::run_config(image);
    api::Image {
        digest: image.digest.clone(),
        state: image.state.as_str().to_string(),
        reference: image.reference.clone(),
        tags: image.tags.clone(),
        size: image.size,
        pulled_bytes: image.pulled_bytes,
        layers: image.layers.clone(),
        env: config.env,
        working_dir: config.working_dir,
        user: config.user,
        entrypoint: config.entrypoint,
        cmd: config.cmd,
        created_at: rfc3339(image.created_at),
        last_used_at: rfc3339(image.last_used_at),
    }
}

/// Pull an image onto this node (or find it there).
#[utoipa::path(post, path = "/v1/images", request_body = api::PullImage,
    responses((status = 200, body = api::Image), (status = 400, body = api::ApiError),
              (status = 401, body = api::ApiError), (status = 403, body = api::ApiError),
              (status = 404, body = api::ApiError), (status = 409, body = api::ApiError),
              (status = 422, body = api::ApiError), (status = 502, body = api::ApiError)))]
pub async fn pull(State(service): State<Service>, body: Bytes) -> Result<Json<api::Image>, Error> {
    let req: api::PullImage = parse_json(&body)?;
    let credentials = req.registry_auth.map(|a| sandboxd_images::Credentials {
        username: a.username,
        password: a.password,
    });
    let image = service.ensure_image(&req.reference, credentials).await?;
    Ok(Json(image_to_api(&image)))
}

/// Import an image archive (`docker save` tarball or OCI layout tar) sent as the body;
/// `?tag=REF` names it (besides the archive's own names), `?name=` picks one image of several.
#[utoipa::path(post, path = "/v1/images/import",
    params(("tag" = Option<String>, Query, description = "reference to tag the image as"),
           ("name" = Option<String>, Query, description = "which image of an archive holding several")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "the archive (a tar; its Content-Type is not checked)"),
    responses((status = 200, body = api::Image), (status = 400, body = api::ApiError),
              (status = 401, body = api::ApiError), (status = 422, body = api::ApiError)))]
pub async fn import(
    State(service): State<Service>,
    RawQuery(raw): RawQuery,
    body: Body,
) -> Result<Json<api::Image>, Error> {
    let pairs: Vec<(String, String)> = raw
        .as_deref()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let param = |key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let stream = body
        .into_data_stream()
        .map(|chunk| chunk.map_err(std::io::Error::other));
    let image = service
        .import_image(stream, param("name"), param("tag"))
        .await?;
    Ok(Json(image_to_api(&image)))
}

/// List the images on this node.
#[utoipa::path(get, path = "/v1/images",
    responses((status = 200, body = api::ImageList), (status = 401, body = api::ApiError)))]
pub async fn list(State(service): State<Service>) -> Result<Json<api::ImageList>, Error> {
    let images = service.list_images().await?;
    Ok(Json(api::ImageList {
        images: images.iter().map(image_to_api).collect(),
    }))
}

/// One image, by digest or (percent-encoded) reference.
#[utoipa::path(get, path = "/v1/images/{key}", params(("key" = String, Path, description = "digest or reference")),
    responses((status = 200, body = api::Image), (status = 400, body = api::ApiError),
              (status = 401, body = api::ApiError), (status = 404, body = api::ApiError)))]
pub async fn get(
    State(service): State<Service>,
    Path(key): Path<String>,
) -> Result<Json<api::Image>, Error> {
    Ok(Json(image_to_api(&service.get_image(&key).await?)))
}

/// Remove an image (its layers stay until pruned); 409 while a sandbox uses it.
#[utoipa::path(delete, path = "/v1/images/{key}", params(("key" = String, Path, description = "digest or reference")),
    responses((status = 204), (status = 400, body = api::ApiError), (status = 401, body = api::ApiError),
              (status = 404, body = api::ApiError), (status = 409, body = api::ApiError)))]
pub async fn remove(
    State(service): State<Service>,
    Path(key): Path<String>,
) -> Result<StatusCode, Error> {
    service.remove_image(&key).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Delete every layer no image uses.
#[utoipa::path(post, path = "/v1/images/prune",
    responses((status = 200, body = api::PruneImages), (status = 401, body = api::ApiError)))]
pub async fn prune(State(service): State<Service>) -> Result<Json<api::PruneImages>, Error> {
    let PruneReport { layers, bytes } = service.prune_images().await?;
    Ok(Json(api::PruneImages {
        layers: layers as u64,
        bytes,
    }))
}
