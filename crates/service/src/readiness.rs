//! Readiness by call-home: a sandbox is `running` only once its agent said so.
//!
//! A create leaves its sandbox `starting` when the runtime has booted it; the agent then reports
//! `environment-ready` to the daemon's callback socket ([`sandboxd_envd::callback`]), and
//! [`Service::ingest_agent_event`] applies it. The create waits for that ([`Service::await_ready`]).
//! For every way the report can go wrong:
//!
//! - **Twice.** The agent retries with the same delivery id until it hears a 2xx. The id is recorded in
//!   the `deliveries` ledger in the SAME write as the state change, the outbox rows and the events, and
//!   only when the recording is new does anything happen: a duplicate answers `applied: false` and
//!   changes, announces and wakes nothing.
//! - **Late.** Readiness for a sandbox that is no longer `starting` (a reconciler or the deadline failed
//!   it, a delete took it) is refused with a conflict and recorded nowhere: a failed sandbox is never
//!   revived. `environment-failed` is accepted from `starting`, `running` and `paused`, and is a no-op
//!   on a sandbox already settled; so ready and failed about one sandbox end `failed` in either order.
//! - **Never.** The create's waiter gives up at [`crate::ServiceConfig::ready_deadline`] and settles the
//!   sandbox `failed` with the reason (its agent exited, or stayed silent), releasing its name, slot
//!   and exposures (`Service::settle`); the waiter runs in its own task, so a caller that hung up does
//!   not take the deadline with it. A `starting` sandbox whose waiter died with its daemon is the
//!   sandbox reconciler's ([`crate::reconcile::sandboxes`]).
//!
//! Failpoints: `callback.before-apply` (received, nothing written) and `callback.after-apply` (written,
//! not yet answered).
//!
//! Waiters are woken by [`Service::publish`] when an event settles their sandbox one way or the other;
//! a waiter re-reads the row after arming its wake-up, so a wake-up between the read and the wait is
//! not lost.

use crate::events::{emit, sandbox_data, Event, SANDBOX_RUNNING};
use crate::settle::settle_in;
use crate::{Service, ServiceError};
use sandboxd_envd::callback::{AgentEvent, CallbackAnswer, CallbackEvent};
use sandboxd_store::{unix_millis_now, Delivery, Sandbox, SandboxState};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Default of [`crate::ServiceConfig::ready_deadline`].
pub const READY_DEADLINE: Duration = Duration::from_secs(30);
/// How long a recorded delivery is kept: far longer than any sender retries it.
pub const DELIVERY_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// Longest delivery id accepted.
const MAX_DELIVERY_ID: usize = 128;
/// Longest failure reason kept.
const MAX_REASON: usize = 1024;

/// Creates waiting for their sandbox to leave `starting`, by sandbox id.
#[derive(Default)]
pub(crate) struct Waiters(Mutex<HashMap<String, Arc<Notify>>>);

impl Waiters {
    fn register(&self, id: &str) -> Arc<Notify> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.to_string())
            .or_default()
            .clone()
    }

    fn unregister(&self, id: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }

    /// Wakes whoever waits for sandbox `id`.
    pub(crate) fn wake(&self, id: &str) {
        if let Some(n) = self.0.lock().unwrap_or_else(|p| p.into_inner()).get(id) {
            n.notify_waiters();
        }
    }
}

/// How many agent events came to what, since this process started (for `/metrics`).
#[derive(Default)]
pub(crate) struct Tally {
    applied: AtomicU64,
    duplicate: AtomicU64,
    unchanged: AtomicU64,
    refused: AtomicU64,
    rejected: AtomicU64,
}

