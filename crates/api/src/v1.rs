//! The native `/v1` handlers: parse and validate, call one [`Service`] method, shape the answer.

use crate::auth::Caller;
use crate::error::{parse_json, Error};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::{StreamExt, TryStreamExt};
use sandboxd_api_types as api;
use sandboxd_service::idempotency::{Replayable, V1_CREATE_SCOPE};
use sandboxd_service::pause::PauseMode;
use sandboxd_service::sandboxes::random_id;
use sandboxd_service::sandboxes::to_api;
use sandboxd_service::{Service, ServiceError};
use sandboxd_store::{SandboxFilter, SandboxState};
use sandboxd_surface::routes::{CreateRoute, ListRoute, ListShape, SurfaceRoutes, VolumesField};

fn query_pairs(raw: &Option<String>) -> Vec<(String, String)> {
    raw.as_deref()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

fn query_param(raw: &Option<String>, key: &str) -> Option<String> {
    query_pairs(raw)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

pub(crate) fn required_path(raw: &Option<String>) -> Result<String, Error> {
    query_param(raw, "path").ok_or_else(|| Error::invalid("query parameter `path` is required"))
}

/// Create a sandbox.
#[utoipa::path(post, path = "/v1/sandboxes", request_body = api::CreateSandbox,
    responses((status = 201, body = api::Sandbox), (status = 400, body = api::ApiError),
              (status = 404, description = "no such template", body = api::ApiError),
              (status = 409, body = api::ApiError),
              (status = 422, description = "the image cannot be run", body = api::ApiError),
              (status = 429, description = "past a per-key limit; `Retry-After` says when to retry", body = api::ApiError),
              (status = 500, description = "the sandbox was made but never became ready (it is then failed)", body = api::ApiError),
              (status = 502, description = "the image's registry failed or is unreachable", body = api::ApiError),
              (status = 503, body = api::ApiError)))]
pub async fn create(
    State(service): State<Service>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Error> {
    // The id is chosen before the work so a crashed attempt's sandbox can be found and undone.
    let id = random_id("sb", 14);
    let owner = key_id(caller.as_ref());
    let work = |stale: Option<String>| async {
        let created = async {
            let req: api::CreateSandbox = parse_json(&body)?;
            let mut plan = service.plan_create(req)?;
            plan.owner = owner.clone();
            if let Some(stale) = stale {
                // An earlier attempt with this key died before answering: undo what it made.
                match service.delete(&stale).await {
                    Ok(()) | Err(ServiceError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            let mounts_none = plan.volumes.is_empty();
            let sandbox = service.create_with_id(id.clone(), plan).await?;
            if mounts_none {
                // Its mounts are the plan's: none to read back.
                return Ok(to_api(&sandbox));
            }
            with_volumes(&service, to_api(&sandbox)).await
        };
        json_response(StatusCode::CREATED, created.await)
    };
    idempotently(
        &service,
        V1_CREATE_SCOPE,
        caller,
        &headers,
        &body,
        Some(id.clone()),
        work,
    )
    .await
}

pub(crate) use sandboxd_surface::key_id;

/// `/v1`'s sandbox routes, for the cluster's forwarding layer.
pub const CLUSTER_ROUTES: SurfaceRoutes = SurfaceRoutes {
    sandbox_roots: &["/v1/sandboxes"],
    not_sandboxes: &[],
    creates: &[CreateRoute {
        path: "/v1/sandboxes",
        template_field: "template",
        volumes: VolumesField {
            list: "volumes",
            volume: "name",
        },
        fingerprint: None,
    }],
    // The sandbox list first: the cluster layer adds the lost sandboxes to it.
    lists: &[
        ListRoute {
            path: "/v1/sandboxes",
            shape: LIST_SHAPE,
        },
        ListRoute {
            path: "/v1/volumes",
            shape: ListShape::WholeIn { items: "volumes" },
        },
    ],
    volume_roots: &["/v1/volumes"],
};

/// How a `/v1` list answers.
pub const LIST_SHAPE: ListShape = ListShape::Envelope {
    items: "sandboxes",
    created: "createdAt",
    id: "id",
};

/// A handler's outcome as a storable response.
pub(crate) fn json_response<T: serde::Serialize>(
    status: StatusCode,
    result: Result<T, Error>,
) -> Replayable {
    match result {
        Ok(value) => Replayable {
            status: status.as_u16(),
            body: serde_json::to_vec(&value).unwrap_or_default(),
            retry_after: None,
        },
        Err(e) => Replayable {
            status: e.status.as_u16(),
            body: serde_json::to_vec(&api::ApiError {
                code: e.code.to_string(),
                message: e.message,
            })
            .unwrap_or_default(),
            retry_after: e.retry_after,
        },
    }
}

/// Runs `work` once per `Idempotency-Key` (when the request has one) and answers with its response,
/// marking replays with `Idempotent-Replayed: true`.
pub(crate) async fn idempotently<F, Fut>(
    service: &Service,
    scope: &'static str,
    caller: Option<Extension<Caller>>,
    headers: &HeaderMap,
    body: &[u8],
    target: Option<String>,
    work: F,
) -> Result<Response, Error>
where
    F: FnOnce(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Replayable>,
{
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| Error::invalid("Idempotency-Key must be visible ASCII"))?,
        ),
    };
    let (response, replayed) = match (key, caller) {
        (Some(key), Some(Extension(Caller { owner: caller, .. }))) => {
            service
                .idempotent(scope, &caller, key, body, target, work)
                .await?
        }
        _ => (work(None).await, false),
    };
    let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut out = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        response.body,
    )
        .into_response();
    if replayed {
        out.headers_mut().insert(
            "idempotent-replayed",
            header::HeaderValue::from_static("true"),
        );
    }
    Ok(crate::error::with_retry_after(out, response.retry_after))
}

/// List sandboxes (`?metadata=k=v` repeatable, `?state=`, `?cursor=`, `?limit=`).
#[utoipa::path(get, path = "/v1/sandboxes",
    params(("metadata" = Option<String>, Query, description = "k=v, repeatable"),
           ("state" = Option<String>, Query), ("cursor" = Option<String>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = api::SandboxList), (status = 400, body = api::ApiError)))]
