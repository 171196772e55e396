//! The TCP forwarders behind `protocol: "tcp"` exposures: one listener per exposed host port, carrying
//! bytes to the sandbox's port. The store's `exposed_ports` row is the promise; a forwarder is its
//! installation, and exists only while this daemon runs (start-up reinstalls them).
//!
//! Installs are serialized ([`Forwarders::install_turn`]): concurrent exposes of one port each try to
//! install its forwarder, and without a turn the second bind of the same host port fails with
//! `EADDRINUSE` against its twin's listener.

use sandboxd_proxy::{TcpForwarder, Upstream};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;

/// Installed forwarders by (sandbox id, sandbox port).
#[derive(Default)]
pub struct Forwarders {
    map: Mutex<HashMap<(String, u16), TcpForwarder>>,
    turn: tokio::sync::Mutex<()>,
}

impl Forwarders {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u16), TcpForwarder>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The turn to install (and, on failure, to roll back) one forwarder; hold it across both.
    pub async fn install_turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// Whether the exposure has its forwarder.
    pub fn installed(&self, sandbox_id: &str, port: u16) -> bool {
        self.map().contains_key(&(sandbox_id.to_string(), port))
    }

    /// Listens on `listen` and forwards to `upstream`; replaces nothing (an installed one is kept).
    pub async fn install(
        &self,
        sandbox_id: &str,
        port: u16,
        listen: SocketAddr,
        upstream: Upstream,
    ) -> std::io::Result<()> {
        if self.installed(sandbox_id, port) {
            return Ok(());
        }
        fail::fail_point!("expose.forwarder", |_| Err(std::io::Error::other(
            "failpoint expose.forwarder"
        )));
        let forwarder = TcpForwarder::bind(listen, upstream).await?;
        self.map()
            .entry((sandbox_id.to_string(), port))
            .or_insert(forwarder);
        Ok(())
    }

    /// Stops the forwarder of one exposure.
    pub fn remove(&self, sandbox_id: &str, port: u16) {
        self.map().remove(&(sandbox_id.to_string(), port));
    }

    /// Stops every forwarder of a sandbox.
    pub fn remove_sandbox(&self, sandbox_id: &str) {
        self.map().retain(|(id, _), _| id != sandbox_id);
    }
}
