//! Settling a sandbox into a terminal state (`failed`, `lost`): the one way every path that gives up on
//! a sandbox does it — a reconciler, a create whose agent never reported ready, an agent that reports
//! its environment failed.
//!
//! Contract: the state change is conditional on the state the caller saw (so a settle racing a flow
//! that moved the row applies once, or not at all) and commits together with what it implies: the
//! name released (a retry with the same name gets a fresh sandbox), the sandbox's exposures removed
//! (their host ports freed) and the events announced. Only if it applied is the rest torn down, in
//! order: routes forgotten, the runtime's sandbox destroyed, then its network slot released (the
//! runtime gives the slot's network up first). A teardown that fails half-way is finished by the
//! reconcilers (`failed`/`lost` rows with a runtime trace or a slot).

use crate::events::{self, emit, Event, PORT_UNEXPOSED};
use crate::{Service, ServiceError};
use sandboxd_store::{unix_millis_now, ExposedPort, SandboxState, StoreError, WriteTx};

impl Service {
    /// Moves sandbox `id` from `from` to terminal state `to` with `reason` and tears it down. Returns
    /// whether the change applied (`false`: the row was not in `from` any more, and is left alone).
    pub(crate) async fn settle(
        &self,
        id: &str,
        from: SandboxState,
        to: SandboxState,
        reason: String,
    ) -> Result<bool, ServiceError> {
        debug_assert!(matches!(to, SandboxState::Failed | SandboxState::Lost));
        let rid = id.to_string();
        let why = reason.clone();
        let settled = self
            .writer()
            .write(move |tx| {
                if !tx.set_state(&rid, &[from], to, Some(&why), unix_millis_now())? {
                    return Ok(None);
                }
                settle_in(tx, &rid, to).map(Some)
            })
            .await?;
        let Some(events) = settled else {
            return Ok(false);
        };
        self.publish(events);
        tracing::warn!(sandbox_id = %id, from = %from, to = %to, reason, "sandbox settled");
        self.tear_down(id).await?;
        Ok(true)
    }

    /// The part of settling that follows the commit: forgets the sandbox's routes, destroys its runtime
    /// sandbox, releases its slot.
    pub(crate) async fn tear_down(&self, id: &str) -> Result<(), ServiceError> {
        self.forget_endpoint(id);
        self.runtime().destroy(id).await?;
        let rid = id.to_string();
        self.writer().write(move |tx| tx.release_slot(&rid)).await?;
        Ok(())
    }
}

/// What settling implies inside the write that moved sandbox `id` to `to`: its name released, its
/// exposures removed, the events emitted (returned, to publish after the commit).
pub(crate) fn settle_in(
    tx: &mut WriteTx<'_>,
    id: &str,
    to: SandboxState,
) -> Result<Vec<Event>, StoreError> {
    tx.release_name(id)?;
    let mut out = Vec::new();
    for port in tx.exposed_ports(id)? {
        out.extend(withdraw_in(tx, &port)?);
    }
    let kind = match to {
        SandboxState::Lost => events::SANDBOX_LOST,
        _ => events::SANDBOX_FAILED,
    };
    let data = tx.get_sandbox_by_id(id)?.map(|s| events::sandbox_data(&s));
    out.push(emit(tx, kind, Some(id), data.unwrap_or_default())?);
    Ok(out)
}

/// Removes exposure `row` (exactly that reservation) in the write `tx`, announcing it; `None` when it
/// was gone already. Its forwarder, if any, is the caller's to stop after the commit.
pub(crate) fn withdraw_in(
    tx: &mut WriteTx<'_>,
    row: &ExposedPort,
) -> Result<Option<Event>, StoreError> {
    if !tx.delete_exposed_port(row)? {
        return Ok(None);
    }
    let data = crate::ports::port_data(row);
    emit(tx, PORT_UNEXPOSED, Some(&row.sandbox_id), data).map(Some)
}
