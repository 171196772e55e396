//! `/v1/sandboxes/{id}/domains`: custom hostnames routed to a sandbox port.
//!
//! `POST` answers 201 when it bound the hostname, 200 when the sandbox already held it (on the same or,
//! now moved, another port), 409 `hostname_conflict` when another sandbox holds it — the store's primary
//! key decides, see [`sandboxd_service::domains`]. It honours `Idempotency-Key` like the sandbox create
//! (scope [`V1_DOMAINS_SCOPE`]; the sandbox id is part of the hashed request).

use crate::auth::Caller;
use crate::error::{parse_json, Error};
use crate::v1::{idempotently, json_response};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::{Extension, Json};
use sandboxd_api_types as api;
use sandboxd_service::domains::V1_DOMAINS_SCOPE;
use sandboxd_service::Service;

/// Bind a hostname to a port of the sandbox.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/domains", params(("id" = String, Path)), request_body = api::BindDomain,
    responses((status = 201, body = api::Domain), (status = 200, body = api::Domain),
              (status = 400, body = api::ApiError), (status = 404, body = api::ApiError),
              (status = 409, body = api::ApiError)))]
pub async fn bind(
    State(service): State<Service>,
    Path(id): Path<String>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Error> {
    let work = |_stale: Option<String>| async {
        let bound = async {
            let req: api::BindDomain = parse_json(&body)?;
            Ok::<_, Error>(service.bind_domain(&id, req).await?)
        };
        match bound.await {
            Ok((domain, true)) => json_response(StatusCode::CREATED, Ok(domain)),
            Ok((domain, false)) => json_response(StatusCode::OK, Ok(domain)),
            Err(e) => json_response::<api::Domain>(StatusCode::OK, Err(e)),
        }
    };
    // The same key and body on another sandbox is another request.
    let request = [id.as_bytes(), b"\n", &body[..]].concat();
    idempotently(
        &service,
        V1_DOMAINS_SCOPE,
        caller,
        &headers,
        &request,
        None,
        work,
    )
    .await
}

/// The hostnames bound to the sandbox.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/domains", params(("id" = String, Path)),
    responses((status = 200, body = Vec<api::Domain>), (status = 404, body = api::ApiError)))]
pub async fn list(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<Vec<api::Domain>>, Error> {
    Ok(Json(service.domains(&id).await?))
}

/// Unbind a hostname from the sandbox.
#[utoipa::path(delete, path = "/v1/sandboxes/{id}/domains/{hostname}",
    params(("id" = String, Path), ("hostname" = String, Path)),
    responses((status = 204), (status = 404, body = api::ApiError)))]
pub async fn unbind(
    State(service): State<Service>,
    Path((id, hostname)): Path<(String, String)>,
) -> Result<StatusCode, Error> {
    service.unbind_domain(&id, &hostname).await?;
    Ok(StatusCode::NO_CONTENT)
}
