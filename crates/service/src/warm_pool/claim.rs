//! A create's claim on a warm pool: it takes an offered sandbox, adopts it under its own id and
//! records it in one write (the contract is the parent module's, **Claiming** and **Orphans**).

use super::PoolEntry;
use crate::events::{emit, sandbox_data, SANDBOX_CREATED, SANDBOX_RUNNING};
use crate::sandboxes::{CreatePlan, Prepared};
use crate::timing::step;
use crate::{Service, ServiceError};
use sandboxd_runtime::{ResourceLimits, SandboxInfo};
use sandboxd_store::{unix_millis_now, NewSandbox, Sandbox, SandboxState};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

impl Service {
    /// Makes sandbox `new` from a ready sandbox of `template`'s pool, if one is free; `None` when
    /// none is (or the one taken would not take the create), and the create is made cold.
    ///
    /// The booted sandbox is taken in this process first ([`super::WarmPools::take`]). Then two
    /// things overlap, for the write's commit is the longest step of a claim: the runtime adopts the
    /// sandbox under the create's id and gives it its limits and environment, while one write admits
    /// the create, inserts its row, claims the entry ([`sandboxd_store::WriteTx::claim_pool_entry`])
    /// and marks it `running`. The create answers once both are done.
    /// - A write refused (a per-key limit, its name taken) destroys what was adopted; an entry no
    ///   longer there to claim, or an adoption that failed before anything was written, makes the
    ///   create cold.
    /// - An adoption that failed after the write undoes the row (`sandbox.failed`) and fails the
    ///   create: its id was written, so it cannot be made cold under it.
    ///
    /// [`super::WarmPools::adopting`] is held throughout, so the reconciler neither takes the
    /// adopted sandbox for an orphan (no row yet) nor the row for a lost sandbox (not renamed yet).
    /// A daemon killed meanwhile leaves an adopted sandbox without a row (an orphan, destroyed at
    /// its restart), or a `running` row whose sandbox is still under its pool id (settled `lost`
    /// at the restart, the pooled sandbox destroyed as an orphan); it answered nothing.
    pub(crate) async fn create_pooled(
        &self,
        template: &str,
        new: NewSandbox,
        plan: &CreatePlan,
        prepared: &Prepared,
    ) -> Result<Option<Sandbox>, ServiceError> {
        // A create past its key's limit was refused by its `prepare`, before it took anything.
        let limits = self.config().key_limits;
        let _adopting = self.pools().adopting.read().await;
        let Some(entry) = self.pools().take(template) else {
            return Ok(None);
        };
        // The pool is one short whatever becomes of this create.
        self.pools().wake_after_claim();
        let id = new.id.clone();
        let entry_id = entry.id.clone();
        // The write first: it is queued before the adoption blocks this task, and commits on the
        // writer's thread meanwhile.
        let admit = async {
            crate::failpoints::hold("create.before-admit").await;
            step(
                "admit",
                self.writer()
                    .write(move |tx| admit_pooled(tx, limits, new, &entry_id)),
            )
            .await
        };
        let adopt = async {
            crate::failpoints::hold("create.adopting").await;
            if crate::failpoints::fails("create.adopt") {
                return Err(ServiceError::StartFailed {
                    id: id.clone(),
                    reason: "failpoint create.adopt".into(),
                });
            }
            self.adopt_pooled(&id, &entry, plan, prepared).await
        };
        let (written, adopted) = tokio::join!(admit, adopt);
        let written = match written {
            // The entry was no longer there to claim (nothing in this process hands one entry to
            // two creates, so no path is known to reach this): the write rolled back whole, and the
            // create is made cold rather than answered with a store error.
            Err(sandboxd_store::StoreError::NotFound { kind, .. })
                if kind == sandboxd_store::warm_pool::READY_POOL_ENTRY =>
            {
                tracing::warn!(sandbox_id = %id, pool_id = %entry.id, "a taken warm-pool entry was gone at its claim; the create is made cold");
                self.discard_adopted(&entry.id, &id).await;
                return Ok(None);
            }
            written => written.map_err(ServiceError::from).and_then(|w| w),
        };
        match (written, adopted) {
            (Ok((row, events)), Ok(made)) => {
                self.remember_endpoint(&row, made);
                self.publish(events);
                self.count_pool_claim(template, true);
                Ok(Some(row))
            }
            (Err(e), _) => {
                self.discard_adopted(&entry.id, &id).await;
                Err(e)
            }
            (Ok(_), Err(e)) => {
                tracing::warn!(sandbox_id = %id, pool_id = %entry.id, error = %crate::error::chain(&e), "a pooled sandbox could not be adopted after its create was written; the create fails");
                // Whichever id it answers to: the rename may not have happened.
                if let Err(d) = self.runtime().destroy(&entry.id).await {
                    tracing::warn!(pool_id = %entry.id, error = %crate::error::chain(&ServiceError::from(d)), "cannot destroy a pooled sandbox that was not adopted");
                }
                Err(self.undo_row(&id, e).await)
            }
        }
    }

