//! Warm pools: sandboxes booted ahead of any create, per template, and the sizes asked for.
//!
//! Contract:
//! - An entry is `warming` from its insert until its agent calls home, then `ready`
//!   ([`WriteTx::mark_pool_entry_ready`], once: a duplicate report changes nothing).
//! - A create claims a `ready` entry by deleting its row ([`WriteTx::claim_pool_entry`]), so an entry
//!   is handed out once however many creates race for it: the single writer runs the claims one
//!   after the other, the second finds no row and its write rolls back. The entry's network slot moves to the creating sandbox in
//!   the same transaction, so the sandbox holds exactly the slot its booted processes use.
//! - A slot is held by a sandbox or by an entry, never both, and an entry holds at most one
//!   (`idx_network_slots_pool`); deleting an entry frees its slot (`ON DELETE SET NULL`).
//! - An entry is no sandbox: no list, count, event, webhook or timeout sees it.

use rusqlite::{params, OptionalExtension, Row};

use crate::error::{Result, StoreError};
use crate::{ReadTx, UnixMillis, WriteTx};

/// Where a warm-pool entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolState {
    /// Booting: its agent has not called home yet.
    Warming,
    /// Booted and idle, waiting for a create.
    Ready,
}

impl PoolState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolState::Warming => "warming",
            PoolState::Ready => "ready",
        }
    }
}

/// One sandbox of a warm pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolEntry {
    /// Its id in the runtime until a create adopts it under its own.
    pub id: String,
    /// The template it was made from.
    pub template: String,
    pub state: PoolState,
    /// Its agent's token (the claiming sandbox's from then on).
    pub agent_token: String,
    /// The limits it was made with.
    pub cpu_millis: u32,
    pub memory_mb: u32,
    pub disk_mb: u32,
    pub created_at: UnixMillis,
    /// The network slot it holds.
    pub slot: Option<u32>,
}

/// The `kind` of the [`StoreError::NotFound`] a claim of an entry that is gone or not ready
/// returns ([`WriteTx::claim_pool_entry`]).
pub const READY_POOL_ENTRY: &str = "ready warm-pool entry";

const COLUMNS: &str = "w.id, w.template, w.state, w.agent_token, w.cpu_millis, w.memory_mb, \
                       w.disk_mb, w.created_at, n.slot";

fn entry(r: &Row<'_>) -> rusqlite::Result<PoolEntry> {
    let state: String = r.get(2)?;
    Ok(PoolEntry {
        id: r.get(0)?,
        template: r.get(1)?,
        state: if state == "ready" {
            PoolState::Ready
        } else {
            PoolState::Warming
        },
        agent_token: r.get(3)?,
        cpu_millis: r.get(4)?,
        memory_mb: r.get(5)?,
        disk_mb: r.get(6)?,
        created_at: r.get(7)?,
        slot: r.get(8)?,
    })
}

impl ReadTx<'_> {
    /// Every warm-pool entry, oldest first.
    pub fn pool_entries(&self) -> Result<Vec<PoolEntry>> {
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT {COLUMNS} FROM warm_pool w LEFT JOIN network_slots n ON n.pool_id = w.id
             ORDER BY w.created_at, w.id"
        ))?;
        let rows = stmt
            .query_map([], entry)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Warm-pool entry `id`, if there is one.
    pub fn pool_entry(&self, id: &str) -> Result<Option<PoolEntry>> {
        Ok(self
            .conn()
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM warm_pool w LEFT JOIN network_slots n ON n.pool_id = w.id
                 WHERE w.id = ?1"
            ))?
            .query_row([id], entry)
            .optional()?)
    }

    /// The pool size asked for each template that has one, by template.
    pub fn pool_sizes(&self) -> Result<Vec<(String, u32)>> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT template, size FROM warm_pool_sizes ORDER BY template")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
}

