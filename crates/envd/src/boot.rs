//! The boot handshake between the runtime (on the host) and `sandboxd-agent boot` (PID 1 of a new sandbox).
//!
//! The runtime clones a process into fresh mount, pid, net, uts and ipc namespaces and executes the agent
//! with two inherited descriptors: [`BOOT_SYNC_FD`], one end of a unix stream socket carrying
//! newline-delimited JSON [`BootMessage`]s, and [`AGENT_LISTEN_FD`], the listening socket the agent will
//! serve on (created by the runtime in a host directory the sandbox never sees).
//!
//! The conversation, in order:
//! 1. runtime → agent: [`BootMessage::Config`]; the agent builds the root filesystem, pivots into it, sets
//!    the hostname, and unshares a user namespace;
//! 2. agent → runtime: [`BootMessage::UserNamespaceReady`]; the runtime writes the uid/gid maps and
//!    finishes the host side (cgroup, network);
//! 3. runtime → agent: [`BootMessage::Go`]; the agent becomes uid 0 of its namespace, confines itself
//!    (no_new_privs, capabilities, seccomp) and answers
//! 4. agent → runtime: [`BootMessage::Ready`], after which no user instruction has run yet and the agent
//!    starts serving.
//!
//! Either side may send [`BootMessage::Failed`] instead of its next message; the other side gives up.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;

/// Descriptor number of the handshake socket in the booting agent.
pub const BOOT_SYNC_FD: i32 = 3;
/// Descriptor number of the agent's listening socket in the booting agent.
pub const AGENT_LISTEN_FD: i32 = 4;
/// Descriptor number, in a booting agent told [`RootfsPlan::idmapped_at`], of the user namespace the
/// lower layers are to be seen through (idmapped mounts: the layers' owners as this sandbox's ids).
pub const IDMAP_USERNS_FD: i32 = 5;

/// Everything the agent needs to finish building its sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BootConfig {
    /// Sandbox id, for logs.
    pub sandbox_id: String,
    /// Hostname inside the sandbox.
    pub hostname: String,
    /// The overlay root filesystem to mount and pivot into.
    pub rootfs: RootfsPlan,
    /// Bind mounts into the new root, in order.
    pub binds: Vec<BindMount>,
    /// First host uid/gid of the sandbox's id mapping (sandbox id 0 maps here).
    pub id_map_base: u32,
    /// The access token every agent call must carry.
    pub token: String,
    /// The user commands run as when a caller names none.
    pub default_user: String,
    /// Environment every command in the sandbox starts with.
    pub envs: HashMap<String, String>,
    /// The directory commands start in when the caller names none (an image's `WorkingDir`); `None`:
    /// the user's home.
    #[serde(default)]
    pub workdir: Option<String>,
    /// The daemon's callback socket as the agent sees it (inside the sandbox), if the daemon listens
    /// for call-home events ([`crate::callback`]); `None`: the agent reports nothing.
    #[serde(default)]
    pub callback_socket: Option<PathBuf>,
    /// Volumes to mount after the binds, in order; each seen through the id mapping of the lower
    /// layers when those are idmapped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeMount>,
    /// A fault the runtime injects for tests (only set by a daemon built with failpoints).
    #[serde(default)]
    pub fault: Option<BootFault>,
}

/// A volume to mount: a directory beneath `root`, opened without following any link.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VolumeMount {
    /// The volume's root on the host.
    pub root: PathBuf,
    /// The directory of the volume to mount, relative to `root` (empty: the root).
    #[serde(default)]
    pub subpath: String,
    /// Absolute path inside the sandbox.
    pub target: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
}

/// Faults a test can inject into a booting agent.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum BootFault {
    /// Finish the handshake, then exit before the first call home: the reporter dies before first
    /// contact.
    ExitBeforeReady,
}

