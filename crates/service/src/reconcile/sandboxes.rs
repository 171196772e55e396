//! The sandbox reconciler: brings each sandbox row and the runtime's sandbox of the same id together.
//!
//! The runtime is the authority for what runs, the row for what was promised. Per row state (an
//! exhaustive `match`, so a new state needs a decision here):
//! - `creating`/`starting`, stuck: the create never finished and never will (its flow is gone or hung
//!   past the deadline; for `starting`, the readiness deadline: its agent never called home). The row turns `failed` with the reason, then the runtime's sandbox is destroyed
//!   and the network slot released. **Also when the runtime shows it running**: the create never
//!   acknowledged it, so its caller got an error or no answer and nobody holds its id — keeping it
//!   would make a sandbox nobody asked to keep, and racing a late acknowledgement is avoided because the
//!   change is conditional on the row still being `creating`/`starting`.
//! - `stopping`/`deleting`, stuck: the delete is finished (runtime destroyed, then the row deleted,
//!   which frees the slot). Nothing moves a sandbox to `stopping` but an unfinished stop would have been
//!   a delete; start-up adoption always treated it so.
//! - `running`/`paused` whose runtime sandbox is gone or no longer running: `lost` with the reason;
//!   what is left of it is destroyed and the slot released. (Not stuck-gated: nothing legitimately
//!   stops the runtime under these states — delete marks the row `deleting` first. A row written
//!   while its pooled sandbox is being adopted is looked at again once no adoption is under way.)
//! - `stopped`: stable, nothing runs by design; left alone.
//! - `failed`/`lost`: terminal. A runtime trace left behind (a destroy that failed on an earlier pass)
//!   is destroyed; a name still held is released.
//! - A runtime sandbox with no row is an orphan and is destroyed. The runtime is listed *before* the
//!   rows are read, and a create writes its row before it asks the runtime, so a create in flight is
//!   never mistaken for an orphan.
//!
//! **Names.** A `failed` or `lost` sandbox releases its name (the row's name becomes `""`) in the same
//! transaction that settles it: the row stays for diagnosis under its id, and a retry with the same
//! name gets a fresh sandbox instead of a 409 forever. The failure reason is what remains to find.

use super::{ReconcileReport, Reconciler};
use crate::{Service, ServiceError};
use sandboxd_runtime::RuntimeState;
use sandboxd_store::{unix_millis_now, Sandbox, SandboxState, UnixMillis};
use std::collections::HashSet;

/// The name of [`SandboxReconciler`].
pub const NAME: &str = "sandboxes";

/// Sweeps sandbox rows of every state (see [`super::reconciler_for`]) and the runtime's orphans.
pub struct SandboxReconciler;

#[async_trait::async_trait]
impl Reconciler for SandboxReconciler {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn reconcile(&self, svc: &Service) -> Result<ReconcileReport, ServiceError> {
        let now = unix_millis_now();
        // The runtime first: see the module docs on orphans.
        let observed = svc.runtime().list().await?;
        let rows = svc
            .reader()
            .read(|tx| tx.sandboxes_in_states(&SandboxState::ALL))
            .await?;
        let mut report = ReconcileReport {
            examined: rows.len(),
            ..Default::default()
        };
        let known: HashSet<String> = rows.iter().map(|r| r.id.clone()).collect();
        for row in rows {
            match resolve(svc, &row, now).await {
                Ok(kinds) => kinds.into_iter().for_each(|k| report.act(k)),
                Err(e) => {
                    tracing::warn!(sandbox_id = %row.id, state = %row.state, error = %crate::error::chain(&e), "cannot reconcile sandbox");
                    report.errors += 1;
                }
            }
        }
        for info in observed.iter().filter(|i| !known.contains(i.id())) {
            report.examined += 1;
            match destroy_orphan(svc, info.id()).await {
                Ok(true) => report.act("orphans"),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(sandbox_id = info.id(), error = %crate::error::chain(&e), "cannot destroy orphan");
                    report.errors += 1;
                }
            }
        }
        Ok(report)
    }
}

