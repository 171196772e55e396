//! Daytona's process sessions (`/api/toolbox/{id}/process/session…`), translated onto the
//! service's shell sessions ([`sandboxd_service::sessions`]).
//!
//! - `POST /process/session {sessionId}` → 201 (409 when it exists); `GET /process/session` → every
//!   session with its commands; `GET /process/session/{sid}`; `DELETE /process/session/{sid}` → 204.
//! - `POST …/{sid}/exec {command, runAsync?|async?}` → 200 `{cmdId, output, stdout, stderr,
//!   exitCode}` once the command ended, or with `runAsync` 202 `{cmdId}` at once.
//! - `GET …/{sid}/command/{cid}` → `{id, command, exitCode?}`; `…/logs` → `{output, stdout,
//!   stderr}`, or with `follow=true` a WebSocket of binary frames, stdout prefixed `\x01\x01\x01`
//!   and stderr `\x02\x02\x02`, closed with 1000 once the command ended and all was sent.
//! - `POST …/{sid}/command/{cid}/input {data}` → 204 once written to the command's stdin; 410 once
//!   it ended.

use super::error::DaytonaError;
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_service::sessions::{CommandOutput, SessionCommand, SessionInput};
use sandboxd_service::Service;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a synchronous session command may run before the call gives up waiting.
const SYNC_WAIT: Duration = Duration::from_secs(600);
/// How often a followed command's files are read again.
const FOLLOW_POLL: Duration = Duration::from_millis(50);
const STDOUT_PREFIX: &[u8] = b"\x01\x01\x01";
const STDERR_PREFIX: &[u8] = b"\x02\x02\x02";

fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, DaytonaError> {
    serde_json::from_slice(body)
        .map_err(|e| DaytonaError::bad_request(format!("invalid JSON body: {e}")))
}

fn command_json(c: &SessionCommand) -> Value {
    let mut v = json!({ "id": c.id, "command": c.command });
    if let Some(code) = c.exit_code {
        v["exitCode"] = json!(code);
    }
    v
}

