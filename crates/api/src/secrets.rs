//! The native `/v1/secrets` handlers. Parse, call the shared flow in
//! [`sandboxd_service::secrets`], shape the answer; no answer carries a value.

use crate::error::{parse_json, Error};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use sandboxd_api_types as api;
use sandboxd_service::Service;

/// Create a secret. Its value is sealed at rest and never shown again.
#[utoipa::path(post, path = "/v1/secrets", request_body = api::CreateSecret,
    responses((status = 201, body = api::SecretInfo), (status = 400, body = api::ApiError),
              (status = 401, body = api::ApiError), (status = 409, body = api::ApiError)))]
pub async fn create(
    State(service): State<Service>,
    body: Bytes,
) -> Result<(StatusCode, Json<api::SecretInfo>), Error> {
    let req: api::CreateSecret = parse_json(&body)?;
    Ok((StatusCode::CREATED, Json(service.create_secret(req).await?)))
}

/// List the secrets, by name (without values).
#[utoipa::path(get, path = "/v1/secrets",
    responses((status = 200, body = api::SecretList), (status = 401, body = api::ApiError)))]
pub async fn list(State(service): State<Service>) -> Result<Json<api::SecretList>, Error> {
    Ok(Json(api::SecretList {
        secrets: service.list_secrets().await?,
    }))
}

/// One secret (without its value).
#[utoipa::path(get, path = "/v1/secrets/{name}", params(("name" = String, Path, description = "name or id")),
    responses((status = 200, body = api::SecretInfo), (status = 401, body = api::ApiError),
              (status = 404, body = api::ApiError)))]
pub async fn get(
    State(service): State<Service>,
    Path(name): Path<String>,
) -> Result<Json<api::SecretInfo>, Error> {
    Ok(Json(service.get_secret(&name).await?))
}

/// Change a secret: each field given replaces the stored one; a new value is a new version.
#[utoipa::path(patch, path = "/v1/secrets/{name}", params(("name" = String, Path, description = "name or id")),
    request_body = api::UpdateSecret,
    responses((status = 200, body = api::SecretInfo), (status = 400, body = api::ApiError),
              (status = 401, body = api::ApiError), (status = 404, body = api::ApiError)))]
pub async fn update(
    State(service): State<Service>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<api::SecretInfo>, Error> {
    let req: api::UpdateSecret = parse_json(&body)?;
    Ok(Json(service.update_secret(&name, req).await?))
}

/// Delete a secret.
#[utoipa::path(delete, path = "/v1/secrets/{name}", params(("name" = String, Path, description = "name or id")),
    responses((status = 204), (status = 401, body = api::ApiError), (status = 404, body = api::ApiError)))]
pub async fn delete(
    State(service): State<Service>,
    Path(name): Path<String>,
) -> Result<StatusCode, Error> {
    service.delete_secret(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The last requests of a sandbox the egress gateway rewrote (names of rules and secrets, never a
/// value), oldest first.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/egress", params(("id" = String, Path, description = "sandbox id or name")),
    responses((status = 200, body = api::EgressLog), (status = 401, body = api::ApiError),
              (status = 404, body = api::ApiError)))]
pub async fn egress(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<api::EgressLog>, Error> {
    let requests = service
        .egress_log(&id)
        .await?
        .into_iter()
        .map(|e| api::EgressEntry {
            host: e.host,
            method: e.method,
            path: e.path,
            status: e.status,
            rule: e.applied.rule,
            secrets: e.applied.secrets,
            sent: e.sent,
            received: e.received,
            millis: e.millis,
        })
        .collect();
    Ok(Json(api::EgressLog { requests }))
}
