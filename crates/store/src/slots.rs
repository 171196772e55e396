//! Network slots: the pool that numbers each sandbox's veth pair / subnet.
//!
//! Contract:
//! - A sandbox holds at most one slot (`idx_network_slots_sandbox`, unique on `sandbox_id` where it is not
//!   NULL); a free slot has `sandbox_id IS NULL` and free slots coexist freely.
//! - [`WriteTx::lease_slot`] is idempotent per sandbox: a sandbox that already holds a slot gets the same
//!   one back with `reused = true`. It never "SELECTs then INSERTs": it claims with
//!   `UPDATE OR IGNORE … WHERE sandbox_id IS NULL` / `INSERT OR IGNORE` and observes the outcome, so the
//!   index, not the caller's reasoning, rejects a second slot.
//! - Slots are handed out lowest-first in `0..pool_size` (a freed slot is reused before a new one).
//! - Deleting a sandbox frees its slot (`ON DELETE SET NULL`); `sandboxes.net_slot` mirrors the lease.
//! - A slot the host turned out to hold for someone else (another daemon's sandbox on its addresses)
//!   is set aside until a time ([`WriteTx::set_slot_aside`]): no lease hands it out before then.
//!
//! Assumes: the caller tears down whatever used a slot before releasing it (or deleting the sandbox).

use rusqlite::{params, OptionalExtension};

use crate::error::{is_foreign_key_violation, Result, StoreError};
use crate::{ReadTx, UnixMillis, WriteTx};

/// The outcome of [`WriteTx::lease_slot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotLease {
    pub slot: u32,
    /// The sandbox already held this slot (so a rollback of this call must not release it).
    pub reused: bool,
}

