//! Daytona's control API (`/api/sandbox…`), translated onto the service's flows.
//!
//! - A create answers once the sandbox runs (state `started`), as the SDK's wait on it would end.
//!   Its root: `snapshot` names a template (an unknown one is a 404, nothing created); a
//!   `buildInfo.dockerfileContent` of one `FROM <image>` line is that image (pulled as any create
//!   pulls); a longer Dockerfile is built once into the template `daytona-<hash of the file>` and
//!   reused by every create of the same file — a create whose file is not built yet answers at once
//!   in state `pending_build` and waits for the build in the background ([`super::pending`]; in a
//!   cluster the create waits for the build itself, as a pending create is known to its node only);
//!   neither is [`DEFAULT_SNAPSHOT`] (the code interpreter:
//!   Daytona's default sandbox runs `code_run`). Builds with local files name the contexts the SDK
//!   uploaded to the object store (`contextHashes`, [`super::object_storage`]).
//! - `cpu`, `memory` and `disk` (GiB) are the sandbox's limits; `labels` its metadata (the SDK keeps
//!   the code language there); `networkBlockAll` turns egress off and `networkAllowList` (comma-separated
//!   IPv4 addresses and CIDR blocks; domain names are refused, as Daytona takes none) is the
//!   sandbox's `allowOut`. `autoStopInterval`, `autoDeleteInterval` and `autoArchiveInterval` are
//!   its idle policy ([`super::lifecycle`]): inactivity stops it, and a stopped one is deleted after
//!   its interval. It has no deadline besides.
//! - Names are the sandboxes' names: unique (a conflict is a 409), and `GET /api/sandbox/{idOrName}`
//!   finds a sandbox by either.
//! - `stop` ends the sandbox's processes and releases its memory, keeping its filesystem; `start`
//!   boots it again on that filesystem (and resumes a paused one) — [`sandboxd_service::stop`];
//!   `pause` freezes it with its memory.

use super::error::DaytonaError;
use super::models::{BuildInfo, CreateSandbox, DaytonaSandbox, SandboxPage, LANGUAGE_LABEL};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::Json;
use sandboxd_api_types as api;
use sandboxd_service::{Service, ServiceError};
use sandboxd_store::{SandboxFilter, SandboxState};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// How long a create in a cluster waits for its Dockerfile's build.
const CLUSTER_BUILD_WAIT: std::time::Duration = std::time::Duration::from_secs(20 * 60);
/// The template a create that names no snapshot and no image gets.
pub const DEFAULT_SNAPSHOT: &str = sandboxd_service::builtin::CODE_INTERPRETER;

/// Where the toolbox of this daemon is, as the caller reached the daemon.
pub fn toolbox_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    format!("http://{host}/api/toolbox")
}

/// `body` as JSON (an empty body is the default).
pub(crate) fn parse<T: serde::de::DeserializeOwned + Default>(
    body: &Bytes,
) -> Result<T, DaytonaError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| DaytonaError::bad_request(format!("invalid JSON body: {e}")))
}

/// The one image a Dockerfile of a single `FROM` line names.
fn single_from(dockerfile: &str) -> Option<&str> {
    let mut lines = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    let first = lines.next()?;
    let image = first
        .strip_prefix("FROM ")
        .or_else(|| first.strip_prefix("from "))?
        .trim();
    (lines.next().is_none() && !image.contains(char::is_whitespace)).then_some(image)
}

