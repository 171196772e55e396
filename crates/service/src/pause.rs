//! Pausing and resuming a sandbox in place, and reading its resource usage.
//!
//! A pause keeps every process of the sandbox with its memory, open files and sockets, and nothing
//! runs until the resume: a namespace sandbox is frozen in place (the cgroup freezer; its memory stays
//! in the host's RAM and is lost on a reboot), a gVisor sandbox is checkpointed to disk and its memory
//! freed (it resumes after a daemon restart or a host reboot). A pause of mode
//! [`PauseMode::Filesystem`] keeps only the files: it is a stop. Guarantees:
//! - **One operation per sandbox at a time.** Pause and resume of one sandbox are serialized by a
//!   per-sandbox lock ([`KeyedLocks`]), so the runtime never sees a freeze and a thaw of one sandbox
//!   interleave and the store's state always names the last one that completed.
//! - **Intent first for a pause, effect first for a resume.** A pause records `paused` (conditionally on
//!   `running`) before freezing, and goes back to `running` if the freeze fails; a resume thaws before
//!   recording `running`. Either way a crash in between leaves a sandbox that is recorded paused while its
//!   processes may run — never one recorded running while frozen, which would hang every command.
//! - Pausing a paused sandbox is [`ServiceError::Conflict`]; resuming a running one reports that nothing
//!   was done. Any other state is a conflict too.
//!
//! - **Auto-pause** (a sandbox created with `lifecycle.onTimeout: "pause"`): at its deadline the expiry
//!   sweep pauses it instead of deleting it ([`Service::pause_at_deadline`]; with `pauseMode:
//!   "filesystem"` it stops it) and then drops its deadline, conditionally on the deadline still
//!   being due, so a timeout set meanwhile stands. A crash between the two leaves a paused (stopped)
//!   sandbox still due, which the next sweep finishes. A resume (a start) gives it its timeout again.
//! - **Auto-resume** (`lifecycle.autoResume`): every request that needs a running sandbox (commands,
//!   files, ports, traffic through the proxy) goes through [`Service::awake`], which resumes such a
//!   sandbox first. A resume of a sandbox whose deadline was dropped gives it its create's timeout again.
//!
//! Assumes: deleting a paused sandbox needs no thaw here (the runtime thaws what it kills). A paused
//! sandbox without auto-pause keeps its deadline: it still holds its memory on the host, so expiry
//! deletes it like any other. Requests to a paused sandbox without auto-resume answer a conflict.

use crate::events::{emit, sandbox_data, SANDBOX_PAUSED, SANDBOX_RESUMED};
use crate::timing::step;
use crate::{Service, ServiceError};
use sandboxd_runtime::cgroup::CgroupStats;
use sandboxd_runtime::{DiskUsage, RuntimeError};
use sandboxd_store::{unix_millis_now, Sandbox, SandboxState};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::OwnedMutexGuard;

/// One async lock per key (a sandbox id, an image digest), created on demand and dropped once nobody
/// holds or waits for it.
#[derive(Default)]
pub struct KeyedLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl KeyedLocks {
    /// Waits for and takes the lock of `id`.
    pub async fn lock(&self, id: &str) -> OwnedMutexGuard<()> {
        let lock = {
            let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
            // Entries only the map refers to are neither held nor awaited.
            map.retain(|_, l| Arc::strong_count(l) > 1);
            map.entry(id.to_string()).or_default().clone()
        };
        lock.lock_owned().await
    }
}

/// What a pause keeps ([`Service::pause_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PauseMode {
    /// Processes, memory and files: a freeze in RAM (namespace tier) or a checkpoint on disk
    /// (gVisor tier).
    #[default]
    Memory,
    /// Files only: the sandbox is stopped ([`Service::stop`]) and boots again on them.
    Filesystem,
}

impl Service {
    /// Pauses sandbox `key` keeping what `mode` says; returns it (`paused`, or `stopped` for a
    /// filesystem pause). Pausing a sandbox already paused that way is a conflict; a sandbox paused
    /// with memory may still be paused to its files (its memory is dropped).
    pub async fn pause_with(&self, key: &str, mode: PauseMode) -> Result<Sandbox, ServiceError> {
        match mode {
            PauseMode::Memory => self.pause(key).await,
            PauseMode::Filesystem => match self.stop(key).await? {
                (sandbox, true) => Ok(sandbox),
                (sandbox, false) => Err(ServiceError::Conflict(format!(
                    "sandbox {} is already paused to its files (stopped)",
                    sandbox.id
                ))),
            },
        }
    }

