//! The call-home surface: what sandboxes' agents report, on the daemon's callback socket, and the
//! ledger of it under `/v1`.
//!
//! The callback router serves only [`EVENTS_PATH`] (contract in [`sandboxd_envd::callback`]); it is
//! served on a unix socket the runtime binds read-only into every sandbox, never on the public
//! listener. Its caller is a sandbox: it proves which one with that sandbox's agent token (`401`
//! otherwise), and every answer is final for the sender's retry policy except a `5xx`.
//! `GET /v1/sandboxes/{id}/agent-events` lists what was applied, one entry per delivery id.

use crate::error::{parse_json, Error};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use sandboxd_api_types as api;
use sandboxd_envd::callback::{CallbackAnswer, CallbackEvent, EVENTS_PATH};
use sandboxd_service::timestamps::rfc3339;
use sandboxd_service::Service;

/// The router of the callback socket.
pub fn router(service: Service) -> Router {
    Router::new()
        .route(EVENTS_PATH, post(ingest))
        .fallback(|| async {
            Error::new(StatusCode::NOT_FOUND, "not_found", "no such route").into_response()
        })
        .with_state(service)
}

async fn ingest(
    State(service): State<Service>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<CallbackAnswer>, Error> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            Error::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing bearer token (the sandbox's agent token)",
            )
        })?;
    let event: CallbackEvent = parse_json(&body)?;
    Ok(Json(service.ingest_agent_event(token, event).await?))
}

/// The events a sandbox's agent reported, oldest first.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/agent-events", params(("id" = String, Path)),
    responses((status = 200, body = api::AgentEventList), (status = 404, body = api::ApiError)))]
pub async fn list(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<api::AgentEventList>, Error> {
    let events = service
        .agent_events(&id)
        .await?
        .into_iter()
        .map(|d| api::AgentEventRecord {
            delivery_id: d.delivery_id,
            event: d.kind,
            received_at: rfc3339(d.received_at),
        })
        .collect();
    Ok(Json(api::AgentEventList { events }))
}
