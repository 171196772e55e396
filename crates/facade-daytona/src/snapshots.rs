//! Daytona's snapshots (`/api/snapshots…`) are the daemon's templates, under the same names: a
//! snapshot made here is a template of `/v1` and E2B, and every template is a snapshot a Daytona
//! create can name.
//!
//! - `POST /api/snapshots {name, imageName | buildInfo{dockerfileContent}, entrypoint?}` begins the
//!   template's pull or build and answers 200 at once (state `pulling` or `building`); the SDK
//!   polls `GET /api/snapshots/{idOrName}` until `active`, `error` (a pull failed) or
//!   `build_failed` (`errorReason` says why, the log names the failing step). A snapshot of an
//!   image with an `entrypoint` runs it in the background in every sandbox made from it (the
//!   template's start command). Builds with local files need Daytona's object store and are
//!   refused, as resources are (a snapshot has none of its own here: give them to the create).
//! - `GET /api/snapshots?page=&limit=` → `{items, total, page, totalPages}`, by name;
//!   `DELETE /api/snapshots/{idOrName}` → 200 (a conflict while sandboxes use it or it builds).
//! - `GET /api/snapshots/{idOrName}/build-logs-url` → `{url}`, the plain-text log at
//!   `…/build-logs`, which `?follow=true` keeps open until the build has ended.
//!
//! - `POST /api/sandbox/{idOrName}/snapshot {name}` turns a sandbox's filesystem into snapshot
//!   `name` ([`Service::snapshot`]); `POST /api/sandbox/{idOrName}/fork {name?}` makes a new
//!   sandbox on a copy of it ([`Service::fork`]).
//!
//! A snapshot's id is its name.

use super::error::DaytonaError;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_service::templates::{StartCommands, TemplateSource};
use sandboxd_service::timestamps::rfc3339;
use sandboxd_service::Service;
use sandboxd_store::{LogLine, TemplateRecord, TemplateState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The page size of a list that names none.
const DEFAULT_PAGE_SIZE: usize = 100;

/// `POST /api/snapshots`: what sandboxd honours of Daytona's body.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSnapshot {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub image_name: Option<String>,
    #[serde(default)]
    pub build_info: Option<super::models::BuildInfo>,
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default)]
    pub cpu: Option<serde_json::Value>,
    #[serde(default)]
    pub gpu: Option<serde_json::Value>,
    #[serde(default)]
    pub memory: Option<serde_json::Value>,
    #[serde(default)]
    pub disk: Option<serde_json::Value>,
}

/// A snapshot as Daytona describes one (`SnapshotDto`; its nullable fields are always present).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotDto {
    pub id: String,
    pub organization_id: &'static str,
    /// A built-in one.
    pub general: bool,
    pub name: String,
    pub image_name: Option<String>,
    pub state: &'static str,
    pub size: Option<u64>,
    pub entrypoint: Option<Vec<String>>,
    pub cpu: u64,
    pub gpu: u64,
    pub mem: u64,
    pub disk: u64,
    pub error_reason: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub last_used_at: Option<String>,
    pub source_sandbox_id: Option<String>,
}

/// `GET /api/snapshots`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotPage {
    pub items: Vec<SnapshotDto>,
    pub total: usize,
    pub page: usize,
    pub total_pages: usize,
}

impl SnapshotDto {
    /// Template `t` as a snapshot.
    pub fn of(t: &TemplateRecord) -> SnapshotDto {
        let image_name = t.source["image"].as_str().map(str::to_string);
        let built = t.source.get("dockerfile").is_some();
        SnapshotDto {
            id: t.name.clone(),
            organization_id: super::models::ORGANIZATION,
            general: sandboxd_service::builtin::find(&t.name).is_some(),
            name: t.name.clone(),
            state: match t.state {
                TemplateState::Building if built => "building",
                TemplateState::Building => "pulling",
                TemplateState::Ready => "active",
                TemplateState::Failed if built => "build_failed",
                TemplateState::Failed => "error",
            },
            image_name,
            size: None,
            entrypoint: t.start_cmd.as_ref().map(|c| vec![c.clone()]),
            cpu: 1,
            gpu: 0,
            mem: 1,
            disk: 1,
            error_reason: t.error.clone(),
            created_at: rfc3339(t.created_at),
            updated_at: rfc3339(t.updated_at),
            last_used_at: None,
            source_sandbox_id: t.source["snapshotOf"].as_str().map(str::to_string),
        }
    }
}

/// A command line of `argv`, each word quoted for `/bin/sh`.
fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `POST /api/snapshots`.
pub async fn create(
    State(service): State<Service>,
    body: Bytes,
) -> Result<Json<SnapshotDto>, DaytonaError> {
    let req: CreateSnapshot = super::control::parse(&body)?;
    if req.name.is_empty() {
        return Err(DaytonaError::bad_request("a snapshot needs a name"));
    }
    if [&req.cpu, &req.gpu, &req.memory, &req.disk]
        .iter()
        .any(|r| r.is_some())
    {
        return Err(DaytonaError::bad_request(
            "a snapshot has no resources of its own on sandboxd: give cpu, memory and disk to the \
             sandboxes created from it",
        ));
    }
    let mut commands = StartCommands::default();
    let source = match (req.image_name, req.build_info) {
        (Some(reference), None) => {
            if let Some(argv) = req.entrypoint.filter(|a| !a.is_empty()) {
                commands.start = Some(shell_line(&argv));
            }
            TemplateSource::Image { reference }
        }
        (None, Some(build)) => {
            TemplateSource::Dockerfile(super::object_storage::build_spec(&service, &build).await?)
        }
        _ => {
            return Err(DaytonaError::bad_request(
                "give a snapshot an imageName or a buildInfo, one of them",
            ))
        }
    };
    let template = service
        .create_template(&req.name, source, None, commands, None)
        .await?;
    Ok(Json(SnapshotDto::of(&template)))
}