    /// Freezes running sandbox `key` and records it `paused`; returns the paused sandbox.
    pub async fn pause(&self, key: &str) -> Result<Sandbox, ServiceError> {
        let id = self.get(key).await?.id;
        let _serial = self.inner.sandbox_locks.lock(&id).await;
        self.pause_locked(&id).await
    }

    /// Auto-pause: pauses auto-pausing sandbox `id` if its deadline is still at or before `now`, then
    /// drops that deadline.
    pub(crate) async fn pause_at_deadline(&self, id: &str, now: i64) -> Result<(), ServiceError> {
        let _serial = self.inner.sandbox_locks.lock(id).await;
        let sandbox = self.get(id).await?;
        let due = sandbox.expires_at.is_some_and(|at| at <= now);
        if !sandbox.lifecycle.auto_pause || !due {
            return Ok(());
        }
        match sandbox.state {
            // Paused to its files: a stop (of a sandbox paused with memory by hand, too).
            SandboxState::Running | SandboxState::Paused if sandbox.lifecycle.pause_files_only => {
                self.stop_locked(id).await?;
            }
            SandboxState::Running => {
                self.pause_locked(id).await?;
            }
            _ => {}
        }
        crate::failpoints::hold("expiry.after-pause").await;
        let rid = id.to_string();
        self.writer()
            .write(move |tx| tx.drop_paused_deadline(&rid, now))
            .await?;
        Ok(())
    }

    /// Sandbox `key`, running: an auto-resuming sandbox that is paused is resumed first. Anything else
    /// not running is a conflict.
    pub(crate) async fn awake(&self, key: &str) -> Result<Sandbox, ServiceError> {
        let sandbox = self.get(key).await?;
        self.wake(sandbox).await
    }

    /// [`Service::awake`] for a row already read.
    pub(crate) async fn wake(&self, sandbox: Sandbox) -> Result<Sandbox, ServiceError> {
        match sandbox.state {
            SandboxState::Running => {
                let now = unix_millis_now();
                self.inner.activity.touch(&sandbox.id, now);
                self.inner.usage_history.touch(&sandbox.id, now);
                Ok(sandbox)
            }
            SandboxState::Paused if sandbox.lifecycle.auto_resume => {
                let (sandbox, _) = self.resume(&sandbox.id).await?;
                Ok(sandbox)
            }
            other => Err(ServiceError::Conflict(format!(
                "sandbox {} is {other}, not running",
                sandbox.id
            ))),
        }
    }

    async fn pause_locked(&self, id: &str) -> Result<Sandbox, ServiceError> {
        let id = id.to_string();
        let sandbox = self.get(&id).await?;
        match sandbox.state {
            SandboxState::Running => {}
            SandboxState::Paused => {
                return Err(ServiceError::Conflict(format!(
                    "sandbox {id} is already paused"
                )))
            }
            other => {
                return Err(ServiceError::Conflict(format!(
                    "sandbox {id} is {other}, not running"
                )))
            }
        }
        let paused = self
            .transition(
                &id,
                SandboxState::Running,
                SandboxState::Paused,
                SANDBOX_PAUSED,
                None,
            )
            .await?
            // Only a delete can have moved it meanwhile (pause and resume hold the lock).
            .ok_or_else(|| ServiceError::Conflict(format!("sandbox {id} is being deleted")))?;
        // The proxy serves cached endpoints without a store read; a paused sandbox must miss.
        self.evict_endpoint(&id);
        crate::failpoints::hold("pause.after-record").await;
        if let Err(e) = self.runtime().pause(&id).await {
            tracing::warn!(sandbox_id = %id, error = %crate::error::chain(&e), "freeze failed; resuming");
            let _ = self.runtime().resume(&id).await;
            self.transition(
                &id,
                SandboxState::Paused,
                SandboxState::Running,
                SANDBOX_RESUMED,
                None,
            )
            .await?;
            return Err(e.into());
        }
        // The requests in flight to it would wait on frozen processes: they end now. After the
        // record, so a client that checks the sandbox when its stream ends finds it paused.
        self.inner.in_flight.paused(&id);
        tracing::info!(sandbox_id = %id, "sandbox paused");
        Ok(paused)
    }

