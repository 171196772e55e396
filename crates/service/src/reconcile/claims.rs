//! The reconciler of pending idempotency claims.
//!
//! A `v1.create` attempt records the sandbox id it is about to make on its claim before making it. If
//! the attempt dies (its lock expires while the claim is still pending), the sandbox it was making is
//! deleted, then the claim, so the key's next use redoes the work and the end state holds one sandbox
//! (`Service::undo_abandoned_creates`). Pending claims that name no target made nothing and are
//! forgotten by the expiry sweep ([`Service::sweep_expired`]).

use super::{ReconcileReport, Reconciler};
use crate::{Service, ServiceError};
use sandboxd_store::unix_millis_now;

/// Sweeps pending claims whose lock expired ([`super::TransitionalState::ClaimPending`]).
pub struct ClaimReconciler;

#[async_trait::async_trait]
impl Reconciler for ClaimReconciler {
    fn name(&self) -> &'static str {
        "claims"
    }

    async fn reconcile(&self, svc: &Service) -> Result<ReconcileReport, ServiceError> {
        let (examined, undone, errors) = svc.undo_abandoned_creates(unix_millis_now()).await?;
        let mut report = ReconcileReport {
            examined,
            errors,
            ..Default::default()
        };
        for _ in 0..undone {
            report.act("creates_undone");
        }
        Ok(report)
    }
}