/// `GET /api/snapshots?page=&limit=`, by name.
pub async fn list(
    State(service): State<Service>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Json<SnapshotPage>, DaytonaError> {
    let number = |key: &str, default: usize| match query.get(key) {
        Some(v) => v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
            DaytonaError::bad_request(format!("{key} must be a positive whole number"))
        }),
        None => Ok(default),
    };
    let page = number("page", 1)?;
    let limit = number("limit", DEFAULT_PAGE_SIZE)?;
    let mut templates = service.list_templates().await?;
    templates.sort_by(|a, b| a.name.cmp(&b.name));
    let total = templates.len();
    let items = templates
        .iter()
        .skip((page - 1).saturating_mul(limit))
        .take(limit)
        .map(SnapshotDto::of)
        .collect();
    Ok(Json(SnapshotPage {
        items,
        total,
        page,
        total_pages: total.div_ceil(limit),
    }))
}

/// `GET /api/snapshots/{idOrName}`.
pub async fn get(
    State(service): State<Service>,
    Path(name): Path<String>,
) -> Result<Json<SnapshotDto>, DaytonaError> {
    Ok(Json(SnapshotDto::of(&service.get_template(&name).await?)))
}

/// `POST /api/snapshots/{idOrName}/activate`: the snapshot as it is — the daemon's templates are
/// never deactivated, so each one is active already.
pub async fn activate(
    state: State<Service>,
    name: Path<String>,
) -> Result<Json<SnapshotDto>, DaytonaError> {
    get(state, name).await
}

/// `DELETE /api/snapshots/{idOrName}`.
pub async fn delete(
    State(service): State<Service>,
    Path(name): Path<String>,
) -> Result<StatusCode, DaytonaError> {
    service.delete_template(&name).await?;
    Ok(StatusCode::OK)
}

/// `GET /api/snapshots/{idOrName}/build-logs-url`.
pub async fn build_logs_url(
    State(service): State<Service>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, DaytonaError> {
    let template = service.get_template(&name).await?;
    let api = super::control::toolbox_url(&headers);
    let api = api.trim_end_matches("/toolbox");
    let path: String = form_urlencoded::byte_serialize(template.name.as_bytes()).collect();
    Ok(Json(
        serde_json::json!({ "url": format!("{api}/snapshots/{path}/build-logs") }),
    ))
}

/// A build-log request's `follow`.
pub(crate) fn follow_of(query: &BTreeMap<String, String>) -> Result<bool, DaytonaError> {
    match query.get("follow").map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(DaytonaError::bad_request(format!(
            "follow must be true or false, not {other:?}"
        ))),
    }
}

/// `GET /api/snapshots/{idOrName}/build-logs?follow=`: the log as plain text, a line each.
pub async fn build_logs(
    State(service): State<Service>,
    Path(name): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response, DaytonaError> {
    let follow = follow_of(&query)?;
    let template = service.get_template(&name).await?;
    let text = |l: &LogLine| format!("{}\n", l.line).into_bytes();
    let body = sandboxd_surface::logs::log_stream(service, template.name, 0, follow, text);
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response())
}

/// `POST /api/sandbox/{idOrName}/snapshot {name}`: its filesystem as snapshot `name`; answers
/// once the snapshot is `active`, with the sandbox as it runs again.
pub async fn of_sandbox(
    State(service): State<Service>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<super::models::DaytonaSandbox>, DaytonaError> {
    let req: NameOnly = super::control::parse(&body)?;
    let Some(name) = req.name.filter(|n| !n.is_empty()) else {
        return Err(DaytonaError::bad_request("a snapshot needs a name"));
    };
    let template = service.snapshot(&key, &name).await?;
    if template.state != TemplateState::Ready {
        return Err(DaytonaError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "snapshot_failed",
            format!(
                "the snapshot failed: {}",
                template.error.unwrap_or_default()
            ),
        ));
    }
    let sandbox = service.get(&key).await?;
    let url = super::control::toolbox_url(&headers);
    Ok(Json(
        super::control::describe(&service, &sandbox, &url).await?,
    ))
}

/// `POST /api/sandbox/{idOrName}/fork {name?}`: a new sandbox on a copy of its filesystem, with
/// its resources, labels and idle policy ([`Service::fork`]); answers once it runs.
pub async fn fork(
    State(service): State<Service>,
    caller: Option<axum::Extension<sandboxd_surface::auth::Caller>>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<super::models::DaytonaSandbox>, DaytonaError> {
    let req: NameOnly = super::control::parse(&body)?;
    let source = service.get(&key).await?;
    let idle = service.idle_policy(&source.id).await?;
    let owner = sandboxd_surface::key_id(caller.as_ref());
    let name = req.name.filter(|n| !n.is_empty());
    let forked = service.fork(&source.id, &owner, name).await?;
    if let Some(policy) = idle {
        service.set_idle_policy(&forked.id, policy).await?;
    }
    let url = super::control::toolbox_url(&headers);
    Ok(Json(
        super::models::DaytonaSandbox::of(&forked, &url).with_idle(idle),
    ))
}

/// A body of an optional `name`.
#[derive(Debug, Default, Deserialize)]
pub struct NameOnly {
    #[serde(default)]
    pub name: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entrypoint_is_one_quoted_shell_line() {
        let argv = ["python3", "-c", "print('hi')"].map(String::from);
        assert_eq!(shell_line(&argv), r#"'python3' '-c' 'print('\''hi'\'')'"#);
    }
}
