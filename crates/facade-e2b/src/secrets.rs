//! E2B's secrets (`/secrets`, behind the API key), translated onto the shared secret flows
//! ([`sandboxd_service::secrets`]).
//!
//! Wire facts (the SDK's generated client): a secret is `{secretID, name, currentVersion,
//! metadata, createdAt, updatedAt}` and never carries its value; create is `POST /secrets` with
//! `{name, value, metadata?}` (201), a new value is `POST /secrets/{id}` with `{value, metadata?}`
//! (200, a new version), `GET` and `DELETE /secrets/{id}` take an id or a name (404 when there is
//! none, 204 on delete); the listing is paged by `limit` and `nextToken`, the next page's token in
//! `x-next-token`.

use super::error::E2bError;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_api_types as api;
use sandboxd_service::secrets::SecretQuery;
use sandboxd_service::Service;
use sandboxd_surface::error::parse_json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A listing's page when the SDK names no limit.
const DEFAULT_PAGE: usize = 100;

/// `POST /secrets`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewSecret {
    name: String,
    value: api::Secret,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
}

/// `POST /secrets/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewValue {
    value: api::Secret,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
}

fn view(s: &api::SecretInfo) -> Value {
    json!({
        "secretID": s.id,
        "name": s.name,
        "currentVersion": s.version,
        "metadata": s.metadata,
        "createdAt": s.created_at,
        "updatedAt": s.updated_at,
    })
}

/// `POST /secrets`: 201 with the secret, without its value.
pub async fn create(
    State(service): State<Service>,
    bytes: Bytes,
) -> Result<(StatusCode, Json<Value>), E2bError> {
    let req: NewSecret = parse_json(&bytes)?;
    let made = service
        .create_secret(api::CreateSecret {
            name: req.name,
            value: req.value,
            metadata: req.metadata,
            ..Default::default()
        })
        .await?;
    Ok((StatusCode::CREATED, Json(view(&made))))
}

/// `POST /secrets/{id}`: a new value (a new version), and the metadata when given.
pub async fn update(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>, E2bError> {
    let req: NewValue = parse_json(&bytes)?;
    let changed = service
        .update_secret(
            &id,
            api::UpdateSecret {
                value: Some(req.value),
                metadata: req.metadata,
                ..Default::default()
            },
        )
        .await?;
    Ok(Json(view(&changed)))
}

/// `GET /secrets/{id}`.
pub async fn get(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<Value>, E2bError> {
    Ok(Json(view(&service.get_secret(&id).await?)))
}

/// `DELETE /secrets/{id}`: 204.
pub async fn destroy(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    service.delete_secret(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /secrets?limit=&nextToken=`: a page by name, the next page's token in `x-next-token`.
pub async fn list(
    State(service): State<Service>,
    RawQuery(raw): RawQuery,
) -> Result<Response, E2bError> {
    let mut query = SecretQuery {
        limit: DEFAULT_PAGE,
        ..Default::default()
    };
    for (k, v) in form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes()) {
        match &*k {
            "nextToken" => query.cursor = Some(v.into_owned()),
            "limit" => {
                query.limit = v.parse().map_err(|_| {
                    E2bError::bad_request(format!("limit must be a number, not {v:?}"))
                })?
            }
            _ => {}
        }
    }
    let page = service.page_secrets(query).await?;
    let items: Vec<Value> = page.items.iter().map(view).collect();
    let mut response = Json(items).into_response();
    if let Some(token) = page.next.and_then(|t| HeaderValue::from_str(&t).ok()) {
        response.headers_mut().insert("x-next-token", token);
    }
    Ok(response)
}
