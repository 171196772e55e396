//! The values that cross the [`crate::Runtime`] boundary, and its error type.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// What the caller wants a sandbox to be.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SandboxSpec {
    /// Unique id: lowercase letters, digits and '-', 1 to 63 characters.
    pub id: String,
    /// Template name; the namespace runtime knows `base`.
    pub template: String,
    /// Resource limits.
    pub limits: ResourceLimits,
    /// The network slot leased to this sandbox by the caller; it fixes the sandbox's addresses.
    pub net_slot: u32,
    /// Whether the sandbox may reach the outside world.
    pub egress: bool,
    /// Environment every command in the sandbox starts with.
    pub envs: HashMap<String, String>,
    /// Access token the sandbox's agent demands on every call.
    pub agent_token: String,
}

/// Resource limits of one sandbox.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Memory limit in MiB.
    pub memory_mb: u64,
    /// CPU limit in thousandths of a CPU (1000 = one CPU).
    pub cpu_millis: u32,
    /// Maximum number of processes and threads.
    pub pids_max: u64,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        Self {
            memory_mb: 512,
            cpu_millis: 1000,
            pids_max: 512,
        }
    }
}

/// Lifecycle state as the runtime observes it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeState {
    /// Prepared, never started.
    Created,
    /// Its init is alive.
    Running,
    /// Was started, no longer runs (stopped, crashed, or killed).
    Stopped,
}

/// The addresses of a sandbox's veth pair.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetAddrs {
    /// The slot the addresses derive from.
    pub slot: u32,
    /// Host end of the pair.
    pub host: Ipv4Addr,
    /// Sandbox end (`eth0` inside).
    pub sandbox: Ipv4Addr,
    /// Prefix length of the point-to-point subnet.
    pub prefix: u8,
}

/// How to reach a sandbox's agent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AgentEndpoint {
    /// Unix socket on the host, in a directory the sandbox cannot see.
    pub socket: PathBuf,
    /// The token the agent demands.
    pub token: String,
}

/// What the runtime knows about one sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SandboxInfo {
    /// The spec it was created from.
    pub spec: SandboxSpec,
    /// Observed state.
    pub state: RuntimeState,
    /// Host pid of the sandbox's init while running.
    pub pid: Option<i32>,
    /// Network addresses.
    pub net: NetAddrs,
    /// Where its agent listens.
    pub agent: AgentEndpoint,
}

impl SandboxInfo {
    /// The sandbox id.
    pub fn id(&self) -> &str {
        &self.spec.id
    }
}

/// Errors of the runtime layer.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The sandbox id is not acceptable.
    #[error("invalid sandbox id {0:?}: use 1 to 63 lowercase letters, digits or '-'")]
    InvalidId(String),
    /// No sandbox with this id exists in the runtime.
    #[error("sandbox {0} not found")]
    NotFound(String),
    /// A sandbox with this id already exists.
    #[error("sandbox {0} already exists")]
    AlreadyExists(String),
    /// The template is unknown to this runtime.
    #[error("unknown template {0:?}")]
    UnknownTemplate(String),
    /// The spec asks for something this runtime cannot provide.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The network slot is outside the configured subnet.
    #[error("network slot {0} is outside the sandbox subnet")]
    SlotOutOfRange(u32),
    /// The host is missing something the runtime needs.
    #[error("host is not ready: {0}")]
    Host(String),
    /// A filesystem operation on the runtime's own state failed.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Setting up cgroup limits failed.
    #[error("cgroup")]
    Cgroup(#[from] crate::cgroup::CgroupError),
    /// Configuring the sandbox's network failed.
    #[error("network: {0}")]
    Network(String),
    /// Starting the sandbox's process failed.
    #[error("spawning the sandbox init")]
    Spawn(#[source] std::io::Error),
    /// The agent reported a failure while booting the sandbox.
    #[error("boot failed at {stage}: {message}")]
    Boot {
        /// Boot step that failed.
        stage: String,
        /// What the agent said.
        message: String,
    },
}

impl RuntimeError {
    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| RuntimeError::Io { what, path, source }
    }
}

/// Checks a sandbox id: 1 to 63 characters of `[a-z0-9-]`, not starting with '-'.
pub fn validate_id(id: &str) -> Result<(), RuntimeError> {
    let ok = !id.is_empty()
        && id.len() <= 63
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::InvalidId(id.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_escape_a_path_are_refused() {
        for bad in ["", "../x", "a/b", "A", "-a", ".", &"a".repeat(64)] {
            assert!(validate_id(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a", "sb-1", &"a".repeat(63)] {
            assert!(validate_id(good).is_ok(), "{good:?} refused");
        }
    }
}
