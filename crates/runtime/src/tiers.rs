//! Every tier behind one [`Runtime`]: the runtime the daemon programs against.
//!
//! Contract: [`Tiers`] sends a create to the tier its spec names and every later call on a sandbox to
//! the tier its record names, so the service, the facades and the reconcilers never branch on the tier.
//! A tier the host cannot run (no usable `runsc`) is not offered: [`Runtime::offers`] says why and how
//! to get it, and a create of it is refused before anything is made.

use crate::gvisor::GvisorRuntime;
use crate::namespace::NamespaceRuntime;
use crate::{
    cgroup, quota, EgressLists, Isolation, ResourceLimits, Runtime, RuntimeError, SandboxInfo,
    SandboxSpec, WritableLayer,
};
use std::sync::Arc;

/// The namespace tier, and the gVisor tier when the host has it.
pub struct Tiers {
    namespace: Arc<NamespaceRuntime>,
    gvisor: Result<GvisorRuntime, String>,
}

impl Tiers {
    /// The tiers on `namespace`'s machinery; `gvisor` is the gVisor tier, or why the host has none.
    pub fn new(namespace: Arc<NamespaceRuntime>, gvisor: Result<GvisorRuntime, String>) -> Self {
        Self { namespace, gvisor }
    }

    /// The namespace tier (host-wide operations: orphan reclaim, disk backend).
    pub fn namespace(&self) -> &NamespaceRuntime {
        &self.namespace
    }

    fn tier(&self, tier: Isolation) -> Result<&dyn Runtime, RuntimeError> {
        match tier {
            Isolation::Namespace => Ok(self.namespace.as_ref()),
            Isolation::Gvisor => match &self.gvisor {
                Ok(gvisor) => Ok(gvisor),
                Err(why) => Err(RuntimeError::Unsupported(format!(
                    "isolation \"gvisor\" is not available on this host: {why}"
                ))),
            },
        }
    }

    /// The tier sandbox `id`'s record names; the namespace tier for an id without a record (it
    /// answers not-found, or cleans up what a half-made create left).
    fn of(&self, id: &str) -> Result<&dyn Runtime, RuntimeError> {
        crate::validate_id(id)?;
        match self.namespace.paths(id).load()? {
            Some(p) => self.tier(p.spec.isolation),
            None => Ok(self.namespace.as_ref()),
        }
    }
}

#[async_trait::async_trait]
impl Runtime for Tiers {
    fn offers(&self, tier: Isolation) -> Result<(), RuntimeError> {
        self.tier(tier).map(|_| ())
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<SandboxInfo, RuntimeError> {
        self.tier(spec.isolation)?.create(spec).await
    }

    async fn start(&self, id: &str) -> Result<SandboxInfo, RuntimeError> {
        self.of(id)?.start(id).await
    }

    async fn stop(&self, id: &str) -> Result<(), RuntimeError> {
        self.of(id)?.stop(id).await
    }

    async fn destroy(&self, id: &str) -> Result<(), RuntimeError> {
        self.of(id)?.destroy(id).await
    }

    async fn adopt(&self, from: &str, to: &str) -> Result<SandboxInfo, RuntimeError> {
        self.of(from)?.adopt(from, to).await
    }

    async fn set_egress_lists(&self, id: &str, lists: EgressLists) -> Result<(), RuntimeError> {
        self.of(id)?.set_egress_lists(id, lists).await
    }

    async fn set_envs(
        &self,
        id: &str,
        envs: std::collections::HashMap<String, String>,
    ) -> Result<(), RuntimeError> {
        self.of(id)?.set_envs(id, envs).await
    }

    async fn slot_free(&self, slot: u32) -> Result<bool, RuntimeError> {
        self.namespace.slot_free(slot).await
    }

    fn volumes(&self) -> Result<Arc<crate::volumes::VolumeStore>, RuntimeError> {
        self.namespace.volumes()
    }

    async fn fork(
        &self,
        id: &str,
        clones: &[SandboxSpec],
    ) -> Result<Vec<Result<SandboxInfo, RuntimeError>>, RuntimeError> {
        self.of(id)?.fork(id, clones).await
    }

    async fn halt(&self, id: &str) -> Result<(), RuntimeError> {
        self.of(id)?.halt(id).await
    }

    async fn inspect(&self, id: &str) -> Result<Option<SandboxInfo>, RuntimeError> {
        self.namespace.inspect(id).await
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>, RuntimeError> {
        self.namespace.list().await
    }

    async fn pause(&self, id: &str) -> Result<(), RuntimeError> {
        self.of(id)?.pause(id).await
    }

    async fn resume(&self, id: &str) -> Result<(), RuntimeError> {
        self.of(id)?.resume(id).await
    }

    async fn disk_usage(&self, id: &str) -> Result<quota::DiskUsage, RuntimeError> {
        self.of(id)?.disk_usage(id).await
    }

    async fn writable_layer(&self, id: &str) -> Result<WritableLayer, RuntimeError> {
        self.of(id)?.writable_layer(id).await
    }

    async fn resize(&self, id: &str, limits: &ResourceLimits) -> Result<(), RuntimeError> {
        self.of(id)?.resize(id, limits).await
    }

    async fn stats(&self, id: &str) -> Result<cgroup::CgroupStats, RuntimeError> {
        self.of(id)?.stats(id).await
    }

    async fn connect_from(
        &self,
        id: &str,
        dst: std::net::SocketAddr,
    ) -> Result<tokio::net::TcpStream, RuntimeError> {
        self.of(id)?.connect_from(id, dst).await
    }
}
