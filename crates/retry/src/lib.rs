//! `sandboxd-retry`: the project's one sender policy for state-bearing messages.
//!
//! Contract: a send is retried only when retrying can help. [`Outcome::Retryable`] (a transport error or
//! a 5xx: plausibly a deploy blip) is attempted again after the policy's backoff, up to
//! [`Policy::attempts`]; [`Outcome::Rejected`] (a 4xx: the request itself is wrong and would fail
//! identically) ends the send after that one attempt; [`Outcome::Delivered`] ends it at once. With a
//! [`Policy::tail`], a budget spent on retryable failures is followed by a slow tail: one attempt every
//! `interval` until `max_total` has passed since the first attempt, for a receiver that is down for minutes.
//!
//! Assumes: the caller reuses one delivery id across every attempt of a send (the closure receives the
//! attempt number, 1-based, not a new identity), so a receiver dedupes what arrives twice. No I/O here:
//! the caller's closure does the sending, [`classify_status`] sorts HTTP statuses.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// How often and how patiently a message is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Attempts of the fast burst (at least 1).
    pub attempts: u32,
    /// Waits before attempt 2, 3, …; the last one repeats if `attempts` outnumbers them.
    pub backoff: Vec<Duration>,
    /// At most this many thousandths of each wait are added at random, so senders do not retry in step.
    pub jitter_permille: u32,
    /// After the burst: `(interval, max_total)` — keep trying every `interval` until `max_total` has passed
    /// since the first attempt.
    pub tail: Option<(Duration, Duration)>,
}

impl Policy {
    /// The policy of state-bearing events: 3 attempts, ~1 s then ~5 s apart (up to 10 % jitter), no tail.
    pub fn state_bearing() -> Self {
        Policy {
            attempts: 3,
            backoff: vec![Duration::from_secs(1), Duration::from_secs(5)],
            jitter_permille: 100,
            tail: None,
        }
    }

    /// This policy followed by a slow tail: one attempt every `interval` until `max_total` after the first.
    pub fn with_tail(mut self, interval: Duration, max_total: Duration) -> Self {
        self.tail = Some((interval, max_total));
        self
    }

    /// The same policy without jitter (deterministic waits, for tests).
    pub fn without_jitter(mut self) -> Self {
        self.jitter_permille = 0;
        self
    }

    /// The wait before attempt `next` (2-based) of the burst, jitter included.
    pub fn delay_before(&self, next: u32) -> Duration {
        let i = next.saturating_sub(2) as usize;
        let base = self
            .backoff
            .get(i)
            .or(self.backoff.last())
            .copied()
            .unwrap_or_default();
        base + jitter(base, self.jitter_permille)
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self::state_bearing()
    }
}

/// A random extra of at most `permille`/1000 of `base` (std's per-process random hasher keys: no rand).
fn jitter(base: Duration, permille: u32) -> Duration {
    if permille == 0 || base.is_zero() {
        return Duration::ZERO;
    }
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(base.as_nanos());
    let max = base.as_millis() as u64 * u64::from(permille.min(1000)) / 1000;
    Duration::from_millis(h.finish() % (max + 1))
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The receiver accepted it (2xx).
    Delivered,
    /// A transport error or a 5xx: worth another attempt.
    Retryable(String),
    /// A 4xx (or any other non-2xx, non-5xx answer): never retried.
    Rejected(String),
}

/// Sorts an HTTP status: 2xx delivered, 5xx retryable, anything else (every 4xx, 3xx) rejected.
pub fn classify_status(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered,
        500..=599 => Outcome::Retryable(format!("HTTP {status}")),
        _ => Outcome::Rejected(format!("HTTP {status}")),
    }
}

/// Why a send ended without delivery.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The receiver rejected the message; it was not retried.
    #[error("rejected: {0}")]
    Rejected(String),
    /// Every attempt the policy allows failed retryably.
    #[error("gave up after {attempts} attempts: {last}")]
    Exhausted {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's error.
        last: String,
    },
}

/// How a send went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Attempts made (at least 1).
    pub attempts: u32,
    /// `Ok` when delivered.
    pub result: Result<(), SendError>,
}

impl Report {
    /// Whether the message was delivered.
    pub fn delivered(&self) -> bool {
        self.result.is_ok()
    }
}

