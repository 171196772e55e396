//! Where sandboxes actually run.
//!
//! [`Runtime`] is the contract the daemon programs against: create, start, stop, destroy, inspect and
//! list sandboxes, pause and resume them in place, and read their resource usage. The runtime is the *authority* for what runs (the store is the authority for what
//! should run); [`Runtime::list`] after a restart is how a fresh daemon adopts what is already running.
//!
//! [`namespace::NamespaceRuntime`] is the embedded default: user, pid, mount, net, uts and ipc namespaces,
//! an overlay root filesystem, cgroup limits ([`cgroup`], v1 and v2), seccomp, and a veth pair per sandbox,
//! with the agent (`sandboxd-agent`) as every sandbox's init, and a disk quota on every sandbox's
//! writable layer ([`quota`]: XFS/ext4 project quotas or btrfs qgroups).
//!
//! [`gvisor::GvisorRuntime`] is the second tier: the same sandboxes behind gVisor's user-space kernel
//! (`runsc`), on the namespace runtime's host machinery. [`tiers::Tiers`] puts both behind one
//! [`Runtime`], sending each call to the tier the sandbox's [`Isolation`] names.

pub mod cgroup;
pub mod gvisor;
pub mod namespace;
pub mod quota;
mod spares;
pub mod tiers;
mod types;
pub mod volumes;

pub use namespace::dns::{NameError, NamePattern};
pub use quota::DiskUsage;
pub use types::*;

/// The operations every isolation tier provides.
///
/// All methods are idempotent where that makes sense: destroying an unknown sandbox succeeds, starting a
/// running one returns it unchanged. Implementations must be safe to call concurrently for different ids;
/// callers serialize operations on one id.
/// What a sandbox wrote to its root filesystem, as it lies on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritableLayer {
    /// The overlay upper directory.
    pub path: std::path::PathBuf,
    /// The host id of the sandbox's root: an owner `id_base + k` on disk is id `k` in the sandbox.
    pub id_base: u32,
}