/// A snapshot of the agent events' outcomes: `(outcome, count)`, outcomes in a fixed order —
/// `applied`, `duplicate` (a delivery id seen before), `unchanged` (nothing left to change),
/// `refused` (late: the sandbox's state refuses it), `rejected` (unknown sandbox, wrong token, malformed).
pub type AgentEventCounts = [(&'static str, u64); 5];

impl Tally {
    fn count(&self, outcome: &Result<CallbackAnswer, ServiceError>, duplicate: bool) {
        let counter = match outcome {
            Ok(a) if a.applied => &self.applied,
            Ok(_) if duplicate => &self.duplicate,
            Ok(_) => &self.unchanged,
            Err(ServiceError::Conflict(_)) => &self.refused,
            Err(ServiceError::Store(_) | ServiceError::Runtime(_)) => return,
            Err(_) => &self.rejected,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> AgentEventCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("applied", get(&self.applied)),
            ("duplicate", get(&self.duplicate)),
            ("unchanged", get(&self.unchanged)),
            ("refused", get(&self.refused)),
            ("rejected", get(&self.rejected)),
        ]
    }
}

/// What one agent event came to inside its write.
enum Ingest {
    UnknownSandbox,
    BadToken,
    Duplicate(SandboxState),
    Unchanged(SandboxState),
    Refused(SandboxState),
    Applied {
        state: SandboxState,
        events: Vec<Event>,
        tear_down: bool,
    },
    /// About a warm pool's sandbox ([`crate::warm_pool`]): its entry is ready, or gone.
    Pooled {
        applied: bool,
        state: &'static str,
    },
}

/// An event from the agent of a warm pool's sandbox `id`, which has no row: `ready` marks its entry
/// ready (once), `failed` forgets it (the pool discards the sandbox).
fn pooled_event(
    tx: &mut sandboxd_store::WriteTx<'_>,
    id: &str,
    token: &str,
    event: &AgentEvent,
) -> Result<Ingest, sandboxd_store::StoreError> {
    let Some(entry) = tx.pool_entry(id)? else {
        return Ok(Ingest::UnknownSandbox);
    };
    if !bool::from(entry.agent_token.as_bytes().ct_eq(token.as_bytes())) {
        return Ok(Ingest::BadToken);
    }
    Ok(match event {
        AgentEvent::EnvironmentReady { .. } => Ingest::Pooled {
            applied: tx.mark_pool_entry_ready(id)?,
            state: "ready",
        },
        AgentEvent::EnvironmentFailed { .. } => Ingest::Pooled {
            applied: tx.delete_pool_entry(id)?,
            state: "failed",
        },
    })
}

impl Service {
    /// Applies one event an agent reported with `token` (see the module docs for twice/late/never).
    pub async fn ingest_agent_event(
        &self,
        token: &str,
        event: CallbackEvent,
    ) -> Result<CallbackAnswer, ServiceError> {
        let mut duplicate = false;
        let outcome = self.ingest(token, event, &mut duplicate).await;
        self.inner.agent_events.count(&outcome, duplicate);
        outcome
    }

    /// How many agent events came to what since this process started.
    pub fn agent_event_counts(&self) -> AgentEventCounts {
        self.inner.agent_events.snapshot()
    }

    async fn ingest(
        &self,
        token: &str,
        event: CallbackEvent,
        duplicate: &mut bool,
    ) -> Result<CallbackAnswer, ServiceError> {
        validate(&event)?;
        let token = token.to_string();
        let CallbackEvent {
            delivery_id,
            sandbox_id: id,
            event,
        } = event;
        let rid = id.clone();
        crate::failpoints::hold("callback.before-apply").await;
        let outcome = self
            .writer()
            .write(move |tx| {
                let Some(sandbox) = tx.get_sandbox_by_id(&rid)? else {
                    return pooled_event(tx, &rid, &token, &event);
                };
                let expected = sandbox.agent_token.as_bytes();
                if expected.is_empty() || !bool::from(expected.ct_eq(token.as_bytes())) {
                    return Ok(Ingest::BadToken);
                }
                if tx.delivery_seen(&delivery_id)? {
                    return Ok(Ingest::Duplicate(sandbox.state));
                }
                let now = unix_millis_now();
                use SandboxState::*;
                let (to, reason) = match (&event, sandbox.state) {
                    (AgentEvent::EnvironmentReady { .. }, Starting) => (Running, None),
                    (AgentEvent::EnvironmentReady { .. }, Running | Paused) => {
                        tx.record_delivery(&delivery_id, event.kind(), Some(&rid), now)?;
                        return Ok(Ingest::Unchanged(sandbox.state));
                    }
                    (AgentEvent::EnvironmentReady { .. }, other) => {
                        return Ok(Ingest::Refused(other));
                    }
                    (AgentEvent::EnvironmentFailed { reason }, Starting | Running | Paused) => {
                        (Failed, Some(format!("its agent reported: {reason}")))
                    }
                    (AgentEvent::EnvironmentFailed { .. }, other) => {
                        tx.record_delivery(&delivery_id, event.kind(), Some(&rid), now)?;
                        return Ok(Ingest::Unchanged(other));
                    }
                };
                // The guard: everything below happens once per delivery id.
                if !tx.record_delivery(&delivery_id, event.kind(), Some(&rid), now)? {
                    return Ok(Ingest::Duplicate(sandbox.state));
                }
                let applied = tx.set_state(&rid, &[sandbox.state], to, reason.as_deref(), now)?;
                debug_assert!(applied, "the row was read in this transaction");
                let events = if to == Running {
                    let data = tx.get_sandbox_by_id(&rid)?.map(|s| sandbox_data(&s));
                    vec![emit(
                        tx,
                        SANDBOX_RUNNING,
                        Some(&rid),
                        data.unwrap_or_default(),
                    )?]
                } else {
                    settle_in(tx, &rid, to)?
                };
                Ok(Ingest::Applied {
                    state: to,
                    events,
                    tear_down: to == Failed,
                })
            })
            .await?;
        // Committed, not yet answered: a crash here loses the 200, and the sender's retry is a duplicate.
        crate::failpoints::hold("callback.after-apply").await;
        let answer = |applied: bool, state: SandboxState| CallbackAnswer {
            applied,
            state: state.as_str().to_string(),
        };
        match outcome {
            Ingest::UnknownSandbox => {
                Err(ServiceError::NotFound(format!("sandbox {id} not found")))
            }
            Ingest::BadToken => Err(ServiceError::Unauthorized(format!(
                "the token is not sandbox {id}'s"
            ))),
            Ingest::Duplicate(state) => {
                *duplicate = true;
                tracing::info!(sandbox_id = %id, "duplicate agent event ignored");
                Ok(answer(false, state))
            }
            Ingest::Unchanged(state) => Ok(answer(false, state)),
            Ingest::Pooled { applied, state } => {
                self.pooled_agent_reported();
                Ok(CallbackAnswer {
                    applied,
                    state: state.to_string(),
                })
            }
            Ingest::Refused(state) => Err(ServiceError::Conflict(format!(
                "sandbox {id} is {state}: its readiness is refused"
            ))),
            Ingest::Applied {
                state,
                events,
                tear_down,
            } => {
                self.publish(events);
                tracing::info!(sandbox_id = %id, state = %state, "applied an agent event");
                if tear_down {
                    self.tear_down(&id).await?;
                }
                Ok(answer(true, state))
            }
        }
    }

    /// The events sandbox `key`'s agent reported (its ledger entries), oldest first.
    pub async fn agent_events(&self, key: &str) -> Result<Vec<Delivery>, ServiceError> {
        let id = self.get(key).await?.id;
        Ok(self
            .reader()
            .read(move |tx| tx.deliveries_for_sandbox(&id))
            .await?)
    }

    /// Waits until sandbox `id` leaves `starting`: its row once `running`; once it failed (or went),
    /// [`ServiceError::StartFailed`] with the reason. At `deadline` the sandbox is settled `failed`.
    pub async fn await_ready(&self, id: &str, deadline: Instant) -> Result<Sandbox, ServiceError> {
        let wake = self.inner.readiness.register(id);
        let result = self.await_ready_armed(id, deadline, &wake).await;
        self.inner.readiness.unregister(id);
        result
    }

    async fn await_ready_armed(
        &self,
        id: &str,
        deadline: Instant,
        wake: &Notify,
    ) -> Result<Sandbox, ServiceError> {
        let mut gave_up = false;
        loop {
            let woken = wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let rid = id.to_string();
            let row = self
                .reader()
                .read_by_key(move |tx| tx.get_sandbox_by_id(&rid))
                .await?;
            let row = match row {
                None => {
                    return Err(ServiceError::StartFailed {
                        id: id.to_string(),
                        reason: "it was deleted while starting".into(),
                    })
                }
                Some(row) if row.state == SandboxState::Starting => row,
                Some(row) if row.state == SandboxState::Running => return Ok(row),
                Some(row) => {
                    return Err(ServiceError::StartFailed {
                        id: id.to_string(),
                        reason: row
                            .failure_reason
                            .unwrap_or_else(|| format!("it is {}", row.state)),
                    })
                }
            };
            if gave_up {
                // Settling found the row moved on, yet it reads `starting`: report the silence anyway.
                return Err(ServiceError::StartFailed {
                    id: id.to_string(),
                    reason: self.silence_reason(id).await,
                });
            }
            tokio::select! {
                _ = &mut woken => {}
                _ = tokio::time::sleep_until(deadline) => {
                    gave_up = true;
                    let reason = self.silence_reason(id).await;
                    self.settle(id, row.state, SandboxState::Failed, reason).await?;
                }
            }
        }
    }

    /// Why a sandbox's agent never reported ready, as far as the runtime can tell.
    async fn silence_reason(&self, id: &str) -> String {
        let secs = self.config().ready_deadline.as_secs_f64();
        match self.runtime().inspect(id).await {
            Ok(Some(info)) if info.state == sandboxd_runtime::RuntimeState::Running => {
                format!("its agent did not report ready within {secs:.1}s")
            }
            Ok(_) => format!("its agent exited before reporting ready (deadline {secs:.1}s)"),
            Err(e) => format!(
                "its agent did not report ready within {secs:.1}s (runtime: {})",
                crate::error::chain(&e)
            ),
        }
    }
}

/// Checks an event's shape before it touches the store.
fn validate(event: &CallbackEvent) -> Result<(), ServiceError> {
    let id = &event.delivery_id;
    if id.is_empty()
        || id.len() > MAX_DELIVERY_ID
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    {
        return Err(ServiceError::InvalidRequest(format!(
            "deliveryId must be 1 to {MAX_DELIVERY_ID} characters of [A-Za-z0-9-_.:]"
        )));
    }
    sandboxd_runtime::validate_id(&event.sandbox_id)
        .map_err(|e| ServiceError::InvalidRequest(format!("sandboxId: {e}")))?;
    if let AgentEvent::EnvironmentFailed { reason } = &event.event {
        if reason.len() > MAX_REASON {
            return Err(ServiceError::InvalidRequest(format!(
                "reason must be at most {MAX_REASON} bytes"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::SANDBOX_FAILED;
    use crate::test_support::{InMemoryRuntimeForTests, TestService};
    use crate::ServiceConfig;

    fn ready(delivery: &str) -> CallbackEvent {
        CallbackEvent {
            delivery_id: delivery.into(),
            sandbox_id: "sb-1".into(),
            event: AgentEvent::EnvironmentReady {
                envd_version: "0.6.4".into(),
            },
        }
    }

    fn failed(delivery: &str) -> CallbackEvent {
        CallbackEvent {
            event: AgentEvent::EnvironmentFailed {
                reason: "setup crashed".into(),
            },
            ..ready(delivery)
        }
    }

    async fn starting() -> TestService {
        let t = TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default());
        t.row("sb-1", "named", SandboxState::Starting, unix_millis_now())
            .await;
        t
    }

    /// Twice: fifty concurrent copies of one delivery apply once and announce once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replayed_readiness_applies_once() {
        let t = starting().await;
        let mut events = t.svc.subscribe();
        let copies: Vec<_> = (0..50)
            .map(|_| {
                let svc = t.svc.clone();
                tokio::spawn(async move { svc.ingest_agent_event("t", ready("dlv-a")).await })
            })
            .collect();
        let mut applied = 0;
        for copy in copies {
            let answer = copy.await.unwrap().unwrap();
            assert_eq!(answer.state, "running");
            applied += usize::from(answer.applied);
        }
        assert_eq!(applied, 1);
        let row = t.get("sb-1").await.unwrap();
        assert_eq!((row.state, row.generation), (SandboxState::Running, 1));
        assert_eq!(events.recv().await.unwrap().kind, SANDBOX_RUNNING);
        assert!(events.try_recv().is_err(), "announced more than once");
        let ledger = t
            .svc
            .reader()
            .read(|tx| tx.deliveries_for_sandbox("sb-1"))
            .await
            .unwrap();
        assert_eq!(ledger.len(), 1);
        let counts = t.svc.agent_event_counts();
        assert_eq!(&counts[..2], [("applied", 1), ("duplicate", 49)]);
    }

    /// Late: readiness after the sandbox failed is refused, recorded nowhere, and revives nothing.
    #[tokio::test]
    async fn late_readiness_is_refused() {
        let t = starting().await;
        let settled = t
            .svc
            .settle(
                "sb-1",
                SandboxState::Starting,
                SandboxState::Failed,
                "deadline".into(),
            )
            .await
            .unwrap();
        assert!(settled);
        let err = t
            .svc
            .ingest_agent_event("t", ready("dlv-late"))
            .await
            .unwrap_err();
        assert!(matches!(err, ServiceError::Conflict(_)), "{err:?}");
        let row = t.get("sb-1").await.unwrap();
        assert_eq!(row.state, SandboxState::Failed);
        assert_eq!(row.failure_reason.as_deref(), Some("deadline"));
        assert_eq!(row.name, "", "a failed sandbox releases its name");
        let seen = t
            .svc
            .reader()
            .read(|tx| tx.delivery_seen("dlv-late"))
            .await
            .unwrap();
        assert!(!seen);
    }

    /// Late, racing: ready and failed about one sandbox end `failed` in either order.
    #[tokio::test]
    async fn ready_and_failed_converge_in_either_order() {
        for ready_first in [true, false] {
            let t = starting().await;
            let (a, b) = if ready_first {
                (ready("dlv-r"), failed("dlv-f"))
            } else {
                (failed("dlv-f"), ready("dlv-r"))
            };
            let _ = t.svc.ingest_agent_event("t", a).await;
            let _ = t.svc.ingest_agent_event("t", b).await;
            let row = t.get("sb-1").await.unwrap();
            assert_eq!(
                row.state,
                SandboxState::Failed,
                "ready first: {ready_first}"
            );
            assert_eq!(
                row.failure_reason.as_deref(),
                Some("its agent reported: setup crashed")
            );
            let leased = t.svc.reader().read(|tx| tx.slot_of("sb-1")).await.unwrap();
            assert_eq!(leased, None, "the failed sandbox's slot is released");
        }
    }

    /// Never: a create whose agent stays silent fails at the deadline with the reason, and its
    /// waiter is released with it.
    #[tokio::test]
    async fn silent_agent_fails_the_create_at_its_deadline() {
        let t = TestService::new(
            ServiceConfig {
                ready_deadline: Duration::from_millis(200),
                ..ServiceConfig::default()
            },
            InMemoryRuntimeForTests::default(),
        );
        *t.rt.started.lock().unwrap() = None; // no agent calls home
        let mut events = t.svc.subscribe();
        let plan = t.svc.plan_create(Default::default()).unwrap();
        let begun = Instant::now();
        let err = t
            .svc
            .create_with_id("sb-silent".into(), plan)
            .await
            .unwrap_err();
        assert!(begun.elapsed() < Duration::from_secs(2));
        let ServiceError::StartFailed { id, reason } = err else {
            panic!("{err:?}")
        };
        assert_eq!(id, "sb-silent");
        assert!(reason.contains("did not report ready"), "{reason}");
        let row = t.get("sb-silent").await.unwrap();
        assert_eq!(row.state, SandboxState::Failed);
        assert!(t.rt.ids().is_empty(), "its runtime sandbox was destroyed");
        let kinds: Vec<_> = std::iter::from_fn(|| events.try_recv().ok())
            .map(|e| e.kind)
            .collect();
        assert_eq!(kinds.last(), Some(&SANDBOX_FAILED));
    }

    #[tokio::test]
    async fn bad_events_are_refused_before_the_store() {
        let t = starting().await;
        let wrong_token = t.svc.ingest_agent_event("nope", ready("dlv-1")).await;
        assert!(matches!(wrong_token, Err(ServiceError::Unauthorized(_))));
        let unknown = CallbackEvent {
            sandbox_id: "sb-other".into(),
            ..ready("dlv-2")
        };
        let unknown = t.svc.ingest_agent_event("t", unknown).await;
        assert!(matches!(unknown, Err(ServiceError::NotFound(_))));
        for bad_id in ["", "has space", &"x".repeat(129)] {
            let r = t.svc.ingest_agent_event("t", ready(bad_id)).await;
            assert!(
                matches!(r, Err(ServiceError::InvalidRequest(_))),
                "{bad_id:?}"
            );
        }
        assert_eq!(t.get("sb-1").await.unwrap().state, SandboxState::Starting);
    }
}
