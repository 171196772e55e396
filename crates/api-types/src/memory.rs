//! What keeps a sandbox's memory: pausing it (`POST /v1/sandboxes/{id}/pause`, and where a paused
//! sandbox's memory then is) and forking it (`POST /v1/sandboxes/{id}/fork`).

use crate::{ApiError, Sandbox};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Where a paused sandbox's memory is kept, which decides what it survives.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PausedMemory {
    /// Frozen in place in the host's RAM (the namespace tier): kept while the host runs, lost on a
    /// host reboot, and still counted against the host's memory.
    Ram,
    /// A checkpoint on disk under the daemon's data dir (the gVisor tier): the memory is freed, and
    /// the sandbox resumes where it was after a daemon restart or a host reboot.
    Disk,
}

/// `POST /v1/sandboxes/{id}/pause`: what the pause keeps. An empty body keeps the memory.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PauseRequest {
    /// `memory` (default): processes and memory are kept, and a resume goes on where they were.
    /// `filesystem`: only the files are kept — the sandbox is stopped, and a start or resume boots
    /// it again on them.
    #[serde(default)]
    pub mode: PauseMode,
}

/// What a pause keeps.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PauseMode {
    /// Processes, memory and files.
    #[default]
    Memory,
    /// Files only: a stop.
    Filesystem,
}

impl PauseMode {
    /// Whether this is the default, [`PauseMode::Memory`].
    pub fn is_memory(&self) -> bool {
        *self == PauseMode::Memory
    }
}

/// `POST /v1/sandboxes/{id}/fork`: copies of a running gVisor sandbox, memory and all.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ForkRequest {
    /// How many forks, 1 to 20; default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 20)]
    pub count: Option<u32>,
    /// Lifetime of each fork in seconds; default: the source's timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_sec: Option<u64>,
}

/// One fork's outcome: exactly one of `sandbox` and `error`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct ForkResult {
    /// The fork, running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
    /// Why this fork failed (the others are not affected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
}

/// `POST /v1/sandboxes/{id}/fork`'s answer: one result per fork asked for.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct ForkResults {
    /// In the order asked.
    pub forks: Vec<ForkResult>,
}