#[async_trait::async_trait]
pub trait Runtime: Send + Sync + 'static {
    /// Whether this runtime can run sandboxes of `tier`; when it cannot,
    /// [`RuntimeError::Unsupported`] saying why and how to get it. A create of a tier the runtime
    /// does not offer is refused with that error before anything is made.
    fn offers(&self, tier: Isolation) -> Result<(), RuntimeError> {
        match tier {
            Isolation::Namespace => Ok(()),
            other => Err(RuntimeError::Unsupported(format!(
                "isolation \"{other}\" is not available in this runtime"
            ))),
        }
    }
    /// Prepares a sandbox (its writable layer and persisted state) without starting it.
    async fn create(&self, spec: &SandboxSpec) -> Result<SandboxInfo, RuntimeError>;
    /// Boots a created or stopped sandbox; returns once its agent is confined and accepting connections.
    async fn start(&self, id: &str) -> Result<SandboxInfo, RuntimeError>;
    /// Kills every process of the sandbox, keeping its writable layer.
    async fn stop(&self, id: &str) -> Result<(), RuntimeError>;
    /// Stops the sandbox and removes everything it had. Unknown ids succeed.
    async fn destroy(&self, id: &str) -> Result<(), RuntimeError>;
    /// Whether network slot `slot` is free on the host (no other process holds its addresses or its
    /// interface name); a runtime without host networking says yes.
    async fn slot_free(&self, slot: u32) -> Result<bool, RuntimeError> {
        let _ = slot;
        Ok(true)
    }
    /// Ends every process of the sandbox as fast as it can, leaving the rest of its teardown (cgroup,
    /// network, layer) to a later [`Runtime::destroy`]. Unknown ids succeed.
    async fn halt(&self, id: &str) -> Result<(), RuntimeError> {
        self.stop(id).await.or_else(|e| match e {
            RuntimeError::NotFound(_) => Ok(()),
            e => Err(e),
        })
    }
    /// What the runtime observes about one sandbox; `None` when it has no trace of it.
    async fn inspect(&self, id: &str) -> Result<Option<SandboxInfo>, RuntimeError>;
    /// Every sandbox the runtime has a trace of, running or not.
    async fn list(&self) -> Result<Vec<SandboxInfo>, RuntimeError>;
    /// Freezes every process of the sandbox in place (processes and memory are kept) and returns once
    /// the kernel reports them frozen. Pausing a paused sandbox succeeds.
    async fn pause(&self, id: &str) -> Result<(), RuntimeError> {
        Err(RuntimeError::Unsupported(format!(
            "pausing sandbox {id} is not available in this runtime"
        )))
    }
    /// Lets a paused sandbox's processes run again. Resuming a running sandbox succeeds.
    async fn resume(&self, id: &str) -> Result<(), RuntimeError> {
        Err(RuntimeError::Unsupported(format!(
            "resuming sandbox {id} is not available in this runtime"
        )))
    }
    /// Copies running sandbox `id` into one new sandbox per spec of `clones` (each with its own id,
    /// network slot and token): one live checkpoint, then a restore per clone with a copy of the
    /// source's writable layer; the source keeps running. `Err` when nothing could be copied (no
    /// clone was made); otherwise one result per clone, each succeeding or failing on its own (a
    /// failed clone leaves nothing behind).
    async fn fork(
        &self,
        id: &str,
        clones: &[SandboxSpec],
    ) -> Result<Vec<Result<SandboxInfo, RuntimeError>>, RuntimeError> {
        let _ = clones;
        Err(RuntimeError::Unsupported(format!(
            "sandbox {id} cannot be forked: forks need the gVisor tier (create it with isolation \"gvisor\")"
        )))
    }
    /// Gives running or created sandbox `from` the id `to` (a warm pool's sandbox, booted ahead,
    /// taken by a create): every later call names it `to`, and nothing answers to `from`; inside,
    /// its hostname becomes `to`. Its processes, addresses, token and limits are untouched; its
    /// cgroup and writable layer keep the names they were made with. One rename on disk: a crash
    /// leaves it under one id or the other.
    async fn adopt(&self, from: &str, to: &str) -> Result<SandboxInfo, RuntimeError> {
        let _ = to;
        Err(RuntimeError::Unsupported(format!(
            "sandbox {from} cannot be adopted under another id in this runtime"
        )))
    }
    /// Replaces running sandbox `id`'s egress default and lists with `lists`, at once and for
    /// what it starts from now on (its connections already open are not cut): its firewall rules
    /// in one transaction, its default route, and its resolver, its own DNS forwarder exactly
    /// when the new lists name domains. Its egress gateway, if it has one, stays. Setting what it
    /// has changes nothing.
    async fn set_egress_lists(&self, id: &str, lists: EgressLists) -> Result<(), RuntimeError> {
        let _ = lists;
        Err(RuntimeError::Unsupported(format!(
            "the egress lists of sandbox {id} cannot change in this runtime"
        )))
    }
    /// Records `envs` as the environment sandbox `id`'s agent starts with from now on (its next
    /// boot); the running agent is told apart, through its own API, so nothing here touches a
    /// process.
    async fn set_envs(
        &self,
        id: &str,
        envs: std::collections::HashMap<String, String>,
    ) -> Result<(), RuntimeError> {
        let _ = envs;
        Err(RuntimeError::Unsupported(format!(
            "the environment of sandbox {id} cannot change in this runtime"
        )))
    }
    /// Disk usage and limit of the sandbox's writable layer (running or not); `Unsupported` when the
    /// runtime does not measure it (no quota backend, or a sandbox made without one).
    async fn disk_usage(&self, id: &str) -> Result<quota::DiskUsage, RuntimeError> {
        Err(RuntimeError::Unsupported(format!(
            "disk usage of sandbox {id} is not available in this runtime"
        )))
    }
    /// The directory holding everything the sandbox wrote to its root filesystem (its overlay upper
    /// layer, in overlayfs form), for committing it as an image layer; read it only while the sandbox
    /// is stopped or paused.
    async fn writable_layer(&self, id: &str) -> Result<WritableLayer, RuntimeError> {
        Err(RuntimeError::Unsupported(format!(
            "the writable layer of sandbox {id} is not available in this runtime"
        )))
    }
    /// Gives the sandbox `limits`, running or stopped: a running sandbox's processes get the CPU and
    /// memory limits at once, its writable layer the disk limit, and every later start all of them.
    /// Which changes to allow (grow only, say) is the caller's.
    async fn resize(&self, id: &str, limits: &ResourceLimits) -> Result<(), RuntimeError> {
        let _ = limits;
        Err(RuntimeError::Unsupported(format!(
            "resizing sandbox {id} is not available in this runtime"
        )))
    }
    /// The host storage of volumes ([`volumes`]); `Unsupported` in a runtime without any.
    fn volumes(&self) -> Result<std::sync::Arc<volumes::VolumeStore>, RuntimeError> {
        Err(RuntimeError::Unsupported(
            "volumes are not available in this runtime".into(),
        ))
    }
    /// Current resource usage and limits of the sandbox's processes.
    async fn stats(&self, id: &str) -> Result<cgroup::CgroupStats, RuntimeError> {
        Err(RuntimeError::Unsupported(format!(
            "usage statistics of sandbox {id} are not available in this runtime"
        )))
    }

    /// A TCP connection to `dst` opened from inside the running sandbox's network, as the
    /// sandbox's own would be (the egress gateway's upstream side).
    async fn connect_from(
        &self,
        id: &str,
        dst: std::net::SocketAddr,
    ) -> Result<tokio::net::TcpStream, RuntimeError> {
        let _ = dst;
        Err(RuntimeError::Unsupported(format!(
            "connections from sandbox {id}'s network are not available in this runtime"
        )))
    }
}
