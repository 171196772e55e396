//! The agent's envd protocol server: what the E2B SDK (and the daemon, through
//! [`sandboxd_envd::EnvdClient`]) talks to inside a sandbox.
//!
//! Contract:
//! - Serves HTTP/1.1 on the inherited unix socket: Connect RPCs `process.Process/{Start, Connect,
//!   List, SendInput, StreamInput, SendSignal, CloseStdin, Update}` and `filesystem.Filesystem/{Stat,
//!   ListDir, MakeDir, Move, Remove, WatchDir, CreateWatcher, GetWatcherEvents, RemoveWatcher}`, plus
//!   `GET/POST /files` and `GET /health`: the envd 0.6.4 surface (`sandboxd_envd::version::ENVD_VERSION`).
//! - Every route but `GET /health` requires the sandbox's access token in `X-Access-Token` (compared in
//!   constant time); `/files` alternatively accepts an E2B v1 URL signature made from that token.
//! - Each call acts as one user: `Authorization: Basic base64("<user>:")` (or `username=` on `/files`),
//!   else [`AgentConfig::default_user`]. Processes run with that user's uid, gid and groups; file
//!   operations run on a thread whose fsuid/fsgid are that user's, so the kernel checks permissions and
//!   new entries belong to the user.
//! - Process output streams with backpressure to every attached client; the agent holds a bounded
//!   amount of it per process and client. Processes outlive the calls that started them.
//! - On SIGTERM/SIGINT the server stops accepting, gives open calls a short grace period, kills the
//!   process groups it started, and returns.
//! - With an [`AgentConfig::callback`], [`run_blocking`] calls home ([`crate::callhome`]): it reports
//!   `environment-ready` once the listener is registered and the shutdown signals are in place (so
//!   calls are answered from then on), and `environment-failed` with the reason, before returning,
//!   when serving cannot start or ends in an error (best effort; a graceful shutdown reports nothing).

mod auth;
mod error;
mod files;
mod fs;
mod identity;
mod init;

pub use identity::write_generation;
mod process;
mod rpc;
mod users;

pub use error::ServerError;
pub use users::{User, UserDb};

use crate::callhome::{self, CallbackTarget};
use axum::routing::get;
use axum::Router;
use sandboxd_envd::callback::AgentEvent;
use sandboxd_retry::Policy;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// What the agent needs to serve a sandbox.
pub struct AgentConfig {
    /// The sandbox's access token; every call but `/health` must carry it. Also the credential the
    /// agent calls home with.
    pub token: String,
    /// The user calls run as when they name none.
    pub default_user: String,
    /// Sandbox-wide environment variables for every process.
    pub envs: HashMap<String, String>,
    /// Where processes start when the caller names no directory (an image's `WorkingDir`); `None`:
    /// the user's home.
    pub workdir: Option<String>,
    /// Where to report readiness (or failure to serve); `None`: report nothing.
    pub callback: Option<CallbackTarget>,
    /// A file the server reads a new [`sandboxd_envd::init::Identity`] from on SIGHUP (and then
    /// removes, to say it took it): how a restored fork learns its token. `None`: no such file.
    pub identity_file: Option<std::path::PathBuf>,
}

impl AgentConfig {
    /// The configuration of a sandbox's own agent: `token`, the `default_user`, `envs` and
    /// `workdir` commands start with, calling home to `callback_socket` (as the sandbox sees it)
    /// as sandbox `sandbox_id` when there is one.
    pub fn for_sandbox(
        sandbox_id: String,
        token: String,
        default_user: String,
        envs: HashMap<String, String>,
        workdir: Option<String>,
        callback_socket: Option<std::path::PathBuf>,
    ) -> AgentConfig {
        AgentConfig {
            token,
            default_user,
            envs,
            workdir,
            callback: callback_socket.map(|socket| CallbackTarget { socket, sandbox_id }),
            identity_file: None,
        }
    }
}

/// Tunables with production defaults; tests shorten them.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Idle time after which a process or watch stream gets a keepalive event, unless the client asks for
    /// another interval with `Keepalive-Ping-Interval` (default 50 s, the SDK's value).
    pub keepalive: Duration,
    /// How long open calls may run on after a shutdown signal (default 2 s).
    pub shutdown_grace: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            keepalive: Duration::from_secs(50),
            shutdown_grace: Duration::from_secs(2),
        }
    }
}

/// State shared by every handler.
pub(crate) struct Shared {
    /// The access token (a restored fork takes a new one, see [`AgentConfig::identity_file`]).
    pub token: std::sync::RwLock<String>,
    pub default_user: String,
    /// The environment commands start with (a warm pool's sandbox takes its creator's, [`init`]).
    pub envs: std::sync::RwLock<HashMap<String, String>>,
    pub workdir: Option<String>,
    pub opts: ServerOptions,
    pub processes: process::ProcessTable,
    pub watchers: fs::WatcherTable,
}

