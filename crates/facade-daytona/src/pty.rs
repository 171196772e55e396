//! Daytona's PTY sessions (`/api/toolbox/{id}/process/pty…`), translated onto the service's
//! ([`sandboxd_service::pty`]).
//!
//! - `POST /process/pty {id, cwd?, envs?, cols?, rows?, lazyStart?}` → 201 `{sessionId}` (409 when
//!   the id is taken); `GET /process/pty` → `{sessions: [PtySessionInfo]}`;
//!   `GET /process/pty/{sid}` → `PtySessionInfo`; `DELETE /process/pty/{sid}` → 200;
//!   `POST /process/pty/{sid}/resize {cols, rows}` → `PtySessionInfo`, 410 once its process ended.
//! - WebSockets: `GET /process/pty/create-connect?id=&cols=&rows=&cwd=` makes the session and
//!   attaches in one step, its environment in the subprotocol token `X-Daytona-Pty-Envs~<base64url
//!   of a JSON object>`; `GET /process/pty/{sid}/connect` attaches to one that exists. The session
//!   is made (or found) before the upgrade is answered, so a taken id, a bad size or an unknown
//!   session is an ordinary error answer, which the SDK raises as its typed error.
//! - On the socket: first the text `{"type":"control","status":"connected"}`; then the terminal's
//!   bytes as binary frames, and the client's frames (binary or text) as keystrokes. When the
//!   process ends: `{"type":"control","status":"exited","exitCode":N}` (to a client that offered
//!   the `X-Daytona-Pty-Exit-Control` subprotocol), then a close 1000 whose reason is
//!   `{"exitCode":N}`. A client that goes away leaves the process running.

use super::error::DaytonaError;
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use base64::Engine;
use futures::{SinkExt, StreamExt};
use sandboxd_service::pty::{PtyInfo, PtyRequest, PtyResize};
use sandboxd_service::terminal::{Terminal, TerminalEnd, TerminalOutput};
use sandboxd_service::Service;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;

/// The subprotocol by which a client asks for the `exited` control message.
pub const EXIT_CONTROL: &str = "X-Daytona-Pty-Exit-Control";
/// The prefix of the subprotocol token carrying a create-connect's environment.
const ENVS_TOKEN: &str = "X-Daytona-Pty-Envs~";
/// Daytona's default window.
const DEFAULT_SIZE: (u16, u16) = (80, 24);