pub async fn list(
    State(service): State<Service>,
    RawQuery(raw): RawQuery,
) -> Result<Json<api::SandboxList>, Error> {
    let filter = list_filter(&raw)?;
    let (rows, next) = service.list(filter).await?;
    Ok(Json(api::SandboxList {
        sandboxes: rows.iter().map(to_api).collect(),
        next_cursor: next,
    }))
}

/// The filter a `/v1/sandboxes` list query asks for; a 400 for a bad one.
pub(crate) fn list_filter(raw: &Option<String>) -> Result<SandboxFilter, Error> {
    let mut filter = SandboxFilter::default();
    for (k, v) in query_pairs(raw) {
        match k.as_str() {
            "metadata" => {
                let (mk, mv) = v.split_once('=').ok_or_else(|| {
                    Error::invalid(format!("metadata filter {v:?} must be key=value"))
                })?;
                filter.metadata.push((mk.to_string(), mv.to_string()));
            }
            "state" => {
                for s in v.split(',') {
                    filter.states.push(
                        SandboxState::parse(s)
                            .ok_or_else(|| Error::invalid(format!("unknown state {s:?}")))?,
                    );
                }
            }
            "cursor" => filter.cursor = Some(v),
            "limit" => {
                filter.limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| Error::invalid("limit must be between 1 and 1000"))?;
            }
            other => return Err(Error::invalid(format!("unknown query parameter {other:?}"))),
        }
    }
    Ok(filter)
}

/// `sandbox` with the volumes it mounts.
async fn with_volumes(service: &Service, mut sandbox: api::Sandbox) -> Result<api::Sandbox, Error> {
    sandbox.volumes = service.sandbox_volumes(&sandbox.id).await?;
    Ok(sandbox)
}

/// Get a sandbox by id or name.
#[utoipa::path(get, path = "/v1/sandboxes/{id}", params(("id" = String, Path, description = "id or name")),
    responses((status = 200, body = api::Sandbox), (status = 404, body = api::ApiError)))]
