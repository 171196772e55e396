//! The delivery ledger: dedupe at ingestion.
//!
//! Contract: a sender mints one delivery id per logical event and reuses it on every retry; the receiver
//! calls [`WriteTx::record_delivery`] in the SAME write closure as the state change the event causes, and
//! applies the change only when it returns `true`. Because both run in one savepoint of one transaction,
//! either both are committed or neither is: a duplicate delivery is a no-op, and a failed apply leaves the
//! id unrecorded so the retry is applied.
//!
//! ```no_run
//! # async fn f(writer: sandboxd_store::StoreWriter, now: i64) -> sandboxd_store::Result<()> {
//! use sandboxd_store::SandboxState::{Running, Starting};
//! writer
//!     .write(move |tx| {
//!         if tx.record_delivery("dlv-123", "environment-ready", Some("sbx-1"), now)? {
//!             tx.set_state("sbx-1", &[Starting], Running, None, now)?;
//!         }
//!         Ok(())
//!     })
//!     .await
//! # }
//! ```

use rusqlite::params;

use crate::error::Result;
use crate::{ReadTx, UnixMillis, WriteTx};

/// One recorded delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The sender's id.
    pub delivery_id: String,
    /// What it reported (`environment-ready`, …).
    pub kind: String,
    /// The sandbox it was about.
    pub sandbox_id: Option<String>,
    /// When it was first received (and applied).
    pub received_at: UnixMillis,
}

impl ReadTx<'_> {
    /// The deliveries recorded about sandbox `id`, oldest first.
    pub fn deliveries_for_sandbox(&self, id: &str) -> Result<Vec<Delivery>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT delivery_id, kind, sandbox_id, received_at FROM deliveries
             WHERE sandbox_id = ?1 ORDER BY received_at, delivery_id",
        )?;
        let rows = stmt.query_map([id], |r| {
            Ok(Delivery {
                delivery_id: r.get(0)?,
                kind: r.get(1)?,
                sandbox_id: r.get(2)?,
                received_at: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Whether `delivery_id` was recorded.
    pub fn delivery_seen(&self, delivery_id: &str) -> Result<bool> {
        Ok(self
            .conn()
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM deliveries WHERE delivery_id = ?1)")?
            .query_row([delivery_id], |r| r.get(0))?)
    }
}

impl WriteTx<'_> {
    /// Records `delivery_id`; `true` the first time, `false` for a duplicate.
    pub fn record_delivery(
        &mut self,
        delivery_id: &str,
        kind: &str,
        sandbox_id: Option<&str>,
        now: UnixMillis,
    ) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "INSERT INTO deliveries (delivery_id, kind, sandbox_id, received_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (delivery_id) DO NOTHING",
            )?
            .execute(params![delivery_id, kind, sandbox_id, now])?;
        Ok(n == 1)
    }

    /// Forgets deliveries received before `before` (once no sender can still retry them). Returns how many.
    pub fn prune_deliveries(&mut self, before: UnixMillis) -> Result<usize> {
        Ok(self
            .conn()
            .prepare_cached("DELETE FROM deliveries WHERE received_at < ?1")?
            .execute([before])?)
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::{new_sandbox, open_temp};
    use crate::{SandboxState, StoreError};

    /// Invariant: an event is applied once (`deliveries` primary key, recorded in the same transaction as
    /// the change it causes).
    #[tokio::test]
    async fn a_delivery_is_recorded_once() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        w.write(|tx| tx.insert_sandbox(new_sandbox("s", "", 1)))
            .await
            .unwrap();
        let apply = |now: i64| {
            move |tx: &mut crate::WriteTx<'_>| {
                let first = tx.record_delivery("dlv-1", "ready", Some("s"), now)?;
                if first {
                    // The state change the event causes; bumps the generation once per application.
                    tx.set_state("s", &SandboxState::ALL, SandboxState::Running, None, now)?;
                }
                Ok(first)
            }
        };
        assert!(w.write(apply(2)).await.unwrap());
        assert!(!w.write(apply(3)).await.unwrap());
        assert!(!w.write(apply(4)).await.unwrap());
        let s = store
            .reader()
            .read(|tx| tx.get_sandbox_by_id("s"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((s.generation, s.updated_at), (1, 2), "applied exactly once");
    }

    /// A failed apply leaves the delivery unrecorded (same savepoint), so the sender's retry is applied.
    #[tokio::test]
    async fn failed_apply_does_not_record_the_delivery() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        let err = w
            .write(|tx| {
                tx.record_delivery("dlv-2", "ready", None, 1)?;
                Err::<(), _>(StoreError::InvalidArgument("apply failed".into()))
            })
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::InvalidArgument(_)));
        assert!(w
            .write(|tx| tx.record_delivery("dlv-2", "ready", None, 2))
            .await
            .unwrap());
    }

    #[tokio::test]
    async fn deliveries_are_listed_by_sandbox() {
        let (_dir, store, _t) = open_temp();
        store
            .writer()
            .write(|tx| {
                tx.record_delivery("b", "environment-failed", Some("s1"), 20)?;
                tx.record_delivery("a", "environment-ready", Some("s1"), 10)?;
                tx.record_delivery("c", "environment-ready", Some("s2"), 5)
            })
            .await
            .unwrap();
        let got = store
            .reader()
            .read(|tx| tx.deliveries_for_sandbox("s1"))
            .await
            .unwrap();
        let ids: Vec<&str> = got.iter().map(|d| d.delivery_id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(got[0].kind, "environment-ready");
    }

    #[tokio::test]
    async fn prune_forgets_old_deliveries() {
        let (_dir, store, _t) = open_temp();
        let n = store
            .writer()
            .write(|tx| {
                tx.record_delivery("old", "k", None, 10)?;
                tx.record_delivery("new", "k", None, 20)?;
                tx.prune_deliveries(15)
            })
            .await
            .unwrap();
        assert_eq!(n, 1);
        let (old, new) = store
            .reader()
            .read(|tx| Ok((tx.delivery_seen("old")?, tx.delivery_seen("new")?)))
            .await
            .unwrap();
        assert!(!old && new);
    }
}
