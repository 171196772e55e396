//! Start-up adoption and expiry.
//!
//! At start-up the store (what was promised) and the runtime (what runs) are brought together:
//! - running in both: adopted as is;
//! - a create or delete the last daemon did not finish: the create is undone (runtime destroyed, row
//!   marked `failed` with the reason), the delete is finished;
//! - promised `running` but gone from the runtime: marked `lost`;
//! - running in the runtime with no row: an orphan, destroyed.
//!
//! Expiry: a sandbox past its `expires_at` is deleted by [`Service::sweep_expired`], which the daemon
//! runs on a timer.

use crate::{Service, ServiceError};
use sandboxd_runtime::RuntimeState;
use sandboxd_store::{unix_millis_now, SandboxState};
use std::collections::HashSet;

/// What [`Service::adopt`] found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Adoption {
    /// Sandboxes running in both store and runtime.
    pub adopted: usize,
    /// Interrupted creates undone.
    pub failed: usize,
    /// Interrupted deletes finished.
    pub deleted: usize,
    /// Promised but gone.
    pub lost: usize,
    /// Runtime sandboxes without a row, destroyed.
    pub orphans: usize,
}

impl Service {
    /// Reconciles store and runtime after a (re)start.
    pub async fn adopt(&self) -> Result<Adoption, ServiceError> {
        let mut report = Adoption::default();
        let rows = self
            .reader()
            .read(|tx| tx.sandboxes_in_states(&SandboxState::ALL))
            .await?;
        let known: HashSet<String> = rows.iter().map(|r| r.id.clone()).collect();
        for row in rows {
            let info = self.runtime().inspect(&row.id).await?;
            let running = info
                .as_ref()
                .is_some_and(|i| i.state == RuntimeState::Running);
            let id = row.id.clone();
            match row.state {
                SandboxState::Running | SandboxState::Paused if running => report.adopted += 1,
                SandboxState::Running | SandboxState::Paused => {
                    report.lost += 1;
                    self.writer()
                        .write(move |tx| {
                            tx.set_state(
                                &id,
                                &[row.state],
                                SandboxState::Lost,
                                Some("its processes are gone"),
                                unix_millis_now(),
                            )
                        })
                        .await?;
                }
                SandboxState::Creating | SandboxState::Starting => {
                    report.failed += 1;
                    self.runtime().destroy(&row.id).await?;
                    self.writer()
                        .write(move |tx| {
                            tx.set_state(
                                &id,
                                &[row.state],
                                SandboxState::Failed,
                                Some("the daemon stopped while creating it"),
                                unix_millis_now(),
                            )?;
                            tx.release_slot(&id)
                        })
                        .await?;
                }
                SandboxState::Deleting | SandboxState::Stopping => {
                    report.deleted += 1;
                    self.runtime().destroy(&row.id).await?;
                    self.writer()
                        .write(move |tx| tx.delete_sandbox(&id))
                        .await?;
                }
                SandboxState::Stopped | SandboxState::Failed | SandboxState::Lost => {}
            }
        }
        for info in self.runtime().list().await? {
            if !known.contains(info.id()) {
                report.orphans += 1;
                tracing::warn!(
                    sandbox_id = info.id(),
                    "destroying a sandbox the store does not know"
                );
                self.runtime().destroy(info.id()).await?;
            }
        }
        Ok(report)
    }

    /// The reconciler of pending `v1.create` claims: an attempt whose lock expired without completing
    /// died mid-way (e.g. the daemon was killed); the sandbox it was making is deleted, then the claim,
    /// so the key's next use redoes the work and the end state holds one sandbox.
    async fn undo_abandoned_creates(&self, now: i64) -> Result<(), ServiceError> {
        let abandoned = self
            .reader()
            .read(move |tx| tx.abandoned_claims(crate::idempotency::V1_CREATE_SCOPE, now))
            .await?;
        for claim in abandoned {
            match self.delete(&claim.target_id).await {
                Ok(()) | Err(ServiceError::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(sandbox_id = %claim.target_id, error = %crate::error::chain(&e), "cannot undo an abandoned create");
                    continue;
                }
            }
            tracing::info!(sandbox_id = %claim.target_id, "undid the sandbox of an abandoned create");
            self.writer()
                .write(move |tx| {
                    tx.delete_claim(&claim.scope, &claim.fingerprint, claim.generation)
                })
                .await?;
        }
        Ok(())
    }

    /// Deletes every sandbox past its deadline and forgets expired idempotency claims; returns how many
    /// sandboxes it deleted.
    pub async fn sweep_expired(&self) -> Result<usize, ServiceError> {
        let now = unix_millis_now();
        self.undo_abandoned_creates(now).await?;
        self.writer()
            .write(move |tx| tx.sweep_expired_claims(now))
            .await?;
        let expired = self
            .reader()
            .read(move |tx| tx.expired_sandboxes(now))
            .await?;
        let mut n = 0;
        for sandbox in expired {
            match self.delete(&sandbox.id).await {
                Ok(()) | Err(ServiceError::NotFound(_)) => n += 1,
                Err(e) => {
                    tracing::warn!(sandbox_id = %sandbox.id, error = %crate::error::chain(&e), "expiry failed")
                }
            }
        }
        Ok(n)
    }
}
