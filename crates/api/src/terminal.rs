//! `GET /v1/sandboxes/{id}/terminal`: a PTY in the sandbox over a WebSocket (`sbx shell`, the console).
//!
//! Query: `cols` and `rows` (default 80×24), `cmd` (repeated, one per argument; none runs a login
//! shell), `user`, `cwd`. Messages are those of [`api::TerminalControl`] and [`api::TerminalNotice`]:
//! binary frames are the terminal's bytes both ways; the server's last message is the notice of how
//! it ended, then a close. The terminal opens before the upgrade is answered, so a bad query, an
//! unknown sandbox or a paused one is an ordinary HTTP error, never a socket that closes at once. A
//! client that goes away hangs up the terminal (its process is killed).

use crate::error::Error;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use sandboxd_api_types as api;
use sandboxd_service::terminal::{TerminalEnd, TerminalInput, TerminalOutput, TerminalRequest};
use sandboxd_service::Service;

/// Open a terminal in the sandbox (a WebSocket).
#[utoipa::path(get, path = "/v1/sandboxes/{id}/terminal",
    params(("id" = String, Path, description = "id or name"),
        ("cols" = Option<u16>, Query, description = "1–1000; default 80"),
        ("rows" = Option<u16>, Query, description = "1–1000; default 24"),
        ("cmd" = Option<Vec<String>>, Query, description = "the command, one parameter per argument; default a login shell"),
        ("user" = Option<String>, Query), ("cwd" = Option<String>, Query)),
    responses((status = 101, description = "switching to the terminal's WebSocket"),
        (status = 400, body = api::ApiError), (status = 401, body = api::ApiError),
        (status = 404, body = api::ApiError), (status = 409, body = api::ApiError)))]
pub async fn open(
    State(service): State<Service>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, Error> {
    let upgrade = upgrade.map_err(|e| {
        Error::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("a terminal is a WebSocket: {e}"),
        )
    })?;
    let req = parse_query(query.as_deref().unwrap_or(""))?;
    let terminal = service.open_terminal(&id, req).await?;
    let input = terminal.input.clone();
    // A browser offers its key as a subprotocol beside this one, and needs one chosen.
    let upgrade = upgrade.protocols(["sandboxd.terminal"]);
    Ok(upgrade.on_upgrade(move |socket| pump(socket, input, terminal.output())))
}

/// The terminal's request from the query string.
fn parse_query(query: &str) -> Result<TerminalRequest, Error> {
    let bad = |m: String| Error::new(StatusCode::BAD_REQUEST, "invalid_request", m);
    let mut req = TerminalRequest {
        cols: 80,
        rows: 24,
        ..Default::default()
    };
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let number = |v: &str| {
            v.parse::<u16>()
                .map_err(|_| bad(format!("{key} must be a number from 1 to 1000, got {v:?}")))
        };
        match key.as_ref() {
            "cols" => req.cols = number(&value)?,
            "rows" => req.rows = number(&value)?,
            "cmd" => req.cmd.push(value.into_owned()),
            "user" => req.user = Some(value.into_owned()),
            "cwd" => req.cwd = Some(value.into_owned()),
            other => return Err(bad(format!("unknown query parameter {other:?}"))),
        }
    }
    Ok(req)
}

/// Carries bytes both ways until the terminal ends (then sends its notice) or the client leaves (then
/// hangs it up); a terminal cut off from its process (by a pause, say) is hung up too, as the client
/// cannot come back to it.
async fn pump(
    socket: WebSocket,
    input: TerminalInput,
    output: impl futures::Stream<Item = TerminalOutput> + Send + 'static,
) {
    let (mut tx, mut rx) = socket.split();
    let mut output = std::pin::pin!(output);
    loop {
        tokio::select! {
            out = output.next() => {
                let notice = match out {
                    Some(TerminalOutput::Data(b)) => {
                        if tx.send(Message::Binary(b)).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    Some(TerminalOutput::End(TerminalEnd::Exited(code))) => {
                        api::TerminalNotice::Exit { exit_code: code }
                    }
                    Some(TerminalOutput::End(TerminalEnd::Failed(message))) => {
                        api::TerminalNotice::Error { message }
                    }
                    None => api::TerminalNotice::Error {
                        message: "the terminal's output ended without an exit status".into(),
                    },
                };
                let text = serde_json::to_string(&notice).unwrap_or_default();
                let _ = tx.send(Message::Text(text.into())).await;
                let _ = tx.send(Message::Close(None)).await;
                // Cut off (a pause, a broken stream) while the process may run: nobody can reach
                // it again.
                if matches!(notice, api::TerminalNotice::Error { .. }) {
                    break;
                }
                return;
            }
            msg = rx.next() => {
                let result = match msg {
                    Some(Ok(Message::Binary(b))) => input.write(b).await,
                    Some(Ok(Message::Text(t))) => match serde_json::from_str(t.as_str()) {
                        Ok(api::TerminalControl::Resize { cols, rows }) => input.resize(cols, rows).await,
                        Err(e) => Err(sandboxd_service::ServiceError::InvalidRequest(format!("not a terminal control message: {e}"))),
                    },
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => Ok(()),
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                };
                if let Err(e) = result {
                    tracing::debug!(error = %sandboxd_errors::chain(&e), "terminal input refused");
                }
            }
        }
    }
    input.hang_up().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_names_size_command_user_and_directory() {
        let req = parse_query("cols=120&rows=40&cmd=sh&cmd=-c&cmd=echo%20hi&user=root&cwd=%2Ftmp")
            .unwrap();
        assert_eq!((req.cols, req.rows), (120, 40));
        assert_eq!(req.cmd, ["sh", "-c", "echo hi"]);
        assert_eq!(
            (req.user.as_deref(), req.cwd.as_deref()),
            (Some("root"), Some("/tmp"))
        );
        let defaults = parse_query("").unwrap();
        assert_eq!(
            (defaults.cols, defaults.rows, defaults.cmd.len()),
            (80, 24, 0)
        );
        for bad in ["cols=wide", "rows=-1", "cols=70000", "shell=zsh"] {
            assert!(parse_query(bad).is_err(), "{bad}");
        }
    }
}
