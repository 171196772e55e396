//! Idle policies: what a sandbox's inactivity does (Daytona's auto-stop, auto-pause, auto-delete
//! and auto-archive intervals).
//!
//! Contract:
//! - A policy is a row of `idle_policies`, at most one per sandbox (its primary key), removed with
//!   its sandbox (`ON DELETE CASCADE`). A sandbox without one is never stopped, paused or deleted
//!   for being idle.
//! - The idle clock of a sandbox is the later of its recorded activity (`active_at`, which only
//!   moves forward: [`WriteTx::touch_idle`]) and its row's last change (`sandboxes.updated_at`: a
//!   stop, a start, a new label count as activity). [`ReadTx::idle_sandboxes`] answers it.
//! - The store keeps the intervals; acting on them (stop, pause, delete) is the service's.

use rusqlite::{params, OptionalExtension};

use crate::error::{unknown_sandbox, Result};
use crate::{ReadTx, SandboxState, UnixMillis, WriteTx};

/// What inactivity does to one sandbox. Intervals are milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdlePolicy {
    /// A running sandbox idle this long is stopped; 0: never.
    pub stop_after_ms: i64,
    /// A running sandbox idle this long is paused, its memory kept; 0: never.
    pub pause_after_ms: i64,
    /// A stopped sandbox idle this long is deleted; negative: never, 0: as soon as it stops.
    pub delete_after_ms: i64,
    /// A stopped sandbox idle this long would be archived (kept and reported; sandboxd keeps a
    /// stopped sandbox's filesystem where it is); 0: never.
    pub archive_after_ms: i64,
}

/// A sandbox with a policy, as the idle sweep sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleSandbox {
    pub sandbox_id: String,
    pub state: SandboxState,
    pub policy: IdlePolicy,
    /// Its idle clock: the later of its recorded activity and its row's last change.
    pub active_at: UnixMillis,
}