impl ReadTx<'_> {
    /// The slot `sandbox_id` holds, if any.
    pub fn slot_of(&self, sandbox_id: &str) -> Result<Option<u32>> {
        Ok(self
            .conn()
            .prepare_cached("SELECT slot FROM network_slots WHERE sandbox_id = ?1")?
            .query_row([sandbox_id], |r| r.get(0))
            .optional()?)
    }

    /// Every leased slot and its holder, by slot.
    pub fn leased_slots(&self) -> Result<Vec<(u32, String)>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT slot, sandbox_id FROM network_slots WHERE sandbox_id IS NOT NULL ORDER BY slot",
        )?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Leased slots whose holder is in one of `states` (e.g. `failed` and `lost`, which never run
    /// again), by slot, with the holder's id.
    pub fn slots_held_in_states(
        &self,
        states: &[crate::SandboxState],
    ) -> Result<Vec<(u32, String)>> {
        let states = serde_json::to_string(&states.iter().map(|s| s.as_str()).collect::<Vec<_>>())
            .expect("a list of strings serializes");
        let mut stmt = self.conn().prepare_cached(
            "SELECT n.slot, n.sandbox_id FROM network_slots n JOIN sandboxes s ON s.id = n.sandbox_id
             WHERE s.state IN (SELECT value FROM json_each(?1)) ORDER BY n.slot",
        )?;
        let rows = stmt
            .query_map([states], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

impl WriteTx<'_> {
    /// Leases the lowest free slot in `0..pool_size` to `sandbox_id`, or returns the one it already holds.
    /// [`StoreError::PoolExhausted`] when every slot is leased; [`StoreError::NotFound`] for an unknown
    /// sandbox.
    pub fn lease_slot(
        &mut self,
        sandbox_id: &str,
        pool_size: u32,
        now: UnixMillis,
    ) -> Result<SlotLease> {
        let lease = self.lease("sandbox_id", sandbox_id, pool_size, now)?;
        if !lease.reused {
            self.conn()
                .prepare_cached("UPDATE sandboxes SET net_slot = ?2 WHERE id = ?1")?
                .execute(params![sandbox_id, lease.slot])?;
        }
        Ok(lease)
    }

    /// Leases the lowest free slot in `0..pool_size` to warm-pool entry `pool_id`
    /// ([`crate::warm_pool`]), or returns the one it already holds; as [`WriteTx::lease_slot`].
    pub fn lease_pool_slot(
        &mut self,
        pool_id: &str,
        pool_size: u32,
        now: UnixMillis,
    ) -> Result<SlotLease> {
        self.lease("pool_id", pool_id, pool_size, now)
    }

    /// Leases a slot to `holder` in `column` (`sandbox_id` or `pool_id`): a slot is free when
    /// neither holds it.
    fn lease(
        &mut self,
        column: &'static str,
        holder: &str,
        pool_size: u32,
        now: UnixMillis,
    ) -> Result<SlotLease> {
        let kind = if column == "pool_id" {
            "warm-pool entry"
        } else {
            "sandbox"
        };
        let not_found = |e: rusqlite::Error| {
            if is_foreign_key_violation(&e) {
                StoreError::NotFound {
                    kind,
                    key: holder.to_owned(),
                }
            } else {
                StoreError::Sqlite(e)
            }
        };
        // 1. Claim the lowest free existing slot. If the holder already holds one, the partial unique
        //    index makes this a no-op (OR IGNORE) and step 2 observes the held slot.
        let claimed: Option<u32> = self
            .conn()
            .prepare_cached(&format!(
                "UPDATE OR IGNORE network_slots SET {column} = ?1, leased_at = ?2
                 WHERE slot = (SELECT MIN(slot) FROM network_slots
                               WHERE sandbox_id IS NULL AND pool_id IS NULL AND slot < ?3
                                 AND (set_aside_until IS NULL OR set_aside_until <= ?2))
                   AND sandbox_id IS NULL AND pool_id IS NULL
                 RETURNING slot"
            ))?
            .query_row(params![holder, now, pool_size], |r| r.get(0))
            .optional()
            .map_err(not_found)?;
        let held = |tx: &Self| -> Result<Option<u32>> {
            Ok(tx
                .conn()
                .prepare_cached(&format!(
                    "SELECT slot FROM network_slots WHERE {column} = ?1"
                ))?
                .query_row([holder], |r| r.get(0))
                .optional()?)
        };
        Ok(match claimed {
            Some(slot) => SlotLease {
                slot,
                reused: false,
            },
            None => match held(self)? {
                // 2. Idempotent: the holder already holds a slot.
                Some(slot) => SlotLease { slot, reused: true },
                // 3. No free row: insert the lowest slot number that has no row yet.
                None => {
                    let inserted: Option<u32> = self
                        .conn()
                        .prepare_cached(&format!(
                            "INSERT OR IGNORE INTO network_slots (slot, {column}, leased_at)
                             SELECT c.s, ?1, ?2
                             FROM (SELECT 0 AS s UNION ALL SELECT slot + 1 FROM network_slots) c
                             WHERE c.s < ?3 AND NOT EXISTS (SELECT 1 FROM network_slots n WHERE n.slot = c.s)
                             ORDER BY c.s LIMIT 1
                             RETURNING slot"
                        ))?
                        .query_row(params![holder, now, pool_size], |r| r.get(0))
                        .optional()
                        .map_err(not_found)?;
                    match inserted {
                        Some(slot) => SlotLease {
                            slot,
                            reused: false,
                        },
                        None => {
                            return Err(StoreError::PoolExhausted {
                                pool: "network slot",
                            })
                        }
                    }
                }
            },
        })
    }

    /// Takes `slot` from `sandbox_id` and sets it aside until `until`: the host holds it for someone
    /// else. The sandbox is left without a slot (lease another). Returns whether it held `slot`.
    pub fn set_slot_aside(
        &mut self,
        sandbox_id: &str,
        slot: u32,
        until: UnixMillis,
    ) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE network_slots SET sandbox_id = NULL, leased_at = NULL, set_aside_until = ?3
                 WHERE slot = ?2 AND sandbox_id = ?1",
            )?
            .execute(params![sandbox_id, slot, until])?;
        self.conn()
            .prepare_cached("UPDATE sandboxes SET net_slot = NULL WHERE id = ?1 AND net_slot = ?2")?
            .execute(params![sandbox_id, slot])?;
        Ok(n == 1)
    }

    /// Frees the slot `sandbox_id` holds. Returns the freed slot, `None` if it held none.
    pub fn release_slot(&mut self, sandbox_id: &str) -> Result<Option<u32>> {
        let freed: Option<u32> = self
            .conn()
            .prepare_cached(
                "UPDATE network_slots SET sandbox_id = NULL, leased_at = NULL WHERE sandbox_id = ?1
                 RETURNING slot",
            )?
            .query_row([sandbox_id], |r| r.get(0))
            .optional()?;
        self.conn()
            .prepare_cached("UPDATE sandboxes SET net_slot = NULL WHERE id = ?1")?
            .execute([sandbox_id])?;
        Ok(freed)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::test_util::{open_temp, seed_sandboxes};

    /// A slot set aside is handed to no one until its time; then it is the lowest free one again.
    #[tokio::test]
    async fn a_slot_set_aside_is_skipped_until_its_time() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a", "b", "c"]).await;
        let w = store.writer();
        let slots = w
            .write(|tx| {
                let first = tx.lease_slot("a", 8, 100)?.slot;
                assert!(tx.set_slot_aside("a", first, 1_000)?);
                assert_eq!(tx.slot_of("a")?, None);
                let again = tx.lease_slot("a", 8, 200)?.slot;
                let other = tx.lease_slot("b", 8, 200)?.slot;
                // Past its time the slot is free like any other.
                let late = tx.lease_slot("c", 8, 1_000)?.slot;
                Ok((first, again, other, late))
            })
            .await
            .unwrap();
        assert_eq!(slots, (0, 1, 2, 0));
        let held = store
            .reader()
            .read(|tx| tx.get_sandbox_by_id("a"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(held.net_slot, Some(1));
    }

    /// Invariant: a sandbox holds at most one network slot (`idx_network_slots_sandbox`); leasing again
    /// returns the same slot, marked reused.
    #[tokio::test]
    async fn lease_is_idempotent_per_sandbox() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a", "b"]).await;
        let w = store.writer();
        let (a1, a2, b1) = w
            .write(|tx| {
                Ok((
                    tx.lease_slot("a", 8, 1)?,
                    tx.lease_slot("a", 8, 2)?,
                    tx.lease_slot("b", 8, 3)?,
                ))
            })
            .await
            .unwrap();
        assert_eq!(
            a1,
            SlotLease {
                slot: 0,
                reused: false
            }
        );
        assert_eq!(
            a2,
            SlotLease {
                slot: 0,
                reused: true
            }
        );
        assert_eq!(
            b1,
            SlotLease {
                slot: 1,
                reused: false
            }
        );
        // Also idempotent when the sandbox's slot is not the lowest free one.
        w.write(|tx| tx.release_slot("a")).await.unwrap();
        let (b2, a3) = w
            .write(|tx| Ok((tx.lease_slot("b", 8, 4)?, tx.lease_slot("a", 8, 5)?)))
            .await
            .unwrap();
        assert_eq!(
            b2,
            SlotLease {
                slot: 1,
                reused: true
            }
        );
        assert_eq!(
            a3,
            SlotLease {
                slot: 0,
                reused: false
            }
        );
        let sandbox = store
            .reader()
            .read(|tx| tx.get_sandbox_by_id("b"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(sandbox.net_slot, Some(1));
    }

    /// The index itself refuses a second slot for one sandbox, whatever code path tries.
    #[tokio::test]
    async fn schema_rejects_a_second_slot_for_one_sandbox() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a"]).await;
        let err = store
            .writer()
            .write(|tx| {
                tx.lease_slot("a", 8, 1)?;
                tx.conn().execute(
                    "INSERT INTO network_slots (slot, sandbox_id) VALUES (5, 'a')",
                    [],
                )?;
                Ok(())
            })
            .await
            .unwrap_err();
        match err {
            StoreError::Sqlite(e) => assert!(
                crate::error::is_unique_violation_on(&e, "network_slots.sandbox_id"),
                "{e:?}"
            ),
            e => panic!("unexpected {e:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_leases_are_distinct_until_the_pool_is_exhausted() {
        let (_dir, store, _t) = open_temp();
        let ids: Vec<String> = (0..21).map(|i| format!("s{i}")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        seed_sandboxes(&store, &refs).await;
        let tasks: Vec<_> = ids
            .iter()
            .map(|id| {
                let (w, id) = (store.writer().clone(), id.clone());
                tokio::spawn(async move { w.write(move |tx| tx.lease_slot(&id, 20, 1)).await })
            })
            .collect();
        let mut slots = HashSet::new();
        let mut exhausted = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(l) => {
                    assert!(!l.reused && l.slot < 20);
                    assert!(slots.insert(l.slot), "slot {} leased twice", l.slot);
                }
                Err(StoreError::PoolExhausted { .. }) => exhausted += 1,
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        assert_eq!((slots.len(), exhausted), (20, 1));
    }

    #[tokio::test]
    async fn released_and_deleted_slots_are_reused_lowest_first() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a", "b", "c", "d"]).await;
        let w = store.writer();
        w.write(|tx| {
            for id in ["a", "b", "c"] {
                tx.lease_slot(id, 3, 1)?;
            }
            Ok(())
        })
        .await
        .unwrap();
        let err = w.write(|tx| tx.lease_slot("d", 3, 2)).await.unwrap_err();
        assert!(matches!(err, StoreError::PoolExhausted { .. }), "{err:?}");
        // Deleting "b" frees slot 1 (ON DELETE SET NULL).
        assert_eq!(w.write(|tx| tx.release_slot("a")).await.unwrap(), Some(0));
        assert_eq!(w.write(|tx| tx.release_slot("a")).await.unwrap(), None);
        w.write(|tx| tx.delete_sandbox("b")).await.unwrap();
        let leased = store.reader().read(|tx| tx.leased_slots()).await.unwrap();
        assert_eq!(leased, vec![(2, "c".to_owned())]);
        let d = w.write(|tx| tx.lease_slot("d", 3, 3)).await.unwrap();
        assert_eq!(
            d,
            SlotLease {
                slot: 0,
                reused: false
            }
        );
    }

    #[tokio::test]
    async fn slots_held_in_states_lists_only_holders_in_those_states() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["ok", "bad", "gone", "free"]).await;
        use crate::SandboxState::*;
        let w = store.writer();
        w.write(|tx| {
            for id in ["ok", "bad", "gone"] {
                tx.lease_slot(id, 8, 1)?;
            }
            tx.set_state("ok", &[Creating], Running, None, 2)?;
            tx.set_state("bad", &[Creating], Failed, Some("x"), 2)?;
            tx.set_state("gone", &[Creating], Lost, Some("y"), 2)?;
            tx.set_state("free", &[Creating], Failed, Some("z"), 2)?;
            Ok(())
        })
        .await
        .unwrap();
        let held = store
            .reader()
            .read(|tx| tx.slots_held_in_states(&[Failed, Lost]))
            .await
            .unwrap();
        assert_eq!(held, vec![(1, "bad".to_owned()), (2, "gone".to_owned())]);
        w.write(|tx| tx.release_slot("bad")).await.unwrap();
        let held = store
            .reader()
            .read(|tx| tx.slots_held_in_states(&[Failed, Lost]))
            .await
            .unwrap();
        assert_eq!(held, vec![(2, "gone".to_owned())]);
    }

    #[tokio::test]
    async fn leasing_for_an_unknown_sandbox_is_not_found() {
        let (_dir, store, _t) = open_temp();
        let err = store
            .writer()
            .write(|tx| tx.lease_slot("ghost", 4, 1))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::NotFound {
                    kind: "sandbox",
                    ..
                }
            ),
            "{err:?}"
        );
        // Nothing was left behind by the failed request.
        let leased = store.reader().read(|tx| tx.leased_slots()).await.unwrap();
        assert!(leased.is_empty());
    }
}