/// `POST /api/sandbox`.
pub async fn create(
    State(service): State<Service>,
    caller: Option<axum::Extension<sandboxd_surface::auth::Caller>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    let req: CreateSandbox = parse(&body)?;
    if let Some(why) = req.refusal() {
        return Err(DaytonaError::bad_request(why));
    }
    // A Dockerfile whose template is not built yet: the create waits for the build in the
    // background (`pending_build`).
    let mut building = false;
    let (template, image) = match (&req.snapshot, &req.build_info) {
        (Some(_), Some(_)) => {
            return Err(DaytonaError::bad_request(
                "give a snapshot or buildInfo, not both",
            ))
        }
        (Some(snapshot), None) => (Some(snapshot.clone()), None),
        (None, Some(build)) => {
            let spec = super::object_storage::build_spec(&service, build).await?;
            match single_from(&spec.dockerfile).filter(|_| spec.context.is_empty()) {
                Some(image) => (None, Some(image.to_string())),
                None => {
                    let name = dockerfile_template(&spec.dockerfile, build);
                    let mut template = service.ensure_dockerfile_template(&name, spec).await?;
                    if service.cluster().is_some() {
                        // A pending create is known to its node only, while a cluster routes
                        // the SDK's polls by the log: there the create waits for the build.
                        template = service.await_template(&name, CLUSTER_BUILD_WAIT).await?;
                    }
                    match template.state {
                        sandboxd_store::TemplateState::Building => building = true,
                        sandboxd_store::TemplateState::Ready => {}
                        sandboxd_store::TemplateState::Failed => {
                            return Err(DaytonaError::new(
                                axum::http::StatusCode::BAD_REQUEST,
                                "build_failed",
                                format!(
                                    "the image build failed: {}",
                                    template.error.unwrap_or_default()
                                ),
                            ))
                        }
                    }
                    (Some(name), None)
                }
            }
        }
        (None, None) => (Some(DEFAULT_SNAPSHOT.to_string()), None),
    };
    let idle = super::lifecycle::policy_of(super::lifecycle::Intervals {
        stop: req.auto_stop_interval,
        pause: req.auto_pause_interval,
        delete: req.auto_delete_interval,
        archive: req.auto_archive_interval,
    })?;
    let mut labels = req.labels.clone().unwrap_or_default();
    labels
        .entry(LANGUAGE_LABEL.to_string())
        .or_insert_with(|| "python".to_string());
    let list = |field, list: &Option<String>, domains| {
        super::network::entries(field, list.as_deref().unwrap_or_default(), domains)
    };
    let allow_out: Vec<String> = list("networkAllowList", &req.network_allow_list, false)?
        .into_iter()
        .chain(list("domainAllowList", &req.domain_allow_list, true)?)
        .collect();
    let create = api::CreateSandbox {
        name: req.name.clone().filter(|n| !n.is_empty()),
        template,
        image,
        cpu: req.cpu.map(|c| c as f64),
        memory_mb: req.memory.map(|g| g.saturating_mul(1024)),
        disk_mb: req.disk.map(|g| g.saturating_mul(1024)),
        env: env_with_secrets(&req)?,
        metadata: Some(labels),
        // No deadline: its idle policy ends it.
        timeout_sec: Some(0),
        network: Some(api::NetworkPolicy {
            egress: !req.network_block_all.unwrap_or(false),
            allow_out,
            // Daytona's sandboxes are private unless made public.
            allow_public_traffic: Some(req.public.unwrap_or(false)),
            ..Default::default()
        }),
        volumes: req.volumes.clone().map(|mounts| {
            mounts
                .into_iter()
                .map(|m| api::VolumeMount {
                    name: m.volume_id,
                    path: m.mount_path,
                    read_only: false,
                    subpath: m.subpath,
                })
                .collect()
        }),
        ..Default::default()
    };
    let owner = sandboxd_surface::key_id(caller.as_ref());
    if building {
        let pending = service
            .create_when_built(&owner, create, Some(idle))
            .await?;
        return Ok(Json(super::pending::describe(
            &pending,
            &toolbox_url(&headers),
            true,
        )));
    }
    let sandbox = service.create_as(&owner, create).await?;
    // The policy is the create's: a sandbox that cannot have it is not kept.
    if let Err(e) = service.set_idle_policy(&sandbox.id, idle).await {
        if let Err(undo) = service.delete(&sandbox.id).await {
            tracing::warn!(sandbox_id = %sandbox.id, error = %sandboxd_service::error::chain(&undo), "cannot undo a create whose idle policy failed");
        }
        return Err(e.into());
    }
    Ok(Json(
        DaytonaSandbox::of(&sandbox, &toolbox_url(&headers)).with_idle(Some(idle)),
    ))
}