/// Brings one row and its runtime sandbox together; returns what it did.
async fn resolve(
    svc: &Service,
    row: &Sandbox,
    now: UnixMillis,
) -> Result<Vec<&'static str>, ServiceError> {
    match row.state {
        SandboxState::Creating | SandboxState::Starting => {
            // A `starting` sandbox is its create's until the readiness deadline.
            let deadline = match row.state {
                SandboxState::Starting => svc.config().ready_deadline,
                _ => svc.config().reconcile_deadline,
            };
            if !svc.is_stuck_for(row.updated_at, now, deadline) {
                return Ok(vec![]);
            }
            let running = runtime_state(svc, &row.id).await? == Some(RuntimeState::Running);
            let reason = match (row.state, running) {
                (SandboxState::Starting, true) => {
                    "the create never finished: its agent never reported ready"
                }
                (_, true) => {
                    "the create never finished: its sandbox started but was never acknowledged"
                }
                (_, false) => "the create never finished: its sandbox never started",
            };
            Ok(settle(svc, row, SandboxState::Failed, reason)
                .await?
                .then_some("failed")
                .into_iter()
                .collect())
        }
        SandboxState::Stopping => {
            if !svc.is_stuck(row.updated_at, now) {
                return Ok(vec![]);
            }
            svc.finish_stop(&row.id).await?;
            tracing::info!(sandbox_id = %row.id, "finished an interrupted stop");
            Ok(vec!["stopped"])
        }
        SandboxState::Deleting => {
            if !svc.is_stuck(row.updated_at, now) {
                return Ok(vec![]);
            }
            let deleted = svc.finish_delete(&row.id).await?;
            tracing::info!(sandbox_id = %row.id, "finished an interrupted delete");
            Ok(deleted.then_some("deleted").into_iter().collect())
        }
        SandboxState::Running | SandboxState::Paused => {
            let mut observed = runtime_state(svc, &row.id).await?;
            if observed.is_none() {
                // A create adopting a pooled sandbox writes its row while the runtime renames the
                // sandbox (`crate::warm_pool`): once no adoption is under way, look again.
                let _adoptions_held = svc.inner.warm_pools.adopting.write().await;
                observed = runtime_state(svc, &row.id).await?;
            }
            let reason = match (row.state, observed) {
                (_, Some(RuntimeState::Running)) => return Ok(vec![]),
                // Paused with memory: nothing runs, its checkpoint waits for the resume.
                (SandboxState::Paused, Some(RuntimeState::Suspended)) => return Ok(vec![]),
                (_, Some(RuntimeState::Suspended)) => {
                    "its processes stopped (a checkpoint remains)"
                }
                (_, Some(RuntimeState::Created | RuntimeState::Stopped)) => "its processes stopped",
                (_, None) => "its processes are gone",
            };
            Ok(settle(svc, row, SandboxState::Lost, reason)
                .await?
                .then_some("lost")
                .into_iter()
                .collect())
        }
        SandboxState::Stopped => Ok(vec![]),
        SandboxState::Failed | SandboxState::Lost => {
            let mut did = vec![];
            if !row.name.is_empty() {
                let id = row.id.clone();
                if svc.writer().write(move |tx| tx.release_name(&id)).await? {
                    did.push("names_released");
                }
            }
            if runtime_state(svc, &row.id).await?.is_some() {
                svc.forget_endpoint(&row.id);
                svc.runtime().destroy(&row.id).await?;
                did.push("cleaned");
            }
            Ok(did)
        }
    }
}

/// What the runtime observes of sandbox `id`; `None` when it has no trace of it.
async fn runtime_state(svc: &Service, id: &str) -> Result<Option<RuntimeState>, ServiceError> {
    Ok(svc.runtime().inspect(id).await?.map(|i| i.state))
}

/// Settles `row` (from the state it was read in) into terminal state `to` ([`Service::settle`]).
async fn settle(
    svc: &Service,
    row: &Sandbox,
    to: SandboxState,
    reason: &'static str,
) -> Result<bool, ServiceError> {
    svc.settle(&row.id, row.state, to, reason.to_string()).await
}

/// Destroys runtime sandbox `id` unless a row for it exists by now. Returns whether it destroyed.
async fn destroy_orphan(svc: &Service, id: &str) -> Result<bool, ServiceError> {
    // No adoption renames a pooled sandbox meanwhile (`crate::warm_pool`): one seen here under its
    // pool id and gone since was adopted, and is no orphan.
    let _adoptions_held = svc.inner.warm_pools.adopting.write().await;
    let rid = id.to_string();
    if svc
        .reader()
        .read(move |tx| tx.get_sandbox_by_id(&rid))
        .await?
        .is_some()
        || svc.is_pool_entry(id).await?
        || svc.runtime().inspect(id).await?.is_none()
    {
        return Ok(false);
    }
    tracing::warn!(
        sandbox_id = id,
        "destroying a sandbox the store does not know"
    );
    svc.runtime().destroy(id).await?;
    Ok(true)
}
