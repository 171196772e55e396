//! The E2B control API's handlers: parse, call the service, answer in E2B's shapes.

use super::error::E2bError;
use super::models::{
    e2b_state, network_lists, ConnectRequest, Metric, NewSandbox, PauseRequest, SandboxBody,
    TimeoutRequest,
};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use sandboxd_service::e2b::CREATE_KEY_SCOPE;
use sandboxd_service::idempotency::Replayable;
use sandboxd_service::pause::PauseMode;
use sandboxd_service::timestamps::parse_timestamp;
use sandboxd_service::timestamps::rfc3339;
use sandboxd_service::Service;
use sandboxd_store::{Sandbox, SandboxFilter, SandboxState};
use sandboxd_surface::auth::Caller;
use std::time::Duration;

type Result<T> = std::result::Result<T, E2bError>;

/// Timeout of a v2 connect that names none, seconds (the SDK model's default).
const CONNECT_DEFAULT_TIMEOUT: u64 = 300;

/// Parses a JSON body; every way it can be wrong is a 400.
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T> {
    if body.is_empty() {
        return Err(E2bError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| E2bError::bad_request(format!("invalid JSON body: {e}")))
}

/// Parses an optional JSON body: empty means every field's default.
fn parse_optional<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    parse(body)
}

/// The sandbox `id` if E2B clients can see it (running or paused), else a 404.
pub(super) async fn visible(service: &Service, id: &str) -> Result<Sandbox> {
    let sandbox = service.get(id).await?;
    if e2b_state(sandbox.state).is_none() {
        return Err(E2bError::not_found(format!("sandbox {id} not found")));
    }
    Ok(sandbox)
}

fn detail(service: &Service, sandbox: &Sandbox) -> SandboxBody {
    SandboxBody::detail(sandbox, service.config())
}

/// The dedupe fingerprint of an E2B create body ([`sandboxd_service::e2b::E2bCreate::fingerprint`]),
/// or `None` for a body the create would refuse.
pub fn create_fingerprint(body: &[u8], default_timeout: std::time::Duration) -> Option<String> {
    let req = parse::<NewSandbox>(body).ok()?.into_create().ok()?;
    Some(req.normalized(default_timeout).fingerprint())
}

/// `POST /sandboxes`, `POST /v2/sandboxes`: create, deduplicated by body (see
/// [`sandboxd_service::e2b`]) and, when the request carries one, by `Idempotency-Key`.
pub async fn create(
    State(service): State<Service>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response> {
    let mut req = parse::<NewSandbox>(&body)?.into_create()?;
    req.owner = sandboxd_surface::key_id(caller.as_ref());
    let work = |_stale: Option<String>| async {
        let created = service.e2b_create(req).await;
        match created {
            Ok(sandbox) => Replayable {
                status: StatusCode::CREATED.as_u16(),
                body: serde_json::to_vec(&detail(&service, &sandbox)).unwrap_or_default(),
                retry_after: None,
            },
            Err(e) => {
                let e = E2bError::from(e);
                Replayable {
                    status: e.status.as_u16(),
                    body: serde_json::to_vec(&e.body()).unwrap_or_default(),
                    retry_after: e.retry_after,
                }
            }
        }
    };
    let key = headers
        .get("idempotency-key")
        .map(|v| {
            v.to_str()
                .map_err(|_| E2bError::bad_request("Idempotency-Key must be visible ASCII"))
        })
        .transpose()?;
    let (answer, replayed) = match (key, caller) {
        (Some(key), Some(Extension(Caller { owner: caller, .. }))) => {
            service
                .idempotent(CREATE_KEY_SCOPE, &caller, key, &body, None, work)
                .await?
        }
        _ => (work(None).await, false),
    };
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        answer.body,
    )
        .into_response();
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(sandboxd_surface::error::with_retry_after(
        response,
        answer.retry_after,
    ))
}

