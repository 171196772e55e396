//! `/v1/webhooks` (registrations and their delivery log) and `/v1/events` (the live feed, as Server-Sent
//! Events). Managing webhooks takes an admin key (a user key gets 403 `forbidden`); the feed does not.
//!
//! `POST /v1/webhooks` answers 201 with the registration (never its secret), 400 when the URL is not an
//! absolute http(s) URL, an event is unknown or the secret is shorter than 16 characters — and then
//! nothing is stored. It honours `Idempotency-Key` like the sandbox create (scope
//! [`V1_WEBHOOKS_SCOPE`]). `GET /v1/events` streams every event as it commits: `id:` the event id,
//! `event:` its type, `data:` `{type, timestamp, data}`; a comment every 15 s keeps idle connections
//! open. A listener that falls more than the feed's buffer behind misses the oldest events (webhooks do
//! not: they go through the outbox).

use crate::auth::Caller;
use crate::error::{parse_json, Error};
use crate::v1::{idempotently, json_response};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::Response;
use axum::{Extension, Json};
use futures::Stream;
use sandboxd_api_types as api;
use sandboxd_service::timestamps::rfc3339;
use sandboxd_service::webhooks::V1_WEBHOOKS_SCOPE;
use sandboxd_service::{Service, ServiceError};
use sandboxd_store::{OutboxState, Webhook};
use std::convert::Infallible;
use std::time::Duration;

fn to_api(w: &Webhook) -> api::Webhook {
    api::Webhook {
        id: w.id.clone(),
        url: w.url.clone(),
        events: w.events.clone(),
        created_at: rfc3339(w.created_at),
    }
}

/// Register a webhook.
#[utoipa::path(post, path = "/v1/webhooks", request_body = api::CreateWebhook,
    responses((status = 201, body = api::Webhook), (status = 400, body = api::ApiError),
              (status = 403, body = api::ApiError, description = "a user key")))]
pub async fn create(
    State(service): State<Service>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Error> {
    let id = Service::new_webhook_id();
    let work = |stale: Option<String>| async {
        let created = async {
            let req: api::CreateWebhook = parse_json(&body)?;
            if let Some(stale) = stale {
                // An earlier attempt with this key died before answering: drop what it stored.
                match service.delete_webhook(&stale).await {
                    Ok(()) | Err(ServiceError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            let hook = service
                .create_webhook(id.clone(), req.url, req.events, req.secret)
                .await?;
            Ok::<_, Error>(to_api(&hook))
        };
        json_response(StatusCode::CREATED, created.await)
    };
    idempotently(
        &service,
        V1_WEBHOOKS_SCOPE,
        caller,
        &headers,
        &body,
        Some(id.clone()),
        work,
    )
    .await
}

/// List webhook registrations.
#[utoipa::path(get, path = "/v1/webhooks", responses((status = 200, body = api::WebhookList), (status = 403, body = api::ApiError, description = "a user key")))]
pub async fn list(State(service): State<Service>) -> Result<Json<api::WebhookList>, Error> {
    let hooks = service.list_webhooks().await?;
    Ok(Json(api::WebhookList {
        webhooks: hooks.iter().map(to_api).collect(),
    }))
}

/// Remove a webhook registration (queued deliveries to it are dropped).
#[utoipa::path(delete, path = "/v1/webhooks/{id}", params(("id" = String, Path)),
    responses((status = 204), (status = 404, body = api::ApiError), (status = 403, body = api::ApiError, description = "a user key")))]
pub async fn delete(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<StatusCode, Error> {
    service.delete_webhook(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The deliveries of a webhook with their attempts, newest first (`?limit=`, default 100). Those of a
/// deleted webhook stay readable (what was still queued ends `failed`, "webhook deleted").
#[utoipa::path(get, path = "/v1/webhooks/{id}/deliveries", params(("id" = String, Path), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = api::WebhookDeliveryList), (status = 404, body = api::ApiError),
              (status = 403, body = api::ApiError, description = "a user key")))]
pub async fn deliveries(
    State(service): State<Service>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<api::WebhookDeliveryList>, Error> {
    let mut limit = 100;
    for (k, v) in raw
        .as_deref()
        .map(|q| {
            form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
    {
        match k.as_str() {
            "limit" => {
                limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| Error::invalid("limit must be between 1 and 1000"))?
            }
            other => return Err(Error::invalid(format!("unknown query parameter {other:?}"))),
        }
    }
    let rows = service.webhook_deliveries(&id, limit).await?;
    let deliveries = rows
        .into_iter()
        .map(|(row, attempts)| api::WebhookDelivery {
            id: row.event_id,
            kind: row.kind,
            state: match row.state {
                OutboxState::Pending => "pending",
                OutboxState::Delivered => "delivered",
                OutboxState::Failed => "failed",
            }
            .to_string(),
            payload: row.payload,
            created_at: rfc3339(row.created_at),
            next_attempt_at: (row.state == OutboxState::Pending)
                .then(|| rfc3339(row.next_attempt_at)),
            last_error: row.last_error,
            attempts: attempts
                .into_iter()
                .map(|a| api::WebhookAttempt {
                    attempt: a.attempt,
                    at: rfc3339(a.at),
                    status: a.status,
                    error: a.error,
                })
                .collect(),
        })
        .collect();
    Ok(Json(api::WebhookDeliveryList { deliveries }))
}

/// The live feed of events, as Server-Sent Events.
#[utoipa::path(get, path = "/v1/events",
    responses((status = 200, content_type = "text/event-stream",
               description = "`id:` event id, `event:` type, `data:` `{type, timestamp, data}`")))]
pub async fn events(
    State(service): State<Service>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    use tokio::sync::broadcast::error::RecvError;
    let rx = service.subscribe();
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let item = match rx.recv().await {
            Ok(ev) => SseEvent::default()
                .id(ev.id.clone())
                .event(ev.kind)
                .data(ev.body().to_string()),
            Err(RecvError::Lagged(n)) => SseEvent::default().comment(format!("missed {n} events")),
            Err(RecvError::Closed) => return None,
        };
        Some((Ok(item), rx))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
