//! Usage history: the samples behind E2B's `get_metrics(start, end)` and Daytona's metric series.
//!
//! Contract:
//! - **Who is sampled.** Every [`ServiceConfig::usage_sample_every`](crate::ServiceConfig)
//!   ([`SAMPLE_EVERY`] by default, E2B's own period), [`Service::record_usage`] samples each running sandbox that is
//!   *awake*: one whose agent or ports were used ([`Service::awake`]) or whose metrics were asked
//!   for ([`Service::usage_sample`]) within the last [`AWAKE_FOR`], or whose previous sample used at least [`BUSY_PCT`] of its
//!   CPU (a process left running in the background keeps its sandbox awake). A sandbox nobody uses
//!   and whose processes sleep is not read at all, so an idle host does no per-sandbox work; its
//!   history holds its last samples and goes on at its next use.
//! - **What is kept.** Each sandbox's newest [`KEEP`] samples (ten minutes at the default period),
//!   in memory: a daemon restart forgets them, a stop or a delete drops them (as does a pass that
//!   finds the sandbox no longer running: paused, say).
//! - **What a request gets** ([`Service::usage_history`]): the kept samples inside its range,
//!   oldest first, and, unless the range ended before now (more than [`OPEN_END`] ago), one taken
//!   now and kept too — so a
//!   running sandbox always has at least one. A sample's CPU share is over the time since the
//!   sandbox's previous reading when that is recent (at most two periods old), else over
//!   [`CPU_SAMPLE_INTERVAL`] watched there and then.

use crate::pause::{UsageSample, CPU_SAMPLE_INTERVAL};
use crate::{Service, ServiceError};
use sandboxd_runtime::cgroup::CgroupStats;
use sandboxd_store::{unix_millis_now, Sandbox, SandboxState, UnixMillis};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often awake sandboxes are sampled unless configured otherwise: E2B's period.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// How long a use, or a request for its metrics, keeps a sandbox sampled, milliseconds.
pub const AWAKE_FOR: UnixMillis = 60_000;
/// The CPU share (percent of its limit) at or over which a sample keeps its sandbox sampled.
pub const BUSY_PCT: f64 = 1.0;
/// How far in the past a range may end and still count as ending now: clients send their own
/// clock's now, truncated (E2B's to the second), milliseconds.
pub const OPEN_END: UnixMillis = 10_000;
/// Samples kept per sandbox.
pub const KEEP: usize = 120;

/// What is known of one sandbox's usage.
#[derive(Debug, Default)]
struct Track {
    /// Its newest use or request for its metrics.
    awake_at: UnixMillis,
    /// Its cumulative CPU time at its newest reading, and when that was taken.
    cpu: Option<(u64, Instant)>,
    /// Its newest samples, oldest first.
    samples: VecDeque<UsageSample>,
}

impl Track {
    fn awake(&self, now: UnixMillis) -> bool {
        now - self.awake_at < AWAKE_FOR
            || self
                .samples
                .back()
                .is_some_and(|s| s.cpu_used_pct >= BUSY_PCT)
    }

    fn keep(&mut self, sample: UsageSample) {
        if self.samples.len() == KEEP {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }
}

/// Every sandbox's [`Track`], by id.
#[derive(Debug, Default)]
pub(crate) struct UsageHistory(Mutex<HashMap<String, Track>>);

impl UsageHistory {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Track>) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Sandbox `id` was used (or asked about) at `at`.
    pub(crate) fn touch(&self, id: &str, at: UnixMillis) {
        self.with(|tracks| match tracks.get_mut(id) {
            Some(track) => track.awake_at = track.awake_at.max(at),
            None => {
                let track = Track {
                    awake_at: at,
                    ..Track::default()
                };
                tracks.insert(id.to_string(), track);
            }
        });
    }

    /// Drops what is known of sandbox `id`.
    pub(crate) fn forget(&self, id: &str) {
        self.with(|tracks| tracks.remove(id));
    }

    fn awake(&self, now: UnixMillis) -> Vec<String> {
        self.with(|tracks| {
            let mut ids: Vec<String> = tracks
                .iter()
                .filter(|(_, t)| t.awake(now))
                .map(|(id, _)| id.clone())
                .collect();
            ids.sort();
            ids
        })
    }

    /// The newest CPU reading of `id` if it was taken within `fresh`.
    fn recent_cpu(&self, id: &str, fresh: Duration) -> Option<(u64, Instant)> {
        self.with(|tracks| {
            tracks
                .get(id)
                .and_then(|t| t.cpu)
                .filter(|(_, at)| at.elapsed() <= fresh)
        })
    }

    /// Records a reading of tracked sandbox `id`; with `sample`, keeps that sample too. One
    /// forgotten meanwhile (deleted) stays forgotten.
    fn record(&self, id: &str, cpu: (u64, Instant), sample: Option<UsageSample>) {
        self.with(|tracks| {
            if let Some(track) = tracks.get_mut(id) {
                track.cpu = Some(cpu);
                if let Some(sample) = sample {
                    track.keep(sample);
                }
            }
        });
    }