fn text(b: &Bytes) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn logs_json(out: &CommandOutput) -> Value {
    json!({
        "output": format!("{}{}", text(&out.stdout), text(&out.stderr)),
        "stdout": text(&out.stdout),
        "stderr": text(&out.stderr),
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateSession {
    session_id: String,
}

/// `POST /process/session`.
pub async fn create(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, DaytonaError> {
    let req: CreateSession = parse(&body)?;
    service.create_session(&id, &req.session_id).await?;
    Ok(StatusCode::CREATED)
}

async fn session_json(service: &Service, id: &str, sid: &str) -> Result<Value, DaytonaError> {
    let commands = service.session_commands(id, sid).await?;
    Ok(json!({
        "sessionId": sid,
        "commands": commands.iter().map(command_json).collect::<Vec<_>>(),
    }))
}

/// `GET /process/session`.
pub async fn list(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<Value>, DaytonaError> {
    let mut all = Vec::new();
    for sid in service.list_sessions(&id).await? {
        all.push(session_json(&service, &id, &sid).await?);
    }
    Ok(Json(Value::Array(all)))
}

/// `GET /process/session/{sid}`.
pub async fn get(
    State(service): State<Service>,
    Path((id, sid)): Path<(String, String)>,
) -> Result<Json<Value>, DaytonaError> {
    Ok(Json(session_json(&service, &id, &sid).await?))
}

/// `DELETE /process/session/{sid}`.
pub async fn delete(
    State(service): State<Service>,
    Path((id, sid)): Path<(String, String)>,
) -> Result<StatusCode, DaytonaError> {
    service.delete_session(&id, &sid).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecRequest {
    command: String,
    #[serde(default)]
    run_async: Option<bool>,
    #[serde(default, rename = "async")]
    var_async: Option<bool>,
}

/// `POST /process/session/{sid}/exec`.
pub async fn exec(
    State(service): State<Service>,
    Path((id, sid)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, DaytonaError> {
    let req: ExecRequest = parse(&body)?;
    let cid = service.session_exec(&id, &sid, &req.command).await?;
    if req.run_async.unwrap_or(false) || req.var_async.unwrap_or(false) {
        return Ok((StatusCode::ACCEPTED, Json(json!({ "cmdId": cid }))).into_response());
    }
    let out = service.session_wait(&id, &sid, &cid, SYNC_WAIT).await?;
    let mut answer = logs_json(&out);
    answer["cmdId"] = json!(cid);
    answer["exitCode"] = json!(out.exit_code);
    Ok(Json(answer).into_response())
}

/// `GET /process/session/{sid}/command/{cid}`.
pub async fn command(
    State(service): State<Service>,
    Path((id, sid, cid)): Path<(String, String, String)>,
) -> Result<Json<Value>, DaytonaError> {
    let commands = service.session_commands(&id, &sid).await?;
    let found = commands.iter().find(|c| c.id == cid).ok_or_else(|| {
        DaytonaError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("command {cid:?} of session {sid:?} not found"),
        )
    })?;
    Ok(Json(command_json(found)))
}

/// `GET /process/session/{sid}/command/{cid}/logs[?follow=true]`.
pub async fn logs(
    State(service): State<Service>,
    Path((id, sid, cid)): Path<(String, String, String)>,
    Query(query): Query<BTreeMap<String, String>>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, DaytonaError> {
    let out = service.session_output(&id, &sid, &cid).await?;
    let follow = query.get("follow").is_some_and(|f| f == "true" || f == "1");
    match (follow, upgrade) {
        (true, Ok(upgrade)) => {
            Ok(upgrade.on_upgrade(move |socket| follow_logs(service, id, sid, cid, socket)))
        }
        (true, Err(_)) => Err(DaytonaError::bad_request(
            "follow=true needs a WebSocket request",
        )),
        (false, _) => Ok(Json(logs_json(&out)).into_response()),
    }
}

/// Sends what the command writes as it writes it, until it ended.
async fn follow_logs(
    service: Service,
    id: String,
    sid: String,
    cid: String,
    mut socket: WebSocket,
) {
    let (mut sent_out, mut sent_err) = (0usize, 0usize);
    loop {
        let out = match service.session_output(&id, &sid, &cid).await {
            Ok(o) => o,
            Err(e) => {
                let reason = sandboxd_errors::chain(&e);
                let frame = CloseFrame {
                    code: 1011,
                    reason: reason.into(),
                };
                let _ = socket.send(Message::Close(Some(frame))).await;
                return;
            }
        };
        for (prefix, data, sent) in [
            (STDOUT_PREFIX, &out.stdout, &mut sent_out),
            (STDERR_PREFIX, &out.stderr, &mut sent_err),
        ] {
            if data.len() > *sent {
                let mut frame = prefix.to_vec();
                frame.extend_from_slice(&data[*sent..]);
                *sent = data.len();
                if socket.send(Message::Binary(frame.into())).await.is_err() {
                    return;
                }
            }
        }
        if out.exit_code.is_some() {
            let frame = CloseFrame {
                code: 1000,
                reason: "".into(),
            };
            let _ = socket.send(Message::Close(Some(frame))).await;
            return;
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

#[derive(Deserialize)]
struct Input {
    data: String,
}

/// `POST /process/session/{sid}/command/{cid}/input` → 204, 410 once the command ended.
pub async fn input(
    State(service): State<Service>,
    Path((id, sid, cid)): Path<(String, String, String)>,
    body: Bytes,
) -> Result<StatusCode, DaytonaError> {
    let req: Input = parse(&body)?;
    match service
        .session_input(&id, &sid, &cid, Bytes::from(req.data))
        .await?
    {
        SessionInput::Sent => Ok(StatusCode::NO_CONTENT),
        SessionInput::Ended => Err(DaytonaError::new(
            StatusCode::GONE,
            "gone",
            format!("command {cid} has ended: it takes no more input"),
        )),
    }
}
