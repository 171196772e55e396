//! Start-up adoption and expiry.
//!
//! At start-up the store (what was promised) and the runtime (what runs) are brought together by one
//! pass of the reconcilers ([`crate::reconcile`]), which the daemon also runs on a timer:
//! - running in both: adopted as is;
//! - a create or delete the last daemon did not finish: the create is undone (runtime destroyed, row
//!   marked `failed` with the reason, its name and slot released), the delete is finished;
//! - promised `running` but gone from the runtime: marked `lost`;
//! - running in the runtime with no row: an orphan, destroyed.
//!
//! Expiry: a sandbox past its `expires_at` is deleted by [`Service::sweep_expired`], which the daemon
//! runs on a timer; the same sweep stops and deletes idle sandboxes ([`crate::idle`]).

use crate::{Service, ServiceError};
use sandboxd_store::{unix_millis_now, SandboxState};

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
    /// Reconciles store and runtime after a (re)start: one [`Service::reconcile_all`] pass. Every record
    /// a transitional state holds was last changed before this process started, so the pass resolves
    /// all of them at once (see [`crate::reconcile`]); the counts are the sandbox reconciler's.
    pub async fn adopt(&self) -> Result<Adoption, ServiceError> {
        let pass = self.reconcile_all().await;
        let sandboxes = pass
            .of(crate::reconcile::sandboxes::NAME)
            .cloned()
            .unwrap_or_default();
        let adopted = self
            .reader()
            .read(|tx| tx.sandboxes_in_states(&[SandboxState::Running, SandboxState::Paused]))
            .await?
            .len();
        match self.sweep_volumes().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "removed the files of volumes without a record"),
            Err(e) => tracing::warn!(error = %crate::error::chain(&e), "sweeping volumes failed"),
        }
        Ok(Adoption {
            adopted,
            failed: sandboxes.count("failed"),
            deleted: sandboxes.count("deleted"),
            lost: sandboxes.count("lost"),
            orphans: sandboxes.count("orphans"),
        })
    }

    /// The reconciler of pending `v1.create` claims ([`crate::reconcile::claims`]): an attempt whose
    /// lock expired without completing died mid-way (e.g. the daemon was killed); the sandbox it was
    /// making is deleted, then the claim, so the key's next use redoes the work and the end state holds
    /// one sandbox. Returns how many claims it examined, undid, and could not undo.
    pub(crate) async fn undo_abandoned_creates(
        &self,
        now: i64,
    ) -> Result<(usize, usize, usize), ServiceError> {
        let abandoned = self
            .reader()
            .read(move |tx| tx.abandoned_claims(crate::idempotency::V1_CREATE_SCOPE, now))
            .await?;
        let (examined, mut undone, mut errors) = (abandoned.len(), 0, 0);
        for claim in abandoned {
            match self.delete(&claim.target_id).await {
                Ok(()) | Err(ServiceError::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(sandbox_id = %claim.target_id, error = %crate::error::chain(&e), "cannot undo an abandoned create");
                    errors += 1;
                    continue;
                }
            }
            tracing::info!(sandbox_id = %claim.target_id, "undid the sandbox of an abandoned create");
            let deleted = self
                .writer()
                .write(move |tx| {
                    tx.delete_claim(&claim.scope, &claim.fingerprint, claim.generation)
                })
                .await?;
            if deleted {
                undone += 1;
            }
        }
        Ok((examined, undone, errors))
    }

    /// Deletes every sandbox past its deadline (pauses an auto-pausing one, see [`crate::pause`]),
    /// forgets expired idempotency claims and deliveries older than
    /// [`crate::readiness::DELIVERY_RETENTION`], and stops and deletes idle sandboxes
    /// ([`Service::sweep_idle`]); returns how many sandboxes it deleted.
    pub async fn sweep_expired(&self) -> Result<usize, ServiceError> {
        let now = unix_millis_now();
        self.undo_abandoned_creates(now).await?;
        let retention = crate::readiness::DELIVERY_RETENTION.as_millis() as i64;
        self.writer()
            .write(move |tx| {
                tx.sweep_expired_claims(now)?;
                tx.prune_deliveries(now - retention)
            })
            .await?;
        let expired = self
            .reader()
            .read(move |tx| tx.expired_sandboxes(now))
            .await?;
        let mut n = 0;
        let idle = self.sweep_idle(now).await?;
        n += idle.deleted;
        for sandbox in expired {
            // A sandbox paused to its files is stopped; one found so was stopped by its pause,
            // which a crash kept from dropping its deadline.
            let pausable = matches!(sandbox.state, SandboxState::Running | SandboxState::Paused)
                || (sandbox.state == SandboxState::Stopped && sandbox.lifecycle.pause_files_only);
            if sandbox.lifecycle.auto_pause && pausable {
                if let Err(e) = self.pause_at_deadline(&sandbox.id, now).await {
                    tracing::warn!(sandbox_id = %sandbox.id, error = %crate::error::chain(&e), "auto-pause failed");
                }
                continue;
            }
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
