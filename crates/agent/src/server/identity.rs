//! A restored fork takes its new identity (`sandboxd_envd::init::Identity`) before it serves.
//!
//! Contract: on SIGHUP the server reads the identity file its configuration names, takes the token
//! (every later call must carry the new one, the old one is refused), writes the clone generation to
//! [`GENERATION_FILE`] for the sandbox's programs, and removes the file — its removal is the answer
//! the agent's init waits for before it opens the door. A SIGHUP without the file changes nothing.

use super::AppState;
use sandboxd_envd::init::{Identity, GENERATION_FILE};
use std::path::{Path, PathBuf};

/// Watches SIGHUP for the server's lifetime.
pub(super) fn watch(state: AppState, file: PathBuf) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match take(&state, &file) {
                Ok(Some(id)) => {
                    tracing::info!(sandbox_id = %id.sandbox_id, generation = id.generation, "took a new identity")
                }
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "cannot take the new identity"),
            }
        }
    });
    Ok(())
}

fn take(state: &AppState, file: &Path) -> std::io::Result<Option<Identity>> {
    let bytes = match std::fs::read(file) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let identity: Identity = serde_json::from_slice(&bytes).map_err(std::io::Error::other)?;
    *state
        .token
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = identity.token.clone();
    write_generation(identity.generation)?;
    std::fs::remove_file(file)?;
    Ok(Some(identity))
}

/// Writes `generation` to [`GENERATION_FILE`], readable by every user of the sandbox.
pub fn write_generation(generation: u64) -> std::io::Result<()> {
    let path = Path::new(GENERATION_FILE);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, format!("{generation}\n"))?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
}
