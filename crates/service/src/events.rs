//! Events: what changed, announced to webhooks (through the outbox) and to `GET /v1/events` listeners.
//!
//! Contract: a flow that changes state calls [`emit`] INSIDE the write closure that makes the change, so
//! the outbox rows (one per registration subscribed to the kind, each with its own stable `msg_` delivery
//! id) commit or roll back together with the change: no announced change that did not happen, no change
//! that is never announced. [`emit`] returns the [`Event`]; the flow hands it to [`Service::publish`] only
//! AFTER the write returned (committed), so a live listener never sees an event whose change was rolled
//! back. Live listeners may miss events (a lagging receiver loses the oldest); webhooks do not.

use crate::sandboxes::random_id;
use crate::Service;
use sandboxd_store::{unix_millis_now, NewWebhook, StoreError, WriteTx};
use serde_json::{json, Value};

/// Every event kind, in lifecycle order.
pub const KINDS: &[&str] = &[
    SANDBOX_CREATED,
    SANDBOX_RUNNING,
    SANDBOX_FAILED,
    SANDBOX_LOST,
    SANDBOX_PAUSED,
    SANDBOX_RESUMED,
    SANDBOX_STOPPED,
    SANDBOX_DELETED,
    PORT_EXPOSED,
    PORT_UNEXPOSED,
];
/// The sandbox row was inserted (state `creating`).
pub const SANDBOX_CREATED: &str = "sandbox.created";
/// The sandbox started.
pub const SANDBOX_RUNNING: &str = "sandbox.running";
/// The sandbox failed to be created (or a stuck create was resolved as failed).
pub const SANDBOX_FAILED: &str = "sandbox.failed";
/// The sandbox's processes vanished.
pub const SANDBOX_LOST: &str = "sandbox.lost";
/// The sandbox was frozen.
pub const SANDBOX_PAUSED: &str = "sandbox.paused";
/// The sandbox was thawed.
pub const SANDBOX_RESUMED: &str = "sandbox.resumed";
/// The sandbox's processes were ended on request; its filesystem is kept (state `stopped`).
pub const SANDBOX_STOPPED: &str = "sandbox.stopped";
/// The sandbox row is gone.
pub const SANDBOX_DELETED: &str = "sandbox.deleted";
/// A port was exposed.
pub const PORT_EXPOSED: &str = "port.exposed";
/// An exposure was withdrawn.
pub const PORT_UNEXPOSED: &str = "port.unexposed";

/// Events after which a sandbox is no longer `starting`: they wake its create's waiter.
const SETTLES_START: &[&str] = &[
    SANDBOX_RUNNING,
    SANDBOX_FAILED,
    SANDBOX_LOST,
    SANDBOX_DELETED,
];

/// How many events a live listener may fall behind before it loses the oldest.
const LIVE_BUFFER: usize = 1024;

/// One committed change.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// `evt_` + random; the SSE `id:`.
    pub id: String,
    /// One of [`KINDS`].
    pub kind: &'static str,
    /// Unix milliseconds.
    pub at: i64,
    /// The sandbox it is about.
    pub sandbox_id: Option<String>,
    /// What the event says (the sandbox, the port, …).
    pub data: Value,
}

impl Event {
    /// The JSON body webhooks receive and SSE listeners read: `{type, timestamp, data}`.
    pub fn body(&self) -> Value {
        json!({
            "type": self.kind,
            "timestamp": crate::timestamps::rfc3339(self.at),
            "data": self.data,
        })
    }
}

/// Records `kind` about `sandbox_id` in the write `tx`: one outbox row per subscribed registration.
pub fn emit(
    tx: &mut WriteTx<'_>,
    kind: &'static str,
    sandbox_id: Option<&str>,
    data: Value,
) -> Result<Event, StoreError> {
    debug_assert!(KINDS.contains(&kind), "unknown event kind {kind}");
    let event = Event {
        id: random_id("evt_", 24),
        kind,
        at: unix_millis_now(),
        sandbox_id: sandbox_id.map(str::to_owned),
        data,
    };
    let body = event.body();
    for hook in tx.webhooks_for(kind)? {
        let delivery = random_id("msg_", 24);
        tx.enqueue_webhook(
            &NewWebhook {
                event_id: &delivery,
                kind,
                sandbox_id,
                payload: &body,
                webhook_id: Some(&hook.id),
            },
            event.at,
        )?;
    }
    Ok(event)
}

/// The live feed of committed events.
#[derive(Debug)]
pub(crate) struct EventBus {
    tx: tokio::sync::broadcast::Sender<Event>,
}

impl Default for EventBus {
    fn default() -> Self {
        Self {
            tx: tokio::sync::broadcast::channel(LIVE_BUFFER).0,
        }
    }
}

impl Service {
    /// Announces committed events to live listeners (and wakes the webhook sender). Call only after the
    /// write that emitted them returned.
    pub fn publish(&self, events: impl IntoIterator<Item = Event>) {
        for event in events {
            tracing::debug!(event_id = %event.id, kind = event.kind, sandbox_id = ?event.sandbox_id, "event");
            if let (Some(id), true) = (&event.sandbox_id, SETTLES_START.contains(&event.kind)) {
                self.inner.readiness.wake(id);
            }
            // No listener is fine.
            let _ = self.inner.events.tx.send(event);
        }
    }

    /// A receiver of every event committed from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Event> {
        self.inner.events.tx.subscribe()
    }
}

/// The `data` of a sandbox event.
pub(crate) fn sandbox_data(s: &sandboxd_store::Sandbox) -> Value {
    serde_json::to_value(crate::sandboxes::to_api(s)).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_store::{Store, StoreConfig, Webhook};

    #[tokio::test]
    async fn emitted_rows_commit_with_the_change_and_go_only_to_subscribers() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _thread) =
            Store::open(dir.path().join("store.db"), StoreConfig::default()).unwrap();
        let w = store.writer();
        w.write(|tx| {
            for (id, kind) in [("wh_a", SANDBOX_CREATED), ("wh_b", SANDBOX_DELETED)] {
                tx.insert_webhook(&Webhook {
                    id: id.into(),
                    url: "http://127.0.0.1:9/".into(),
                    events: vec![kind.into()],
                    secret: "0123456789abcdef".into(),
                    created_at: 1,
                })?;
            }
            Ok(())
        })
        .await
        .unwrap();
        let due = |store: &Store| {
            let r = store.reader().clone();
            async move { r.read(|tx| tx.due_webhooks(i64::MAX, 100)).await.unwrap() }
        };
        // A change that rolls back takes its announcement with it.
        let failed = w
            .write(|tx| {
                emit(tx, SANDBOX_CREATED, Some("sb1"), json!({"id": "sb1"}))?;
                Err::<(), _>(StoreError::NotFound {
                    kind: "sandbox",
                    key: "sb1".into(),
                })
            })
            .await;
        assert!(failed.is_err());
        assert!(
            due(&store).await.is_empty(),
            "a rolled-back change announced"
        );
        let ev = w
            .write(|tx| emit(tx, SANDBOX_CREATED, Some("sb1"), json!({"id": "sb1"})))
            .await
            .unwrap();
        let rows = due(&store).await;
        assert_eq!(rows.len(), 1, "only wh_a subscribes to sandbox.created");
        assert_eq!(rows[0].webhook_id.as_deref(), Some("wh_a"));
        assert!(rows[0].event_id.starts_with("msg_"));
        assert_eq!(rows[0].payload, ev.body());
        assert_eq!(rows[0].payload["type"], SANDBOX_CREATED);
        assert!(ev.id.starts_with("evt_"));
    }
}
