//! The webhook outbox: outbound events written in the same transaction as the change they announce.
//!
//! Contract: [`WriteTx::enqueue_webhook`] is idempotent per `event_id` (unique), so a retried flow does not
//! announce twice. A sender polls [`ReadTx::due_webhooks`], delivers with the event id as its delivery id,
//! and then records the result: [`WriteTx::mark_webhook_delivered`], [`WriteTx::reschedule_webhook`]
//! (transport error / 5xx: attempts + 1, next attempt later) or [`WriteTx::mark_webhook_failed`] (4xx or
//! budget spent). Only `pending` rows are due; the result updates apply only to pending rows, so a late
//! duplicate result cannot resurrect a finished one.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ValueRef};
use rusqlite::{params, OptionalExtension, Row};

use crate::error::Result;
use crate::{ReadTx, UnixMillis, WriteTx};

/// Delivery state of an outbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxState {
    Pending,
    Delivered,
    Failed,
}

impl FromSql for OutboxState {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value.as_str()? {
            "pending" => Ok(OutboxState::Pending),
            "delivered" => Ok(OutboxState::Delivered),
            "failed" => Ok(OutboxState::Failed),
            other => Err(FromSqlError::Other(
                format!("unknown outbox state {other:?}").into(),
            )),
        }
    }
}

/// An event to announce.
#[derive(Debug, Clone)]
pub struct NewWebhook<'a> {
    /// Unique per logical event; also the delivery id the receiver dedupes on.
    pub event_id: &'a str,
    pub kind: &'a str,
    pub sandbox_id: Option<&'a str>,
    pub payload: &'a serde_json::Value,
    /// The registration it goes to (see [`crate::webhooks`]); `None` for rows queued before migration 2.
    pub webhook_id: Option<&'a str>,
}

/// A stored outbox row.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEntry {
    pub id: i64,
    pub event_id: String,
    pub kind: String,
    pub sandbox_id: Option<String>,
    pub payload: serde_json::Value,
    pub created_at: UnixMillis,
    pub state: OutboxState,
    pub attempts: u32,
    pub next_attempt_at: UnixMillis,
    pub last_error: Option<String>,
    pub webhook_id: Option<String>,
}

pub(crate) const COLUMNS: &str =
    "id, event_id, kind, sandbox_id, payload, created_at, state, attempts, next_attempt_at, last_error, webhook_id";

pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<OutboxEntry> {
    let payload: String = row.get(4)?;
    Ok(OutboxEntry {
        id: row.get(0)?,
        event_id: row.get(1)?,
        kind: row.get(2)?,
        sandbox_id: row.get(3)?,
        payload: serde_json::from_str(&payload).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(4, rusqlite::types::Type::Text, Box::new(e))
        })?,
        created_at: row.get(5)?,
        state: row.get(6)?,
        attempts: row.get(7)?,
        next_attempt_at: row.get(8)?,
        last_error: row.get(9)?,
        webhook_id: row.get(10)?,
    })
}

impl ReadTx<'_> {
    /// Pending rows due at `now`, oldest due first, at most `limit`.
    pub fn due_webhooks(&self, now: UnixMillis, limit: usize) -> Result<Vec<OutboxEntry>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM webhook_outbox WHERE state = 'pending' AND next_attempt_at <= ?1
             ORDER BY next_attempt_at, id LIMIT ?2"
        );
        let mut stmt = self.conn().prepare_cached(&sql)?;
        let rows = stmt
            .query_map(params![now, limit as i64], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// The outbox row for `event_id`.
    pub fn get_webhook(&self, event_id: &str) -> Result<Option<OutboxEntry>> {
        let sql = format!("SELECT {COLUMNS} FROM webhook_outbox WHERE event_id = ?1");
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_row([event_id], from_row)
            .optional()?)
    }
}

impl WriteTx<'_> {
    /// Queues an event, due at once. Returns `false` if `event_id` was already queued.
    pub fn enqueue_webhook(&mut self, event: &NewWebhook<'_>, now: UnixMillis) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "INSERT INTO webhook_outbox (event_id, kind, sandbox_id, payload, created_at, next_attempt_at,
                                             webhook_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)
                 ON CONFLICT (event_id) DO NOTHING",
            )?
            .execute(params![
                event.event_id,
                event.kind,
                event.sandbox_id,
                event.payload.to_string(),
                now,
                event.webhook_id
            ])?;
        Ok(n == 1)
    }

    /// Marks row `id` delivered. Returns whether a pending row changed.
    pub fn mark_webhook_delivered(&mut self, id: i64) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE webhook_outbox SET state = 'delivered', attempts = attempts + 1, last_error = NULL
                 WHERE id = ?1 AND state = 'pending'",
            )?
            .execute([id])?;
        Ok(n == 1)
    }

    /// Records a failed attempt of row `id` and makes it due again at `next_attempt_at`.
    pub fn reschedule_webhook(
        &mut self,
        id: i64,
        next_attempt_at: UnixMillis,
        error: &str,
    ) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = ?2, last_error = ?3
                 WHERE id = ?1 AND state = 'pending'",
            )?
            .execute(params![id, next_attempt_at, error])?;
        Ok(n == 1)
    }

    /// Gives up on row `id`.
    pub fn mark_webhook_failed(&mut self, id: i64, error: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE webhook_outbox SET state = 'failed', attempts = attempts + 1, last_error = ?2
                 WHERE id = ?1 AND state = 'pending'",
            )?
            .execute(params![id, error])?;
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::open_temp;

    #[tokio::test]
    async fn outbox_rows_are_unique_per_event_and_move_through_states() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        let payload = serde_json::json!({"sandboxId": "s", "state": "running"});
        let p = payload.clone();
        let (first, dup) = w
            .write(move |tx| {
                let ev = NewWebhook {
                    event_id: "ev-1",
                    kind: "sandbox.running",
                    sandbox_id: Some("s"),
                    payload: &p,
                    webhook_id: None,
                };
                Ok((tx.enqueue_webhook(&ev, 100)?, tx.enqueue_webhook(&ev, 101)?))
            })
            .await
            .unwrap();
        assert!(first && !dup);
        let due = store
            .reader()
            .read(|tx| tx.due_webhooks(100, 10))
            .await
            .unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].payload, payload);
        let id = due[0].id;
        assert!(w
            .write(move |tx| tx.reschedule_webhook(id, 1_100, "503"))
            .await
            .unwrap());
        let (early, later) = store
            .reader()
            .read(|tx| Ok((tx.due_webhooks(1_099, 10)?, tx.due_webhooks(1_100, 10)?)))
            .await
            .unwrap();
        assert!(early.is_empty());
        assert_eq!(
            (later[0].attempts, later[0].last_error.as_deref()),
            (1, Some("503"))
        );
        assert!(w
            .write(move |tx| tx.mark_webhook_delivered(id))
            .await
            .unwrap());
        // A late duplicate result does not resurrect or re-fail a finished row.
        assert!(!w
            .write(move |tx| tx.mark_webhook_failed(id, "late"))
            .await
            .unwrap());
        let row = store
            .reader()
            .read(|tx| tx.get_webhook("ev-1"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((row.state, row.attempts), (OutboxState::Delivered, 2));
    }
}
