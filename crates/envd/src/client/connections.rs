//! [`AgentConnections`]: HTTP/1.1 connections to agents' sockets kept open between calls, for the
//! clients given them ([`super::EnvdClient::with_connections`]).
//!
//! A call on a new connection costs the agent an `accept`, a connection's setup and a `close`, and
//! the caller a `connect` and a handshake: about a tenth of a millisecond each way here, against a
//! command round trip of about one and a half. The pool is hyper's own (`hyper_util`'s client), on a
//! connector that dials the socket a call's URI names.
//!
//! Contract:
//! - A connection carries one call at a time. It goes back to the pool only once its response was
//!   read to the end: a response dropped half-read, a request body that broke off, or a connection
//!   the agent closed never carries another call.
//! - At most [`MAX_IDLE_PER_AGENT`] idle connections per socket, each closed once unused for
//!   [`IDLE_TIMEOUT`]: an idle sandbox soon holds none, and its agent no state for one.
//! - A call that a kept connection could not even start to send (the agent closed it meanwhile) is
//!   sent on a new connection; a call that was sent, even in part, is never sent again.
//! - Connections and the pool's one idle timer run on the tokio runtime of the call that made them:
//!   a process makes one pool per runtime (the daemon, one).

use super::Body;
use crate::Error;
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::future::Ready;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::UnixStream;

/// How long an unused connection stays open.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle connections kept per agent socket; calls beyond them at once get connections of their own,
/// closed when done.
pub const MAX_IDLE_PER_AGENT: usize = 2;

/// Kept connections to agents, shared by every client given them; cheap to clone.
#[derive(Clone)]
pub struct AgentConnections {
    client: Client<UnixConnector, Body>,
}

impl std::fmt::Debug for AgentConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConnections").finish_non_exhaustive()
    }
}

impl Default for AgentConnections {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentConnections {
    /// An empty pool.
    pub fn new() -> Self {
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_max_idle_per_host(MAX_IDLE_PER_AGENT)
            .pool_timer(TokioTimer::new())
            .build(UnixConnector);
        AgentConnections { client }
    }

    /// Sends `req` (its URI a path) to the agent at `socket`, on a kept connection when one is idle.
    pub(super) async fn send(
        &self,
        socket: &Path,
        mut req: Request<Body>,
    ) -> Result<Response<Incoming>, Error> {
        let path = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        *req.uri_mut() = format!("http://{}{path}", authority_of(socket))
            .parse()
            .map_err(|e: http::uri::InvalidUri| Error::Request(e.into()))?;
        self.client.request(req).await.map_err(|e| {
            if e.is_connect() {
                Error::Connect {
                    path: socket.to_path_buf(),
                    source: std::io::Error::other(e),
                }
            } else {
                Error::Exchange(e)
            }
        })
    }
}

/// The URI authority naming socket `path`: its bytes in hex, a valid host whatever the path holds.
fn authority_of(path: &Path) -> String {
    hex::encode(path.as_os_str().as_bytes())
}

/// The socket an authority of [`authority_of`] names.
fn socket_of(uri: &Uri) -> std::io::Result<PathBuf> {
    let host = uri.host().unwrap_or_default();
    let bytes = hex::decode(host).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not an agent socket's authority: {host:?} ({e})"),
        )
    })?;
    Ok(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
}

/// Dials the unix socket a URI names ([`authority_of`]).
#[derive(Clone, Copy, Debug)]
struct UnixConnector;

impl tower_service::Service<Uri> for UnixConnector {
    type Response = TokioIo<UnixStream>;
    type Error = std::io::Error;
    type Future = Ready<std::io::Result<TokioIo<UnixStream>>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        // A unix socket's connect completes at once, or fails at once.
        std::future::ready(
            socket_of(&uri)
                .and_then(|path| super::connect(&path))
                .map(TokioIo::new),
        )
    }
}

#[cfg(test)]
mod tests;
