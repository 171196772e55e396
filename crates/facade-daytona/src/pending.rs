//! Daytona's view of a create that waits for its build ([`sandboxd_service::pending`]): state
//! `pending_build` in the create's answer, `building_snapshot` while the template builds,
//! `starting` once built, `build_failed` or `error` with its `errorReason` if it ends without a
//! sandbox; from the moment the sandbox has a row, the row answers instead. Its build log is at
//! `GET /api/sandbox/{idOrName}/build-logs-url` → `{url}` (`…/build-logs`, plain text,
//! `?follow=true` open until the build has ended).

use super::error::DaytonaError;
use super::models::{DaytonaSandbox, ORGANIZATION};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_service::pending::{PendingCreate, PendingState};
use sandboxd_service::{Service, ServiceError};
use sandboxd_store::LogLine;
use std::collections::BTreeMap;

/// `p` as Daytona describes it; `just_made`: in the create's own answer.
pub fn describe(p: &PendingCreate, toolbox_url: &str, just_made: bool) -> DaytonaSandbox {
    let (state, error_reason) = match &p.state {
        PendingState::Building if just_made => ("pending_build", None),
        PendingState::Building => ("building_snapshot", None),
        PendingState::Starting => ("starting", None),
        PendingState::Failed {
            reason,
            build_failed,
        } => (
            if *build_failed {
                "build_failed"
            } else {
                "error"
            },
            Some(reason.clone()),
        ),
    };
    let at = sandboxd_service::timestamps::rfc3339(p.created_at);
    DaytonaSandbox {
        id: p.id.clone(),
        organization_id: ORGANIZATION,
        name: if p.name.is_empty() {
            p.id.clone()
        } else {
            p.name.clone()
        },
        snapshot: p.template.clone(),
        user: "user",
        env: p.env.clone(),
        labels: p.metadata.clone(),
        public: false,
        network_block_all: false,
        network_allow_list: None,
        domain_allow_list: None,
        kvm: false,
        target: "local",
        cpu: u64::from(p.cpu_millis).div_ceil(1000).max(1),
        gpu: 0,
        memory: p.memory_mb.div_ceil(1024),
        disk: p.disk_mb.div_ceil(1024),
        state,
        error_reason,
        created_at: at.clone(),
        updated_at: at,
        toolbox_proxy_url: toolbox_url.to_string(),
        auto_stop_interval: None,
        auto_pause_interval: None,
        auto_archive_interval: None,
        auto_delete_interval: None,
        auto_destroy_at: None,
        isolation: None,
    }
    .with_idle(p.idle)
}

/// The template whose build log belongs to sandbox `key`: its pending create's, or the one it
/// was made from.
async fn template_of(service: &Service, key: &str) -> Result<String, DaytonaError> {
    match service.get(key).await {
        Ok(sandbox) => Ok(sandbox.template),
        Err(ServiceError::NotFound(e)) => service
            .pending_create(key)
            .map(|p| p.template)
            .ok_or_else(|| ServiceError::NotFound(e).into()),
        Err(e) => Err(e.into()),
    }
}

/// `GET /api/sandbox/{idOrName}/build-logs-url`.
pub async fn build_logs_url(
    State(service): State<Service>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, DaytonaError> {
    template_of(&service, &key).await?;
    let api = super::control::toolbox_url(&headers);
    let api = api.trim_end_matches("/toolbox");
    let path: String = form_urlencoded::byte_serialize(key.as_bytes()).collect();
    Ok(Json(
        serde_json::json!({ "url": format!("{api}/sandbox/{path}/build-logs") }),
    ))
}

/// `GET /api/sandbox/{idOrName}/build-logs?follow=`: its template's build log as plain text.
pub async fn build_logs(
    State(service): State<Service>,
    Path(key): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response, DaytonaError> {
    let follow = super::snapshots::follow_of(&query)?;
    let template = template_of(&service, &key).await?;
    // A template with no record (`base`, an image's) has no log: an empty one.
    if service.get_template(&template).await.is_err() {
        return Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "").into_response());
    }
    let text = |l: &LogLine| format!("{}\n", l.line).into_bytes();
    let body = sandboxd_surface::logs::log_stream(service, template, 0, follow, text);
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response())
}
