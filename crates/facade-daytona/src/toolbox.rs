//! Daytona's toolbox (`{toolboxProxyUrl}/{sandboxId}/…`, served at `/api/toolbox/{id}/…`),
//! translated onto the service's exec and code-interpreter flows.
//!
//! - `POST /process/execute {command, cwd?, envs?, timeout? (s)}` → `{exitCode, result}`: the
//!   command under `sh -c`, `result` its stdout then its stderr.
//! - `POST /process/code-run {code, language?, argv?, envs?, timeout? (s)}` → `{exitCode, result,
//!   artifacts: {charts}}`: the code as a script in a fresh process, as Daytona runs it (nothing
//!   carries over between runs; [`sandboxd_service::script`]): `result` its output then its
//!   errors (a traceback, exit code 1, when it raised), `charts` the figures it showed; python,
//!   javascript and bash, other languages are a 400; a run past `timeout` (default 600 s) is
//!   killed and answered 408 `PROCESS_EXECUTION_TIMEOUT` (errors in the daemon's shape,
//!   [`ToolboxError`]).
//! - `/process/interpreter/context` (create, list, delete) and the `run_code` WebSocket
//!   `/process/interpreter/execute`: the same kernels. The socket takes one frame `{code,
//!   contextId?, envs?, timeout?}`, sends `stdout`/`stderr`/`error` frames (a result's text as
//!   `stdout`), and closes with 1000 when done or 4008 when `timeout` (seconds, default 600)
//!   passed, which interrupts the code.
//! - `GET /user-home-dir`, `GET /work-dir` → `{dir}`.

use super::charts::daytona_chart;
use super::error::DaytonaError;
use super::models::{CodeRunRequest, CreateContext, ExecuteRequest, InterpreterExecute};
use super::toolbox_error::ToolboxError;
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::Response;
use axum::Json;
use futures::StreamExt;
use sandboxd_api_types as api;
use sandboxd_service::code::code_lines;
use sandboxd_service::script::{Script, ScriptLanguage};
use sandboxd_service::Service;
use serde_json::{json, Value};
use std::time::Duration;

/// Daytona's default execution timeout for `run_code`.
const DEFAULT_RUN_TIMEOUT: Duration = Duration::from_secs(600);
/// WebSocket close code for a run that timed out (Daytona's).
const CLOSE_TIMEOUT: u16 = 4008;
/// Where commands start and files are relative to.
const HOME: &str = sandboxd_service::pty::USER_HOME;

fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, DaytonaError> {
    serde_json::from_slice(body)
        .map_err(|e| DaytonaError::bad_request(format!("invalid JSON body: {e}")))
}

