//! Fork with memory: copies of a running sandbox, each a sandbox of its own that goes on from the
//! source's processes, memory and files (gVisor tier; `sandboxd_runtime::Runtime::fork`). (A fork
//! of the files alone, on any tier, is [`Service::fork`].)
//!
//! Each fork is recorded first as a create is (state `creating`, its own id, network slot, tokens
//! and expiry, everything else the source's), in one write for all of them, so the slots are
//! leased before the runtime is asked; the runtime then checkpoints the source once and restores
//! every fork from it. A fork the runtime made becomes `running` (its agent answers already: it
//! does not call home, it was restored after its source's did); one it could not make is undone
//! on its own (runtime, then row) and reported as that fork's error; when nothing could be copied
//! every row goes. A crash in between leaves `creating` rows the reconcilers fail and clean as they
//! do any interrupted create. The source keeps running with its id and expiry.

use crate::events::{emit, sandbox_data, SANDBOX_CREATED};
use crate::sandboxes::random_id;
use crate::{Service, ServiceError};
use sandboxd_runtime::{Isolation, SandboxSpec};
use sandboxd_store::{unix_millis_now, NewSandbox, Sandbox, SandboxState};

/// How many forks one call may ask for (E2B's limit).
pub const MAX_FORKS: u32 = 20;

impl Service {
    /// Forks running sandbox `key` `count` times (1..=[`MAX_FORKS`]), each fork living
    /// `timeout_sec` seconds (0: the source's timeout). `Err` when nothing could be forked;
    /// otherwise one result per fork.
    pub async fn fork_with_memory(
        &self,
        key: &str,
        count: u32,
        timeout_sec: u64,
    ) -> Result<Vec<Result<Sandbox, ServiceError>>, ServiceError> {
        if !(1..=MAX_FORKS).contains(&count) {
            return Err(ServiceError::InvalidRequest(format!(
                "count must be between 1 and {MAX_FORKS}"
            )));
        }
        if timeout_sec > self.config().max_timeout.as_secs() {
            return Err(ServiceError::InvalidRequest(format!(
                "timeout must be at most {}",
                self.config().max_timeout.as_secs()
            )));
        }
        let source = self.get(key).await?;
        if source.isolation != Isolation::Gvisor.as_str() {
            return Err(ServiceError::InvalidRequest(format!(
                "sandbox {} runs in the {} tier and cannot be forked: forks need the gvisor tier \
                 (create the sandbox with isolation \"gvisor\")",
                source.id, source.isolation
            )));
        }
        if source.state != SandboxState::Running {
            return Err(ServiceError::Conflict(format!(
                "sandbox {} is {}: only a running sandbox can be forked",
                source.id,
                source.state.as_str()
            )));
        }
        let running =
            self.runtime().inspect(&source.id).await?.ok_or_else(|| {
                ServiceError::NotFound(format!("sandbox {} not found", source.id))
            })?;
        let now = unix_millis_now();
        let lifetime_ms = match timeout_sec {
            0 => source.lifecycle.timeout_ms,
            secs => (secs as i64).saturating_mul(1000),
        };
        let rows: Vec<NewSandbox> = (0..count)
            .map(|_| NewSandbox {
                id: random_id("sb", 14),
                name: String::new(),
                state: SandboxState::Creating,
                template: source.template.clone(),
                cpu_millis: source.cpu_millis,
                memory_mb: source.memory_mb,
                metadata: source.metadata.clone(),
                env: source.env.clone(),
                network: source.network.clone(),
                agent_token: random_id("", 40),
                created_at: now,
                expires_at: (lifetime_ms > 0).then(|| now.saturating_add(lifetime_ms)),
                lifecycle: sandboxd_store::Lifecycle {
                    timeout_ms: lifetime_ms,
                    ..source.lifecycle
                },
                image: source.image.clone(),
                disk_mb: source.disk_mb,
                owner: String::new(),
                isolation: source.isolation.clone(),
            })
            .collect();
        let slots = self.config().net_slots;
        let recorded = rows.clone();
        let source_id = source.id.clone();
        let (leased, created) = self
            .writer()
            .write(move |tx| {
                let mut leased = Vec::with_capacity(recorded.len());
                let mut created = Vec::with_capacity(recorded.len());
                // A fork mounts what its source mounts, recorded like a create's mounts.
                let mounts = tx.sandbox_mounts(&source_id)?;
                for row in recorded {
                    let id = row.id.clone();
                    tx.insert_sandbox(row)?;
                    for mount in &mounts {
                        tx.insert_mount(&sandboxd_store::VolumeMountRecord {
                            sandbox_id: id.clone(),
                            ..mount.clone()
                        })?;
                    }
                    leased.push(tx.lease_slot(&id, slots, now)?.slot);
                    let data = tx.get_sandbox_by_id(&id)?.map(|s| sandbox_data(&s));
                    created.push(emit(
                        tx,
                        SANDBOX_CREATED,
                        Some(&id),
                        data.unwrap_or_default(),
                    )?);
                }
                Ok((leased, created))
            })
            .await?;
        self.publish(created);
        let mut specs = Vec::with_capacity(rows.len());
        for (row, slot) in rows.iter().zip(leased) {
            let slot = match self.free_slot(&row.id, slot).await {
                Ok(slot) => slot,
                Err(e) => return Err(self.undo_forks(&rows, e).await),
            };
            let base = self.config().net_slot_base;
            specs.push(SandboxSpec {
                id: row.id.clone(),
                net_slot: base + slot,
                id_range: Some(base + slot),
                agent_token: row.agent_token.clone(),
                ..running.spec.clone()
            });
        }
        let made = match self.runtime().fork(&source.id, &specs).await {
            Ok(made) => made,
            Err(e) => return Err(self.undo_forks(&rows, e.into()).await),
        };
        crate::failpoints::hold("fork.after-restore").await;
        let mut results = Vec::with_capacity(made.len());
        for (row, made) in rows.iter().zip(made) {
            results.push(match made {
                Ok(info) => {
                    // Its copies of the source's terminals: their callers are the source's.
                    let agent =
                        sandboxd_envd::EnvdClient::new(&info.agent.socket, &info.agent.token);
                    let all = crate::orphan_terminals::Which::All;
                    self.end_terminals(&row.id, Some(agent), all).await;
                    self.mark_forked(&row.id, &info).await
                }
                Err(e) => Err(self.undo_create(&row.id, e.into()).await),
            });
        }
        Ok(results)
    }

    /// Moves fork `id` to `running`, storing where the runtime put it.
    async fn mark_forked(
        &self,
        id: &str,
        info: &sandboxd_runtime::SandboxInfo,
    ) -> Result<Sandbox, ServiceError> {
        let moved = self
            .move_with_endpoint(id, SandboxState::Running, info)
            .await?;
        if !moved {
            let e = ServiceError::StartFailed {
                id: id.to_string(),
                reason: "it was deleted while being forked".into(),
            };
            return Err(self.undo_create(id, e).await);
        }
        self.get(id).await
    }

    /// Undoes every fork of `rows` (nothing could be copied); returns `e` to answer with.
    async fn undo_forks(&self, rows: &[NewSandbox], e: ServiceError) -> ServiceError {
        for row in rows {
            let _ = self
                .undo_create(&row.id, ServiceError::InvalidRequest(e.to_string()))
                .await;
        }
        e
    }
}
