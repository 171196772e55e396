//! Request idempotency: the generic claim/replay primitive.
//!
//! Contract (the seed's four cases, keyed by `(scope, fingerprint)`; `scope` namespaces a facade, e.g.
//! `"e2b.create"`, `fingerprint` is the request's dedupe key):
//! 1. No row: [`WriteTx::claim`] inserts a pending row with a lock until `now + pending_ttl` →
//!    [`ClaimOutcome::Acquired`]; this caller does the work.
//! 2. Ready row inside its replay window → [`ClaimOutcome::Replay`] of the stored outcome; do not redo the
//!    work.
//! 3. Pending row whose lock is live → [`ClaimOutcome::InFlight`]; wait for it (poll [`ReadTx::get_claim`]).
//! 4. Stale row (pending with an expired lock, or ready with an expired window) → reset to pending with a
//!    fresh lock and `generation + 1` → [`ClaimOutcome::Acquired`]; the previous attempt counts as failed.
//!
//! Plus: a live row claimed with a different `request_hash` is [`ClaimOutcome::Mismatch`] (an
//! Idempotency-Key reused for another request: 422). The claim is one `INSERT … ON CONFLICT DO NOTHING`
//! and, only if that inserted nothing, the follow-up that tells cases 2–4 apart.
//!
//! `generation` is a fencing token: [`WriteTx::complete_claim`] and [`WriteTx::delete_claim`] act only on
//! the generation the caller acquired, so a stale claimer whose row was reset cannot overwrite the newer
//! attempt. Guarantee: within the replay window every duplicate replays the same outcome; outside it, or
//! after a failed attempt's lock expires, the work runs again (at-least-once with replay suppression).
//! Windows are half-open: a lock or window is live while `now < until`.

use std::time::Duration;

use rusqlite::{params, OptionalExtension};

use crate::error::{Result, StoreError};
use crate::{add_ms, ReadTx, UnixMillis, WriteTx};

/// What [`WriteTx::claim`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// This caller owns the attempt; complete or delete it with this generation.
    Acquired { generation: i64 },
    /// A completed attempt's outcome, to return verbatim.
    Replay {
        target_id: String,
        status: Option<u16>,
        body: Option<Vec<u8>>,
    },
    /// Another attempt is running and its lock is live until `locked_until`.
    InFlight { locked_until: UnixMillis },
    /// The key is live for a request with a different hash.
    Mismatch,
}

/// The outcome a completed attempt stores for replay.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredResponse {
    /// What the work produced (e.g. the sandbox id).
    pub target_id: String,
    /// The HTTP status to replay, if the facade replays responses.
    pub status: Option<u16>,
    /// The response body to replay, if the facade replays responses.
    pub body: Option<Vec<u8>>,
}

/// State of a claim row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    Pending,
    Ready,
}

/// A stored claim, for callers polling an in-flight attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRecord {
    pub state: ClaimState,
    pub generation: i64,
    pub locked_until: UnixMillis,
    pub replay_until: Option<UnixMillis>,
    pub request_hash: String,
    pub response: StoredResponse,
}

fn read_record(
    conn: &rusqlite::Connection,
    scope: &str,
    fingerprint: &str,
) -> Result<Option<ClaimRecord>> {
    Ok(conn
        .prepare_cached(
            "SELECT state, generation, locked_until, replay_until, request_hash, target_id,
                    response_status, response_body
             FROM request_idempotency WHERE scope = ?1 AND fingerprint = ?2",
        )?
        .query_row(params![scope, fingerprint], |r| {
            let state: String = r.get(0)?;
            Ok(ClaimRecord {
                state: if state == "ready" {
                    ClaimState::Ready
                } else {
                    ClaimState::Pending
                },
                generation: r.get(1)?,
                locked_until: r.get(2)?,
                replay_until: r.get(3)?,
                request_hash: r.get(4)?,
                response: StoredResponse {
                    target_id: r.get(5)?,
                    status: r.get(6)?,
                    body: r.get(7)?,
                },
            })
        })
        .optional()?)
}

/// A pending claim whose lock expired while it named the resource its attempt was making.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbandonedClaim {
    /// Scope of the claim.
    pub scope: String,
    /// Fingerprint of the claim.
    pub fingerprint: String,
    /// Generation of the dead attempt.
    pub generation: i64,
    /// What the dead attempt was making.
    pub target_id: String,
}

