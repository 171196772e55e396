//! Webhook registrations and the delivery log of the outbox ([`crate::outbox`]).
//!
//! Contract: a registration is `(id, url, events, secret)`; [`ReadTx::webhooks_for`] answers which
//! registrations an event kind fans out to, so a flow can queue one outbox row per subscriber in the same
//! write as the change it announces. Every attempt a sender makes is logged once per `(outbox row,
//! attempt number)` ([`WriteTx::record_webhook_attempt`]) and counted on the row; a sender leases a due row
//! ([`WriteTx::lease_webhook`]) before sending so a second poll does not send it concurrently, and settles
//! it with [`WriteTx::settle_webhook`]. Deleting a registration leaves its rows (their history stays
//! readable); a sender fails rows whose registration is gone.

use rusqlite::{params, OptionalExtension, Row};

use crate::error::Result;
use crate::outbox::{from_row, OutboxEntry, OutboxState, COLUMNS};
use crate::{ReadTx, UnixMillis, WriteTx};

/// A webhook registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub id: String,
    pub url: String,
    /// Event kinds it is subscribed to.
    pub events: Vec<String>,
    /// Signing secret (raw, or `whsec_` + base64).
    pub secret: String,
    pub created_at: UnixMillis,
}

/// One logged delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryAttempt {
    pub attempt: u32,
    pub at: UnixMillis,
    /// HTTP status, when the receiver answered.
    pub status: Option<u16>,
    pub error: Option<String>,
}

fn webhook_from_row(row: &Row<'_>) -> rusqlite::Result<Webhook> {
    let events: String = row.get(2)?;
    Ok(Webhook {
        id: row.get(0)?,
        url: row.get(1)?,
        events: serde_json::from_str(&events).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, Box::new(e))
        })?,
        secret: row.get(3)?,
        created_at: row.get(4)?,
    })
}

