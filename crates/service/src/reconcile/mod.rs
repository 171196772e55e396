//! Reconcilers: the sweeps that catch the failure that never reports itself.
//!
//! A flow that dies mid-way (the daemon is killed, a step hangs) leaves a record in a transitional
//! state and nobody to report it. Each [`Reconciler`] owns one resource type: it queries the store for
//! records stuck in a transitional state past a deadline, polls the authority for what actually happened
//! (the runtime for what runs), and force-resolves — marks the record failed or lost, releases what was
//! held for it, cleans up what the far side left behind.
//!
//! Guarantees:
//! - **Level-triggered and idempotent.** A reconciler reads the current state and acts on it, never on
//!   an event; every write is conditional on the state it read ([`sandboxd_store::WriteTx::set_state`]
//!   names the states it may leave), so a pass that races a flow, or a second pass, changes nothing the
//!   first did not leave to do. Two passes in a row: the second reports no actions.
//! - **Bounded.** [`Service::reconcile_all`] runs the reconcilers one after another, and at most one
//!   pass runs at a time (a pass asked for while one runs waits for it).
//! - **In-flight work is left alone.** A record counts as stuck only when it was last changed before
//!   this process started (one store has one daemon, so no flow of this process can own it) or longer
//!   than [`crate::ServiceConfig::reconcile_deadline`] ago.
//! - **Coverage.** Every transitional state the schema allows is a [`TransitionalState`] and
//!   [`reconciler_for`] maps it to the reconciler that sweeps it with an exhaustive `match`; the test
//!   beside it checks each of those reconcilers is one [`Service::reconcile_all`] runs. A new state
//!   without a sweep does not compile, or fails that test.
//!
//! The reconcilers ([`RECONCILERS`], in the order a pass runs them):
//!
//! | state | reconciler | resolution |
//! |---|---|---|
//! | claim `pending`, lock expired, naming a sandbox | [`claims`] | the sandbox is deleted, then the claim |
//! | sandbox `creating`/`starting`, stuck (`starting`: past the readiness deadline) | [`sandboxes`] | `failed` (name released, exposures removed), runtime destroyed, slot released |
//! | sandbox `stopping`/`deleting`, stuck | [`sandboxes`] | runtime destroyed, row deleted |
//! | sandbox `running`/`paused`, runtime gone or stopped | [`sandboxes`] | `lost` (name released), runtime destroyed, slot released |
//! | sandbox `failed`/`lost` with a runtime trace or a name | [`sandboxes`] | runtime destroyed, name released |
//! | runtime sandbox without a row (orphan) | [`sandboxes`] | destroyed |
//! | exposed port `exposing`, stuck | [`ports`] | sandbox running: route installed and marked `active`; paused: kept; otherwise deleted |
//! | exposure (host port) of a `failed`/`lost` sandbox | [`ports`] | deleted, its forwarder stopped |
//! | network slot leased to a `failed`/`lost` sandbox | [`slots`] | released once the runtime has no trace of it |
//! | image `pulling`, stuck and not pulled by this process | [`images`] | row and claim deleted (the next need pulls again) |
//! | template `building`, stuck and not built by this process | [`templates`] | `failed` (the name may be built again) |
//! | cluster: placement of this node without a live row, or a row whose placement was lost | [`placements`] | placement released; sandbox deleted; lost mark cleared |
//! | cluster: a ready template the log does not place here, or a home here of one gone | [`template_homes`] | home recorded; home removed |
//!
//! Where they run: at start-up ([`Service::adopt`] is one pass), on the daemon's timer, and on demand
//! (`POST /v1/admin/reconcile`).

pub mod claims;
pub mod images;
pub mod placements;
pub mod ports;
pub mod sandboxes;
pub mod slots;
pub mod template_homes;
pub mod templates;

#[cfg(test)]
mod scenarios;

use crate::{Service, ServiceError};
use sandboxd_store::{unix_millis_now, SandboxState, UnixMillis};
use std::collections::BTreeMap;
use std::time::Duration;

/// Default of [`crate::ServiceConfig::reconcile_deadline`]: how long a record may sit in a
/// transitional state before a reconciler resolves it.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// What one reconciler found and did in one pass.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Records it looked at.
    pub examined: usize,
    /// Changes it made, by kind (`failed`, `lost`, `deleted`, `orphans`, …); empty when it found nothing
    /// to do.
    pub actions: BTreeMap<&'static str, usize>,
    /// Records it could not resolve this pass (retried on the next one).
    pub errors: usize,
}

impl ReconcileReport {
    /// Counts one change of kind `kind`.
    pub fn act(&mut self, kind: &'static str) {
        *self.actions.entry(kind).or_default() += 1;
    }