impl ReadTx<'_> {
    /// The claim row for `(scope, fingerprint)`, if any.
    pub fn get_claim(&self, scope: &str, fingerprint: &str) -> Result<Option<ClaimRecord>> {
        read_record(self.conn(), scope, fingerprint)
    }

    /// Pending claims of `scope` whose lock expired before `now` and that name a target: attempts that
    /// died mid-way, whose resource someone must undo before the claim is forgotten.
    pub fn abandoned_claims(&self, scope: &str, now: UnixMillis) -> Result<Vec<AbandonedClaim>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT scope, fingerprint, generation, target_id FROM request_idempotency
             WHERE scope = ?1 AND state = 'pending' AND locked_until <= ?2 AND target_id <> ''",
        )?;
        let rows = stmt
            .query_map(params![scope, now], |r| {
                Ok(AbandonedClaim {
                    scope: r.get(0)?,
                    fingerprint: r.get(1)?,
                    generation: r.get(2)?,
                    target_id: r.get(3)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

impl WriteTx<'_> {
    /// Claims `(scope, fingerprint)` for a request whose content hashes to `request_hash`; see the module
    /// docs for the outcomes.
    pub fn claim(
        &mut self,
        scope: &str,
        fingerprint: &str,
        request_hash: &str,
        now: UnixMillis,
        pending_ttl: Duration,
    ) -> Result<ClaimOutcome> {
        let locked_until = add_ms(now, pending_ttl);
        // Case 1: no row yet.
        let inserted = self
            .conn()
            .prepare_cached(
                "INSERT INTO request_idempotency
                     (scope, fingerprint, state, target_id, locked_until, request_hash, generation, created_at)
                 VALUES (?1, ?2, 'pending', '', ?3, ?4, 0, ?5)
                 ON CONFLICT (scope, fingerprint) DO NOTHING",
            )?
            .execute(params![scope, fingerprint, locked_until, request_hash, now])?;
        if inserted == 1 {
            return Ok(ClaimOutcome::Acquired { generation: 0 });
        }
        let row =
            read_record(self.conn(), scope, fingerprint)?.ok_or_else(|| StoreError::NotFound {
                kind: "idempotency claim",
                key: format!("{scope}/{fingerprint}"),
            })?;
        let live = match row.state {
            ClaimState::Ready => row.replay_until.is_some_and(|t| now < t),
            ClaimState::Pending => now < row.locked_until,
        };
        if !live {
            // Case 4: stale; reset and take it over.
            let generation: i64 = self
                .conn()
                .prepare_cached(
                    "UPDATE request_idempotency
                     SET state = 'pending', target_id = '', locked_until = ?3, replay_until = NULL,
                         response_status = NULL, response_body = NULL, request_hash = ?4,
                         generation = generation + 1, created_at = ?5
                     WHERE scope = ?1 AND fingerprint = ?2 AND generation = ?6
                     RETURNING generation",
                )?
                .query_row(
                    params![
                        scope,
                        fingerprint,
                        locked_until,
                        request_hash,
                        now,
                        row.generation
                    ],
                    |r| r.get(0),
                )?;
            return Ok(ClaimOutcome::Acquired { generation });
        }
        if row.request_hash != request_hash {
            return Ok(ClaimOutcome::Mismatch);
        }
        Ok(match row.state {
            // Case 2: replay.
            ClaimState::Ready => ClaimOutcome::Replay {
                target_id: row.response.target_id,
                status: row.response.status,
                body: row.response.body,
            },
            // Case 3: someone is on it.
            ClaimState::Pending => ClaimOutcome::InFlight {
                locked_until: row.locked_until,
            },
        })
    }

    /// Records the outcome of the attempt `generation` and opens its replay window until
    /// `now + replay_ttl`. [`StoreError::ClaimLost`] if that attempt is no longer the current pending one.
    pub fn complete_claim(
        &mut self,
        scope: &str,
        fingerprint: &str,
        generation: i64,
        response: &StoredResponse,
        now: UnixMillis,
        replay_ttl: Duration,
    ) -> Result<()> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE request_idempotency
                 SET state = 'ready', target_id = ?4, response_status = ?5, response_body = ?6,
                     replay_until = ?7
                 WHERE scope = ?1 AND fingerprint = ?2 AND generation = ?3 AND state = 'pending'",
            )?
            .execute(params![
                scope,
                fingerprint,
                generation,
                response.target_id,
                response.status,
                response.body,
                add_ms(now, replay_ttl),
            ])?;
        if n == 1 {
            Ok(())
        } else {
            Err(StoreError::ClaimLost {
                scope: scope.to_owned(),
                fingerprint: fingerprint.to_owned(),
                generation,
            })
        }
    }

    /// Records, on a pending claim of `generation`, the resource the attempt is about to make, so a
    /// later claimer that finds the claim stale can undo it. [`StoreError::ClaimLost`] when the claim
    /// was reset meanwhile.
    pub fn set_claim_target(
        &mut self,
        scope: &str,
        fingerprint: &str,
        generation: i64,
        target_id: &str,
    ) -> Result<()> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE request_idempotency SET target_id = ?4
                 WHERE scope = ?1 AND fingerprint = ?2 AND generation = ?3 AND state = 'pending'",
            )?
            .execute(params![scope, fingerprint, generation, target_id])?;
        if n == 1 {
            Ok(())
        } else {
            Err(StoreError::ClaimLost {
                scope: scope.to_owned(),
                fingerprint: fingerprint.to_owned(),
                generation,
            })
        }
    }

    /// Drops the attempt `generation` (its work rolled back) so the next retry starts at once instead of
    /// waiting out the lock. Returns whether it deleted.
    pub fn delete_claim(
        &mut self,
        scope: &str,
        fingerprint: &str,
        generation: i64,
    ) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "DELETE FROM request_idempotency WHERE scope = ?1 AND fingerprint = ?2 AND generation = ?3",
            )?
            .execute(params![scope, fingerprint, generation])?;
        Ok(n == 1)
    }

    /// Deletes every row whose replay window (ready) or lock (pending) has passed — except pending rows
    /// that name a target: their attempt died mid-way and its resource must be undone first (see
    /// [`ReadTx::abandoned_claims`]; the owner deletes those with [`WriteTx::delete_claim`]). Returns how
    /// many.
    pub fn sweep_expired_claims(&mut self, now: UnixMillis) -> Result<usize> {
        Ok(self
            .conn()
            .prepare_cached(
                "DELETE FROM request_idempotency
                 WHERE (state = 'pending' AND locked_until <= ?1 AND target_id = '')
                    OR (state = 'ready' AND replay_until <= ?1)",
            )?
            .execute([now])?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::open_temp;

    #[tokio::test]
    async fn an_abandoned_attempt_keeps_its_target_until_undone() {
        let (_dir, store, _thread) = open_temp();
        let w = store.writer().clone();
        let ttl = Duration::from_millis(100);
        let gen = w
            .write(move |tx| match tx.claim("s", "fp", "h", 1_000, ttl)? {
                ClaimOutcome::Acquired { generation } => {
                    tx.set_claim_target("s", "fp", generation, "sb-dead")?;
                    Ok(generation)
                }
                other => panic!("{other:?}"),
            })
            .await
            .unwrap();
        // The sweep keeps a dead attempt that names what it was making...
        assert_eq!(
            w.write(|tx| tx.sweep_expired_claims(5_000)).await.unwrap(),
            0
        );
        let abandoned = store
            .reader()
            .read(|tx| tx.abandoned_claims("s", 5_000))
            .await
            .unwrap();
        assert_eq!(abandoned.len(), 1);
        assert_eq!(
            (abandoned[0].target_id.as_str(), abandoned[0].generation),
            ("sb-dead", gen)
        );
        // ...and a live lock is not abandoned yet.
        let early = store
            .reader()
            .read(|tx| tx.abandoned_claims("s", 1_050))
            .await
            .unwrap();
        assert!(early.is_empty());
        // A stale generation cannot retarget a reset claim.
        w.write(|tx| {
            tx.claim("s", "fp", "h", 5_000, Duration::from_secs(1))
                .map(|_| ())
        })
        .await
        .unwrap();
        assert!(w
            .write(move |tx| tx.set_claim_target("s", "fp", gen, "x"))
            .await
            .is_err());
    }
    use crate::StoreWriter;

    const PENDING: Duration = Duration::from_secs(120);
    const REPLAY: Duration = Duration::from_secs(10);
    const S: &str = "e2b.create";
    const FP: &str = "fp-1";

    async fn claim(w: &StoreWriter, hash: &'static str, now: i64) -> ClaimOutcome {
        w.write(move |tx| tx.claim(S, FP, hash, now, PENDING))
            .await
            .unwrap()
    }

    async fn complete(w: &StoreWriter, gen: i64, target: &'static str, now: i64) -> Result<()> {
        w.write(move |tx| {
            let resp = StoredResponse {
                target_id: target.into(),
                status: Some(201),
                body: Some(format!("{{\"id\":\"{target}\"}}").into_bytes()),
            };
            tx.complete_claim(S, FP, gen, &resp, now, REPLAY)
        })
        .await
    }

    /// Case 1 then case 2: the first claimer acquires; a duplicate inside the replay window replays the
    /// stored target without redoing the work.
    #[tokio::test]
    async fn duplicate_claim_inside_window_replays_target() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        assert_eq!(
            claim(w, "h", 1_000).await,
            ClaimOutcome::Acquired { generation: 0 }
        );
        complete(w, 0, "sbx-1", 2_000).await.unwrap();
        let replay = claim(w, "h", 2_000 + 9_999).await;
        assert_eq!(
            replay,
            ClaimOutcome::Replay {
                target_id: "sbx-1".into(),
                status: Some(201),
                body: Some(b"{\"id\":\"sbx-1\"}".to_vec()),
            }
        );
    }

    /// Case 3: a duplicate while the first attempt's lock is live waits; it does not acquire.
    #[tokio::test]
    async fn duplicate_claim_while_pending_is_in_flight() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        assert!(matches!(
            claim(w, "h", 1_000).await,
            ClaimOutcome::Acquired { .. }
        ));
        assert_eq!(
            claim(w, "h", 1_000 + 119_999).await,
            ClaimOutcome::InFlight {
                locked_until: 121_000
            }
        );
    }

    /// Case 4a: a pending attempt whose lock expired (its worker crashed) is reset; the new claimer
    /// acquires with the next generation.
    #[tokio::test]
    async fn stale_pending_claim_is_reset_and_reacquired() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        assert_eq!(
            claim(w, "h", 1_000).await,
            ClaimOutcome::Acquired { generation: 0 }
        );
        assert_eq!(
            claim(w, "h", 121_000).await,
            ClaimOutcome::Acquired { generation: 1 }
        );
        let rec = store
            .reader()
            .read(|tx| tx.get_claim(S, FP))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (rec.state, rec.generation, rec.locked_until),
            (ClaimState::Pending, 1, 241_000)
        );
    }

    /// Case 4b: once the replay window has passed, a duplicate redoes the work.
    #[tokio::test]
    async fn expired_replay_window_resets_claim() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        claim(w, "h", 1_000).await;
        complete(w, 0, "sbx-1", 2_000).await.unwrap();
        assert_eq!(
            claim(w, "h", 12_000).await,
            ClaimOutcome::Acquired { generation: 1 }
        );
        let rec = store
            .reader()
            .read(|tx| tx.get_claim(S, FP))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(rec.state, ClaimState::Pending);
        assert_eq!(
            rec.response,
            StoredResponse::default(),
            "the old outcome is gone"
        );
        assert_eq!(rec.replay_until, None);
    }

    /// Fencing: a claimer whose row was reset by a later claimer cannot complete over it.
    #[tokio::test]
    async fn stale_generation_complete_is_refused() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        assert_eq!(
            claim(w, "h", 0).await,
            ClaimOutcome::Acquired { generation: 0 }
        );
        assert_eq!(
            claim(w, "h", 200_000).await,
            ClaimOutcome::Acquired { generation: 1 }
        );
        let err = complete(w, 0, "sbx-old", 200_001).await.unwrap_err();
        assert!(
            matches!(err, StoreError::ClaimLost { generation: 0, .. }),
            "{err:?}"
        );
        complete(w, 1, "sbx-new", 200_002).await.unwrap();
        // Completing twice is refused too (the attempt is no longer pending).
        assert!(matches!(
            complete(w, 1, "sbx-again", 200_003).await,
            Err(StoreError::ClaimLost { .. })
        ));
        assert!(matches!(
            claim(w, "h", 200_004).await,
            ClaimOutcome::Replay { ref target_id, .. } if target_id == "sbx-new"
        ));
    }

    /// An idempotency key reused with a different request is a mismatch while the row is live, and free
    /// for any request once it has expired.
    #[tokio::test]
    async fn reused_key_with_different_request_hash_is_mismatch() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        claim(w, "h1", 0).await;
        assert_eq!(claim(w, "h2", 1).await, ClaimOutcome::Mismatch);
        complete(w, 0, "sbx", 2).await.unwrap();
        assert_eq!(claim(w, "h2", 3).await, ClaimOutcome::Mismatch);
        assert_eq!(
            claim(w, "h2", 20_000).await,
            ClaimOutcome::Acquired { generation: 1 }
        );
        assert_eq!(claim(w, "h1", 20_001).await, ClaimOutcome::Mismatch);
    }

    #[tokio::test]
    async fn scopes_do_not_collide() {
        let (_dir, store, _t) = open_temp();
        let (a, b) = store
            .writer()
            .write(|tx| {
                Ok((
                    tx.claim("e2b.create", "same", "h", 0, PENDING)?,
                    tx.claim("daytona.create", "same", "h", 0, PENDING)?,
                ))
            })
            .await
            .unwrap();
        assert_eq!(a, ClaimOutcome::Acquired { generation: 0 });
        assert_eq!(b, ClaimOutcome::Acquired { generation: 0 });
    }

    #[tokio::test]
    async fn delete_claim_frees_the_key_for_the_next_retry_only_for_its_generation() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        claim(w, "h", 0).await;
        assert!(!w.write(|tx| tx.delete_claim(S, FP, 7)).await.unwrap());
        assert!(matches!(
            claim(w, "h", 1).await,
            ClaimOutcome::InFlight { .. }
        ));
        assert!(w.write(|tx| tx.delete_claim(S, FP, 0)).await.unwrap());
        assert_eq!(
            claim(w, "h", 2).await,
            ClaimOutcome::Acquired { generation: 0 }
        );
    }

    #[tokio::test]
    async fn sweep_removes_only_expired_rows() {
        let (_dir, store, _t) = open_temp();
        let n = store
            .writer()
            .write(|tx| {
                tx.claim(S, "pending-live", "h", 0, Duration::from_millis(100))?;
                tx.claim(S, "pending-dead", "h", 0, Duration::from_millis(50))?;
                tx.claim(S, "ready-live", "h", 0, PENDING)?;
                tx.complete_claim(
                    S,
                    "ready-live",
                    0,
                    &StoredResponse::default(),
                    0,
                    Duration::from_millis(100),
                )?;
                tx.claim(S, "ready-dead", "h", 0, PENDING)?;
                tx.complete_claim(
                    S,
                    "ready-dead",
                    0,
                    &StoredResponse::default(),
                    0,
                    Duration::from_millis(50),
                )?;
                tx.sweep_expired_claims(50)
            })
            .await
            .unwrap();
        assert_eq!(n, 2);
        let left = store
            .reader()
            .read(|tx| {
                Ok([
                    tx.get_claim(S, "pending-live")?.is_some(),
                    tx.get_claim(S, "pending-dead")?.is_some(),
                    tx.get_claim(S, "ready-live")?.is_some(),
                    tx.get_claim(S, "ready-dead")?.is_some(),
                ])
            })
            .await
            .unwrap();
        assert_eq!(left, [true, false, true, false]);
    }

    /// Concurrent duplicates: exactly one acquires, every other one sees it in flight.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_duplicate_claims_acquire_once() {
        let (_dir, store, _t) = open_temp();
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let w = store.writer().clone();
                tokio::spawn(async move { w.write(|tx| tx.claim(S, FP, "h", 5, PENDING)).await })
            })
            .collect();
        let mut acquired = 0;
        for t in tasks {
            match t.await.unwrap().unwrap() {
                ClaimOutcome::Acquired { generation: 0 } => acquired += 1,
                ClaimOutcome::InFlight {
                    locked_until: 120_005,
                } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(acquired, 1);
    }
}