/// Sends by calling `attempt(n)` (n = 1, 2, …) under `policy` until delivered, rejected or out of budget.
pub async fn send<F, Fut>(policy: &Policy, mut attempt: F) -> Report
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Outcome>,
{
    let started = tokio::time::Instant::now();
    let burst = policy.attempts.max(1);
    let mut n = 0;
    loop {
        n += 1;
        let last = match attempt(n).await {
            Outcome::Delivered => {
                return Report {
                    attempts: n,
                    result: Ok(()),
                }
            }
            Outcome::Rejected(why) => {
                return Report {
                    attempts: n,
                    result: Err(SendError::Rejected(why)),
                }
            }
            Outcome::Retryable(why) => why,
        };
        let wait = if n < burst {
            policy.delay_before(n + 1)
        } else {
            match policy.tail {
                Some((interval, max_total)) if started.elapsed() + interval <= max_total => {
                    interval
                }
                _ => {
                    return Report {
                        attempts: n,
                        result: Err(SendError::Exhausted { attempts: n, last }),
                    }
                }
            }
        };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::time::Instant;

    /// Attempt numbers and when they arrived.
    type Log = Arc<Mutex<Vec<(u32, Duration)>>>;

    /// A scripted receiver: answers `statuses` in order (the last one forever), logging when each
    /// attempt arrived (relative to the start) and its number.
    fn receiver(statuses: Vec<u16>) -> (Log, impl FnMut(u32) -> std::future::Ready<Outcome>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let l = log.clone();
        let f = move |n: u32| {
            let mut log = l.lock().unwrap();
            let status = statuses[log.len().min(statuses.len() - 1)];
            log.push((n, start.elapsed()));
            std::future::ready(classify_status(status))
        };
        (log, f)
    }

    fn secs(log: &[(u32, Duration)]) -> Vec<u64> {
        log.iter().map(|(_, d)| d.as_secs()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn server_errors_are_retried_exactly_up_to_the_budget_with_the_backoff() {
        let (log, f) = receiver(vec![503]);
        let report = send(&Policy::state_bearing().without_jitter(), f).await;
        assert_eq!(report.attempts, 3);
        assert!(matches!(
            report.result,
            Err(SendError::Exhausted { attempts: 3, ref last }) if last == "HTTP 503"
        ));
        let log = log.lock().unwrap();
        assert_eq!(
            log.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(secs(&log), vec![0, 1, 6], "1 s then 5 s apart");
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_stays_small_and_only_adds() {
        let (log, f) = receiver(vec![500]);
        send(&Policy::state_bearing(), f).await;
        let log = log.lock().unwrap();
        let (a, b) = (log[1].1 - log[0].1, log[2].1 - log[1].1);
        assert!(
            a >= Duration::from_secs(1) && a <= Duration::from_millis(1100),
            "{a:?}"
        );
        assert!(
            b >= Duration::from_secs(5) && b <= Duration::from_millis(5500),
            "{b:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn client_errors_are_attempted_once() {
        let (log, f) = receiver(vec![400, 200]);
        let report = send(&Policy::state_bearing(), f).await;
        assert_eq!(report.attempts, 1);
        assert_eq!(report.result, Err(SendError::Rejected("HTTP 400".into())));
        assert_eq!(log.lock().unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn success_stops_the_retries() {
        let (log, f) = receiver(vec![500, 200, 500]);
        let report = send(&Policy::state_bearing().without_jitter(), f).await;
        assert_eq!(
            report,
            Report {
                attempts: 2,
                result: Ok(())
            }
        );
        assert_eq!(secs(&log.lock().unwrap()), vec![0, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_tail_keeps_trying_a_receiver_that_is_down_for_minutes() {
        // Down for 4 minutes, then up.
        let start = Instant::now();
        let attempts = Arc::new(Mutex::new(0u32));
        let a = attempts.clone();
        let policy = Policy::state_bearing()
            .without_jitter()
            .with_tail(Duration::from_secs(30), Duration::from_secs(3600));
        let report = send(&policy, move |_| {
            *a.lock().unwrap() += 1;
            std::future::ready(if start.elapsed() < Duration::from_secs(240) {
                Outcome::Retryable("connection refused".into())
            } else {
                Outcome::Delivered
            })
        })
        .await;
        assert!(report.delivered(), "{report:?}");
        // 0, 1, 6, then every 30 s: 36, 66, …, 246.
        assert_eq!(report.attempts, 3 + 8);
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(240) && took < Duration::from_secs(280),
            "{took:?}"
        );
        // Without the tail the same receiver is given up on after the burst.
        let report = send(&Policy::state_bearing().without_jitter(), |_| {
            std::future::ready(Outcome::Retryable("down".into()))
        })
        .await;
        assert_eq!(report.attempts, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn the_tail_ends_at_its_total() {
        let policy = Policy::state_bearing()
            .without_jitter()
            .with_tail(Duration::from_secs(60), Duration::from_secs(300));
        let start = Instant::now();
        let report = send(&policy, |_| {
            std::future::ready(Outcome::Retryable("down".into()))
        })
        .await;
        assert!(!report.delivered());
        assert!(start.elapsed() <= Duration::from_secs(300));
        // 0, 1, 6, 66, 126, 186, 246.
        assert_eq!(report.attempts, 7);
    }

    #[test]
    fn statuses_are_sorted_by_whether_retrying_can_help() {
        assert_eq!(classify_status(204), Outcome::Delivered);
        assert!(matches!(classify_status(502), Outcome::Retryable(_)));
        assert!(matches!(classify_status(429), Outcome::Rejected(_)));
        assert!(matches!(classify_status(404), Outcome::Rejected(_)));
        assert!(matches!(classify_status(410), Outcome::Rejected(_)));
        assert!(matches!(classify_status(301), Outcome::Rejected(_)));
    }
}