/// `sandbox` as Daytona describes it, with its idle policy.
pub async fn describe(
    service: &Service,
    sandbox: &sandboxd_store::Sandbox,
    toolbox_url: &str,
) -> Result<DaytonaSandbox, DaytonaError> {
    let idle = service.idle_policy(&sandbox.id).await?;
    Ok(DaytonaSandbox::of(sandbox, toolbox_url).with_idle(idle))
}

/// The template a build is built into, one per distinct Dockerfile and set of uploaded contexts
/// (a context's hash is the MD5 of its files, so other files make another template).
fn dockerfile_template(dockerfile: &str, build: &BuildInfo) -> String {
    let mut hash = Sha256::new();
    hash.update(dockerfile.as_bytes());
    for context in build.context_hashes.iter().flatten() {
        hash.update(b"\0");
        hash.update(context.as_bytes());
    }
    let digest = hex::encode(hash.finalize());
    format!("daytona-{}", &digest[..16])
}

/// `GET /api/sandbox/{idOrName}`: the sandbox, or the create still waiting for its build.
pub async fn get(
    State(service): State<Service>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    let url = toolbox_url(&headers);
    match service.get(&key).await {
        Ok(sandbox) => Ok(Json(describe(&service, &sandbox, &url).await?)),
        Err(ServiceError::NotFound(e)) => match service.pending_create(&key) {
            Some(p) => Ok(Json(super::pending::describe(&p, &url, false))),
            None => Err(ServiceError::NotFound(e).into()),
        },
        Err(e) => Err(e.into()),
    }
}