    /// Moves sandbox `id` from `from` to `to` and, in the same transaction, sets its deadline to
    /// `deadline` (when given) and emits `event`; publishes the event once committed. `None` when the
    /// sandbox was no longer in `from`.
    pub(crate) async fn transition(
        &self,
        id: &str,
        from: SandboxState,
        to: SandboxState,
        event: &'static str,
        deadline: Option<i64>,
    ) -> Result<Option<Sandbox>, ServiceError> {
        let rid = id.to_string();
        let changed = self
            .writer()
            .write(move |tx| {
                let now = unix_millis_now();
                let applied = tx.set_state(&rid, &[from], to, None, now)?;
                if applied && deadline.is_some() {
                    tx.set_expires_at(&rid, deadline, now)?;
                }
                match tx.get_sandbox_by_id(&rid)? {
                    Some(s) if applied => {
                        let ev = emit(tx, event, Some(&rid), sandbox_data(&s))?;
                        Ok(Some((s, ev)))
                    }
                    _ => Ok(None),
                }
            })
            .await?;
        Ok(changed.map(|(s, ev)| {
            self.publish([ev]);
            s
        }))
    }

    /// Thaws paused sandbox `key` and records it `running`. Returns the sandbox and whether it was
    /// paused (a running sandbox is returned unchanged).
    pub async fn resume(&self, key: &str) -> Result<(Sandbox, bool), ServiceError> {
        let id = self.get(key).await?.id;
        let _serial = self.inner.sandbox_locks.lock(&id).await;
        let sandbox = self.get(&id).await?;
        match sandbox.state {
            SandboxState::Paused => {}
            SandboxState::Running => return Ok((sandbox, false)),
            other => {
                return Err(ServiceError::Conflict(format!(
                    "sandbox {id} is {other}, neither paused nor running"
                )))
            }
        }
        step("thaw", self.runtime().resume(&id)).await?;
        self.inner.in_flight.resumed(&id);
        // Before the row says running, so no terminal opened since is among them.
        step(
            "terminals",
            self.end_terminals(&id, None, crate::orphan_terminals::Which::All),
        )
        .await;
        // An auto-paused sandbox has no deadline: it gets its create's timeout again.
        let lifecycle = sandbox.lifecycle;
        let deadline =
            (lifecycle.auto_pause && sandbox.expires_at.is_none() && lifecycle.timeout_ms > 0)
                .then(|| unix_millis_now().saturating_add(lifecycle.timeout_ms));
        let record = self.transition(
            &id,
            SandboxState::Paused,
            SandboxState::Running,
            SANDBOX_RESUMED,
            deadline,
        );
        let resumed = step("record", record)
            .await?
            .ok_or_else(|| ServiceError::Conflict(format!("sandbox {id} is being deleted")))?;
        tracing::info!(sandbox_id = %id, "sandbox resumed");
        Ok((resumed, true))
    }

    /// Resource usage of running or paused sandbox `key`, as its cgroup reports it.
    pub async fn usage(&self, key: &str) -> Result<(Sandbox, CgroupStats), ServiceError> {
        let sandbox = self.get(key).await?;
        if !matches!(sandbox.state, SandboxState::Running | SandboxState::Paused) {
            return Err(ServiceError::Conflict(format!(
                "sandbox {} is {}, not running",
                sandbox.id, sandbox.state
            )));
        }
        let stats = self.runtime().stats(&sandbox.id).await?;
        Ok((sandbox, stats))
    }