    /// The kept samples of `id` taken within `from..=to`, oldest first.
    fn range(&self, id: &str, from: UnixMillis, to: UnixMillis) -> Vec<UsageSample> {
        self.with(|tracks| {
            tracks.get(id).map_or_else(Vec::new, |t| {
                t.samples
                    .iter()
                    .filter(|s| (from..=to).contains(&s.at_ms))
                    .copied()
                    .collect()
            })
        })
    }
}

impl Service {
    /// One sample of running sandbox `key`'s usage, taken now and kept in its history (see the
    /// module's contract for its CPU share): the E2B and Daytona metrics.
    pub async fn usage_sample(&self, key: &str) -> Result<UsageSample, ServiceError> {
        let (sandbox, stats) = self.usage(key).await?;
        // Asked about: it is sampled for a while, and what is read now is kept.
        self.inner
            .usage_history
            .touch(&sandbox.id, unix_millis_now());
        let fresh = self.config().usage_sample_every * 2;
        let (sandbox, stats, before) = match self.inner.usage_history.recent_cpu(&sandbox.id, fresh)
        {
            Some(before) if before.1.elapsed() >= CPU_SAMPLE_INTERVAL / 2 => {
                (sandbox, stats, before)
            }
            _ => {
                let before = (stats.cpu_usage_usec, Instant::now());
                tokio::time::sleep(CPU_SAMPLE_INTERVAL).await;
                let (sandbox, stats) = self.usage(key).await?;
                (sandbox, stats, before)
            }
        };
        self.keep_sample(&sandbox, &stats, Some(before)).await
    }

    /// The kept samples of running sandbox `key` taken within `from..=to` (Unix milliseconds; `None`:
    /// its first sample, now), oldest first, ending with one taken now unless `to` is in the past.
    /// A range that starts after it ends is the caller's mistake (every surface's range is checked
    /// here).
    pub async fn usage_history(
        &self,
        key: &str,
        from: Option<UnixMillis>,
        to: Option<UnixMillis>,
    ) -> Result<Vec<UsageSample>, ServiceError> {
        if let Some((from, to)) = from.zip(to).filter(|(from, to)| from > to) {
            return Err(ServiceError::InvalidRequest(format!(
                "the range starts after it ends ({from} ms > {to} ms since the epoch)"
            )));
        }
        let sandbox = self.get(key).await?;
        let now = match to {
            Some(to) if to < unix_millis_now() - OPEN_END => {
                // Still only a running sandbox's metrics.
                self.usage(&sandbox.id).await?;
                None
            }
            _ => Some(self.usage_sample(&sandbox.id).await?),
        };
        let to = now.map_or(to.unwrap_or(UnixMillis::MAX), |s| {
            s.at_ms.max(to.unwrap_or(0))
        });
        Ok(self
            .inner
            .usage_history
            .range(&sandbox.id, from.unwrap_or(0), to))
    }

    /// Samples every awake running sandbox once (see the module's contract); returns how many
    /// samples it kept. A sandbox that is gone or no longer running is forgotten.
    pub async fn record_usage(&self) -> usize {
        let mut kept = 0;
        for id in self.inner.usage_history.awake(unix_millis_now()) {
            match self.usage(&id).await {
                Ok((sandbox, stats)) if sandbox.state == SandboxState::Running => {
                    let before = self.inner.usage_history.recent_cpu(&id, Duration::MAX);
                    match self.keep_sample(&sandbox, &stats, before).await {
                        Ok(_) => kept += usize::from(before.is_some()),
                        Err(e) => {
                            tracing::debug!(sandbox_id = %id, error = %e, "usage sample failed")
                        }
                    }
                }
                Ok(_) | Err(ServiceError::NotFound(_) | ServiceError::Conflict(_)) => {
                    self.inner.usage_history.forget(&id);
                }
                Err(e) => tracing::debug!(sandbox_id = %id, error = %e, "usage sample failed"),
            }
        }
        kept
    }

