//! What a runtime that builds the sandbox itself hands the agent it starts as PID 1 (the gVisor tier:
//! `runsc` makes the root, the namespaces and the confinement, so there is no boot handshake).
//!
//! The runtime starts `sandboxd-agent init` with its standard input on a pipe carrying exactly one
//! line: an [`InitConfig`] as JSON. The agent reads it, closes its standard input, listens on
//! [`InitConfig::socket`] (a path in a directory the runtime shares with the host) and becomes the
//! sandbox's init. The token travels on the pipe, never in the environment or a file the sandbox
//! could read later.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;

/// Created by the agent's init in the directory of [`InitConfig::socket`] once it closed every host
/// socket of the sandbox, on the runtime's [`SUSPEND_SIGNAL`]: the sandbox may be checkpointed.
pub const SUSPENDED_MARKER: &str = "suspended";
/// Created by the runtime in that directory to have the agent listen on its socket again (after a
/// restore, or when a checkpoint is given up).
pub const RESUME_MARKER: &str = "resume";
/// The signal (its name, for `runsc kill`) that asks the agent's init to close its host sockets.
pub const SUSPEND_SIGNAL: &str = "USR2";

/// Where every process of a sandbox reads its clone generation: 0 for a sandbox booted afresh, one
/// more than its source's for a sandbox restored from another's checkpoint (a fork), so programs
/// that keep state clones must not share (random seeds, unique ids) know to renew it.
pub const GENERATION_FILE: &str = "/run/sandboxd/generation";

/// A new identity for a restored agent (a fork's), carried by the [`RESUME_MARKER`] file: it takes
/// it before it serves anything. An empty marker keeps the identity it had.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Identity {
    /// The sandbox's id.
    pub sandbox_id: String,
    /// The access token every call must carry from now on.
    pub token: String,
    /// The clone generation ([`GENERATION_FILE`]).
    pub generation: u64,
}

/// Everything the agent needs to serve in a sandbox its runtime built.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InitConfig {
    /// Sandbox id, for logs and for calling home.
    pub sandbox_id: String,
    /// Where to listen, as the agent sees it (inside the sandbox).
    pub socket: PathBuf,
    /// The access token every agent call must carry.
    pub token: String,
    /// The user commands run as when a caller names none.
    pub default_user: String,
    /// Environment every command in the sandbox starts with.
    pub envs: HashMap<String, String>,
    /// The directory commands start in when the caller names none; `None`: the user's home.
    #[serde(default)]
    pub workdir: Option<String>,
    /// The daemon's callback socket as the agent sees it, if the daemon listens for call-home events
    /// ([`crate::callback`]).
    #[serde(default)]
    pub callback_socket: Option<PathBuf>,
}

impl InitConfig {
    /// Encodes the configuration as its one line of JSON, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        crate::boot::to_line(self)
    }

    /// Decodes the line (with or without its newline).
    pub fn from_line(line: &[u8]) -> Result<Self, serde_json::Error> {
        crate::boot::from_line(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_travels_as_one_line() {
        let config = InitConfig {
            sandbox_id: "sb1".into(),
            socket: "/.sandboxd/sock/agent.sock".into(),
            token: "t\nwith a newline".into(),
            default_user: "user".into(),
            envs: HashMap::from([("A".into(), "1\n2".into())]),
            workdir: Some("/app".into()),
            callback_socket: None,
        };
        let line = config.to_line();
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(InitConfig::from_line(&line).unwrap(), config);
        assert!(InitConfig::from_line(b"{}").is_err());
    }
}