    /// What `sandbox`'s writable layer holds and may hold; `None` where the runtime cannot tell.
    pub async fn disk_usage(&self, sandbox: &Sandbox) -> Result<Option<DiskUsage>, ServiceError> {
        match self.runtime().disk_usage(&sandbox.id).await {
            Ok(usage) => Ok(Some(usage)),
            Err(RuntimeError::Unsupported(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// How long [`Service::usage_sample`] watches the CPU when the sandbox has no recent reading.
pub const CPU_SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// A sandbox's usage at one moment ([`Service::usage_sample`]); serialized as E2B's and Daytona's
/// metrics name the fields (`cpuCount`, `memUsed`, …), the time left to each surface's format.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageSample {
    /// When it was taken, Unix milliseconds.
    #[serde(skip)]
    pub at_ms: i64,
    /// CPUs it may use (its CPU limit, rounded up).
    pub cpu_count: u32,
    /// Its CPU use over the sample, as a percentage of its limit (two decimals).
    pub cpu_used_pct: f64,
    /// Memory in use, page cache left out (bytes).
    pub mem_used: u64,
    /// Its memory limit (bytes).
    pub mem_total: u64,
    /// Page cache charged to it (bytes).
    pub mem_cache: u64,
    /// Bytes its writable layer holds (0 where the runtime cannot tell).
    pub disk_used: u64,
    /// Bytes its writable layer may hold (0 where there is no limit).
    pub disk_total: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{InMemoryRuntimeForTests, TestService};
    use crate::ServiceConfig;
    use sandboxd_api_types as api;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    async fn auto_pausing(t: &TestService, auto_resume: bool) -> Sandbox {
        t.svc
            .create(api::CreateSandbox {
                timeout_sec: Some(60),
                lifecycle: Some(api::Lifecycle {
                    on_timeout: api::OnTimeout::Pause,
                    auto_resume,
                    pause_mode: api::PauseMode::Memory,
                }),
                ..Default::default()
            })
            .await
            .unwrap()
    }

    /// Makes the deadlines of `ids` due now, then runs the expiry sweep three times.
    async fn expire_now(t: &TestService, ids: &[&str]) {
        let now = unix_millis_now();
        for id in ids {
            let id = id.to_string();
            t.svc
                .writer()
                .write(move |tx| tx.set_expires_at(&id, Some(now), now))
                .await
                .unwrap();
        }
        for _ in 0..3 {
            t.svc.sweep_expired().await.unwrap();
        }
    }

    /// At its deadline an auto-pausing sandbox is paused and loses its deadline, once however often
    /// the sweep runs; a resume gives it its timeout again. A plain sandbox is deleted as before.
    #[tokio::test]
    async fn the_deadline_pauses_once_and_a_resume_restores_the_timeout() {
        let t = TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default());
        let sb = auto_pausing(&t, false).await;
        let plain = t.svc.create(api::CreateSandbox::default()).await.unwrap();
        // Both deadlines are due now.
        expire_now(&t, &[&sb.id, &plain.id]).await;
        let paused = t.svc.get(&sb.id).await.unwrap();
        assert_eq!(paused.state, SandboxState::Paused);
        assert_eq!(paused.expires_at, None);
        assert_eq!(t.rt.pauses.load(Ordering::SeqCst), 1);
        assert!(matches!(
            t.svc.get(&plain.id).await,
            Err(ServiceError::NotFound(_))
        ));
        // No auto-resume: a request is a conflict; an explicit resume restores the timeout.
        assert!(matches!(
            t.svc.awake(&sb.id).await,
            Err(ServiceError::Conflict(_))
        ));
        let before = unix_millis_now();
        let (resumed, was_paused) = t.svc.resume(&sb.id).await.unwrap();
        assert!(was_paused);
        let deadline = resumed.expires_at.expect("a deadline again");
        assert!(
            (before + 60_000..=unix_millis_now() + 60_000).contains(&deadline),
            "{deadline}"
        );
    }

    /// With `pauseMode: "filesystem"` the deadline stops the sandbox (nothing is frozen) and drops
    /// its deadline, once however often the sweep runs; a start gives it its timeout again. It cannot
    /// be combined with auto-resume, nor stand without an auto-pause.
    #[tokio::test]
    async fn a_files_only_auto_pause_stops_at_the_deadline() {
        let t = TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default());
        let lifecycle = |on_timeout, auto_resume| api::Lifecycle {
            on_timeout,
            auto_resume,
            pause_mode: api::PauseMode::Filesystem,
        };
        let create = |lifecycle| api::CreateSandbox {
            timeout_sec: Some(60),
            lifecycle: Some(lifecycle),
            ..Default::default()
        };
        for refused in [
            lifecycle(api::OnTimeout::Pause, true),
            lifecycle(api::OnTimeout::Kill, false),
        ] {
            assert!(
                matches!(
                    t.svc.create(create(refused)).await,
                    Err(ServiceError::InvalidRequest(_))
                ),
                "{refused:?}"
            );
        }
        let sb = t
            .svc
            .create(create(lifecycle(api::OnTimeout::Pause, false)))
            .await
            .unwrap();
        assert!(sb.lifecycle.pause_files_only);
        expire_now(&t, &[&sb.id]).await;
        let stopped = t.svc.get(&sb.id).await.unwrap();
        assert_eq!(stopped.state, SandboxState::Stopped);
        assert_eq!(stopped.expires_at, None);
        assert_eq!(t.rt.pauses.load(Ordering::SeqCst), 0, "nothing was frozen");
        let before = unix_millis_now();
        let (started, did) = t.svc.start(&sb.id).await.unwrap();
        assert!(did);
        let deadline = started.expires_at.expect("a deadline again");
        assert!(
            (before + 60_000..=unix_millis_now() + 60_000).contains(&deadline),
            "{deadline}"
        );
    }

    /// Concurrency: 200 requests that find an auto-resuming sandbox paused resume it once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_requests_resume_once() {
        let t = TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default());
        let sb = auto_pausing(&t, true).await;
        t.svc.pause(&sb.id).await.unwrap();
        let generation = t.svc.get(&sb.id).await.unwrap().generation;
        let calls: Vec<_> = (0..200)
            .map(|_| {
                let (svc, id) = (t.svc.clone(), sb.id.clone());
                tokio::spawn(async move { svc.awake(&id).await })
            })
            .collect();
        for call in calls {
            assert_eq!(call.await.unwrap().unwrap().state, SandboxState::Running);
        }
        assert_eq!(t.rt.resumes.load(Ordering::SeqCst), 1);
        let after = t.svc.get(&sb.id).await.unwrap();
        assert_eq!(after.generation, generation + 1, "one state change");
    }

