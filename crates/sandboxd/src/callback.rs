//! The callback socket: where sandboxes' agents report (`sandboxd_envd::callback`).
//!
//! `<data-dir>/callback/` (mode 0755) holds one unix socket, `daemon.sock` (mode 0666: agents run as
//! unprivileged mapped ids). The runtime binds the directory read-only into every sandbox, so a
//! sandbox reaches the daemon with no network at all, and a restarted daemon's new socket shows through
//! the binds of sandboxes that booted before it. Requests are authenticated per sandbox by the
//! service ([`sandboxd_api::callbacks`]).

use anyhow::Context;
use sandboxd_envd::callback::SOCKET_NAME;
use sandboxd_service::Service;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Creates the callback directory under `data_dir` (if missing); returns its path.
pub fn prepare_dir(data_dir: &Path) -> anyhow::Result<PathBuf> {
    let dir = data_dir.join("callback");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("setting the mode of {}", dir.display()))?;
    Ok(dir)
}

/// Binds the callback socket in `dir` (replacing a previous daemon's) and serves the callback router
/// until the task is aborted.
pub fn serve(dir: &Path, service: Service) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let path = dir.join(SOCKET_NAME);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
    }
    let listener = tokio::net::UnixListener::bind(&path)
        .with_context(|| format!("listening on {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    let app = sandboxd_api::callbacks::router(service);
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the callback socket stopped serving");
        }
    }))
}
