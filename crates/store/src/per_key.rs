//! What each API key holds: the sandboxes it created, for the per-key limits.
//!
//! Contract: a sandbox row carries the id of the key that created it (`owner`; `""` when none is
//! known, e.g. rows from before the column, which count against nobody). [`ReadTx::key_usage`]
//! counts a key's sandboxes that hold resources (every state but `deleting`, `failed` and `lost`)
//! and, of those, the creates still in flight (`creating`, `starting`). A create reads the usage and
//! inserts its row in one write transaction, and there is one writer, so racing creates of one key
//! never get past a limit together (`per_key_limits_hold_under_racing_creates`, end to end).

use rusqlite::params;

use crate::error::Result;
use crate::ReadTx;

/// A key's sandboxes, as its limits count them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyUsage {
    /// Sandboxes holding resources (not `deleting`, `failed` or `lost`).
    pub sandboxes: u32,
    /// Of those, creates not finished yet (`creating`, `starting`).
    pub creating: u32,
}

impl ReadTx<'_> {
    /// What key `owner` holds (see the module contract).
    pub fn key_usage(&self, owner: &str) -> Result<KeyUsage> {
        let (sandboxes, creating): (u32, u32) = self.conn().prepare_cached(
            "SELECT COUNT(*), COALESCE(SUM(state IN ('creating', 'starting')), 0) FROM sandboxes
             WHERE owner = ?1 AND state NOT IN ('deleting', 'failed', 'lost')",
        )?
        .query_row(params![owner], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(KeyUsage {
            sandboxes,
            creating,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{new_sandbox, open_temp};
    use crate::SandboxState;

    #[tokio::test]
    async fn usage_counts_a_keys_live_sandboxes_and_its_creates_in_flight() {
        let (_dir, store, _t) = open_temp();
        let rows = [
            ("a1", "k1", SandboxState::Creating),
            ("a2", "k1", SandboxState::Starting),
            ("a3", "k1", SandboxState::Running),
            ("a4", "k1", SandboxState::Paused),
            ("a5", "k1", SandboxState::Deleting),
            ("a6", "k1", SandboxState::Failed),
            ("a7", "k1", SandboxState::Lost),
            ("b1", "k2", SandboxState::Running),
            ("c1", "", SandboxState::Running),
        ];
        store
            .writer()
            .write(move |tx| {
                for (id, owner, state) in rows {
                    let mut row = new_sandbox(id, "", 1);
                    row.owner = owner.into();
                    row.state = state;
                    tx.insert_sandbox(row)?;
                }
                Ok(())
            })
            .await
            .unwrap();
        let usage = |owner: &'static str| {
            let r = store.reader().clone();
            async move { r.read(move |tx| tx.key_usage(owner)).await.unwrap() }
        };
        assert_eq!(
            usage("k1").await,
            KeyUsage {
                sandboxes: 4,
                creating: 2
            }
        );
        assert_eq!(
            usage("k2").await,
            KeyUsage {
                sandboxes: 1,
                creating: 0
            }
        );
        assert_eq!(usage("nobody").await, KeyUsage::default());
    }
}
