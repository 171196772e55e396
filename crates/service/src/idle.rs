//! Inactivity: a sandbox with an idle policy ([`IdlePolicy`]: Daytona's auto-stop, auto-pause,
//! auto-delete and auto-archive intervals) is stopped once it has been idle for its stop interval,
//! or paused (its memory kept) once idle for its pause interval, and, once stopped, deleted when it
//! has been stopped for its delete interval. A policy stops or pauses, never both.
//!
//! Guarantees:
//! - **Activity** is every call that reaches the sandbox's agent or its ports ([`Service::awake`]:
//!   commands, files, sessions, code, previews), an explicit [`Service::record_activity`], and
//!   every change of its row (a start, a label, a stop). Calls are counted in memory
//!   ([`Activity`]); the sweep writes a running sandbox's newest activity to the store when it is
//!   [`PERSIST_AFTER`] newer than the stored one, so a busy sandbox costs no write per call and a
//!   daemon restart forgets at most that much of it.
//! - **The sweep acts with the ordinary flows**: a stop is [`Service::stop`] (intent first: its
//!   processes end, its filesystem stays), a pause is [`Service::pause`] (a start or resume
//!   continues it) and a delete is [`Service::delete`]; a sandbox that changed state meanwhile is
//!   left to the next pass. A paused sandbox is not deleted for being idle: only a stopped one. Auto-archive is kept and reported only: a
//!   stopped sandbox's filesystem stays where it is.
//! - A sandbox without a policy is never stopped or deleted for being idle (its deadline, if it
//!   has one, is [`Service::sweep_expired`]'s).

use crate::{Service, ServiceError};
use sandboxd_store::{unix_millis_now, IdlePolicy, Sandbox, SandboxState, UnixMillis};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// How much newer than the stored activity a running sandbox's activity must be to be written.
pub const PERSIST_AFTER: UnixMillis = 10_000;

/// The newest activity of each sandbox seen by this process, not yet (all) in the store.
#[derive(Debug, Default)]
pub(crate) struct Activity(Mutex<HashMap<String, UnixMillis>>);

impl Activity {
    /// Sandbox `id` was used at `at`.
    pub(crate) fn touch(&self, id: &str, at: UnixMillis) {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let entry = seen.entry(id.to_string()).or_insert(at);
        *entry = (*entry).max(at);
    }

    fn get(&self, id: &str) -> Option<UnixMillis> {
        let seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.get(id).copied()
    }

    /// Forgets every sandbox but those in `keep`.
    fn retain(&self, keep: &HashSet<&str>) {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.retain(|id, _| keep.contains(id.as_str()));
    }
}

/// What one sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IdleSweep {
    /// Running sandboxes stopped for being idle.
    pub stopped: usize,
    /// Running sandboxes paused for being idle.
    pub paused: usize,
    /// Stopped sandboxes deleted for being stopped long enough.
    pub deleted: usize,
}

impl Service {
    /// Gives sandbox `key` `policy`; returns the sandbox. Setting it counts as activity.
    pub async fn set_idle_policy(
        &self,
        key: &str,
        policy: IdlePolicy,
    ) -> Result<Sandbox, ServiceError> {
        if policy.stop_after_ms < 0 || policy.pause_after_ms < 0 || policy.archive_after_ms < 0 {
            return Err(ServiceError::InvalidRequest(
                "the auto-stop, auto-pause and auto-archive intervals cannot be negative".into(),
            ));
        }
        if policy.stop_after_ms > 0 && policy.pause_after_ms > 0 {
            return Err(ServiceError::InvalidRequest(
                "a sandbox is stopped or paused when idle, not both: set the auto-stop or the \
                 auto-pause interval to 0"
                    .into(),
            ));
        }
        let sandbox = self.get(key).await?;
        let id = sandbox.id.clone();
        let now = unix_millis_now();
        self.writer()
            .write(move |tx| tx.set_idle_policy(&id, &policy, now))
            .await?;
        Ok(sandbox)
    }

    /// Sandbox `id`'s policy, if it has one.
    pub async fn idle_policy(&self, id: &str) -> Result<Option<IdlePolicy>, ServiceError> {
        let id = id.to_string();
        Ok(self.reader().read(move |tx| tx.idle_policy(&id)).await?)
    }

    /// Records that sandbox `key` is in use now (Daytona's `refresh_activity`), in the store at
    /// once.
    pub async fn record_activity(&self, key: &str) -> Result<(), ServiceError> {
        let id = self.get(key).await?.id;
        let now = unix_millis_now();
        self.inner.activity.touch(&id, now);
        self.writer()
            .write(move |tx| tx.touch_idle(&id, now))
            .await?;
        Ok(())
    }

