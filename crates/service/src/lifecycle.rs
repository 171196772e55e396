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

    /// Sets sandbox `key`'s deadline to `ttl` from now (Daytona's time to live), or drops it
    /// (`None`). At the deadline the expiry sweep deletes it whatever its state: running, paused or
    /// stopped (an auto-pausing one is paused instead, as at any deadline). At most `--max-timeout`.
    pub async fn set_time_to_live(
        &self,
        key: &str,
        ttl: Option<std::time::Duration>,
    ) -> Result<sandboxd_store::Sandbox, ServiceError> {
        if let Some(ttl) = ttl {
            self.check_timeout(ttl)?;
        }
        let id = self.get(key).await?.id;
        let rid = id.clone();
        self.writer()
            .write(move |tx| {
                let now = unix_millis_now();
                let at =
                    ttl.map(|t| now.saturating_add(t.as_millis().min(i64::MAX as u128) as i64));
                if tx.get_sandbox_by_id(&rid)?.is_none() {
                    return Ok(None);
                }
                tx.set_expires_at(&rid, at, now)?;
                tx.get_sandbox_by_id(&rid)
            })
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("sandbox {id} not found")))
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

#[cfg(test)]
mod tests {
    use crate::test_support::{InMemoryRuntimeForTests, TestService};
    use crate::{ServiceConfig, ServiceError};
    use sandboxd_api_types as api;
    use sandboxd_store::SandboxState;
    use std::time::Duration;

    /// A time to live deletes a sandbox whatever its state (a stopped one here); a dropped one
    /// keeps it; one past `--max-timeout` is refused and changes nothing.
    #[tokio::test]
    async fn a_time_to_live_deletes_even_a_stopped_sandbox_and_dropping_it_keeps_one() {
        let t = TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default());
        let untimed = || api::CreateSandbox {
            timeout_sec: Some(0),
            ..Default::default()
        };
        let doomed = t.svc.create(untimed()).await.unwrap();
        let kept = t.svc.create(untimed()).await.unwrap();
        assert_eq!(kept.expires_at, None);
        let (stopped, _) = t.svc.stop(&doomed.id).await.unwrap();
        assert_eq!(stopped.state, SandboxState::Stopped);
        let set = t.svc.set_time_to_live(&doomed.id, Some(Duration::ZERO));
        assert!(set.await.unwrap().expires_at.is_some());
        let due = t.svc.set_time_to_live(&kept.id, Some(Duration::ZERO));
        assert!(due.await.unwrap().expires_at.is_some());
        let dropped = t.svc.set_time_to_live(&kept.id, None).await.unwrap();
        assert_eq!(dropped.expires_at, None);
        let too_long = Duration::from_secs(10 * 365 * 24 * 3600);
        let refused = t.svc.set_time_to_live(&kept.id, Some(too_long)).await;
        assert!(matches!(refused, Err(ServiceError::InvalidRequest(_))));
        assert_eq!(t.svc.get(&kept.id).await.unwrap().expires_at, None);

        t.svc.sweep_expired().await.unwrap();
        assert!(matches!(
            t.svc.get(&doomed.id).await,
            Err(ServiceError::NotFound(_))
        ));
        assert_eq!(
            t.svc.get(&kept.id).await.unwrap().state,
            SandboxState::Running
        );
    }
}
