//! E2B's template and snapshot endpoints, translated onto the existing flows
//! ([`sandboxd_service::e2b_templates`], [`Service::create_template`], [`Service::snapshot`],
//! [`Service::delete_template`]). A template's E2B id is its name: it is what
//! `Sandbox.create("name")` sends, and sandboxes resolve templates by name.
//!
//! What each endpoint answers (the statuses the SDKs insist on):
//! - `POST /v3/templates {name, tags?}` → **202** `{templateID, buildID, public, names, tags,
//!   aliases}`; nothing is recorded until the build starts. 409 when a template of that name is
//!   building or ready (delete it first: rebuilding a ready template is not supported), 400 for
//!   `cpuCount`, `memoryMB`, `minFreeDiskMb` or extra `tags` (a template here has no resources of its
//!   own, and one name).
//! - `GET /templates/{id}/files/{hash}` → **201** `{present: true}` when those files were uploaded,
//!   else `{present: false, url}`: an upload URL on this daemon signed for that hash.
//! - `PUT /e2b/files/{hash}?expires=&signature=` (no API key: the URL is the authorization) → 200;
//!   403 for a wrong or expired signature, 413 past the size cap, 400 for a body that is no tar.
//! - `POST /v2/templates/{id}/builds/{buildID}` (template JSON) → **202**; the build runs on.
//! - `GET /templates/{id}/builds/{buildID}/status?logsOffset=&limit=` → 200 `{templateID, buildID,
//!   status: waiting|building|ready|error, logs, logEntries, reason?}`; entries from `logsOffset`
//!   on, so a poll past the end is empty.
//! - `GET /templates/aliases/{alias}` → 200 `{templateID, public}` / 404.
//! - Tags (`POST`/`DELETE /templates/tags`, `GET /templates/{id}/tags`) → 501, naming what to do.
//! - `DELETE /templates/{id}` → 204; 404 unknown; 409 while it builds or a sandbox uses it.
//! - `POST /sandboxes/{id}/snapshots {name?, memory?}` → **201** `{snapshotID, names}`; 404 for an
//!   unknown sandbox; 400 for `memory: true` (a snapshot keeps the filesystem only).
//! - `GET /snapshots?sandboxID=&name=&limit=&nextToken=` → 200 `[{snapshotID, names}]`, the next
//!   page's token in `x-next-token`.
//!
//! Proven by `crates/sandboxd/tests/e2b_templates.rs` (the real Python and JS SDKs).

use super::error::E2bError;
use super::handlers::visible;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_service::e2b_templates::{E2bBuild, E2bBuildState, E2bFrom, E2bStep};
use sandboxd_service::sandboxes::DEFAULT_TEMPLATE;
use sandboxd_service::templates::validate_name;
use sandboxd_service::timestamps::rfc3339;
use sandboxd_service::{Service, ServiceError};
use sandboxd_store::TemplateState;
use serde::{Deserialize, Serialize};
use serde_json::json;

type Result<T> = std::result::Result<T, E2bError>;

/// Most log entries one status answer carries.
const MAX_LOG_PAGE: usize = 1000;
/// Snapshots in a page when the request names no limit.
const DEFAULT_SNAPSHOT_PAGE: usize = 100;

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T> {
    serde_json::from_slice(body)
        .map_err(|e| E2bError::bad_request(format!("invalid JSON body: {e}")))
}

fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    raw.map(|r| form_urlencoded::parse(r.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

/// `POST /v3/templates`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildRequest {
    #[serde(default)]
    pub name: Option<String>,
    /// Older SDKs' spelling of `name`.
    #[serde(default)]
    pub alias: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub cpu_count: Option<u64>,
    #[serde(rename = "memoryMB", default)]
    pub memory_mb: Option<u64>,
    #[serde(default)]
    pub min_free_disk_mb: Option<u64>,
}

/// `POST /v3/templates`: names the build; nothing is recorded until it starts.
pub async fn request_build(State(service): State<Service>, body: Bytes) -> Result<Response> {
    let req: BuildRequest = parse(&body)?;
    for (field, given) in [
        ("cpuCount", req.cpu_count.is_some()),
        ("memoryMB", req.memory_mb.is_some()),
        ("minFreeDiskMb", req.min_free_disk_mb.is_some()),
    ] {
        if given {
            return Err(E2bError::bad_request(format!(
                "{field} is not supported: a template has no resources of its own here (sandboxes \
                 get the daemon's defaults); leave it out"
            )));
        }
    }
    if req.tags.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(E2bError::bad_request(
            "tags are not supported: a template has one name; build \"name:tag\" instead",
        ));
    }
    let name = req
        .name
        .or(req.alias)
        .ok_or_else(|| E2bError::bad_request("name is required"))?;
    validate_name(&name)?;
    if name == DEFAULT_TEMPLATE {
        return Err(E2bError::new(
            StatusCode::CONFLICT,
            "template \"base\" is built in",
        ));
    }
    match service.get_template(&name).await {
        Ok(t) if t.state != TemplateState::Failed => {
            return Err(E2bError::new(
                StatusCode::CONFLICT,
                format!(
                    "template {name:?} already exists ({}); delete it before building it again",
                    t.state.as_str()
                ),
            ))
        }
        Ok(_) | Err(ServiceError::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let build_id = service.e2b_build_id(&name)?;
    let tags: Vec<&str> = name
        .split_once(':')
        .map(|(_, t)| vec![t])
        .unwrap_or_default();
    let body = json!({
        "templateID": name,
        "buildID": build_id,
        "public": false,
        "names": [name],
        "tags": tags,
        "aliases": [name],
    });
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// `GET /templates/{templateID}/files/{hash}` → 201 `{present}` or `{present: false, url}`.
pub async fn file_link(
    State(service): State<Service>,
    headers: HeaderMap,
    Path((template_id, hash)): Path<(String, String)>,
) -> Result<Response> {
    validate_name(&template_id)?;
    if service.e2b_file_present(&hash)? {
        return Ok((StatusCode::CREATED, Json(json!({ "present": true }))).into_response());
    }
    let path = service.e2b_upload_path(&hash)?;
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .unwrap_or_else(|| {
            let c = service.config();
            format!("{}:{}", c.domain, c.public_port)
        });
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .filter(|p| *p == "https")
        .unwrap_or("http");
    let url = format!("{scheme}://{host}{path}");
    Ok((
        StatusCode::CREATED,
        Json(json!({ "present": false, "url": url })),
    )
        .into_response())
}

/// `PUT /e2b/files/{hash}?expires=&signature=`: stores an upload the URL's signature allows.
pub async fn upload(
    State(service): State<Service>,
    Path(hash): Path<String>,
    RawQuery(raw): RawQuery,
    body: Body,
) -> Result<StatusCode> {
    let pairs = query_pairs(raw.as_deref());
    let param = |k: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let denied = || E2bError::new(StatusCode::FORBIDDEN, "the upload URL is not signed");
    let expires = param("expires")
        .and_then(|e| e.parse::<i64>().ok())
        .ok_or_else(denied)?;
    let signature = param("signature").ok_or_else(denied)?;
    service
        .e2b_store_file(&hash, expires, signature, body.into_data_stream())
        .await?;
    Ok(StatusCode::OK)
}

/// A template JSON's step.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepBody {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub args: Option<Vec<String>>,
    #[serde(default)]
    pub files_hash: Option<String>,
    #[serde(default)]
    pub force: Option<bool>,
}

/// `POST /v2/templates/{id}/builds/{buildID}`: the template JSON.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateBody {
    #[serde(default)]
    pub from_image: Option<String>,
    #[serde(default)]
    pub from_template: Option<String>,
    #[serde(default)]
    pub from_image_registry: Option<serde_json::Value>,
    #[serde(default)]
    pub force: Option<bool>,
    #[serde(default)]
    pub steps: Option<Vec<StepBody>>,
    #[serde(default)]
    pub start_cmd: Option<String>,
    #[serde(default)]
    pub ready_cmd: Option<String>,
}

impl TemplateBody {
    fn into_build(self) -> Result<E2bBuild> {
        let from = match (self.from_image, self.from_template) {
            (Some(image), None) => E2bFrom::Image(image),
            (None, Some(template)) => E2bFrom::Template(template),
            _ => {
                return Err(E2bError::bad_request(
                    "give exactly one of fromImage and fromTemplate",
                ))
            }
        };
        let credentials = match self.from_image_registry {
            None | Some(serde_json::Value::Null) => None,
            Some(registry) => {
                if !matches!(from, E2bFrom::Image(_)) {
                    return Err(E2bError::bad_request(
                        "fromImageRegistry goes with fromImage",
                    ));
                }
                match registry["type"].as_str() {
                    Some("registry") => {
                        let field = |k: &str| {
                            registry[k].as_str().map(str::to_string).ok_or_else(|| {
                                E2bError::bad_request(format!(
                                    "fromImageRegistry.{k} must be a string"
                                ))
                            })
                        };
                        Some(sandboxd_images::Credentials {
                            username: field("username")?,
                            password: field("password")?,
                        })
                    }
                    other => {
                        return Err(E2bError::bad_request(format!(
                        "fromImageRegistry type {} is not supported: give {{type: \"registry\", \
                             username, password}}",
                        other.unwrap_or("(none)")
                    )))
                    }
                }
            }
        };
        Ok(E2bBuild {
            from,
            credentials,
            force: self.force.unwrap_or(false),
            steps: self
                .steps
                .unwrap_or_default()
                .into_iter()
                .map(|s| E2bStep {
                    kind: s.kind,
                    args: s.args.unwrap_or_default(),
                    files_hash: s.files_hash,
                    force: s.force.unwrap_or(false),
                })
                .collect(),
            start_cmd: self.start_cmd,
            ready_cmd: self.ready_cmd,
        })
    }
}

/// `POST /v2/templates/{id}/builds/{buildID}`: starts the build (202).
pub async fn start_build(
    State(service): State<Service>,
    Path((template_id, build_id)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode> {
    let build = parse::<TemplateBody>(&body)?.into_build()?;
    service.e2b_build(&template_id, &build_id, build).await?;
    Ok(StatusCode::ACCEPTED)
}

/// One entry of a build's log.
#[derive(Debug, Serialize)]
pub struct LogEntry {
    pub timestamp: String,
    pub level: &'static str,
    pub message: String,
}

/// `GET /templates/{id}/builds/{buildID}/status?logsOffset=&limit=`.
pub async fn build_status(
    State(service): State<Service>,
    Path((template_id, build_id)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Json<serde_json::Value>> {
    let mut offset = 0u64;
    let mut limit = 100usize;
    for (k, v) in query_pairs(raw.as_deref()) {
        match k.as_str() {
            "logsOffset" => {
                offset = v
                    .parse()
                    .map_err(|_| E2bError::bad_request("logsOffset must be a whole number"))?
            }
            "limit" => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LOG_PAGE).contains(n))
                    .ok_or_else(|| {
                        E2bError::bad_request(format!("limit must be between 1 and {MAX_LOG_PAGE}"))
                    })?
            }
            _ => {}
        }
    }
    let status = service
        .e2b_build_status(&template_id, &build_id, offset, limit)
        .await?;
    let entries: Vec<LogEntry> = status
        .lines
        .iter()
        .map(|l| LogEntry {
            timestamp: rfc3339(l.at),
            level: if l.line.starts_with("failed: ") {
                "error"
            } else if l.line.starts_with("warning: ") {
                "warn"
            } else {
                "info"
            },
            message: l.line.clone(),
        })
        .collect();
    let state = match status.state {
        E2bBuildState::Waiting => "waiting",
        E2bBuildState::Building => "building",
        E2bBuildState::Ready => "ready",
        E2bBuildState::Error => "error",
    };
    let logs: Vec<&str> = status.lines.iter().map(|l| l.line.as_str()).collect();
    let mut body = json!({
        "templateID": template_id,
        "buildID": build_id,
        "status": state,
        "logs": logs,
        "logEntries": entries,
    });
    if let Some((message, step)) = status.reason {
        body["reason"] = json!({ "message": message, "step": step });
    }
    Ok(Json(body))
}

/// `POST /templates/tags`, `DELETE /templates/tags`, `GET /templates/{id}/tags`: refused (501), so
/// the SDK's `assign_tags`, `remove_tags` and `get_tags` raise its own error at once. A template
/// here has one name, and `name:tag` is such a name.
pub async fn tags_refused() -> E2bError {
    E2bError::new(
        StatusCode::NOT_IMPLEMENTED,
        "template tags are not supported: a template has one name; build each version under its \
         own name (Template.build(t, \"name:tag\")) and create sandboxes from that name",
    )
}

/// `GET /templates/aliases/{alias}` → 200 `{templateID, public}` / 404.
pub async fn alias(
    State(service): State<Service>,
    Path(alias): Path<String>,
) -> Result<Json<serde_json::Value>> {
    if alias != DEFAULT_TEMPLATE {
        service.get_template(&alias).await?;
    }
    Ok(Json(json!({ "templateID": alias, "public": false })))
}

/// `DELETE /templates/{id}` → 204; 404 unknown; 409 while it builds or a sandbox uses it.
pub async fn delete_template(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<StatusCode> {
    service.delete_template(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /sandboxes/{id}/snapshots`.
#[derive(Debug, Default, Deserialize)]
pub struct SnapshotRequest {
    #[serde(default)]
    pub name: Option<String>,
    /// `true` asks for the memory too, which a snapshot here does not keep.
    #[serde(default)]
    pub memory: Option<bool>,
}

/// `POST /sandboxes/{id}/snapshots` → 201 `{snapshotID, names}`.
pub async fn snapshot(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response> {
    let req: SnapshotRequest = if body.iter().all(u8::is_ascii_whitespace) {
        SnapshotRequest::default()
    } else {
        parse(&body)?
    };
    if req.memory == Some(true) {
        return Err(E2bError::bad_request(
            "memory snapshots are not supported: a snapshot keeps the sandbox's filesystem only \
             (mode=\"filesystem\")",
        ));
    }
    let sandbox = visible(&service, &id).await?;
    let name = req.name.filter(|n| !n.is_empty());
    let template = service.e2b_snapshot(&sandbox.id, name.as_deref()).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "snapshotID": template.name, "names": [template.name] })),
    )
        .into_response())
}

/// `GET /snapshots?sandboxID=&name=&limit=&nextToken=` → 200 `[{snapshotID, names}]`.
pub async fn list_snapshots(
    State(service): State<Service>,
    RawQuery(raw): RawQuery,
) -> Result<Response> {
    let (mut sandbox, mut name, mut cursor) = (None, None, None);
    let mut limit = DEFAULT_SNAPSHOT_PAGE;
    for (k, v) in query_pairs(raw.as_deref()) {
        match k.as_str() {
            "sandboxID" => sandbox = Some(v),
            "name" => name = Some(v),
            "nextToken" => cursor = Some(v),
            "limit" => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| E2bError::bad_request("limit must be between 1 and 1000"))?
            }
            _ => {}
        }
    }
    let (page, next) = service
        .e2b_snapshots(
            sandbox.as_deref(),
            name.as_deref(),
            limit,
            cursor.as_deref(),
        )
        .await?;
    let body: Vec<serde_json::Value> = page
        .iter()
        .map(|t| json!({ "snapshotID": t.name, "names": [t.name] }))
        .collect();
    let mut response = Json(body).into_response();
    if let Some(token) = next.and_then(|t| HeaderValue::from_str(&t).ok()) {
        response.headers_mut().insert("x-next-token", token);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_json_parses_as_the_sdk_sends_it() {
        let body = r#"{"fromImage":"busybox:1","fromImageRegistry":{"type":"registry",
            "username":"u","password":"p"},"force":false,"steps":[{"type":"COPY",
            "args":["a","/a","",""],"force":false,"filesHash":"00"},{"type":"RUN","args":["true"],
            "force":true}],"startCmd":"x","readyCmd":"y","future":1}"#;
        let build = parse::<TemplateBody>(body.as_bytes())
            .unwrap()
            .into_build()
            .unwrap();
        assert_eq!(build.from, E2bFrom::Image("busybox:1".into()));
        assert_eq!(build.credentials.unwrap().username, "u");
        assert_eq!(build.steps.len(), 2);
        assert!(build.steps[1].force);
        for bad in [
            r#"{"steps":[]}"#,
            r#"{"fromImage":"a","fromTemplate":"b"}"#,
            r#"{"fromTemplate":"b","fromImageRegistry":{"type":"registry","username":"u","password":"p"}}"#,
            r#"{"fromImage":"a","fromImageRegistry":{"type":"aws"}}"#,
        ] {
            let err = parse::<TemplateBody>(bad.as_bytes())
                .unwrap()
                .into_build()
                .unwrap_err();
            assert_eq!(err.status, 400, "{bad}");
        }
    }
}
