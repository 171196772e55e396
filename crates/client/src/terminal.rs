//! Terminals: [`Client::terminal`] opens `GET /v1/sandboxes/{id}/terminal`, a WebSocket to a PTY in
//! the sandbox, and splits it into a [`TerminalWriter`] (keystrokes, window sizes) and a
//! [`TerminalReader`] (output, then how it ended). An error answer before the upgrade (a bad size, an
//! unknown sandbox) is the same [`ClientError::Api`] any other call returns.

use crate::types::{TerminalControl, TerminalNotice};
use crate::{Client, ClientError};
use bytes::Bytes;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// What to open.
#[derive(Debug, Clone)]
pub struct TerminalOptions {
    /// The command and its arguments; empty runs a login shell.
    pub cmd: Vec<String>,
    pub cols: u16,
    pub rows: u16,
    pub user: Option<String>,
    pub cwd: Option<String>,
}

impl Default for TerminalOptions {
    fn default() -> Self {
        TerminalOptions {
            cmd: Vec::new(),
            cols: 80,
            rows: 24,
            user: None,
            cwd: None,
        }
    }
}

/// One thing a terminal said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminalEvent {
    /// Bytes it wrote.
    Output(Bytes),
    /// How it ended; nothing follows.
    Ended(TerminalNotice),
}

/// The sending half of a terminal.
pub struct TerminalWriter(SplitSink<Socket, Message>);

/// The receiving half of a terminal.
pub struct TerminalReader(SplitStream<Socket>);

impl TerminalWriter {
    /// Sends keystrokes.
    pub async fn write(&mut self, data: impl Into<Bytes>) -> Result<(), ClientError> {
        self.send(Message::Binary(data.into())).await
    }

    /// Tells the terminal its window's new size.
    pub async fn resize(&mut self, cols: u16, rows: u16) -> Result<(), ClientError> {
        let text = serde_json::to_string(&TerminalControl::Resize { cols, rows })
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.send(Message::Text(text.into())).await
    }

    /// Closes the socket: the daemon hangs up the terminal.
    pub async fn close(&mut self) -> Result<(), ClientError> {
        self.send(Message::Close(None)).await
    }

    async fn send(&mut self, msg: Message) -> Result<(), ClientError> {
        self.0.send(msg).await.map_err(websocket)
    }
}

impl TerminalReader {
    /// The next thing the terminal said; `Ended` is the last, and a socket that closes without it is
    /// [`ClientError::Protocol`].
    pub async fn next(&mut self) -> Result<TerminalEvent, ClientError> {
        loop {
            match self.0.next().await {
                Some(Ok(Message::Binary(b))) => return Ok(TerminalEvent::Output(b)),
                Some(Ok(Message::Text(t))) => {
                    return serde_json::from_str(t.as_str())
                        .map(TerminalEvent::Ended)
                        .map_err(|e| ClientError::Protocol(format!("terminal notice: {e}")))
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                Some(Ok(Message::Close(_))) | None => {
                    return Err(ClientError::Protocol(
                        "the terminal closed without saying how it ended".into(),
                    ))
                }
                Some(Err(e)) => return Err(websocket(e)),
            }
        }
    }
}

fn websocket(e: tungstenite::Error) -> ClientError {
    ClientError::WebSocket(Box::new(e))
}

impl Client {
    /// Opens a terminal in sandbox `id`.
    pub async fn terminal(
        &self,
        id: &str,
        opts: &TerminalOptions,
    ) -> Result<(TerminalWriter, TerminalReader), ClientError> {
        let mut url = self.sandbox_endpoint(id, &["terminal"])?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("cols", &opts.cols.to_string())
                .append_pair("rows", &opts.rows.to_string());
            for arg in &opts.cmd {
                q.append_pair("cmd", arg);
            }
            if let Some(user) = &opts.user {
                q.append_pair("user", user);
            }
            if let Some(cwd) = &opts.cwd {
                q.append_pair("cwd", cwd);
            }
        }
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        url.set_scheme(scheme)
            .map_err(|()| ClientError::InvalidUrl {
                url: url.to_string(),
                reason: "cannot carry a WebSocket".into(),
            })?;
        let mut request = url.as_str().into_client_request().map_err(websocket)?;
        let bearer = HeaderValue::from_str(&format!("Bearer {}", self.token))
            .map_err(|e| ClientError::InvalidArgument(format!("token: {e}")))?;
        request.headers_mut().insert("authorization", bearer);
        let socket = match tokio_tungstenite::connect_async(request).await {
            Ok((socket, _)) => socket,
            Err(tungstenite::Error::Http(resp)) => {
                let status = resp.status().as_u16();
                let body = resp.body().as_deref().unwrap_or_default();
                return Err(ClientError::from_error_body(status, body));
            }
            Err(e) => return Err(websocket(e)),
        };
        let (tx, rx) = socket.split();
        Ok((TerminalWriter(tx), TerminalReader(rx)))
    }
}