pub(crate) type AppState = Arc<Shared>;

impl Shared {
    /// The environment commands start with now.
    pub fn envs(&self) -> HashMap<String, String> {
        self.envs
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The access token calls must carry now.
    pub fn token(&self) -> String {
        self.token
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// Builds a single-thread tokio runtime and serves `listener` until SIGTERM/SIGINT, calling home if
/// `cfg.callback` says where; returns the process exit code.
///
/// One thread: an idle sandbox holds two tasks of the host's `kernel.pid_max` (its init and this),
/// not four, and a call is served without a hand-off between threads. Blocking work (compression,
/// archives) runs on `spawn_blocking`'s threads, which start on demand and end when idle.
pub fn run_blocking(listener: std::os::unix::net::UnixListener, mut cfg: AgentConfig) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .thread_name("agent-worker")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the agent runtime");
            return 1;
        }
    };
    let reporter = cfg.callback.take().map(|target| Reporter {
        target,
        token: cfg.token.clone(),
    });
    runtime.block_on(async move {
        let (listener, shutdown) = match start(listener) {
            Ok(started) => started,
            Err(reason) => {
                tracing::error!(error = %reason, "agent server cannot start");
                if let Some(r) = &reporter {
                    r.failed(reason).await;
                }
                return 1;
            }
        };
        if let Some(r) = reporter.clone() {
            tokio::spawn(async move { r.ready().await });
        }
        match serve_with(listener, cfg, ServerOptions::default(), shutdown).await {
            Ok(()) => 0,
            Err(e) => {
                tracing::error!(error = %e, "agent server failed");
                if let Some(r) = &reporter {
                    r.failed(format!("agent server failed: {e}")).await;
                }
                1
            }
        }
    })
}

/// Registers the inherited listener with tokio and subscribes to the shutdown signals; the reason
/// when either fails.
fn start(
    listener: std::os::unix::net::UnixListener,
) -> Result<
    (
        tokio::net::UnixListener,
        impl Future<Output = ()> + Send + 'static,
    ),
    String,
> {
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot make the agent socket non-blocking: {e}"))?;
    let listener = tokio::net::UnixListener::from_std(listener)
        .map_err(|e| format!("cannot register the agent socket: {e}"))?;
    let shutdown =
        shutdown_signal().map_err(|e| format!("cannot subscribe to shutdown signals: {e}"))?;
    Ok((listener, shutdown))
}

/// The agent's call-home reports, under the state-bearing policy.
#[derive(Clone)]
struct Reporter {
    target: CallbackTarget,
    token: String,
}

impl Reporter {
    async fn ready(&self) {
        let event = AgentEvent::EnvironmentReady {
            envd_version: sandboxd_envd::version::ENVD_VERSION.to_string(),
        };
        callhome::report(&self.target, &self.token, event, &Policy::state_bearing()).await;
    }

    async fn failed(&self, reason: String) {
        let event = AgentEvent::EnvironmentFailed { reason };
        callhome::report(&self.target, &self.token, event, &Policy::state_bearing()).await;
    }
}

/// Serves `listener` until SIGTERM or SIGINT.
pub async fn serve(listener: tokio::net::UnixListener, cfg: AgentConfig) -> std::io::Result<()> {
    serve_with(listener, cfg, ServerOptions::default(), shutdown_signal()?).await
}

/// Serves `listener` with `opts` until `shutdown` completes.
pub async fn serve_with(
    listener: tokio::net::UnixListener,
    cfg: AgentConfig,
    opts: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if cfg.token.is_empty() {
        tracing::warn!(
            "the agent has an empty access token: only callers sending an empty token pass"
        );
    }
    let grace = opts.shutdown_grace;
    let state: AppState = Arc::new(Shared {
        token: std::sync::RwLock::new(cfg.token),
        default_user: cfg.default_user,
        envs: std::sync::RwLock::new(cfg.envs),
        workdir: cfg.workdir,
        opts,
        processes: process::ProcessTable::default(),
        watchers: fs::WatcherTable::default(),
    });
    if let Some(file) = cfg.identity_file {
        identity::watch(state.clone(), file)?;
    }
    let app = router(state.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let mut stopped = stop_rx.clone();
    let result = tokio::select! {
        r = server => r,
        _ = async move {
            let _ = stopped.wait_for(|s| *s).await;
            tokio::time::sleep(grace).await;
        } => Ok(()),
    };
    state.processes.kill_all();
    tracing::info!("agent server stopped");
    result
}

fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/health",
            get(|| async { axum::http::StatusCode::NO_CONTENT }),
        )
        .merge(init::routes())
        .merge(process::routes())
        .merge(fs::routes())
        .merge(files::routes())
        .fallback(rpc::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        // Outermost: covers the early answers of the token check too.
        .layer(axum::middleware::from_fn(sandboxd_drain::drain_unread))
        .with_state(state)
}

/// Resolves when SIGTERM or SIGINT arrives.
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    })
}
