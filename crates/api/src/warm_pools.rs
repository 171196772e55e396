//! The native `/v1/warm-pools` handlers (admin keys only: the pools are the daemon's). Parse, call
//! the shared flow in [`sandboxd_service::warm_pool`], shape the answer.

use crate::error::{parse_json, Error};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::Json;
use sandboxd_api_types as api;
use sandboxd_service::Service;

/// Every template's warm pool: its size, the sandboxes ready and booting, hits and misses.
#[utoipa::path(get, path = "/v1/warm-pools",
    responses((status = 200, body = api::WarmPoolList), (status = 401, body = api::ApiError),
              (status = 403, body = api::ApiError, description = "a user key")))]
pub async fn list(State(service): State<Service>) -> Result<Json<api::WarmPoolList>, Error> {
    Ok(Json(api::WarmPoolList {
        warm_pools: service.warm_pools().await?,
    }))
}

/// Keep `size` sandboxes of a template booted and idle (0 empties its pool); the pool fills behind
/// the answer.
#[utoipa::path(put, path = "/v1/warm-pools/{template}",
    params(("template" = String, Path, description = "a template's name (`base` included)")),
    request_body = api::SetWarmPool,
    responses((status = 200, body = api::WarmPool),
              (status = 400, body = api::ApiError, description = "a size past the limit, or a template whose sandboxes cannot be pooled"),
              (status = 401, body = api::ApiError), (status = 403, body = api::ApiError, description = "a user key"),
              (status = 404, body = api::ApiError, description = "no such template")))]
pub async fn set(
    State(service): State<Service>,
    Path(template): Path<String>,
    body: Bytes,
) -> Result<Json<api::WarmPool>, Error> {
    let req: api::SetWarmPool = parse_json(&body)?;
    Ok(Json(service.set_warm_pool(&template, req.size).await?))
}