/// Paths (on the host) of the overlay making up the sandbox's root filesystem.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RootfsPlan {
    /// Read-only lower layer (the template; for an image, its prepared top layer).
    pub lower: PathBuf,
    /// More read-only layers under `lower`, highest first (an image's layers); empty for `base`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub below: Vec<PathBuf>,
    /// The sandbox's private writable layer.
    pub upper: PathBuf,
    /// Overlayfs work directory, on the same filesystem as `upper`.
    pub work: PathBuf,
    /// Where the merged tree is mounted before `pivot_root` (an existing, empty directory).
    pub target: PathBuf,
    /// When set, the lower layers are not used as they are: each is cloned as an idmapped mount seen
    /// through the user namespace on [`IDMAP_USERNS_FD`] and attached under this directory (an
    /// existing one, in the agent's own mount namespace), and the overlay is made of those clones.
    /// `None`: the layers' owners already are the sandbox's ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idmapped_at: Option<PathBuf>,
}

/// One bind mount from the host into the sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BindMount {
    /// Host path.
    pub source: PathBuf,
    /// Absolute path inside the sandbox.
    pub target: PathBuf,
    /// Remount read-only after binding.
    pub read_only: bool,
}

/// One message of the handshake (one JSON document per line).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BootMessage {
    /// runtime → agent: the plan.
    Config(Box<BootConfig>),
    /// agent → runtime: the user namespace exists and waits for its id maps.
    UserNamespaceReady,
    /// runtime → agent: id maps, cgroup and network are in place.
    Go,
    /// agent → runtime: confined and about to serve.
    Ready,
    /// either way: the sender gave up at `stage`.
    Failed {
        /// The step that failed.
        stage: String,
        /// What went wrong.
        message: String,
    },
}

impl BootMessage {
    /// Encodes the message as one line of JSON, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        to_line(self)
    }

    /// Decodes one line (with or without its newline).
    pub fn from_line(line: &[u8]) -> Result<Self, serde_json::Error> {
        from_line(line)
    }
}

/// `value` as one line of JSON, newline included (JSON escapes every newline inside strings).
pub(crate) fn to_line(value: &impl Serialize) -> Vec<u8> {
    // Serializing these plain structs cannot fail.
    let mut line = serde_json::to_vec(value).unwrap_or_default();
    line.push(b'\n');
    line
}

/// One line of JSON (with or without its newline) as a `T`.
pub(crate) fn from_line<T: serde::de::DeserializeOwned>(
    line: &[u8],
) -> Result<T, serde_json::Error> {
    serde_json::from_slice(line.strip_suffix(b"\n").unwrap_or(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_as_single_lines() {
        let config = BootConfig {
            sandbox_id: "sb1".into(),
            hostname: "sb1".into(),
            rootfs: RootfsPlan {
                lower: "/l".into(),
                below: vec!["/l2".into(), "/l1".into()],
                upper: "/u".into(),
                work: "/w".into(),
                target: "/t".into(),
                idmapped_at: Some("/i".into()),
            },
            binds: vec![BindMount {
                source: "/usr".into(),
                target: "/usr".into(),
                read_only: true,
            }],
            id_map_base: 100_000,
            token: "tok\nen".into(),
            default_user: "user".into(),
            workdir: Some("/app".into()),
            envs: HashMap::from([("A".into(), "line1\nline2".into())]),
            callback_socket: Some("/.sandboxd/callback/daemon.sock".into()),
            volumes: vec![VolumeMount {
                root: "/state/layers/vol.v1/data".into(),
                subpath: "a/b".into(),
                target: "/data".into(),
                read_only: true,
            }],
            fault: Some(BootFault::ExitBeforeReady),
        };
        for msg in [
            BootMessage::Config(Box::new(config)),
            BootMessage::UserNamespaceReady,
            BootMessage::Go,
            BootMessage::Ready,
            BootMessage::Failed {
                stage: "mount".into(),
                message: "no".into(),
            },
        ] {
            let line = msg.to_line();
            assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
            assert_eq!(BootMessage::from_line(&line).unwrap(), msg);
        }
    }
}