    /// Caches where adopted sandbox `row` is (`made`, the runtime's word), so its first command
    /// reads no more than a cold one's, and stores it behind the answer: were it lost, the next
    /// lookup would read it from the runtime again ([`Service::endpoint`]).
    fn remember_endpoint(&self, row: &Sandbox, made: SandboxInfo) {
        self.endpoint_of(row, crate::ports::observed_endpoint(&made));
        let svc = self.clone();
        tokio::spawn(async move { svc.record_endpoint(&made).await });
    }

    /// Gives pooled sandbox `entry` (`ready`, taken) sandbox `id`'s name, limits and environment.
    /// Its agent takes the environment while the runtime renames it: the agent is reached through
    /// its socket's directory held open ([`path_across_renames`]), whatever that directory is named.
    async fn adopt_pooled(
        &self,
        id: &str,
        entry: &PoolEntry,
        plan: &CreatePlan,
        prepared: &Prepared,
    ) -> Result<SandboxInfo, ServiceError> {
        let pooled =
            self.runtime()
                .inspect(&entry.id)
                .await?
                .ok_or_else(|| ServiceError::StartFailed {
                    id: id.to_string(),
                    reason: format!("its pooled sandbox {} is gone", entry.id),
                })?;
        let (dir, socket) =
            path_across_renames(&pooled.agent.socket).map_err(|e| ServiceError::StartFailed {
                id: id.to_string(),
                reason: format!("its pooled agent's socket cannot be opened: {e}"),
            })?;
        let client = sandboxd_envd::EnvdClient::new(&socket, &pooled.agent.token);
        let envs: std::collections::HashMap<_, _> = prepared.envs.clone().into_iter().collect();
        // An agent booted with the create's environment already (the pool's is the template's,
        // and most creates add none) is not asked again.
        let booted_with_it = pooled.spec.envs == envs;
        let init = async {
            if booted_with_it {
                return Ok(());
            }
            let init = tokio::time::timeout(self.config().ready_deadline, client.init(envs));
            step("init", init)
                .await
                .map_err(|_| ServiceError::StartFailed {
                    id: id.to_string(),
                    reason: "its pooled agent did not take its environment in time".into(),
                })?
                .map_err(ServiceError::Agent)
        };
        // The agent's request first: it is on its way, served by the daemon's other threads, while
        // the runtime's adoption (file writes, the hostname) blocks this one.
        let (inited, made) = tokio::join!(init, step("adopt", self.runtime().adopt(&entry.id, id)));
        drop(dir);
        let made = made?;
        inited?;
        // Pooled sandboxes boot with the default policy, which sends nothing out.
        if plan.network.egress != crate::network::EgressPolicy::default().egress {
            // Its lists are the default's (`poolable`): empty.
            let lists = sandboxd_runtime::EgressLists {
                egress: plan.network.egress,
                ..Default::default()
            };
            step("egress", self.runtime().set_egress_lists(id, lists)).await?;
        }
        if (entry.cpu_millis, u64::from(entry.memory_mb)) != (plan.cpu_millis, plan.memory_mb) {
            let limits = ResourceLimits {
                memory_mb: plan.memory_mb,
                cpu_millis: plan.cpu_millis,
                pids_max: ResourceLimits::default().pids_max,
                disk_mb: plan.disk_mb,
            };
            step("resize", self.runtime().resize(id, &limits)).await?;
        }
        Ok(made)
    }