    /// Stops the sandboxes idle past their stop interval and deletes the ones stopped past their
    /// delete interval, as of `now` (part of [`Service::sweep_expired`]).
    pub async fn sweep_idle(&self, now: UnixMillis) -> Result<IdleSweep, ServiceError> {
        let rows = self.reader().read(|tx| tx.idle_sandboxes()).await?;
        self.inner
            .activity
            .retain(&rows.iter().map(|r| r.sandbox_id.as_str()).collect());
        let mut done = IdleSweep::default();
        for row in rows {
            let seen = self.inner.activity.get(&row.sandbox_id);
            let idle_for = now - row.active_at.max(seen.unwrap_or(0));
            let id = row.sandbox_id;
            match row.state {
                SandboxState::Running
                    if row.policy.stop_after_ms > 0 && idle_for >= row.policy.stop_after_ms =>
                {
                    match self.stop(&id).await {
                        Ok((_, true)) => {
                            tracing::info!(sandbox_id = %id, idle_ms = idle_for, "stopped an idle sandbox");
                            done.stopped += 1;
                        }
                        Ok((_, false)) | Err(ServiceError::NotFound(_)) => {}
                        Err(e) => {
                            tracing::warn!(sandbox_id = %id, error = %crate::error::chain(&e), "auto-stop failed")
                        }
                    }
                }
                SandboxState::Running
                    if row.policy.pause_after_ms > 0 && idle_for >= row.policy.pause_after_ms =>
                {
                    match self.pause(&id).await {
                        Ok(_) => {
                            tracing::info!(sandbox_id = %id, idle_ms = idle_for, "paused an idle sandbox");
                            done.paused += 1;
                        }
                        Err(ServiceError::NotFound(_) | ServiceError::Conflict(_)) => {}
                        Err(e) => {
                            tracing::warn!(sandbox_id = %id, error = %crate::error::chain(&e), "auto-pause failed")
                        }
                    }
                }
                SandboxState::Running => {
                    if let Some(seen) = seen.filter(|s| *s >= row.active_at + PERSIST_AFTER) {
                        self.writer()
                            .write(move |tx| tx.touch_idle(&id, seen))
                            .await?;
                    }
                }
                SandboxState::Stopped
                    if row.policy.delete_after_ms >= 0
                        && idle_for >= row.policy.delete_after_ms =>
                {
                    match self.delete(&id).await {
                        Ok(()) => {
                            tracing::info!(sandbox_id = %id, stopped_ms = idle_for, "deleted a sandbox stopped past its interval");
                            done.deleted += 1;
                        }
                        Err(ServiceError::NotFound(_)) => {}
                        Err(e) => {
                            tracing::warn!(sandbox_id = %id, error = %crate::error::chain(&e), "auto-delete failed")
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{InMemoryRuntimeForTests, TestService};
    use crate::ServiceConfig;
    use sandboxd_api_types as api;

    fn service() -> TestService {
        TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default())
    }

    async fn running(t: &TestService) -> String {
        t.svc
            .create(api::CreateSandbox::default())
            .await
            .unwrap()
            .id
    }

    const MINUTE: i64 = 60_000;

    fn policy(stop: i64, delete: i64) -> IdlePolicy {
        IdlePolicy {
            stop_after_ms: stop,
            pause_after_ms: 0,
            delete_after_ms: delete,
            archive_after_ms: 0,
        }
    }

    /// Activity postpones the stop; an idle one is really stopped (its filesystem kept), then
    /// deleted once stopped for its interval; a sandbox with no policy is left alone.
    #[tokio::test]
    async fn idle_sandboxes_are_stopped_then_deleted_and_activity_postpones_it() {
        let t = service();
        let svc = &t.svc;
        let idle = running(&t).await;
        let busy = running(&t).await;
        let plain = running(&t).await;
        svc.set_idle_policy(&idle, policy(MINUTE, 2 * MINUTE))
            .await
            .unwrap();
        svc.set_idle_policy(&busy, policy(MINUTE, -1))
            .await
            .unwrap();
        let start = unix_millis_now();

        assert_eq!(
            svc.sweep_idle(start + 1_000).await.unwrap(),
            IdleSweep::default()
        );
        svc.inner.activity.touch(&busy, start + 50_000);
        let swept = svc.sweep_idle(start + MINUTE + 1_000).await.unwrap();
        assert_eq!(
            swept,
            IdleSweep {
                stopped: 1,
                ..Default::default()
            },
            "only the idle one"
        );
        assert_eq!(svc.get(&idle).await.unwrap().state, SandboxState::Stopped);
        assert_eq!(svc.get(&busy).await.unwrap().state, SandboxState::Running);
        assert_eq!(svc.get(&plain).await.unwrap().state, SandboxState::Running);

        // The stop restarted the clock: deleted only two minutes after it.
        let stopped_at = svc.get(&idle).await.unwrap().updated_at;
        let swept = svc.sweep_idle(stopped_at + MINUTE).await.unwrap();
        assert_eq!(swept.deleted, 0);
        let later = stopped_at + 2 * MINUTE + 1_000;
        let swept = svc.sweep_idle(later).await.unwrap();
        assert_eq!(
            swept,
            IdleSweep {
                stopped: 1,
                deleted: 1,
                ..Default::default()
            },
            "busy is idle by now too"
        );
        assert!(matches!(
            svc.get(&idle).await,
            Err(ServiceError::NotFound(_))
        ));
        assert_eq!(svc.get(&busy).await.unwrap().state, SandboxState::Stopped);
        assert_eq!(
            svc.sweep_idle(later + 60 * MINUTE).await.unwrap().deleted,
            0,
            "never deleted"
        );
        assert_eq!(svc.get(&plain).await.unwrap().state, SandboxState::Running);
    }

    /// A running sandbox's activity reaches the store once it is [`PERSIST_AFTER`] newer, so a
    /// restart does not forget it.
    #[tokio::test]
    async fn activity_is_written_to_the_store_by_the_sweep() {
        let t = service();
        let svc = &t.svc;
        let id = running(&t).await;
        svc.set_idle_policy(&id, policy(MINUTE, -1)).await.unwrap();
        let stored = || async {
            let rows = svc.reader().read(|tx| tx.idle_sandboxes()).await.unwrap();
            rows[0].active_at
        };
        let before = stored().await;
        svc.inner.activity.touch(&id, before + PERSIST_AFTER - 1);
        svc.sweep_idle(before + 1).await.unwrap();
        assert_eq!(stored().await, before, "not worth a write yet");
        svc.inner.activity.touch(&id, before + PERSIST_AFTER);
        svc.sweep_idle(before + 1).await.unwrap();
        assert_eq!(stored().await, before + PERSIST_AFTER);
    }

    #[tokio::test]
    async fn a_negative_stop_interval_is_refused() {
        let t = service();
        let id = running(&t).await;
        let refused = t.svc.set_idle_policy(&id, policy(-1, -1)).await;
        assert!(
            matches!(refused, Err(ServiceError::InvalidRequest(_))),
            "{refused:?}"
        );
        let unknown = t.svc.set_idle_policy("sbx-nope", policy(1, 1)).await;
        assert!(
            matches!(unknown, Err(ServiceError::NotFound(_))),
            "{unknown:?}"
        );
    }

    /// Invariant: a policy stops or pauses an idle sandbox, never both. One with a pause interval
    /// is paused (its memory kept) once idle that long, activity postponing it, and is not deleted
    /// for being idle while paused; a policy with both intervals is refused.
    #[tokio::test]
    async fn an_idle_sandbox_with_a_pause_interval_is_paused_not_stopped() {
        let t = service();
        let svc = &t.svc;
        let idle = running(&t).await;
        let busy = running(&t).await;
        let pausing = IdlePolicy {
            stop_after_ms: 0,
            pause_after_ms: MINUTE,
            delete_after_ms: 0,
            archive_after_ms: 0,
        };
        for id in [&idle, &busy] {
            svc.set_idle_policy(id, pausing).await.unwrap();
        }
        let both = svc
            .set_idle_policy(
                &idle,
                IdlePolicy {
                    stop_after_ms: MINUTE,
                    ..pausing
                },
            )
            .await;
        assert!(
            matches!(both, Err(ServiceError::InvalidRequest(_))),
            "{both:?}"
        );

        let start = unix_millis_now();
        svc.inner.activity.touch(&busy, start + 50_000);
        let swept = svc.sweep_idle(start + MINUTE + 1_000).await.unwrap();
        let expected = IdleSweep {
            paused: 1,
            ..Default::default()
        };
        assert_eq!(swept, expected, "only the idle one");
        assert_eq!(svc.get(&idle).await.unwrap().state, SandboxState::Paused);
        assert_eq!(svc.get(&busy).await.unwrap().state, SandboxState::Running);
        assert_eq!(t.rt.pauses.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Paused, it stays: not deleted (its delete interval is for a stopped one), not paused again.
        let later = svc.sweep_idle(start + 90 * MINUTE).await.unwrap();
        assert_eq!(later, expected, "the busy one, idle by now");
        assert_eq!(svc.get(&idle).await.unwrap().state, SandboxState::Paused);
    }
}