pub async fn get(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<api::Sandbox>, Error> {
    match service.get(&id).await {
        Ok(sandbox) => Ok(Json(with_volumes(&service, to_api(&sandbox)).await?)),
        // Cluster mode: one lost with its node is shown as `lost` through every other node.
        Err(ServiceError::NotFound(message)) => match service.lost_sandbox(&id) {
            Some(lost) => Ok(Json(lost)),
            None => Err(ServiceError::NotFound(message).into()),
        },
        Err(e) => Err(e.into()),
    }
}

/// Pause a running sandbox: with `mode: "memory"` (the default, also for an empty body) its
/// processes and memory are kept and nothing runs until a resume — frozen in the host's RAM on the
/// namespace tier (lost on a host reboot), checkpointed to disk on the gVisor tier (kept across
/// restarts and reboots); the answer's `pausedMemory` says which. With `mode: "filesystem"` only its
/// files are kept: it is stopped, and a resume or start boots it again.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/pause", params(("id" = String, Path, description = "id or name")),
    request_body = api::PauseRequest,
    responses((status = 200, body = api::Sandbox), (status = 400, body = api::ApiError),
              (status = 404, body = api::ApiError),
              (status = 409, description = "already paused, or not running", body = api::ApiError)))]
pub async fn pause(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<api::Sandbox>, Error> {
    let req: api::PauseRequest = if body.iter().all(u8::is_ascii_whitespace) {
        api::PauseRequest::default()
    } else {
        parse_json(&body)?
    };
    let mode = match req.mode {
        api::PauseMode::Memory => PauseMode::Memory,
        api::PauseMode::Filesystem => PauseMode::Filesystem,
    };
    Ok(Json(to_api(&service.pause_with(&id, mode).await?)))
}

/// Fork a running gVisor sandbox: one live checkpoint, then `count` new sandboxes, each with its
/// own id, address and tokens, going on from the source's processes, memory and files; the source
/// keeps running. Each fork succeeds or fails on its own. A namespace sandbox answers 400.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/fork", params(("id" = String, Path, description = "id or name")),
    request_body = api::ForkRequest,
    responses((status = 201, body = api::ForkResults),
              (status = 400, description = "count outside 1..20, or not a gvisor sandbox", body = api::ApiError),
              (status = 404, body = api::ApiError),
              (status = 409, description = "not running", body = api::ApiError)))]
pub async fn fork(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<api::ForkResults>), Error> {
    // An empty body asks for one fork.
    let req: api::ForkRequest = if body.is_empty() {
        api::ForkRequest::default()
    } else {
        parse_json(&body)?
    };
    let made = service
        .fork_with_memory(&id, req.count.unwrap_or(1), req.timeout_sec.unwrap_or(0))
        .await?;
    let forks = made
        .into_iter()
        .map(|made| match made {
            Ok(sandbox) => api::ForkResult {
                sandbox: Some(to_api(&sandbox)),
                error: None,
            },
            Err(e) => {
                let e = Error::from(e);
                api::ForkResult {
                    sandbox: None,
                    error: Some(api::ApiError {
                        code: e.code.to_string(),
                        message: e.message,
                    }),
                }
            }
        })
        .collect();
    Ok((StatusCode::CREATED, Json(api::ForkResults { forks })))
}

/// Stop a running or paused sandbox: its processes end and its memory is released; what it wrote,
/// its name and its address are kept for a start (a stopped one is returned unchanged).
#[utoipa::path(post, path = "/v1/sandboxes/{id}/stop", params(("id" = String, Path, description = "id or name")),
    responses((status = 200, body = api::Sandbox), (status = 404, body = api::ApiError),
              (status = 409, description = "neither running, paused nor stopped", body = api::ApiError)))]
pub async fn stop(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<api::Sandbox>, Error> {
    Ok(Json(to_api(&service.stop(&id).await?.0)))
}

/// Replace a running sandbox's egress: `egress` (the default for destinations in neither list) and
/// both lists, whole, as a create's `network` sets them; what its new connections meet from the
/// answer on (those open stay). `rules` replace its egress gateway's rules where the gateway is in
/// its path (its create named secrets or rules); `allowPublicTraffic` changes only when given.
#[utoipa::path(put, path = "/v1/sandboxes/{id}/network", params(("id" = String, Path, description = "id or name")),
    request_body = api::NetworkPolicy,
    responses((status = 200, body = api::Sandbox), (status = 404, body = api::ApiError),
              (status = 400, description = "a list entry that cannot be enforced, rules the sandbox cannot take while it runs, or a tier that cannot change it", body = api::ApiError),
              (status = 409, description = "not running", body = api::ApiError)))]
