//! Daytona's warm pools (`/api/warm-pools`: list, create, update, delete) onto the shared pools of
//! [`sandboxd_service::warm_pool`]: a Daytona pool is the pool of the template its snapshot names,
//! and its id is that name. Admin keys only, as on `/v1`.
//!
//! Wire facts (the SDK's generated client): a pool is `{id, organizationId, snapshot, target, pool,
//! currentSize, cpu, mem, disk, osUser, env, errorReason?, createdAt, updatedAt}` (`mem` and `disk`
//! in GiB); create is `POST /api/warm-pools` with `{snapshot, pool ≥ 1, target?}` (409 when the
//! snapshot has one), update `PATCH /api/warm-pools/{id}` with `{pool}` (0 drains it), delete
//! `DELETE /api/warm-pools/{id}`; `GET /api/warm-pools` lists them.

use super::error::DaytonaError;
use super::models::ORGANIZATION;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use sandboxd_api_types as api;
use sandboxd_service::{Service, ServiceError};
use sandboxd_surface::error::parse_json;
use serde::Deserialize;
use serde_json::{json, Value};

/// The region every pool is in (this daemon).
const TARGET: &str = "local";

/// `POST /api/warm-pools` (its `target` region is ignored: this daemon is the only one).
#[derive(Debug, Deserialize)]
struct CreateWarmPool {
    snapshot: String,
    pool: u32,
}

/// `PATCH /api/warm-pools/{id}`.
#[derive(Debug, Deserialize)]
struct UpdateWarmPool {
    pool: u32,
}

/// A pool's body. Its times are the answer's own: the daemon keeps none for a pool.
fn view(p: &api::WarmPool) -> Value {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let now = sandboxd_service::timestamps::rfc3339(ms);
    json!({
        "id": p.template,
        "organizationId": ORGANIZATION,
        "snapshot": p.template,
        "target": TARGET,
        "pool": p.size,
        "currentSize": p.ready,
        // The defaults its sandboxes boot with (a create's own are applied when it takes one).
        "cpu": 1,
        "mem": 1,
        "disk": 0,
        "osUser": "user",
        "env": {},
        "createdAt": now,
        "updatedAt": now,
    })
}

/// The pool of `template`, if it has a size.
async fn pool_of(service: &Service, template: &str) -> Result<Option<api::WarmPool>, DaytonaError> {
    Ok(service
        .warm_pools()
        .await?
        .into_iter()
        .find(|p| p.template == template && p.size > 0))
}

/// `POST /api/warm-pools`: 201 with the pool; 409 when the snapshot has one already.
pub async fn create(
    State(service): State<Service>,
    bytes: Bytes,
) -> Result<(StatusCode, Json<Value>), DaytonaError> {
    let req: CreateWarmPool = parse_json(&bytes)?;
    if req.pool == 0 {
        return Err(ServiceError::InvalidRequest("pool must be at least 1".into()).into());
    }
    if pool_of(&service, &req.snapshot).await?.is_some() {
        return Err(ServiceError::Conflict(format!(
            "snapshot {:?} has a warm pool already: update it",
            req.snapshot
        ))
        .into());
    }
    let made = service.set_warm_pool(&req.snapshot, req.pool).await?;
    Ok((StatusCode::CREATED, Json(view(&made))))
}

/// `PATCH /api/warm-pools/{id}`: the pool's new size (0 drains it).
pub async fn update(
    State(service): State<Service>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>, DaytonaError> {
    let req: UpdateWarmPool = parse_json(&bytes)?;
    if pool_of(&service, &id).await?.is_none() {
        return Err(ServiceError::NotFound(format!("warm pool {id:?} not found")).into());
    }
    Ok(Json(view(&service.set_warm_pool(&id, req.pool).await?)))
}

/// `DELETE /api/warm-pools/{id}`: its sandboxes go behind the answer.
pub async fn delete(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<StatusCode, DaytonaError> {
    if pool_of(&service, &id).await?.is_none() {
        return Err(ServiceError::NotFound(format!("warm pool {id:?} not found")).into());
    }
    service.set_warm_pool(&id, 0).await?;
    Ok(StatusCode::OK)
}

/// `GET /api/warm-pools`: every pool with a size.
pub async fn list(State(service): State<Service>) -> Result<Json<Value>, DaytonaError> {
    let pools = service.warm_pools().await?;
    Ok(Json(Value::Array(
        pools.iter().filter(|p| p.size > 0).map(view).collect(),
    )))
}
