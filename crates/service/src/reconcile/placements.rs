//! The placements reconciler (cluster mode): the log and this node's store brought to agree.
//!
//! Intent is the log's placements owned by this node; observed is this node's rows. Each pass:
//! - a placement of this node whose sandbox has no row here, past the deadline (a create that
//!   reserved and then died, or whose reservation committed after it had answered 503), or whose row
//!   is `deleting`, `failed` or `lost` (it holds no name locally either), is **released**;
//! - when the log marks this node lost (its lease lapsed while it was away), every sandbox here whose
//!   placement is no longer live is **deleted** — its name may be another sandbox's by now — and then
//!   the mark is cleared for that epoch ([`sandboxd_cluster::Command::Recovered`]).
//!
//! Without a cluster it examines nothing.

use super::{ReconcileReport, Reconciler};
use crate::{Service, ServiceError};
use sandboxd_cluster::state::PlacementState;
use sandboxd_cluster::Command;
use sandboxd_store::{unix_millis_now, SandboxState};
use std::collections::BTreeMap;

/// Sweeps this node's placements against its rows.
pub struct PlacementReconciler;

#[async_trait::async_trait]
impl Reconciler for PlacementReconciler {
    fn name(&self) -> &'static str {
        "placements"
    }

    async fn reconcile(&self, svc: &Service) -> Result<ReconcileReport, ServiceError> {
        let mut report = ReconcileReport::default();
        let Some(cluster) = svc.cluster() else {
            return Ok(report);
        };
        let me = cluster.id();
        let (placements, lost_epoch) = cluster.read(|s| {
            let mine: BTreeMap<String, (PlacementState, i64)> = s
                .placements
                .iter()
                .filter(|(_, p)| p.owner == me)
                .map(|(id, p)| (id.clone(), (p.state, p.reserved_at_ms)))
                .collect();
            let lost = s.nodes.get(&me).filter(|r| r.lost).map(|r| r.epoch);
            (mine, lost)
        });
        let rows: BTreeMap<String, SandboxState> = svc
            .reader()
            .read(|tx| tx.sandboxes_in_states(&SandboxState::ALL))
            .await?
            .into_iter()
            .map(|s| (s.id, s.state))
            .collect();
        report.examined = placements.len() + rows.len();
        let deadline_ms = svc.config().reconcile_deadline.as_millis() as i64;
        let now = unix_millis_now();
        for (id, (state, reserved_at_ms)) in &placements {
            if *state == PlacementState::Lost {
                continue;
            }
            let release = match rows.get(id) {
                None => now.saturating_sub(*reserved_at_ms) > deadline_ms,
                Some(s) => matches!(
                    s,
                    SandboxState::Deleting | SandboxState::Failed | SandboxState::Lost
                ),
            };
            if release {
                match cluster.propose(Command::Release { id: id.clone() }).await {
                    Ok(_) => report.act("released"),
                    Err(_) => report.errors += 1,
                }
            }
        }
        let Some(epoch) = lost_epoch else {
            return Ok(report);
        };
        for (id, state) in &rows {
            let live = matches!(placements.get(id), Some((s, _)) if *s != PlacementState::Lost);
            if live || *state == SandboxState::Deleting {
                continue;
            }
            match svc.delete(id).await {
                Ok(()) | Err(ServiceError::NotFound(_)) => report.act("deleted"),
                Err(e) => {
                    tracing::warn!(sandbox_id = %id, error = %crate::error::chain(&e), "could not delete a sandbox whose placement was lost");
                    report.errors += 1;
                }
            }
        }
        if report.errors == 0 {
            match cluster
                .propose(Command::Recovered { node: me, epoch })
                .await
            {
                Ok(_) => report.act("recovered"),
                Err(_) => report.errors += 1,
            }
        }
        Ok(report)
    }
}