    /// Destroys pooled sandbox `entry_id`, adopted (or half adopted) as `id`, and forgets its entry.
    async fn discard_adopted(&self, entry_id: &str, id: &str) {
        // Whichever id it answers to now, it goes with the entry.
        if let Err(e) = self.runtime().destroy(id).await {
            tracing::warn!(sandbox_id = %id, error = %crate::error::chain(&ServiceError::from(e)), "cannot destroy an adopted pooled sandbox");
        }
        if let Err(e) = self.discard_pool_entry(entry_id).await {
            tracing::warn!(pool_id = %entry_id, error = %crate::error::chain(&e), "cannot discard a pooled sandbox");
        }
    }
}

/// The write of a create that took pooled sandbox `entry_id`: admits `new` (a refusal is the
/// inner `Err`), inserts its row, claims the entry and marks the row `running`; the row and the
/// events to publish once committed.
fn admit_pooled(
    tx: &mut sandboxd_store::WriteTx<'_>,
    limits: crate::per_key::KeyLimits,
    new: NewSandbox,
    entry_id: &str,
) -> sandboxd_store::Result<Result<(Sandbox, [crate::events::Event; 2]), ServiceError>> {
    let now = unix_millis_now();
    let id = new.id.clone();
    if let Err(refused) = crate::sandboxes::insert_admitted(tx, limits, new, now)? {
        return Ok(Err(refused));
    }
    tx.claim_pool_entry(entry_id, &id, now)?;
    let created = tx.get_sandbox_by_id(&id)?.map(|s| sandbox_data(&s));
    let created = emit(tx, SANDBOX_CREATED, Some(&id), created.unwrap_or_default())?;
    tx.set_state(
        &id,
        &[SandboxState::Creating],
        SandboxState::Running,
        None,
        now,
    )?;
    let row = tx
        .get_sandbox_by_id(&id)?
        .ok_or(sandboxd_store::StoreError::NotFound {
            kind: "sandbox",
            key: id.clone(),
        })?;
    let running = emit(tx, SANDBOX_RUNNING, Some(&id), sandbox_data(&row))?;
    Ok(Ok((row, [created, running])))
}

/// A path to unix socket `socket` that stays valid while its directory is renamed: through
/// `/proc/self/fd` and the directory held open (the returned handle; the path is valid while it
/// is).
fn path_across_renames(socket: &Path) -> std::io::Result<(std::fs::File, PathBuf)> {
    let (Some(dir), Some(name)) = (socket.parent(), socket.file_name()) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} names no file in a directory", socket.display()),
        ));
    };
    let held = std::fs::File::open(dir)?;
    let path = Path::new("/proc/self/fd")
        .join(held.as_raw_fd().to_string())
        .join(name);
    Ok((held, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The path to a socket through its held directory reaches the socket after the directory
    /// was renamed, where its own path no longer does.
    #[tokio::test]
    async fn a_socket_is_reached_across_its_directorys_rename() {
        let tmp = tempfile::tempdir().unwrap();
        let (before, after) = (tmp.path().join("wp1"), tmp.path().join("sb1"));
        std::fs::create_dir(&before).unwrap();
        let socket = before.join("agent.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let (_held, via) = path_across_renames(&socket).unwrap();
        std::fs::rename(&before, &after).unwrap();
        assert!(tokio::net::UnixStream::connect(&socket).await.is_err());
        let connected = tokio::net::UnixStream::connect(&via).await;
        assert!(connected.is_ok(), "{connected:?} via {}", via.display());
        assert!(listener.accept().await.is_ok());
        assert!(path_across_renames(Path::new("/")).is_err());
    }
}