    /// How many changes it made.
    pub fn total_actions(&self) -> usize {
        self.actions.values().sum()
    }

    /// How many changes of kind `kind` it made.
    pub fn count(&self, kind: &str) -> usize {
        self.actions.get(kind).copied().unwrap_or(0)
    }
}

/// What one [`Service::reconcile_all`] pass did, reconciler by reconciler (in the order they ran).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// One report per reconciler, by name.
    pub reconcilers: Vec<(&'static str, ReconcileReport)>,
}

impl SweepReport {
    /// The report of reconciler `name`.
    pub fn of(&self, name: &str) -> Option<&ReconcileReport> {
        self.reconcilers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, r)| r)
    }

    /// How many changes the pass made (0: store and runtime already agreed).
    pub fn total_actions(&self) -> usize {
        self.reconcilers
            .iter()
            .map(|(_, r)| r.total_actions())
            .sum()
    }
}

/// One sweep over one resource type.
#[async_trait::async_trait]
pub trait Reconciler: Send + Sync {
    /// Stable name, as reports show it.
    fn name(&self) -> &'static str;
    /// One level-triggered pass: resolves whatever is stuck now.
    async fn reconcile(&self, svc: &Service) -> Result<ReconcileReport, ServiceError>;
}

/// Every reconciler, in the order [`Service::reconcile_all`] runs them: abandoned claims first (they
/// delete whole sandboxes), then sandboxes (which settle rows to `failed`/`lost`), then what hangs off
/// sandboxes (ports, then the slots of settled rows).
pub const RECONCILERS: [&'static dyn Reconciler; 8] = [
    &claims::ClaimReconciler,
    &images::ImageReconciler,
    &templates::TemplateReconciler,
    &sandboxes::SandboxReconciler,
    &ports::PortReconciler,
    &slots::SlotReconciler,
    &placements::PlacementReconciler,
    &template_homes::TemplateHomeReconciler,
];

/// A transitional state the schema allows: a record in it is between two stable states and waits on
/// a flow that may never come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransitionalState {
    /// A sandbox row in a state of [`SandboxState::TRANSITIONAL`].
    Sandbox(SandboxState),
    /// An exposed port reserved but whose route may not be installed (`exposed_ports.state =
    /// 'exposing'`).
    PortExposing,
    /// An idempotency claim whose attempt has not completed (`request_idempotency.state = 'pending'`).
    ClaimPending,
    /// A network slot leased to a sandbox (`network_slots.sandbox_id IS NOT NULL`), pending release
    /// once its sandbox settles.
    SlotLeased,
    /// A host port held by an exposure (`exposed_ports.host_port > 0`), pending release once its
    /// sandbox settles.
    HostPortLeased,
    /// An image whose pull has not completed (`images.state = 'pulling'`).
    ImagePulling,
    /// A template whose build has not ended (`templates.state = 'building'`).
    TemplateBuilding,
}

impl TransitionalState {
    /// Every transitional state.
    pub fn all() -> Vec<TransitionalState> {
        SandboxState::TRANSITIONAL
            .into_iter()
            .map(TransitionalState::Sandbox)
            .chain([
                TransitionalState::PortExposing,
                TransitionalState::ClaimPending,
                TransitionalState::SlotLeased,
                TransitionalState::HostPortLeased,
                TransitionalState::ImagePulling,
                TransitionalState::TemplateBuilding,
            ])
            .collect()
    }
}

/// The reconciler that sweeps records in `state`. Exhaustive on purpose (no `_` arm, here or on the
/// sandbox states): a new state must be given its sweep before this compiles.
pub fn reconciler_for(state: TransitionalState) -> &'static dyn Reconciler {
    match state {
        TransitionalState::Sandbox(s) => match s {
            SandboxState::Creating
            | SandboxState::Starting
            | SandboxState::Stopping
            | SandboxState::Deleting => &sandboxes::SandboxReconciler,
            // Stable states: the sandbox reconciler still examines them (a running row whose runtime
            // died, a failed row whose runtime remains), so they map to it as well.
            SandboxState::Running
            | SandboxState::Paused
            | SandboxState::Stopped
            | SandboxState::Failed
            | SandboxState::Lost => &sandboxes::SandboxReconciler,
        },
        TransitionalState::PortExposing | TransitionalState::HostPortLeased => {
            &ports::PortReconciler
        }
        TransitionalState::ClaimPending => &claims::ClaimReconciler,
        TransitionalState::SlotLeased => &slots::SlotReconciler,
        TransitionalState::ImagePulling => &images::ImageReconciler,
        TransitionalState::TemplateBuilding => &templates::TemplateReconciler,
    }
}