impl WriteTx<'_> {
    /// Records a new `warming` entry (its slot is leased with [`WriteTx::lease_pool_slot`]).
    pub fn insert_pool_entry(&mut self, e: &PoolEntry) -> Result<()> {
        self.conn()
            .prepare_cached(
                "INSERT INTO warm_pool (id, template, state, agent_token, cpu_millis, memory_mb,
                                        disk_mb, created_at)
                 VALUES (?1, ?2, 'warming', ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                e.id,
                e.template,
                e.agent_token,
                e.cpu_millis,
                e.memory_mb,
                e.disk_mb,
                e.created_at
            ])?;
        Ok(())
    }

    /// Moves entry `id` from `warming` to `ready`; false when it was not warming (already ready, or
    /// gone).
    pub fn mark_pool_entry_ready(&mut self, id: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE warm_pool SET state = 'ready' WHERE id = ?1 AND state = 'warming'",
            )?
            .execute([id])?;
        Ok(n == 1)
    }

    /// Deletes entry `id` (its slot is freed); false when there was none.
    pub fn delete_pool_entry(&mut self, id: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached("DELETE FROM warm_pool WHERE id = ?1")?
            .execute([id])?;
        Ok(n == 1)
    }

    /// Claims `ready` entry `entry_id` for sandbox `sandbox_id` (whose row must exist): deletes the
    /// entry, leases its slot to the sandbox and makes its agent's token the sandbox's.
    /// [`StoreError::NotFound`] when it is no ready entry (claimed already, discarded, or still
    /// warming), so the caller's savepoint rolls back whatever it wrote with the claim.
    pub fn claim_pool_entry(
        &mut self,
        entry_id: &str,
        sandbox_id: &str,
        now: UnixMillis,
    ) -> Result<PoolEntry> {
        let found = self
            .conn()
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM warm_pool w LEFT JOIN network_slots n ON n.pool_id = w.id
                 WHERE w.id = ?1 AND w.state = 'ready'"
            ))?
            .query_row([entry_id], entry)
            .optional()?
            .ok_or_else(|| StoreError::NotFound {
                kind: READY_POOL_ENTRY,
                key: entry_id.to_string(),
            })?;
        // The delete is the claim; its slot's `pool_id` is cleared by the foreign key.
        self.delete_pool_entry(&found.id)?;
        if let Some(slot) = found.slot {
            self.conn()
                .prepare_cached(
                    "UPDATE network_slots SET sandbox_id = ?1, leased_at = ?2 WHERE slot = ?3",
                )?
                .execute(params![sandbox_id, now, slot])?;
        }
        self.conn()
            .prepare_cached("UPDATE sandboxes SET net_slot = ?2, agent_token = ?3 WHERE id = ?1")?
            .execute(params![sandbox_id, found.slot, found.agent_token])?;
        Ok(found)
    }

    /// Sets the pool size asked for `template` (0 removes it).
    pub fn set_pool_size(&mut self, template: &str, size: u32) -> Result<()> {
        if size == 0 {
            self.conn()
                .prepare_cached("DELETE FROM warm_pool_sizes WHERE template = ?1")?
                .execute([template])?;
        } else {
            self.conn()
                .prepare_cached(
                    "INSERT INTO warm_pool_sizes (template, size) VALUES (?1, ?2)
                     ON CONFLICT (template) DO UPDATE SET size = excluded.size",
                )?
                .execute(params![template, size])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{new_sandbox, open_temp};

    fn pooled(id: &str, created_at: UnixMillis) -> PoolEntry {
        PoolEntry {
            id: id.into(),
            template: "base".into(),
            state: PoolState::Warming,
            agent_token: format!("tok-{id}"),
            cpu_millis: 1000,
            memory_mb: 512,
            disk_mb: 0,
            created_at,
            slot: None,
        }
    }

    /// Invariant: a warm-pool entry is handed out once. Two hundred creates race for a pool of ten
    /// entries, twenty for each ready one (a warming one is never handed out): one of each twenty
    /// gets it, with the slot its entry held, and the others' writes roll back whole (no row); they
    /// lease slots of their own, never one an entry or another sandbox holds.
    #[tokio::test]
    async fn an_entry_is_claimed_once_however_many_creates_race() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        let slots = w
            .write(|tx| {
                let mut slots = Vec::new();
                for i in 0..10 {
                    let id = format!("wp{i}");
                    tx.insert_pool_entry(&pooled(&id, i))?;
                    slots.push(tx.lease_pool_slot(&id, 1000, 1)?.slot);
                    if i % 2 == 0 {
                        assert!(tx.mark_pool_entry_ready(&id)?);
                        assert!(!tx.mark_pool_entry_ready(&id)?, "ready once");
                    }
                }
                Ok(slots)
            })
            .await
            .unwrap();
        // Warming entries are not handed out.
        let early = w
            .write(|tx| {
                tx.insert_sandbox(new_sandbox("sb-early", "", 2))?;
                tx.claim_pool_entry("wp1", "sb-early", 2)
            })
            .await;
        assert!(
            matches!(early, Err(StoreError::NotFound { .. })),
            "{early:?}"
        );
        w.write(|tx| {
            for i in (1..10).step_by(2) {
                assert!(tx.mark_pool_entry_ready(&format!("wp{i}"))?);
            }
            Ok(())
        })
        .await
        .unwrap();
        let creates = (0..200).map(|i| {
            let w = w.clone();
            tokio::spawn(async move {
                let id = format!("sb{i}");
                let entry = format!("wp{}", i % 10);
                let (rid, eid) = (id.clone(), entry.clone());
                let pooled = w
                    .write(move |tx| {
                        tx.insert_sandbox(new_sandbox(&rid, "", 2))?;
                        let e = tx.claim_pool_entry(&eid, &rid, 3)?;
                        let row = tx.get_sandbox_by_id(&rid)?.unwrap();
                        assert_eq!(row.agent_token, e.agent_token, "the entry's agent's token");
                        Ok((e.slot.unwrap(), tx.slot_of(&rid)?.unwrap()))
                    })
                    .await;
                match pooled {
                    Ok((entry_slot, slot)) => (Some(entry), entry_slot, slot),
                    Err(StoreError::NotFound { .. }) => {
                        let cold = w
                            .write(move |tx| {
                                assert!(tx.get_sandbox_by_id(&id)?.is_none(), "rolled back");
                                tx.insert_sandbox(new_sandbox(&id, "", 2))?;
                                Ok(tx.lease_slot(&id, 1000, 3)?.slot)
                            })
                            .await
                            .unwrap();
                        (None, cold, cold)
                    }
                    Err(e) => panic!("{e}"),
                }
            })
        });
        let mut claimed = Vec::new();
        let mut held = std::collections::HashSet::new();
        for create in creates {
            let (entry, entry_slot, slot) = create.await.unwrap();
            assert!(held.insert(slot), "slot {slot} handed out twice");
            if let Some(entry) = entry {
                assert_eq!(entry_slot, slot, "the claim moves the entry's own slot");
                assert!(slots.contains(&slot));
                claimed.push(entry);
            } else {
                assert!(!slots.contains(&slot), "a cold create took an entry's slot");
            }
        }
        claimed.sort();
        let mut want: Vec<String> = (0..10).map(|i| format!("wp{i}")).collect();
        want.sort();
        assert_eq!(claimed, want);
        let left = store.reader().read(|tx| tx.pool_entries()).await.unwrap();
        assert!(left.is_empty());
    }

    /// Deleting an entry frees its slot for anyone; sizes are set, replaced and removed.
    #[tokio::test]
    async fn a_deleted_entry_frees_its_slot_and_sizes_are_kept() {
        let (_dir, store, _t) = open_temp();
        let (entry, slot) = store
            .writer()
            .write(|tx| {
                tx.insert_pool_entry(&pooled("wp0", 1))?;
                let slot = tx.lease_pool_slot("wp0", 8, 1)?.slot;
                assert_eq!(tx.lease_pool_slot("wp0", 8, 1)?.slot, slot, "idempotent");
                let entry = tx.pool_entry("wp0")?;
                assert!(tx.delete_pool_entry("wp0")?);
                tx.insert_sandbox(new_sandbox("sb", "", 2))?;
                let again = tx.lease_slot("sb", 8, 2)?.slot;
                tx.set_pool_size("base", 3)?;
                tx.set_pool_size("base", 5)?;
                tx.set_pool_size("other", 2)?;
                tx.set_pool_size("other", 0)?;
                Ok((entry, (slot, again)))
            })
            .await
            .unwrap();
        assert_eq!(entry.unwrap().slot, Some(slot.0));
        assert_eq!(slot.0, slot.1);
        let sizes = store.reader().read(|tx| tx.pool_sizes()).await.unwrap();
        assert_eq!(sizes, vec![("base".to_string(), 5)]);
    }
}