    /// Makes a sample of `sandbox` from `stats` read now and the CPU reading `before` (without one,
    /// only the reading is kept, as the next sample's start) and keeps it.
    async fn keep_sample(
        &self,
        sandbox: &Sandbox,
        stats: &CgroupStats,
        before: Option<(u64, Instant)>,
    ) -> Result<UsageSample, ServiceError> {
        let now = Instant::now();
        let cpus = f64::from(sandbox.cpu_millis.max(1)) / 1000.0;
        let cpu_used_pct = before.map_or(0.0, |(usec, at)| {
            let elapsed_usec = now.duration_since(at).as_micros().max(1) as f64;
            let used_usec = stats.cpu_usage_usec.saturating_sub(usec) as f64;
            (used_usec / (elapsed_usec * cpus) * 100.0).clamp(0.0, 100.0)
        });
        // The sandbox as just read: its layer's usage costs no second read of the store.
        let disk = self.disk_usage(sandbox).await?;
        let sample = UsageSample {
            at_ms: unix_millis_now(),
            cpu_count: sandbox.cpu_millis.div_ceil(1000).max(1),
            cpu_used_pct: (cpu_used_pct * 100.0).round() / 100.0,
            mem_used: stats
                .memory_usage_bytes
                .saturating_sub(stats.memory_file_bytes),
            mem_total: stats
                .memory_limit_bytes
                .unwrap_or(u64::from(sandbox.memory_mb) * 1024 * 1024),
            mem_cache: stats.memory_file_bytes,
            disk_used: disk.map_or(0, |d| d.used_bytes),
            disk_total: disk.and_then(|d| d.limit_bytes).unwrap_or(0),
        };
        let reading = (stats.cpu_usage_usec, now);
        self.inner
            .usage_history
            .record(&sandbox.id, reading, before.is_some().then_some(sample));
        Ok(sample)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{InMemoryRuntimeForTests, TestService};
    use crate::ServiceConfig;
    use sandboxd_api_types as api;
    use std::sync::atomic::Ordering;

    fn tracked(t: &TestService, id: &str) -> Option<(UnixMillis, usize)> {
        let history = &t.svc.inner.usage_history;
        history.with(|tracks| tracks.get(id).map(|t| (t.awake_at, t.samples.len())))
    }

    /// Invariant: an idle sandbox costs no sampling. Nobody used it, so a pass reads nothing; a
    /// use makes it awake, and a pass then keeps a sample each (the first only starts its CPU
    /// reading); a busy sample keeps it awake past its use, an idle one ends that; a delete and a
    /// stop forget it.
    #[tokio::test]
    async fn only_sandboxes_in_use_are_sampled_and_a_delete_forgets_them() {
        let t = TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default());
        let sb = t.svc.create(api::CreateSandbox::default()).await.unwrap();
        let idle = t.svc.create(api::CreateSandbox::default()).await.unwrap();
        assert_eq!(t.svc.record_usage().await, 0);
        assert_eq!(tracked(&t, &sb.id), None);

        t.svc.awake(&sb.id).await.unwrap();
        assert_eq!(t.svc.record_usage().await, 0, "the first pass only reads");
        t.rt.cpu_usec.fetch_add(50_000, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(t.svc.record_usage().await, 1);
        assert_eq!(tracked(&t, &sb.id).unwrap().1, 1);
        assert_eq!(tracked(&t, &idle.id), None);

        // Its use long past: the busy sample keeps it sampled, the idle one after it ends that.
        t.svc
            .inner
            .usage_history
            .with(|tracks| tracks.get_mut(&sb.id).unwrap().awake_at = 0);
        assert_eq!(t.svc.record_usage().await, 1);
        assert_eq!(t.svc.record_usage().await, 0);
        assert_eq!(tracked(&t, &sb.id).unwrap().1, 2);

        t.svc.delete(&sb.id).await.unwrap();
        t.svc.awake(&idle.id).await.unwrap();
        t.svc.record_usage().await;
        assert_eq!(tracked(&t, &sb.id), None);
        assert!(tracked(&t, &idle.id).is_some());
        t.svc.stop(&idle.id).await.unwrap();
        assert_eq!(tracked(&t, &idle.id), None, "a stop ends its history");
    }

    /// Invariant: a sandbox keeps at most [`KEEP`] samples, and a request gets those inside its
    /// range, oldest first, ending with one taken now unless the range ended in the past; a range
    /// that starts after it ends is refused.
    #[tokio::test]
    async fn a_request_gets_its_range_oldest_first_ending_now() {
        let t = TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default());
        let sb = t.svc.create(api::CreateSandbox::default()).await.unwrap();
        t.svc.awake(&sb.id).await.unwrap();
        for _ in 0..KEEP + 5 {
            t.rt.cpu_usec.fetch_add(1_000, Ordering::SeqCst);
            t.svc.record_usage().await;
        }
        assert_eq!(tracked(&t, &sb.id).unwrap().1, KEEP);

        tokio::time::sleep(Duration::from_millis(2)).await;
        let before = unix_millis_now();
        let all = t.svc.usage_history(&sb.id, None, None).await.unwrap();
        assert_eq!(all.len(), KEEP, "the oldest gave way to the one taken now");
        assert!(all.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        let last = all.last().unwrap();
        assert!(last.at_ms >= before);
        assert_eq!((last.mem_used, last.mem_cache), (2 << 20, 1 << 20));

        let past = t
            .svc
            .usage_history(&sb.id, None, Some(1_000))
            .await
            .unwrap();
        assert!(past.is_empty(), "{past:?}");
        let after = t
            .svc
            .usage_history(&sb.id, Some(before), None)
            .await
            .unwrap();
        assert_eq!(
            after.len(),
            2,
            "the first request's own sample, and this one's"
        );

        let backwards = t.svc.usage_history(&sb.id, Some(2_000), Some(1_000)).await;
        assert!(
            matches!(backwards, Err(ServiceError::InvalidRequest(_))),
            "{backwards:?}"
        );
        let gone = t.svc.usage_history("sbx-none", None, None).await;
        assert!(matches!(gone, Err(ServiceError::NotFound(_))), "{gone:?}");
    }
}
