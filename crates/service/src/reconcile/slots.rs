//! The slot reconciler: network slots leased to sandboxes that will never run again.
//!
//! A `failed` or `lost` sandbox keeps its row but not its slot. The sandbox reconciler releases the slot
//! when it settles a row; this sweep catches the rest (a release that did not happen because the daemon
//! stopped in between, or rows settled by an older build). A slot is released only once the runtime has
//! no trace of the sandbox, since its network (veth pair, addresses) derives from the slot: the sandbox
//! reconciler destroys the trace first.

use super::{ReconcileReport, Reconciler};
use crate::{Service, ServiceError};
use sandboxd_store::SandboxState;

/// Sweeps leased slots ([`super::TransitionalState::SlotLeased`]) of `failed`/`lost` sandboxes.
pub struct SlotReconciler;

#[async_trait::async_trait]
impl Reconciler for SlotReconciler {
    fn name(&self) -> &'static str {
        "slots"
    }

    async fn reconcile(&self, svc: &Service) -> Result<ReconcileReport, ServiceError> {
        let held = svc
            .reader()
            .read(|tx| tx.slots_held_in_states(&[SandboxState::Failed, SandboxState::Lost]))
            .await?;
        let mut report = ReconcileReport {
            examined: held.len(),
            ..Default::default()
        };
        for (slot, id) in held {
            if svc.runtime().inspect(&id).await?.is_some() {
                // Its network may still be up; the sandbox reconciler destroys it first.
                report.errors += 1;
                continue;
            }
            let rid = id.clone();
            if svc
                .writer()
                .write(move |tx| tx.release_slot(&rid))
                .await?
                .is_some()
            {
                tracing::info!(sandbox_id = %id, slot, "released the slot of a settled sandbox");
                report.act("released");
            }
        }
        Ok(report)
    }
}