/// Per-service reconciliation state.
pub(crate) struct ReconcileState {
    /// When this service started: records last changed before it belong to no flow of this process.
    started_at: UnixMillis,
    /// Held by the running pass, so passes never overlap.
    pass: tokio::sync::Mutex<()>,
}

impl Default for ReconcileState {
    fn default() -> Self {
        Self {
            started_at: unix_millis_now(),
            pass: Default::default(),
        }
    }
}

impl Service {
    /// Whether a record last changed at `updated_at` is stuck: changed before this process started, or
    /// longer than the deadline ago.
    pub(crate) fn is_stuck(&self, updated_at: UnixMillis, now: UnixMillis) -> bool {
        self.is_stuck_for(updated_at, now, self.config().reconcile_deadline)
    }

    /// [`Service::is_stuck`] with another deadline.
    pub(crate) fn is_stuck_for(
        &self,
        updated_at: UnixMillis,
        now: UnixMillis,
        deadline: Duration,
    ) -> bool {
        let deadline = i64::try_from(deadline.as_millis()).unwrap_or(i64::MAX);
        updated_at < self.inner.reconcile.started_at || now.saturating_sub(updated_at) >= deadline
    }

    /// Runs every reconciler once, in order; a reconciler that fails is logged and counted as one error
    /// and the pass goes on. At most one pass runs at a time.
    pub async fn reconcile_all(&self) -> SweepReport {
        let _pass = self.inner.reconcile.pass.lock().await;
        let mut report = SweepReport::default();
        for reconciler in RECONCILERS {
            let one = match reconciler.reconcile(self).await {
                Ok(one) => one,
                Err(e) => {
                    tracing::warn!(reconciler = reconciler.name(), error = %crate::error::chain(&e), "reconciler failed");
                    ReconcileReport {
                        errors: 1,
                        ..Default::default()
                    }
                }
            };
            if one.total_actions() > 0 || one.errors > 0 {
                tracing::info!(reconciler = reconciler.name(), actions = ?one.actions, errors = one.errors, "reconciled");
            }
            report.reconcilers.push((reconciler.name(), one));
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_store::{ClaimState, ImageState, PortState, TemplateState};

    /// Invariant (coverage): every transitional state the schema allows is swept by a reconciler that
    /// `reconcile_all` runs. `reconciler_for` is an exhaustive match, so a new `TransitionalState` or
    /// `SandboxState` variant does not compile without a sweep; this test catches a state added to a list
    /// (`SandboxState::TRANSITIONAL`, the port and claim states) whose reconciler is not in the pass.
    #[test]
    fn every_transitional_state_has_a_reconciler_in_the_pass() {
        let in_pass: Vec<&str> = RECONCILERS.iter().map(|r| r.name()).collect();
        let mut distinct = in_pass.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), in_pass.len(), "reconciler names are unique");
        let all = TransitionalState::all();
        for state in SandboxState::TRANSITIONAL {
            assert!(all.contains(&TransitionalState::Sandbox(state)), "{state}");
        }
        // The other tables' transitional states, from their own enums (exhaustive: a new variant must
        // be classified here).
        for port in [PortState::Exposing, PortState::Active] {
            let transitional = match port {
                PortState::Exposing => Some(TransitionalState::PortExposing),
                PortState::Active => None,
            };
            assert!(transitional.is_none_or(|t| all.contains(&t)), "{port:?}");
        }
        for claim in [ClaimState::Pending, ClaimState::Ready] {
            let transitional = match claim {
                ClaimState::Pending => Some(TransitionalState::ClaimPending),
                ClaimState::Ready => None,
            };
            assert!(transitional.is_none_or(|t| all.contains(&t)), "{claim:?}");
        }
        for image in [ImageState::Pulling, ImageState::Ready] {
            let transitional = match image {
                ImageState::Pulling => Some(TransitionalState::ImagePulling),
                ImageState::Ready => None,
            };
            assert!(transitional.is_none_or(|t| all.contains(&t)), "{image:?}");
        }
        for template in [
            TemplateState::Building,
            TemplateState::Ready,
            TemplateState::Failed,
        ] {
            let transitional = match template {
                TemplateState::Building => Some(TransitionalState::TemplateBuilding),
                TemplateState::Ready | TemplateState::Failed => None,
            };
            assert!(
                transitional.is_none_or(|t| all.contains(&t)),
                "{template:?}"
            );
        }
        assert!(all.contains(&TransitionalState::SlotLeased));
        assert!(all.contains(&TransitionalState::HostPortLeased));
        for state in all
            .into_iter()
            .chain(SandboxState::ALL.map(TransitionalState::Sandbox))
        {
            let name = reconciler_for(state).name();
            assert!(
                in_pass.contains(&name),
                "{state:?} is swept by {name:?}, which reconcile_all does not run ({in_pass:?})"
            );
        }
    }
}