impl ReadTx<'_> {
    /// Sandbox `id`'s policy, if it has one.
    pub fn idle_policy(&self, id: &str) -> Result<Option<IdlePolicy>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT stop_after_ms, delete_after_ms, archive_after_ms, pause_after_ms
                 FROM idle_policies WHERE sandbox_id = ?1",
            )?
            .query_row([id], |r| {
                Ok(IdlePolicy {
                    stop_after_ms: r.get(0)?,
                    delete_after_ms: r.get(1)?,
                    archive_after_ms: r.get(2)?,
                    pause_after_ms: r.get(3)?,
                })
            })
            .optional()?)
    }

    /// Every running or stopped sandbox with a policy, oldest idle clock first.
    pub fn idle_sandboxes(&self) -> Result<Vec<IdleSandbox>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT s.id, s.state, p.stop_after_ms, p.delete_after_ms, p.archive_after_ms,
                    MAX(p.active_at, s.updated_at) AS clock, p.pause_after_ms
             FROM idle_policies p JOIN sandboxes s ON s.id = p.sandbox_id
             WHERE s.state IN ('running', 'stopped')
             ORDER BY clock, s.id",
        )?;
        let rows = stmt
            .query_map([], |r| {
                let state: String = r.get(1)?;
                Ok(IdleSandbox {
                    sandbox_id: r.get(0)?,
                    state: SandboxState::parse(&state).unwrap_or(SandboxState::Failed),
                    policy: IdlePolicy {
                        stop_after_ms: r.get(2)?,
                        delete_after_ms: r.get(3)?,
                        archive_after_ms: r.get(4)?,
                        pause_after_ms: r.get(6)?,
                    },
                    active_at: r.get(5)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

impl WriteTx<'_> {
    /// Gives sandbox `id` `policy` (replacing the one it had); setting it is activity at `now`.
    /// [`crate::StoreError::NotFound`] for an unknown sandbox.
    pub fn set_idle_policy(
        &mut self,
        id: &str,
        policy: &IdlePolicy,
        now: UnixMillis,
    ) -> Result<()> {
        self.conn()
            .prepare_cached(
                "INSERT INTO idle_policies (sandbox_id, stop_after_ms, delete_after_ms,
                     archive_after_ms, active_at, pause_after_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (sandbox_id) DO UPDATE SET
                     stop_after_ms = excluded.stop_after_ms,
                     delete_after_ms = excluded.delete_after_ms,
                     archive_after_ms = excluded.archive_after_ms,
                     pause_after_ms = excluded.pause_after_ms,
                     active_at = MAX(active_at, excluded.active_at)",
            )?
            .execute(params![
                id,
                policy.stop_after_ms,
                policy.delete_after_ms,
                policy.archive_after_ms,
                now,
                policy.pause_after_ms
            ])
            .map_err(unknown_sandbox(id))?;
        Ok(())
    }

    /// Records activity of sandbox `id` at `at` (never moving its clock back); whether it has a
    /// policy.
    pub fn touch_idle(&mut self, id: &str, at: UnixMillis) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE idle_policies SET active_at = MAX(active_at, ?2) WHERE sandbox_id = ?1",
            )?
            .execute(params![id, at])?;
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::IdlePolicy;
    use crate::test_util::{open_temp, seed_sandboxes};
    use crate::{SandboxState, StoreError};

    const POLICY: IdlePolicy = IdlePolicy {
        stop_after_ms: 60_000,
        pause_after_ms: 0,
        delete_after_ms: -1,
        archive_after_ms: 0,
    };

    /// Invariant: one policy per sandbox (`idle_policies` primary key), gone with its sandbox; its
    /// idle clock only moves forward and follows the row's own changes.
    #[tokio::test]
    async fn a_policy_is_one_per_sandbox_and_its_clock_only_moves_forward() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a", "b"]).await;
        let w = store.writer();
        let r = store.reader();
        w.write(|tx| {
            tx.set_state(
                "a",
                &[SandboxState::Creating],
                SandboxState::Running,
                None,
                5,
            )?;
            tx.set_idle_policy("a", &POLICY, 10)?;
            tx.set_idle_policy(
                "a",
                &IdlePolicy {
                    delete_after_ms: 0,
                    pause_after_ms: 30_000,
                    ..POLICY
                },
                8,
            )
        })
        .await
        .unwrap();
        let unknown = w.write(|tx| tx.set_idle_policy("nope", &POLICY, 1)).await;
        assert!(
            matches!(unknown, Err(StoreError::NotFound { .. })),
            "{unknown:?}"
        );
        let policy = r.read(|tx| tx.idle_policy("a")).await.unwrap().unwrap();
        assert_eq!(policy.delete_after_ms, 0, "replaced");
        assert_eq!(policy.pause_after_ms, 30_000, "replaced");
        assert_eq!(r.read(|tx| tx.idle_policy("b")).await.unwrap(), None);

        let idle = r.read(|tx| tx.idle_sandboxes()).await.unwrap();
        assert_eq!(
            idle.len(),
            1,
            "only a running or stopped sandbox with a policy"
        );
        assert_eq!(idle[0].active_at, 10, "an older setting keeps the clock");
        assert!(w.write(|tx| tx.touch_idle("a", 50)).await.unwrap());
        assert!(w.write(|tx| tx.touch_idle("a", 20)).await.unwrap());
        assert!(!w.write(|tx| tx.touch_idle("b", 20)).await.unwrap());
        let idle = r.read(|tx| tx.idle_sandboxes()).await.unwrap();
        assert_eq!(idle[0].active_at, 50, "never back");
        w.write(|tx| {
            tx.set_state(
                "a",
                &[SandboxState::Running],
                SandboxState::Stopped,
                None,
                90,
            )
        })
        .await
        .unwrap();
        let idle = r.read(|tx| tx.idle_sandboxes()).await.unwrap();
        assert_eq!(
            (idle[0].state, idle[0].active_at),
            (SandboxState::Stopped, 90),
            "a stop restarts the clock"
        );
        w.write(|tx| tx.delete_sandbox("a")).await.unwrap();
        assert_eq!(r.read(|tx| tx.idle_policy("a")).await.unwrap(), None);
    }
}