pub async fn update_network(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<api::Sandbox>, Error> {
    let network: api::NetworkPolicy = parse_json(&body)?;
    let update = sandboxd_service::network_update::EgressUpdate {
        egress: Some(network.egress),
        allow_out: network.allow_out,
        deny_out: network.deny_out,
        rules: network.rules,
        public: network.allow_public_traffic,
    };
    Ok(Json(to_api(&service.update_egress(&id, update).await?)))
}

/// Start a stopped sandbox again on its filesystem; answers once it runs (and its template's start
/// commands are up). A paused one is resumed, a running one returned unchanged.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/start", params(("id" = String, Path, description = "id or name")),
    responses((status = 200, body = api::Sandbox), (status = 404, body = api::ApiError),
              (status = 409, description = "being created, deleted, or failed", body = api::ApiError),
              (status = 500, description = "it could not boot again (it is then failed)", body = api::ApiError)))]
pub async fn start(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<api::Sandbox>, Error> {
    Ok(Json(to_api(&service.start(&id).await?.0)))
}

/// Resume a paused sandbox (a running one is returned unchanged); one paused to its files (stopped)
/// is started again. An auto-paused sandbox gets its timeout again.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/resume", params(("id" = String, Path, description = "id or name")),
    responses((status = 200, body = api::Sandbox), (status = 404, body = api::ApiError),
              (status = 409, description = "neither paused, stopped nor running", body = api::ApiError)))]
pub async fn resume(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<api::Sandbox>, Error> {
    Ok(Json(to_api(&service.start(&id).await?.0)))
}

/// Destroy a sandbox.
#[utoipa::path(delete, path = "/v1/sandboxes/{id}", params(("id" = String, Path)),
    responses((status = 204), (status = 404, body = api::ApiError)))]
pub async fn delete(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<StatusCode, Error> {
    service.delete(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Run a command to completion.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/exec", params(("id" = String, Path)), request_body = api::ExecRequest,
    responses((status = 200, body = api::ExecResult), (status = 400, body = api::ApiError), (status = 404, body = api::ApiError)))]
pub async fn exec(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<api::ExecResult>, Error> {
    let req: api::ExecRequest = parse_json(&body)?;
    Ok(Json(service.exec(&id, req).await?))
}

/// Run a command, streaming its output as NDJSON `ExecEvent`s.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/exec/stream", params(("id" = String, Path)), request_body = api::ExecRequest,
    responses((status = 200, body = api::ExecEvent, content_type = "application/x-ndjson"), (status = 404, body = api::ApiError)))]
pub async fn exec_stream(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, Error> {
    let req: api::ExecRequest = parse_json(&body)?;
    let events = service.exec_stream(&id, req).await?;
    let lines = events.map(|event| {
        let mut line = serde_json::to_vec(&event).unwrap_or_default();
        line.push(b'\n');
        Ok::<_, std::convert::Infallible>(Bytes::from(line))
    });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response())
}

/// Run code in the sandbox's code interpreter (sandboxes of `code-interpreter-v1`), streaming its
/// output as NDJSON lines: `number_of_executions`, `stdout`, `stderr`, `result` (text, html, png,
/// chart, …), `error`, `keepalive`, and `end_of_execution` last — the E2B Code Interpreter's lines.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/code", params(("id" = String, Path)), request_body = api::RunCode,
    responses((status = 200, content_type = "application/x-ndjson"), (status = 400, body = api::ApiError),
        (status = 404, body = api::ApiError), (status = 409, body = api::ApiError), (status = 502, body = api::ApiError)))]
pub async fn run_code(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, Error> {
    let req: api::RunCode = parse_json(&body)?;
    let lines = service.run_code(&id, req).await?;
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response())
}

