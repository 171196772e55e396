//! Deleting a sandbox: claimed, stopped, answered; torn down behind the answer.
//!
//! Contract:
//! - Moving the row to `deleting` is the claim on the delete: exactly one of racing deletes (callers,
//!   the expiry sweep) makes it and answers Ok; the others, like any caller after it, find the sandbox
//!   gone ([`ServiceError::NotFound`]: [`Service::get`] and [`Service::list`] leave `deleting` rows out).
//!   The claim frees the sandbox's name and withdraws its routes (custom domains, exposed ports) in
//!   the same transaction, so a new sandbox may take them at once and nothing routes to it any more.
//! - The delete answers once the sandbox's processes have ended ([`Runtime::halt`]); its cgroup,
//!   network, layer and row go behind the answer ([`Service::finish_delete`]), and only then is
//!   `sandbox.deleted` emitted. The row keeps the network slot leased until then, so no new sandbox
//!   gets an interface still being torn down.
//! - Until its teardown ends, a deleted sandbox still holds its template's and image's layers: a
//!   template or image removal waits for such teardowns ([`Service::await_teardowns`]) before it
//!   counts who uses them.
//! - A teardown that fails, or that a crash interrupted, leaves the row `deleting`; the sandboxes
//!   reconciler finishes it ([`crate::reconcile`]). The failpoints `delete.after-mark` (before the
//!   processes end) and `delete.teardown` (after the answer, before the teardown) hold the flow there.
//!
//! [`Runtime::halt`]: sandboxd_runtime::Runtime::halt

use crate::events::{emit, SANDBOX_DELETED};
use crate::timing::step;
use crate::{Service, ServiceError};
use sandboxd_store::{unix_millis_now, Sandbox, SandboxState};
use std::time::Duration;

/// The longest a template or image removal waits for the teardowns of deleted sandboxes made of it.
const TEARDOWN_WAIT: Duration = Duration::from_secs(10);

impl Service {
    /// Deletes a sandbox by id or name: see the module's contract.
    pub async fn delete(&self, key: &str) -> Result<(), ServiceError> {
        let sandbox = step("resolve", self.get(key)).await?;
        let id = sandbox.id.clone();
        let rid = id.clone();
        let claimed = step(
            "claim",
            self.writer().write(move |tx| {
                let from: Vec<SandboxState> = SandboxState::ALL
                    .into_iter()
                    .filter(|s| *s != SandboxState::Deleting)
                    .collect();
                let claimed =
                    tx.set_state(&rid, &from, SandboxState::Deleting, None, unix_millis_now())?;
                if claimed {
                    tx.release_name(&rid)?;
                    for domain in tx.domains_of(&rid)? {
                        tx.unbind_domain(&domain.hostname, &rid)?;
                    }
                    for port in tx.exposed_ports(&rid)? {
                        tx.remove_exposed_port(&rid, port.port)?;
                    }
                }
                Ok(claimed)
            }),
        )
        .await?;
        if !claimed {
            return Err(ServiceError::NotFound(format!(
                "sandbox {id} not found (it is being deleted)"
            )));
        }
        // Cluster mode: the name goes cluster-wide too, before the answer (`crate::cluster`).
        self.release_placement(&id).await;
        crate::failpoints::hold("delete.after-mark").await;
        self.forget_endpoint(&id);
        self.inner.egress_audit.forget(&id);
        self.inner.usage_history.forget(&id);
        step("halt", self.runtime().halt(&id)).await?;
        let svc = self.clone();
        tokio::spawn(async move {
            crate::failpoints::hold("delete.teardown").await;
            if let Err(e) = svc.finish_delete(&id).await {
                tracing::warn!(sandbox_id = %id, error = %e, "teardown failed; the reconciler retries it");
            }
        });
        Ok(())
    }

    /// Waits until no deleted sandbox that `uses` says was made of `what` is still being torn down;
    /// [`ServiceError::Conflict`] after [`TEARDOWN_WAIT`].
    pub(crate) async fn await_teardowns(
        &self,
        what: &str,
        uses: impl Fn(&Sandbox) -> bool + Clone + Send + 'static,
    ) -> Result<(), ServiceError> {
        let deadline = tokio::time::Instant::now() + TEARDOWN_WAIT;
        loop {
            let uses = uses.clone();
            let held = self
                .reader()
                .read(move |tx| {
                    let deleting = tx.sandboxes_in_states(&[SandboxState::Deleting])?;
                    Ok(deleting.iter().filter(|s| uses(s)).count())
                })
                .await?;
            if held == 0 {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ServiceError::Conflict(format!(
                    "{what} is still held by {held} sandbox(es) being torn down: retry shortly"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Tears down what is left of a `deleting` sandbox and removes its row, emitting
    /// `sandbox.deleted`. Returns whether this call removed the row (a racing teardown may have).
    pub(crate) async fn finish_delete(&self, id: &str) -> Result<bool, ServiceError> {
        self.forget_endpoint(id);
        self.runtime().destroy(id).await?;
        let rid = id.to_string();
        let deleted = self
            .writer()
            .write(move |tx| {
                let id = rid;
                if !tx.delete_sandbox(&id)? {
                    return Ok(None);
                }
                let data = serde_json::json!({ "id": id });
                emit(tx, SANDBOX_DELETED, Some(&id), data).map(Some)
            })
            .await?;
        // A request that read the sandbox before the claim may have cached its endpoint since.
        self.forget_endpoint(id);
        self.inner.usage_history.forget(id);
        Ok(deleted.map(|ev| self.publish([ev])).is_some())
    }
}
