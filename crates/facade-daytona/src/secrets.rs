//! Daytona's secrets (`/api/secret`: create, list, a cursor-paged list, get, update, delete) onto
//! the shared secret flows ([`sandboxd_service::secrets`]); using them on create is
//! [`super::control`]'s `secrets` (`[{ENV_VAR: secret name}]`, each variable set to the secret's
//! placeholder).
//!
//! Wire facts (the SDK's generated client): a secret is `{id, name, description, placeholder,
//! hosts, createdAt, updatedAt}` and never carries its value; create is `POST /api/secret` with
//! `{name, value, description?, hosts?}` (201), update `PATCH /api/secret/{id}` with any of
//! `{value, description, hosts}`, delete 204; `GET /api/secret/paginated` takes `cursor`, `limit`
//! (1–200, default 100), `name` (a part of the name), `sort` (`name`, `createdAt` or `updatedAt`,
//! default `createdAt`) and `order` (`asc` or `desc`, default `desc`) and answers `{items, total,
//! nextCursor}`.

use super::error::DaytonaError;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use sandboxd_api_types as api;
use sandboxd_service::secrets::{SecretOrder, SecretQuery};
use sandboxd_service::Service;
use sandboxd_surface::error::parse_json;
use serde::Deserialize;
use serde_json::{json, Value};

/// The largest page the SDK may ask for.
const MAX_PAGE: usize = 200;

/// `POST /api/secret`.
#[derive(Debug, Deserialize)]
struct CreateSecret {
    name: String,
    value: api::Secret,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    hosts: Option<Vec<String>>,
}

/// `PATCH /api/secret/{id}`.
#[derive(Debug, Deserialize)]
struct UpdateSecret {
    #[serde(default)]
    value: Option<api::Secret>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    hosts: Option<Vec<String>>,
}

fn view(s: &api::SecretInfo) -> Value {
    json!({
        "id": s.id,
        "name": s.name,
        "description": (!s.description.is_empty()).then_some(&s.description),
        "placeholder": s.placeholder,
        "hosts": s.hosts,
        "createdAt": s.created_at,
        "updatedAt": s.updated_at,
    })
}

/// `POST /api/secret`: 201 with the secret, without its value.
pub async fn create(
    State(service): State<Service>,
    bytes: Bytes,
) -> Result<(StatusCode, Json<Value>), DaytonaError> {
    let req: CreateSecret = parse_json(&bytes)?;
    let made = service
        .create_secret(api::CreateSecret {
            name: req.name,
            value: req.value,
            hosts: req.hosts,
            description: req.description,
            metadata: None,
        })
        .await?;
    Ok((StatusCode::CREATED, Json(view(&made))))
}

/// `PATCH /api/secret/{id}`: each field given replaces the stored one.
pub async fn update(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>, DaytonaError> {
    let req: UpdateSecret = parse_json(&bytes)?;
    let changed = service
        .update_secret(
            &id,
            api::UpdateSecret {
                value: req.value,
                hosts: req.hosts,
                description: req.description,
                metadata: None,
            },
        )
        .await?;
    Ok(Json(view(&changed)))
}

/// `GET /api/secret/{id}`.
pub async fn get(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<Value>, DaytonaError> {
    Ok(Json(view(&service.get_secret(&id).await?)))
}

/// `DELETE /api/secret/{id}`: 204.
pub async fn delete(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<StatusCode, DaytonaError> {
    service.delete_secret(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/secret`: every secret, newest first.
pub async fn list(State(service): State<Service>) -> Result<Json<Value>, DaytonaError> {
    let mut all = service.list_secrets().await?;
    all.sort_by(|a, b| b.created_at.cmp(&a.created_at));
    Ok(Json(Value::Array(all.iter().map(view).collect())))
}

/// `GET /api/secret/paginated`.
pub async fn paginated(
    State(service): State<Service>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, DaytonaError> {
    let mut query = SecretQuery {
        limit: 100,
        order: SecretOrder::CreatedAt,
        descending: true,
        ..Default::default()
    };
    for (k, v) in form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes()) {
        match &*k {
            "cursor" => query.cursor = Some(v.into_owned()),
            "name" if !v.is_empty() => query.name_contains = Some(v.into_owned()),
            "limit" => {
                query.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| {
                        DaytonaError::bad_request(format!("limit must be 1 to {MAX_PAGE}"))
                    })?
            }
            "sort" => {
                query.order = match &*v {
                    "name" => SecretOrder::Name,
                    "createdAt" => SecretOrder::CreatedAt,
                    "updatedAt" => SecretOrder::UpdatedAt,
                    other => {
                        return Err(DaytonaError::bad_request(format!(
                            "sort must be name, createdAt or updatedAt, not {other:?}"
                        )))
                    }
                }
            }
            "order" => {
                query.descending = match &*v {
                    "asc" => false,
                    "desc" => true,
                    other => {
                        return Err(DaytonaError::bad_request(format!(
                            "order must be asc or desc, not {other:?}"
                        )))
                    }
                }
            }
            _ => {}
        }
    }
    let page = service.page_secrets(query).await?;
    Ok(Json(json!({
        "items": page.items.iter().map(view).collect::<Vec<_>>(),
        "total": page.total,
        "nextCursor": page.next,
    })))
}