/// Download a file (`?path=/abs/path`).
#[utoipa::path(get, path = "/v1/sandboxes/{id}/files", params(("id" = String, Path), ("path" = String, Query)),
    responses((status = 200, content_type = "application/octet-stream"), (status = 404, body = api::ApiError)))]
pub async fn download(
    State(service): State<Service>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, Error> {
    let path = required_path(&raw)?;
    let user = query_param(&raw, "user");
    let stream = service.read_file(&id, &path, user.as_deref()).await?;
    let body = Body::from_stream(stream.map_err(std::io::Error::other));
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response())
}

/// Upload a file (`?path=/abs/path`, raw body).
#[utoipa::path(put, path = "/v1/sandboxes/{id}/files", params(("id" = String, Path), ("path" = String, Query)),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 204), (status = 400, body = api::ApiError), (status = 404, body = api::ApiError)))]
pub async fn upload(
    State(service): State<Service>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
    body: Body,
) -> Result<StatusCode, Error> {
    let path = required_path(&raw)?;
    let user = query_param(&raw, "user");
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    // The agent client wants a Sync stream; a channel fed from the request body is one.
    tokio::spawn(async move {
        let mut data = body.into_data_stream();
        while let Some(chunk) = data.next().await {
            let failed = chunk.is_err();
            if tx.send(chunk.map_err(std::io::Error::other)).await.is_err() || failed {
                break;
            }
        }
    });
    let stream = tokio_stream_from(rx);
    service
        .write_file(&id, &path, user.as_deref(), stream)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

fn tokio_stream_from<T: Send + 'static>(
    rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + Sync + 'static {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
}

/// List a directory (`?path=/dir`).
#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/list", params(("id" = String, Path), ("path" = String, Query)),
    responses((status = 200, body = api::FileList), (status = 404, body = api::ApiError)))]
pub async fn list_files(
    State(service): State<Service>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<api::FileList>, Error> {
    let path = required_path(&raw)?;
    Ok(Json(service.list_files(&id, &path).await?))
}

/// Expose a port of the sandbox; exposing it again returns the same URL.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/ports", params(("id" = String, Path)), request_body = api::ExposePort,
    responses((status = 201, body = api::ExposedPort), (status = 200, body = api::ExposedPort),
              (status = 409, body = api::ApiError)))]
pub async fn expose(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, Error> {
    let req: api::ExposePort = parse_json(&body)?;
    let (port, existed) = service.expose(&id, req).await?;
    let status = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(port)).into_response())
}

/// The exposed ports of a sandbox.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/ports", params(("id" = String, Path)),
    responses((status = 200, body = Vec<api::ExposedPort>), (status = 404, body = api::ApiError)))]
pub async fn ports(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<Vec<api::ExposedPort>>, Error> {
    Ok(Json(service.ports(&id).await?))
}

/// Withdraw an exposure.
#[utoipa::path(delete, path = "/v1/sandboxes/{id}/ports/{port}", params(("id" = String, Path), ("port" = u16, Path)),
    responses((status = 204), (status = 404, body = api::ApiError)))]
pub async fn unexpose(
    State(service): State<Service>,
    Path((id, port)): Path<(String, String)>,
) -> Result<StatusCode, Error> {
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| Error::invalid(format!("invalid port {port:?}")))?;
    service.unexpose(&id, port).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Run every reconciler once (what the daemon also does on its timer) and report what each examined,
/// changed (by kind) and could not resolve. A second call right after reports no changes.
#[utoipa::path(post, path = "/v1/admin/reconcile",
    responses((status = 200, description = "`{reconcilers: [{name, examined, actions: {kind: count}, errors}], totalActions}`"),
              (status = 403, body = api::ApiError, description = "a user key")))]
pub async fn reconcile(State(service): State<Service>) -> Json<serde_json::Value> {
    let report = service.reconcile_all().await;
    let reconcilers: Vec<serde_json::Value> = report
        .reconcilers
        .iter()
        .map(|(name, r)| {
            serde_json::json!({
                "name": name,
                "examined": r.examined,
                "actions": r.actions,
                "errors": r.errors,
            })
        })
        .collect();
    Json(serde_json::json!({
        "reconcilers": reconcilers,
        "totalActions": report.total_actions(),
    }))
}