fn info_json(info: &PtyInfo) -> Value {
    json!({
        "id": info.id,
        "cwd": info.cwd,
        "envs": info.envs,
        "cols": info.cols,
        "rows": info.rows,
        "createdAt": info.created_at,
        "active": info.active,
        "lazyStart": info.lazy_start,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreatePty {
    id: Option<String>,
    cwd: Option<String>,
    #[serde(default)]
    envs: HashMap<String, String>,
    cols: Option<u16>,
    rows: Option<u16>,
    #[serde(default)]
    lazy_start: bool,
}

/// `POST /process/pty`.
pub async fn create(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), DaytonaError> {
    let req: CreatePty = serde_json::from_slice(&body)
        .map_err(|e| DaytonaError::bad_request(format!("invalid JSON body: {e}")))?;
    let sid = req
        .id
        .ok_or_else(|| DaytonaError::bad_request("a PTY session needs an id"))?;
    let (info, terminal) = service
        .create_pty(
            &id,
            PtyRequest {
                id: sid,
                cwd: req.cwd,
                envs: req.envs,
                cols: req.cols.unwrap_or(DEFAULT_SIZE.0),
                rows: req.rows.unwrap_or(DEFAULT_SIZE.1),
                lazy_start: req.lazy_start,
            },
        )
        .await?;
    // Nobody is attached yet: the process runs on, its output until then unread.
    drop(terminal);
    Ok((StatusCode::CREATED, Json(json!({ "sessionId": info.id }))))
}

/// `GET /process/pty`.
pub async fn list(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<Value>, DaytonaError> {
    let sessions: Vec<Value> = service
        .list_ptys(&id)
        .await?
        .iter()
        .map(info_json)
        .collect();
    Ok(Json(json!({ "sessions": sessions })))
}

/// `GET /process/pty/{sid}`.
pub async fn get(
    State(service): State<Service>,
    Path((id, sid)): Path<(String, String)>,
) -> Result<Json<Value>, DaytonaError> {
    Ok(Json(info_json(&service.pty_info(&id, &sid).await?)))
}

/// `DELETE /process/pty/{sid}`.
pub async fn delete(
    State(service): State<Service>,
    Path((id, sid)): Path<(String, String)>,
) -> Result<Json<Value>, DaytonaError> {
    service.kill_pty(&id, &sid).await?;
    Ok(Json(
        json!({ "message": format!("PTY session {sid} killed") }),
    ))
}

#[derive(Deserialize)]
struct Resize {
    cols: u16,
    rows: u16,
}

/// `POST /process/pty/{sid}/resize`.
pub async fn resize(
    State(service): State<Service>,
    Path((id, sid)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, DaytonaError> {
    let req: Resize = serde_json::from_slice(&body)
        .map_err(|e| DaytonaError::bad_request(format!("invalid JSON body: {e}")))?;
    match service.resize_pty(&id, &sid, req.cols, req.rows).await? {
        PtyResize::Resized(info) => Ok(Json(info_json(&info))),
        PtyResize::Ended(_) => Err(DaytonaError::new(
            StatusCode::GONE,
            "gone",
            format!("PTY session {sid} has ended"),
        )),
    }
}

type Upgrade = Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>;

fn websocket(upgrade: Upgrade) -> Result<WebSocketUpgrade, DaytonaError> {
    upgrade.map_err(|e| DaytonaError::bad_request(format!("a PTY connection is a WebSocket: {e}")))
}

/// The subprotocol tokens the client offered.
fn offered(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

/// The environment a create-connect carries in its subprotocol token, if any.
fn envs_of(tokens: &[String]) -> Result<HashMap<String, String>, DaytonaError> {
    let Some(encoded) = tokens.iter().find_map(|t| t.strip_prefix(ENVS_TOKEN)) else {
        return Ok(HashMap::new());
    };
    let bad = |why: String| DaytonaError::bad_request(format!("the {ENVS_TOKEN} token {why}"));
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded.trim_end_matches('='))
        .map_err(|e| bad(format!("is not base64url: {e}")))?;
    serde_json::from_slice(&json).map_err(|e| bad(format!("is not a JSON object of strings: {e}")))
}

#[derive(Deserialize)]
pub struct CreateConnect {
    id: Option<String>,
    cols: Option<u16>,
    rows: Option<u16>,
    cwd: Option<String>,
}

/// `GET /process/pty/create-connect` (a WebSocket).
pub async fn create_connect(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Query<CreateConnect>,
    headers: HeaderMap,
    upgrade: Upgrade,
) -> Result<Response, DaytonaError> {
    let upgrade = websocket(upgrade)?;
    let tokens = offered(&headers);
    let sid =
        q.id.ok_or_else(|| DaytonaError::bad_request("a PTY session needs an id"))?;
    let req = PtyRequest {
        id: sid,
        cwd: q.cwd,
        envs: envs_of(&tokens)?,
        cols: q.cols.unwrap_or(DEFAULT_SIZE.0),
        rows: q.rows.unwrap_or(DEFAULT_SIZE.1),
        lazy_start: false,
    };
    let (_, terminal) = service.create_pty(&id, req).await?;
    let terminal = terminal.ok_or_else(|| {
        DaytonaError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the PTY session was made without its terminal",
        )
    })?;
    Ok(answer(upgrade, &tokens, terminal))
}

/// `GET /process/pty/{sid}/connect` (a WebSocket).
pub async fn connect(
    State(service): State<Service>,
    Path((id, sid)): Path<(String, String)>,
    headers: HeaderMap,
    upgrade: Upgrade,
) -> Result<Response, DaytonaError> {
    let upgrade = websocket(upgrade)?;
    let terminal = service.connect_pty(&id, &sid).await?;
    Ok(answer(upgrade, &offered(&headers), terminal))
}

fn answer(upgrade: WebSocketUpgrade, tokens: &[String], terminal: Terminal) -> Response {
    let exit_control = tokens.iter().any(|t| t == EXIT_CONTROL);
    upgrade
        .protocols([EXIT_CONTROL])
        .on_upgrade(move |socket| pump(socket, terminal, exit_control))
}

fn control(body: Value) -> Message {
    Message::Text(body.to_string().into())
}

/// Carries bytes both ways until the process ends (then says how) or the client leaves (then the
/// process runs on).
async fn pump(socket: WebSocket, terminal: Terminal, exit_control: bool) {
    let (mut tx, mut rx) = socket.split();
    let input = terminal.input.clone();
    if tx
        .send(control(json!({"type": "control", "status": "connected"})))
        .await
        .is_err()
    {
        return;
    }
    let mut output = std::pin::pin!(terminal.output());
    loop {
        tokio::select! {
            out = output.next() => {
                let (code, reason) = match out {
                    Some(TerminalOutput::Data(b)) => {
                        if tx.send(Message::Binary(b)).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    Some(TerminalOutput::End(TerminalEnd::Exited(code))) => {
                        if exit_control {
                            let exited = json!({"type": "control", "status": "exited", "exitCode": code});
                            let _ = tx.send(control(exited)).await;
                        }
                        (1000, json!({ "exitCode": code }))
                    }
                    Some(TerminalOutput::End(TerminalEnd::Failed(message))) => {
                        let _ = tx.send(control(json!({"type": "control", "status": "error", "error": message}))).await;
                        (1011, json!({ "error": message }))
                    }
                    None => (1011, json!({ "error": "the terminal's output ended without an exit status" })),
                };
                let frame = CloseFrame { code, reason: reason.to_string().into() };
                let _ = tx.send(Message::Close(Some(frame))).await;
                return;
            }
            msg = rx.next() => {
                let typed = match msg {
                    Some(Ok(Message::Binary(b))) => b,
                    Some(Ok(Message::Text(t))) => Bytes::copy_from_slice(t.as_bytes()),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                };
                if let Err(e) = input.write(typed).await {
                    tracing::debug!(error = %sandboxd_errors::chain(&e), "PTY input refused");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_comes_from_its_subprotocol_token() {
        let encoded =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"A":"1","B":"x y"}"#);
        let tokens = vec![EXIT_CONTROL.to_string(), format!("{ENVS_TOKEN}{encoded}")];
        let envs = envs_of(&tokens).unwrap();
        assert_eq!(envs.get("A").map(String::as_str), Some("1"));
        assert_eq!(envs.get("B").map(String::as_str), Some("x y"));
        assert!(envs_of(&[EXIT_CONTROL.to_string()]).unwrap().is_empty());
        for bad in ["!!!", "WzFd"] {
            let e = envs_of(&[format!("{ENVS_TOKEN}{bad}")]).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn offered_tokens_are_split_and_trimmed() {
        let mut headers = HeaderMap::new();
        headers.insert("sec-websocket-protocol", "a, b".parse().unwrap());
        headers.append("sec-websocket-protocol", "c".parse().unwrap());
        assert_eq!(offered(&headers), ["a", "b", "c"]);
    }
}
