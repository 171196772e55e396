//! Daytona's previews and public toggle (`/api/sandbox/{idOrName}/…`), translated onto the
//! service's ([`sandboxd_service::previews`]).
//!
//! - `GET …/ports/{port}/preview-url` → `{sandboxId, url, token}`: the port's URL, and the token a
//!   request to it sends in `X-Daytona-Preview-Token` while the sandbox is not public.
//! - `GET …/ports/{port}/signed-preview-url?expiresInSeconds=` → `{sandboxId, port, token, url}`:
//!   a URL that works without headers (60 s unless told, at most 7 days);
//!   `POST …/ports/{port}/signed-preview-url/{token}/expire` ends it.
//! - `POST …/public/{isPublic}` → the sandbox: public (anyone reaches its ports) or not.
//! - `PUT …/labels {labels}` → `{labels}`: its labels replaced (kept here beside the other
//!   settings a created sandbox can change).

use super::control::toolbox_url;
use super::error::DaytonaError;
use super::models::DaytonaSandbox;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::Json;
use sandboxd_service::Service;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

/// `GET /api/sandbox/{key}/ports/{port}/preview-url`.
pub async fn preview_url(
    State(service): State<Service>,
    Path((key, port)): Path<(String, u32)>,
) -> Result<Json<Value>, DaytonaError> {
    let preview = service.preview(&key, port).await?;
    Ok(Json(json!({
        "sandboxId": preview.sandbox_id,
        "url": preview.url,
        "token": preview.token,
    })))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignQuery {
    expires_in_seconds: Option<u64>,
}

/// `GET /api/sandbox/{key}/ports/{port}/signed-preview-url`.
pub async fn signed_preview_url(
    State(service): State<Service>,
    Path((key, port)): Path<(String, u32)>,
    Query(q): Query<SignQuery>,
) -> Result<Json<Value>, DaytonaError> {
    let signed = service
        .sign_preview(&key, port, q.expires_in_seconds.map(Duration::from_secs))
        .await?;
    Ok(Json(json!({
        "sandboxId": signed.sandbox_id,
        "port": signed.port,
        "token": signed.token,
        "url": signed.url,
    })))
}

/// `POST /api/sandbox/{key}/ports/{port}/signed-preview-url/{token}/expire`.
pub async fn expire_signed_preview_url(
    State(service): State<Service>,
    Path((key, port, token)): Path<(String, u32, String)>,
) -> Result<Json<Value>, DaytonaError> {
    service.expire_preview(&key, port, &token).await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct Labels {
    labels: std::collections::BTreeMap<String, String>,
}

/// `PUT /api/sandbox/{key}/labels {labels}` → `{labels}`: the labels replaced, the code language's
/// kept unless given (the toolbox's `code_run` reads it).
pub async fn replace_labels(
    State(service): State<Service>,
    Path(key): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, DaytonaError> {
    let req: Labels = serde_json::from_slice(&body)
        .map_err(|e| DaytonaError::bad_request(format!("invalid JSON body: {e}")))?;
    let mut labels = req.labels;
    let current = service.get(&key).await?;
    if let Some(language) = current.metadata.get(super::models::LANGUAGE_LABEL) {
        labels
            .entry(super::models::LANGUAGE_LABEL.to_string())
            .or_insert_with(|| language.clone());
    }
    let sandbox = service.set_metadata(&current.id, labels).await?;
    Ok(Json(json!({ "labels": sandbox.metadata })))
}

/// `POST /api/sandbox/{key}/public/{isPublic}`.
pub async fn set_public(
    State(service): State<Service>,
    Path((key, public)): Path<(String, bool)>,
    headers: HeaderMap,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    let sandbox = service.set_public(&key, public).await?;
    Ok(Json(
        super::control::describe(&service, &sandbox, &toolbox_url(&headers)).await?,
    ))
}