    /// A filesystem pause is a stop (nothing is frozen), twice is a conflict and so is a memory pause
    /// of the stopped sandbox; E2B's connect boots it again. A memory-paused sandbox may still be
    /// paused to its files.
    #[tokio::test]
    async fn a_filesystem_pause_stops_and_connect_boots_it_again() {
        let t = TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default());
        let sb = t.svc.create(api::CreateSandbox::default()).await.unwrap();
        let paused = t.svc.pause_with(&sb.id, PauseMode::Filesystem).await;
        assert_eq!(paused.unwrap().state, SandboxState::Stopped);
        assert_eq!(t.rt.pauses.load(Ordering::SeqCst), 0, "nothing was frozen");
        for mode in [PauseMode::Filesystem, PauseMode::Memory] {
            assert!(
                matches!(
                    t.svc.pause_with(&sb.id, mode).await,
                    Err(ServiceError::Conflict(_))
                ),
                "{mode:?}"
            );
        }
        let (back, resumed) = t
            .svc
            .e2b_connect(&sb.id, Duration::from_secs(60))
            .await
            .unwrap();
        assert!(resumed);
        assert_eq!(back.state, SandboxState::Running);
        let paused = t.svc.pause_with(&sb.id, PauseMode::Memory).await.unwrap();
        assert_eq!(paused.state, SandboxState::Paused);
        assert_eq!(t.rt.pauses.load(Ordering::SeqCst), 1);
        let dropped = t.svc.pause_with(&sb.id, PauseMode::Filesystem).await;
        assert_eq!(dropped.unwrap().state, SandboxState::Stopped);
    }

    #[tokio::test]
    async fn one_holder_per_sandbox_and_unused_locks_are_dropped() {
        let locks = Arc::new(KeyedLocks::default());
        let a = locks.lock("a").await;
        // Another sandbox is not held up.
        let b = locks.lock("b").await;
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let _a = locks.lock("a").await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "a second holder of `a` got in");
        drop(a);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter gets `a` once it is released")
            .unwrap();
        drop(b);
        let _c = locks.lock("c").await;
        let map = locks.0.lock().unwrap();
        assert_eq!(map.keys().collect::<Vec<_>>(), ["c"]);
    }
}