/// `GET /sandboxes/{id}`.
pub async fn get(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<SandboxBody>> {
    let sandbox = visible(&service, &id).await?;
    let mut body = detail(&service, &sandbox);
    body.volume_mounts = service
        .sandbox_volumes(&sandbox.id)
        .await?
        .into_iter()
        .map(|m| crate::models::VolumeMountBody {
            name: m.name,
            path: m.path,
        })
        .collect();
    Ok(Json(body))
}

/// `DELETE /sandboxes/{id}`: 204, or 404 when there is no such sandbox.
pub async fn kill(State(service): State<Service>, Path(id): Path<String>) -> Result<StatusCode> {
    service.delete(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT /sandboxes/{id}/network {allowOut?, denyOut?, rules?, allowInternetAccess?}` → 204: the
/// running sandbox's egress lists replaced whole on the service's one flow
/// ([`sandboxd_service::network_update`]): an omitted list is cleared, the rules are replaced where
/// the egress gateway is in the sandbox's path, and `allowInternetAccess` (the default for
/// destinations in neither list) and `allowPublicTraffic` are kept when omitted. The other keys of a create's `network` are refused
/// as there.
pub async fn update_network(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode> {
    let mut body: serde_json::Value = parse(&body)?;
    visible(&service, &id).await?;
    let egress = match body
        .as_object_mut()
        .and_then(|o| o.remove("allowInternetAccess"))
    {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Bool(b)) => Some(b),
        Some(_) => {
            return Err(E2bError::bad_request(
                "allowInternetAccess must be a boolean",
            ))
        }
    };
    let public_given = body.get("allowPublicTraffic").is_some_and(|v| !v.is_null());
    let lists = network_lists(Some(&body))?;
    service
        .update_egress(
            &id,
            sandboxd_service::network_update::EgressUpdate {
                egress,
                allow_out: lists.allow_out,
                deny_out: lists.deny_out,
                rules: lists.rules,
                public: public_given.then_some(lists.public),
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /sandboxes/{id}/timeout {timeout}`: the sandbox now expires `timeout` seconds from now.
pub async fn set_timeout(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode> {
    let req: TimeoutRequest = parse(&body)?;
    visible(&service, &id).await?;
    service
        .set_timeout(&id, Duration::from_secs(req.timeout), false)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /sandboxes/{id}/pause {memory?}`: 204; 409 when already paused. `memory: false` keeps only
/// the files (a stop); otherwise processes and memory are kept.
pub async fn pause(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode> {
    let req: PauseRequest = parse_optional(&body)?;
    let mode = match req.memory {
        Some(false) => PauseMode::Filesystem,
        _ => PauseMode::Memory,
    };
    visible(&service, &id).await?;
    // A sandbox paused either way is a conflict for both modes (`Service::pause_with`).
    service.pause_with(&id, mode).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /sandboxes/{id}/fork {timeout?, count?}`: 201 with one `{sandbox}` or `{error}` per fork
/// asked for (each succeeds or fails on its own); the checkpoint is taken once. A sandbox of the
/// namespace tier answers 400 naming the tier that forks.
pub async fn fork(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response> {
    let req: ForkRequest = parse_optional(&body)?;
    visible(&service, &id).await?;
    let made = service
        .fork_with_memory(
            &id,
            req.count.unwrap_or(1),
            req.timeout.unwrap_or(FORK_TIMEOUT_SECS),
        )
        .await?;
    let results: Vec<serde_json::Value> = made
        .into_iter()
        .map(|made| match made {
            Ok(sandbox) => serde_json::json!({ "sandbox": detail(&service, &sandbox) }),
            Err(e) => serde_json::json!({ "error": E2bError::from(e).body() }),
        })
        .collect();
    Ok((StatusCode::CREATED, Json(results)).into_response())
}

/// A fork's lifetime when the request names none (E2B's default).
const FORK_TIMEOUT_SECS: u64 = 15;

/// The body of `POST /sandboxes/{id}/fork`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ForkRequest {
    /// Lifetime of each fork, seconds.
    timeout: Option<u64>,
    /// How many forks.
    count: Option<u32>,
}

/// `POST /sandboxes/{id}/connect {timeout}` (timeout required).
pub async fn connect_v1(state: State<Service>, id: Path<String>, body: Bytes) -> Result<Response> {
    let req: ConnectRequest = parse(&body)?;
    if req.timeout.is_none() {
        return Err(E2bError::bad_request("timeout is required"));
    }
    connect(state, id, req).await
}

/// `POST /v2/sandboxes/{id}/connect {timeout?}`.
pub async fn connect_v2(state: State<Service>, id: Path<String>, body: Bytes) -> Result<Response> {
    let req: ConnectRequest = parse_optional(&body)?;
    connect(state, id, req).await
}

/// Connect: resumes a paused sandbox (201) or extends a running one's deadline (200); either way the
/// answer is the sandbox.
async fn connect(
    State(service): State<Service>,
    Path(id): Path<String>,
    req: ConnectRequest,
) -> Result<Response> {
    let sandbox = visible(&service, &id).await?;
    if req.memory == Some(false) && sandbox.state == SandboxState::Paused {
        // A cold boot from its files: the memory it was paused with is dropped first.
        service.pause_with(&id, PauseMode::Filesystem).await?;
    }
    let timeout = Duration::from_secs(req.timeout.unwrap_or(CONNECT_DEFAULT_TIMEOUT));
    let (sandbox, resumed) = service.e2b_connect(&id, timeout).await?;
    let status = if resumed {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(detail(&service, &sandbox))).into_response())
}

/// `POST /sandboxes/{id}/resume {timeout}` (older SDKs): 201 with the sandbox; 409 if it is running.
pub async fn resume(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response> {
    let req: ConnectRequest = parse_optional(&body)?;
    let sandbox = visible(&service, &id).await?;
    if sandbox.state == SandboxState::Running {
        return Err(E2bError::new(
            StatusCode::CONFLICT,
            format!("sandbox {id} is already running"),
        ));
    }
    let timeout = Duration::from_secs(req.timeout.unwrap_or(CONNECT_DEFAULT_TIMEOUT));
    let (sandbox, _) = service.e2b_connect(&id, timeout).await?;
    Ok((StatusCode::CREATED, Json(detail(&service, &sandbox))).into_response())
}

/// `GET /sandboxes/{id}/metrics?start&end`: the sandbox's usage samples within `start..=end` (Unix
/// seconds, each optional), oldest first, ending with one taken now unless `end` is past
/// ([`Service::usage_history`]).
pub async fn metrics(
    State(service): State<Service>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Vec<Metric>>> {
    let (mut start, mut end) = (None, None);
    for (key, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        let slot = match key.as_ref() {
            "start" => &mut start,
            "end" => &mut end,
            _ => continue,
        };
        let seconds: i64 = value.parse().map_err(|_| {
            E2bError::bad_request(format!(
                "{key} must be a Unix time in seconds, not {value:?}"
            ))
        })?;
        *slot = Some(seconds.saturating_mul(1000));
    }
    visible(&service, &id).await?;
    let samples = service.usage_history(&id, start, end).await?;
    Ok(Json(
        samples
            .into_iter()
            .map(|sample| Metric {
                timestamp: rfc3339(sample.at_ms),
                timestamp_unix: sample.at_ms / 1000,
                sample,
            })
            .collect(),
    ))
}

/// `GET /v2/sandboxes`: one page of running and paused sandboxes, the next page's token in
/// `x-next-token`. Query: `metadata=k%3Dv%26k2%3Dv2` (URL-encoded pairs), `state=running,paused`,
/// `limit`, `nextToken`, `template`, `startedAfter`, `order=asc`.
pub async fn list_v2(State(service): State<Service>, RawQuery(raw): RawQuery) -> Result<Response> {
    let query = ListQuery::parse(
        raw.as_deref(),
        &[
            SandboxState::Running,
            SandboxState::Paused,
            SandboxState::Stopped,
        ],
    )?;
    let (rows, next) = service.list(query.filter.clone()).await?;
    let body: Vec<SandboxBody> = rows
        .iter()
        .filter(|s| query.keeps(s))
        .map(SandboxBody::listed)
        .collect();
    let mut response = Json(body).into_response();
    if let Some(token) = next.and_then(|t| HeaderValue::from_str(&t).ok()) {
        response.headers_mut().insert("x-next-token", token);
    }
    Ok(response)
}

/// `GET /sandboxes` (older SDKs): every running sandbox, optionally filtered by `metadata`.
pub async fn list_v1(
    State(service): State<Service>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Vec<SandboxBody>>> {
    let mut query = ListQuery::parse(raw.as_deref(), &[SandboxState::Running])?;
    query.filter.limit = 1000;
    let mut out = Vec::new();
    loop {
        let (rows, next) = service.list(query.filter.clone()).await?;
        out.extend(
            rows.iter()
                .filter(|s| query.keeps(s))
                .map(SandboxBody::listed),
        );
        match next {
            Some(cursor) => query.filter.cursor = Some(cursor),
            None => return Ok(Json(out)),
        }
    }
}

/// A parsed listing query: what the store filters, and what is filtered after it.
#[derive(Debug, Default)]
struct ListQuery {
    filter: SandboxFilter,
    template: Option<String>,
    started_after: Option<i64>,
}

impl ListQuery {
    fn parse(raw: Option<&str>, default_states: &[SandboxState]) -> Result<Self> {
        let mut q = ListQuery::default();
        let pairs = raw
            .map(|r| {
                form_urlencoded::parse(r.as_bytes())
                    .into_owned()
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        for (key, value) in pairs {
            match key.as_str() {
                // `k=v&k2=v2`, each side percent-encoded once more (E2B's SDKs quote before encoding).
                "metadata" => {
                    for (k, v) in form_urlencoded::parse(value.as_bytes()) {
                        q.filter
                            .metadata
                            .push((percent_decode(&k), percent_decode(&v)));
                    }
                }
                "state" => {
                    for s in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                        // Paused with memory or to its files (stopped): both are E2B's `paused`.
                        let states: &[SandboxState] = match s {
                            "running" => &[SandboxState::Running],
                            "paused" => &[SandboxState::Paused, SandboxState::Stopped],
                            other => {
                                return Err(E2bError::bad_request(format!(
                                    "unknown state {other:?}: use running or paused"
                                )))
                            }
                        };
                        for state in states {
                            if !q.filter.states.contains(state) {
                                q.filter.states.push(*state);
                            }
                        }
                    }
                }
                "limit" => {
                    q.filter.limit = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .ok_or_else(|| E2bError::bad_request("limit must be between 1 and 1000"))?;
                }
                "nextToken" => {
                    if !valid_token(&value) {
                        return Err(E2bError::bad_request("invalid nextToken"));
                    }
                    q.filter.cursor = Some(value);
                }
                "template" => q.template = Some(value),
                "startedAfter" => {
                    q.started_after = Some(parse_timestamp(&value).ok_or_else(|| {
                        E2bError::bad_request("startedAfter must be an RFC 3339 timestamp")
                    })?);
                }
                "order" if value == "asc" => {}
                "order" => {
                    return Err(E2bError::bad_request(
                        "only order=asc (oldest first) is supported",
                    ))
                }
                // Newer SDKs may send more; unknown filters are not applied.
                _ => {}
            }
        }
        if q.filter.states.is_empty() {
            q.filter.states = default_states.to_vec();
        }
        Ok(q)
    }

    /// The filters the store does not apply.
    fn keeps(&self, s: &Sandbox) -> bool {
        self.template.as_ref().is_none_or(|t| *t == s.template)
            && self.started_after.is_none_or(|t| s.created_at >= t)
    }
}

/// A `nextToken` is a cursor this daemon issued: `<createdAt>:<sandboxId>`.
fn valid_token(token: &str) -> bool {
    token.split_once(':').is_some_and(|(at, id)| {
        at.parse::<i64>().is_ok()
            && !id.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    })
}

/// `%XX` sequences decoded (no `+` rule); invalid sequences are kept as they are.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_filters_decode_the_sdks_double_encoding() {
        // Python: urlencode({quote("team a"): quote("x&y")}) sent as the `metadata` parameter.
        let q = ListQuery::parse(
            Some("metadata=team%252520a%3Dx%252526y%26k%3Dv&state=running&limit=2"),
            &[],
        )
        .unwrap();
        assert_eq!(
            q.filter.metadata,
            [
                ("team a".to_string(), "x&y".to_string()),
                ("k".into(), "v".into())
            ]
        );
        assert_eq!(q.filter.states, [SandboxState::Running]);
        assert_eq!(q.filter.limit, 2);
    }

    #[test]
    fn states_default_and_accept_lists_or_repeats() {
        let all = [SandboxState::Running, SandboxState::Paused];
        assert_eq!(ListQuery::parse(None, &all).unwrap().filter.states, all);
        let q = ListQuery::parse(Some("state=paused&state=running,paused"), &[]).unwrap();
        assert_eq!(
            q.filter.states,
            [
                SandboxState::Paused,
                SandboxState::Stopped,
                SandboxState::Running
            ]
        );
        for bad in [
            "state=failed",
            "limit=0",
            "limit=x",
            "nextToken=garbage",
            "order=desc",
        ] {
            assert!(ListQuery::parse(Some(bad), &all).is_err(), "{bad}");
        }
        assert!(ListQuery::parse(Some("nextToken=17%3Aab-1&order=asc&future=1"), &all).is_ok());
    }

    #[test]
    fn percent_decoding_keeps_what_is_not_an_escape() {
        assert_eq!(percent_decode("a%20b"), "a b");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("a+b"), "a+b");
    }
}