/// `GET /api/sandbox?cursor=&limit=&labels=<JSON object>`; the first page begins with this node's
/// creates that wait for their build (or failed it), as `GET /api/sandbox/{id}` answers them.
pub async fn list(
    State(service): State<Service>,
    Query(query): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<SandboxPage>, DaytonaError> {
    let labels: BTreeMap<String, String> = match query.get("labels") {
        Some(raw) if !raw.is_empty() => serde_json::from_str(raw).map_err(|e| {
            DaytonaError::bad_request(format!("labels must be a JSON object of strings: {e}"))
        })?,
        _ => BTreeMap::new(),
    };
    let limit = match query.get("limit") {
        Some(l) => l
            .parse::<usize>()
            .map_err(|_| DaytonaError::bad_request("limit must be a whole number"))?,
        None => 0,
    };
    let first_page = query.get("cursor").is_none_or(|c| c.is_empty());
    let filter = SandboxFilter {
        metadata: labels.clone().into_iter().collect(),
        states: vec![
            SandboxState::Starting,
            SandboxState::Running,
            SandboxState::Paused,
            SandboxState::Stopped,
            SandboxState::Failed,
        ],
        cursor: query.get("cursor").filter(|c| !c.is_empty()).cloned(),
        limit,
    };
    let (rows, next) = service.list(filter).await?;
    let url = toolbox_url(&headers);
    let mut items = Vec::with_capacity(rows.len());
    if first_page {
        // Creates still waiting for their build come first, as Daytona lists them.
        for p in service.pending_creates() {
            let matches = labels.iter().all(|(k, v)| p.metadata.get(k) == Some(v));
            if matches && !rows.iter().any(|r| r.id == p.id) {
                items.push(super::pending::describe(&p, &url, false));
            }
        }
    }
    for sandbox in &rows {
        items.push(describe(&service, sandbox, &url).await?);
    }
    Ok(Json(SandboxPage {
        items,
        next_cursor: next,
    }))
}

/// `DELETE /api/sandbox/{idOrName}`: 200 with the sandbox as it was, `destroyed`.
pub async fn delete(
    State(service): State<Service>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    let sandbox = match service.get(&key).await {
        Ok(sandbox) => sandbox,
        Err(ServiceError::NotFound(e)) => {
            let Some(p) = service.cancel_pending(&key) else {
                return Err(ServiceError::NotFound(e).into());
            };
            let mut gone = super::pending::describe(&p, &toolbox_url(&headers), false);
            gone.state = "destroyed";
            return Ok(Json(gone));
        }
        Err(e) => return Err(e.into()),
    };
    service.delete(&sandbox.id).await?;
    let mut gone = DaytonaSandbox::of(&sandbox, &toolbox_url(&headers));
    gone.state = "destroyed";
    Ok(Json(gone))
}

/// `POST /api/sandbox/{idOrName}/start`: boots a stopped sandbox again on its filesystem (a paused
/// one is resumed, a running one answered as it is).
pub async fn start(
    State(service): State<Service>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    let (sandbox, _) = service.start(&key).await?;
    Ok(Json(
        describe(&service, &sandbox, &toolbox_url(&headers)).await?,
    ))
}

/// `POST /api/sandbox/{idOrName}/stop`: ends its processes, keeps its filesystem.
pub async fn stop(
    State(service): State<Service>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    let (sandbox, _) = service.stop(&key).await?;
    Ok(Json(
        describe(&service, &sandbox, &toolbox_url(&headers)).await?,
    ))
}

/// `POST /api/sandbox/{idOrName}/pause`: freezes the sandbox with its memory
/// ([`sandboxd_service::pause`]), state `paused`; `start` resumes it.
pub async fn pause(
    State(service): State<Service>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    let sandbox = service.pause(&key).await?;
    Ok(Json(
        describe(&service, &sandbox, &toolbox_url(&headers)).await?,
    ))
}

/// `POST /api/sandbox/{idOrName}/resize {cpu?, memory?, disk?}` (whole CPUs, GiB): the sandbox's
/// new limits ([`sandboxd_service::resize`]: a running one only grows in CPU and memory, a disk
/// only grows, while stopped); 200 with the sandbox.
pub async fn resize(
    State(service): State<Service>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    #[derive(Default, serde::Deserialize)]
    struct Body {
        cpu: Option<u64>,
        memory: Option<u64>,
        disk: Option<u64>,
        gpu: Option<u64>,
    }
    let req: Body = parse(&body)?;
    if req.gpu.is_some() {
        return Err(DaytonaError::bad_request(
            "GPUs are not available on sandboxd",
        ));
    }
    let to = sandboxd_service::resize::Resize {
        cpu: req.cpu.map(|c| c as f64),
        memory_mb: req.memory.map(|g| g.saturating_mul(1024)),
        disk_mb: req.disk.map(|g| g.saturating_mul(1024)),
    };
    let sandbox = service.resize(&key, to).await?;
    Ok(Json(
        describe(&service, &sandbox, &toolbox_url(&headers)).await?,
    ))
}

/// `GET /api/sandbox/{idOrName}/toolbox-proxy-url`.
pub async fn toolbox_proxy_url(
    State(service): State<Service>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, DaytonaError> {
    service.get(&key).await?;
    Ok(Json(serde_json::json!({ "url": toolbox_url(&headers) })))
}

/// A create's environment with its `secrets`: each variable they name holds its secret's
/// placeholder. A variable given both ways is the caller's 400. (Whether the secrets exist is the
/// shared create's check.)
fn env_with_secrets(req: &CreateSandbox) -> Result<Option<BTreeMap<String, String>>, DaytonaError> {
    let Some(secrets) = &req.secrets else {
        return Ok(req.env.clone());
    };
    let mut env = req.env.clone().unwrap_or_default();
    for (var, secret) in secrets.iter().flatten() {
        if env.contains_key(var) {
            return Err(DaytonaError::bad_request(format!(
                "{var} is given both in env and in secrets"
            )));
        }
        env.insert(var.clone(), sandboxd_secrets::placeholder(secret));
    }
    Ok(Some(env))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dockerfile_of_one_from_line_is_that_image() {
        assert_eq!(
            single_from("FROM python:3.12-slim\n"),
            Some("python:3.12-slim")
        );
        assert_eq!(single_from("# base\n\nFROM alpine\n"), Some("alpine"));
        assert_eq!(single_from("FROM alpine\nRUN true\n"), None);
        assert_eq!(single_from("FROM alpine AS x\n"), None);
        assert_eq!(single_from(""), None);
    }
}