/// `POST /process/execute`.
pub async fn execute(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, DaytonaError> {
    let req: ExecuteRequest = parse(&body)?;
    let result = service
        .exec(
            &id,
            api::ExecRequest {
                cmd: vec!["/bin/sh".into(), "-c".into(), req.command],
                env: req.envs,
                cwd: req.cwd,
                timeout_ms: req.timeout.map(|s| s.saturating_mul(1000)),
                ..Default::default()
            },
        )
        .await?;
    Ok(Json(json!({
        "exitCode": result.exit_code,
        "result": format!("{}{}", result.stdout, result.stderr),
    })))
}

/// The interpreter's language for a Daytona language name (`python` when none is given).
fn interpreter_language(language: Option<&str>) -> Result<String, DaytonaError> {
    match language.map(str::to_ascii_lowercase).as_deref() {
        None | Some("") | Some("python") => Ok("python".into()),
        Some("bash") => Ok("bash".into()),
        Some(other) => Err(DaytonaError::bad_request(format!(
            "code in {other:?} cannot run here: sandboxd's interpreter runs python and bash"
        ))),
    }
}

/// `POST /process/code-run`.
pub async fn code_run(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ToolboxError> {
    const PATH: &str = "/process/code-run";
    let req: CodeRunRequest = parse(&body).map_err(|e| ToolboxError::from(e).at(PATH))?;
    let limit = req
        .timeout
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_RUN_TIMEOUT);
    let language = ScriptLanguage::parse(req.language.as_deref())
        .map_err(|e| ToolboxError::from(e).at(PATH))?;
    let script = Script {
        language,
        code: req.code,
        argv: req.argv.unwrap_or_default(),
        envs: req.envs,
        timeout: Some(limit),
    };
    let out = service
        .run_script(&id, script)
        .await
        .map_err(|e| ToolboxError::from(e).at(PATH))?;
    if out.timed_out {
        let message = format!("the code ran longer than {limit:?} and was killed");
        let timeout = axum::http::StatusCode::REQUEST_TIMEOUT;
        return Err(ToolboxError::new(timeout, "PROCESS_EXECUTION_TIMEOUT", message).at(PATH));
    }
    Ok(Json(json!({
        "exitCode": out.exit_code,
        "result": format!("{}{}", out.stdout, out.stderr),
        "artifacts": { "charts": out.charts.into_iter().map(daytona_chart).collect::<Vec<_>>() },
    })))
}

/// An interpreter context as Daytona describes one.
fn context_of(ctx: &Value) -> Value {
    json!({
        "id": ctx["id"],
        "cwd": ctx["cwd"],
        "language": ctx["language"],
        "createdAt": sandboxd_service::timestamps::rfc3339(sandboxd_store::unix_millis_now()),
        "active": true,
    })
}

/// `POST /process/interpreter/context`.
pub async fn create_context(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, DaytonaError> {
    let req: CreateContext = if body.iter().all(u8::is_ascii_whitespace) {
        CreateContext::default()
    } else {
        parse(&body)?
    };
    let language = interpreter_language(req.language.as_deref())?;
    let made = service
        .interpreter_call(
            &id,
            http::Method::POST,
            "/contexts",
            Some(json!({ "language": language, "cwd": req.cwd })),
        )
        .await?;
    Ok(Json(context_of(&made)))
}

/// `GET /process/interpreter/context`.
pub async fn list_contexts(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<Value>, DaytonaError> {
    let all = service
        .interpreter_call(&id, http::Method::GET, "/contexts", None)
        .await?;
    let contexts: Vec<Value> = all
        .as_array()
        .map(|a| a.iter().map(context_of).collect())
        .unwrap_or_default();
    Ok(Json(json!({ "contexts": contexts })))
}

/// `DELETE /process/interpreter/context/{context}`.
pub async fn delete_context(
    State(service): State<Service>,
    Path((id, context)): Path<(String, String)>,
) -> Result<Json<Value>, DaytonaError> {
    if context.is_empty()
        || !context
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(DaytonaError::bad_request("invalid context id"));
    }
    service
        .interpreter_call(
            &id,
            http::Method::DELETE,
            &format!("/contexts/{context}"),
            None,
        )
        .await?;
    Ok(Json(
        json!({ "message": format!("context {context} deleted") }),
    ))
}

/// `GET /process/interpreter/execute` (WebSocket).
pub async fn run_code_socket(
    State(service): State<Service>,
    Path(id): Path<String>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, DaytonaError> {
    // Unknown sandboxes are refused before the upgrade.
    service.get(&id).await?;
    Ok(upgrade.on_upgrade(move |socket| run_on_socket(service, id, socket)))
}

async fn run_on_socket(service: Service, id: String, mut socket: WebSocket) {
    let request = loop {
        match socket.recv().await {
            Some(Ok(Message::Text(text))) => {
                break serde_json::from_str::<InterpreterExecute>(&text)
            }
            Some(Ok(Message::Binary(bytes))) => break serde_json::from_slice(&bytes),
            Some(Ok(_)) => continue,
            _ => return,
        }
    };
    let close = |code: u16, reason: String| {
        Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        }))
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => {
            let _ = socket
                .send(close(1003, format!("invalid request: {e}")))
                .await;
            return;
        }
    };
    let limit = request
        .timeout
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_RUN_TIMEOUT);
    let run = api::RunCode {
        code: request.code,
        context_id: request.context_id,
        envs: request.envs,
        ..Default::default()
    };
    let mut lines = match service.run_code(&id, run).await {
        Ok(lines) => code_lines(lines),
        Err(e) => {
            let e = DaytonaError::from(e);
            let frame =
                json!({ "type": "error", "name": e.code, "value": e.message, "traceback": "" });
            let _ = socket.send(Message::Text(frame.to_string().into())).await;
            let _ = socket.send(close(1000, String::new())).await;
            return;
        }
    };
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(deadline);
    loop {
        let line = tokio::select! {
            l = lines.next() => l,
            _ = &mut deadline => {
                // Dropping the stream interrupts the code.
                drop(lines);
                let _ = socket.send(close(CLOSE_TIMEOUT, "execution timed out".into())).await;
                return;
            }
        };
        let Some(Ok(line)) = line else { break };
        {
            let frame = match line["type"].as_str() {
                Some(kind @ ("stdout" | "stderr")) => json!({ "type": kind, "text": line["text"] }),
                Some("error") => json!({
                    "type": "error",
                    "name": line["name"],
                    "value": line["value"],
                    "traceback": line["traceback"],
                }),
                Some("result") if line["is_main_result"] == true && line["text"].is_string() => {
                    json!({ "type": "stdout", "text": format!("{}\n", line["text"].as_str().unwrap_or_default()) })
                }
                _ => continue,
            };
            if socket
                .send(Message::Text(frame.to_string().into()))
                .await
                .is_err()
            {
                return;
            }
        }
    }
    let _ = socket.send(close(1000, String::new())).await;
}

/// `GET /user-home-dir`.
pub async fn user_home_dir(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<Value>, DaytonaError> {
    service.get(&id).await?;
    Ok(Json(json!({ "dir": HOME })))
}

/// `GET /work-dir`: the image's working directory, or the home.
pub async fn work_dir(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<Value>, DaytonaError> {
    Ok(Json(json!({ "dir": service.work_dir(&id).await? })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_python_and_bash_run() {
        assert_eq!(interpreter_language(None).unwrap(), "python");
        assert_eq!(interpreter_language(Some("Python")).unwrap(), "python");
        assert!(interpreter_language(Some("typescript")).is_err());
    }
}