impl ReadTx<'_> {
    /// Every registration, oldest first.
    pub fn list_webhooks(&self) -> Result<Vec<Webhook>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT id, url, events, secret, created_at FROM webhooks ORDER BY created_at, id",
        )?;
        let rows = stmt
            .query_map([], webhook_from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Registration `id`.
    pub fn get_webhook_registration(&self, id: &str) -> Result<Option<Webhook>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT id, url, events, secret, created_at FROM webhooks WHERE id = ?1",
            )?
            .query_row([id], webhook_from_row)
            .optional()?)
    }

    /// Registrations subscribed to `kind`.
    pub fn webhooks_for(&self, kind: &str) -> Result<Vec<Webhook>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT id, url, events, secret, created_at FROM webhooks
             WHERE EXISTS (SELECT 1 FROM json_each(webhooks.events) WHERE value = ?1)
             ORDER BY created_at, id",
        )?;
        let rows = stmt
            .query_map([kind], webhook_from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// The outbox rows of registration `webhook_id`, newest first, at most `limit`, each with its attempts.
    pub fn webhook_deliveries(
        &self,
        webhook_id: &str,
        limit: usize,
    ) -> Result<Vec<(OutboxEntry, Vec<DeliveryAttempt>)>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM webhook_outbox WHERE webhook_id = ?1 ORDER BY id DESC LIMIT ?2"
        );
        let rows = self
            .conn()
            .prepare_cached(&sql)?
            .query_map(params![webhook_id, limit as i64], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut out = Vec::with_capacity(rows.len());
        let mut stmt = self.conn().prepare_cached(
            "SELECT attempt, at, status, error FROM webhook_attempts WHERE outbox_id = ?1 ORDER BY attempt",
        )?;
        for row in rows {
            let attempts = stmt
                .query_map([row.id], |r| {
                    Ok(DeliveryAttempt {
                        attempt: r.get(0)?,
                        at: r.get(1)?,
                        status: r.get(2)?,
                        error: r.get(3)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            out.push((row, attempts));
        }
        Ok(out)
    }
}

impl WriteTx<'_> {
    /// Stores a registration.
    pub fn insert_webhook(&mut self, w: &Webhook) -> Result<()> {
        let events = serde_json::to_string(&w.events).unwrap_or_else(|_| "[]".into());
        self.conn()
            .prepare_cached(
                "INSERT INTO webhooks (id, url, events, secret, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![w.id, w.url, events, w.secret, w.created_at])?;
        Ok(())
    }

    /// Deletes registration `id`; returns whether it existed.
    pub fn delete_webhook(&mut self, id: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached("DELETE FROM webhooks WHERE id = ?1")?
            .execute([id])?;
        Ok(n == 1)
    }

    /// Makes pending row `id` due only at `until` (a sender is working on it). Returns whether it was
    /// still pending.
    pub fn lease_webhook(&mut self, id: i64, until: UnixMillis) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE webhook_outbox SET next_attempt_at = ?2 WHERE id = ?1 AND state = 'pending'",
            )?
            .execute(params![id, until])?;
        Ok(n == 1)
    }

    /// Logs attempt `attempt` of row `outbox_id` and counts it on the row (once per attempt number).
    pub fn record_webhook_attempt(
        &mut self,
        outbox_id: i64,
        attempt: &DeliveryAttempt,
    ) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "INSERT INTO webhook_attempts (outbox_id, attempt, at, status, error) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (outbox_id, attempt) DO NOTHING",
            )?
            .execute(params![
                outbox_id,
                attempt.attempt,
                attempt.at,
                attempt.status,
                attempt.error
            ])?;
        if n == 1 {
            self.conn()
                .prepare_cached(
                    "UPDATE webhook_outbox SET attempts = attempts + 1, last_error = ?2 WHERE id = ?1",
                )?
                .execute(params![outbox_id, attempt.error])?;
        }
        Ok(n == 1)
    }

    /// Settles pending row `id`: `Delivered`, `Failed`, or `Pending` again at `next_attempt_at`. Attempts
    /// are counted by [`WriteTx::record_webhook_attempt`], not here. Returns whether a pending row changed.
    pub fn settle_webhook(
        &mut self,
        id: i64,
        state: OutboxState,
        next_attempt_at: UnixMillis,
        error: Option<&str>,
    ) -> Result<bool> {
        let state = match state {
            OutboxState::Pending => "pending",
            OutboxState::Delivered => "delivered",
            OutboxState::Failed => "failed",
        };
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE webhook_outbox SET state = ?2, next_attempt_at = ?3, last_error = ?4
                 WHERE id = ?1 AND state = 'pending'",
            )?
            .execute(params![id, state, next_attempt_at, error])?;
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::NewWebhook;
    use crate::test_util::open_temp;

    fn hook(id: &str, events: &[&str]) -> Webhook {
        Webhook {
            id: id.into(),
            url: "http://127.0.0.1:9/".into(),
            events: events.iter().map(|s| s.to_string()).collect(),
            secret: "0123456789abcdef".into(),
            created_at: 1,
        }
    }

    #[tokio::test]
    async fn events_fan_out_only_to_subscribed_registrations_and_attempts_are_logged_once() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        w.write(|tx| {
            tx.insert_webhook(&hook("wh_a", &["sandbox.created", "sandbox.deleted"]))?;
            tx.insert_webhook(&hook("wh_b", &["port.exposed"]))
        })
        .await
        .unwrap();
        let subs = store
            .reader()
            .read(|tx| tx.webhooks_for("sandbox.created"))
            .await
            .unwrap();
        assert_eq!(
            subs.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(),
            ["wh_a"]
        );
        let payload = serde_json::json!({"type": "sandbox.created"});
        let id = w
            .write(move |tx| {
                tx.enqueue_webhook(
                    &NewWebhook {
                        event_id: "msg_1",
                        kind: "sandbox.created",
                        sandbox_id: Some("sb1"),
                        payload: &payload,
                        webhook_id: Some("wh_a"),
                    },
                    5,
                )?;
                Ok(tx.get_webhook("msg_1")?.unwrap().id)
            })
            .await
            .unwrap();
        let a = DeliveryAttempt {
            attempt: 1,
            at: 6,
            status: Some(500),
            error: Some("HTTP 500".into()),
        };
        let (first, dup) = w
            .write(move |tx| {
                Ok((
                    tx.record_webhook_attempt(id, &a)?,
                    tx.record_webhook_attempt(id, &a)?,
                ))
            })
            .await
            .unwrap();
        assert!(first && !dup);
        assert!(w
            .write(move |tx| tx.settle_webhook(id, OutboxState::Failed, 6, Some("HTTP 500")))
            .await
            .unwrap());
        let d = store
            .reader()
            .read(|tx| tx.webhook_deliveries("wh_a", 10))
            .await
            .unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].0.state, d[0].0.attempts), (OutboxState::Failed, 1));
        assert_eq!(d[0].1.len(), 1);
        assert!(store
            .reader()
            .read(|tx| tx.webhook_deliveries("wh_b", 10))
            .await
            .unwrap()
            .is_empty());
        assert!(w.write(|tx| tx.delete_webhook("wh_a")).await.unwrap());
        assert!(!w.write(|tx| tx.delete_webhook("wh_a")).await.unwrap());
    }
}
