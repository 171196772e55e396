//! Where a request's time went: the steps of a flow (a create's store write, its adoption, its
//! agent's boot; an exec's lookup and its agent call) each run in a `tracing` span of their own
//! (`step`, with the step's name as its `name` field) and, inside [`collect`], are also gathered
//! for the `Server-Timing` header of the answer ([`server_timing`]) that `bench` reads its
//! breakdowns from.
//!
//! With `SB_LOG=info,sandboxd_service::timing=debug` the daemon logs each step's end with its
//! milliseconds, inside the request's span (its id, its sandbox).
//!
//! Contract: a step is timed from its start to its end on the task that serves the request; a step
//! run in a task of its own is not gathered (its span still is), so a flow times the wait for such a
//! task as a step of its own. Outside [`collect`] a step costs its span and nothing else.

use std::cell::RefCell;
use std::future::Future;
use std::time::{Duration, Instant};
use tracing::Instrument;

tokio::task_local! {
    static STEPS: RefCell<Vec<Step>>;
}

/// One timed step of a flow.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The step's name: a `Server-Timing` token (letters, digits, `-`).
    pub name: &'static str,
    /// How long it took.
    pub took: Duration,
}

/// Runs `work`, gathering the steps it times, and returns them with its output.
pub async fn collect<F: Future>(work: F) -> (F::Output, Vec<Step>) {
    let mut out = None;
    let steps = STEPS
        .scope(RefCell::new(Vec::new()), async {
            out = Some(work.await);
            STEPS.with(|s| s.take())
        })
        .await;
    (out.expect("the scoped work ran to its end"), steps)
}

/// Runs step `name` of a flow in a span of its own, timing it for the [`collect`] around it.
pub async fn step<F: Future>(name: &'static str, work: F) -> F::Output {
    let start = Instant::now();
    let span = tracing::debug_span!("step", name, otel.name = name);
    let out = work.instrument(span.clone()).await;
    let took = start.elapsed();
    span.in_scope(|| tracing::debug!(ms = took.as_secs_f64() * 1e3, "step done"));
    record(name, took);
    out
}

/// Records step `name` that took `took` (a step timed by hand), for the [`collect`] around it.
pub fn record(name: &'static str, took: Duration) {
    let _ = STEPS.try_with(|s| s.borrow_mut().push(Step { name, took }));
}

/// `steps` as a `Server-Timing` header value (`name;dur=MILLISECONDS, …`); a step taken more than
/// once is summed, in the order first taken. `None` when there are none.
pub fn server_timing(steps: &[Step]) -> Option<String> {
    let mut summed: Vec<(&'static str, Duration)> = Vec::new();
    for step in steps {
        match summed.iter_mut().find(|(name, _)| *name == step.name) {
            Some((_, took)) => *took += step.took,
            None => summed.push((step.name, step.took)),
        }
    }
    if summed.is_empty() {
        return None;
    }
    let parts: Vec<String> = summed
        .iter()
        .map(|(name, took)| format!("{name};dur={:.3}", took.as_secs_f64() * 1e3))
        .collect();
    Some(parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn steps_inside_collect_are_gathered_in_order_and_summed_by_name() {
        let (out, steps) = collect(async {
            step("claim", async {}).await;
            record("adopt", Duration::from_micros(1500));
            record("claim", Duration::from_micros(250));
            7
        })
        .await;
        assert_eq!(out, 7);
        let names: Vec<_> = steps.iter().map(|s| s.name).collect();
        assert_eq!(names, ["claim", "adopt", "claim"]);
        let steps: Vec<Step> = steps
            .into_iter()
            .map(|s| Step {
                took: s.took.min(Duration::from_micros(250)),
                ..s
            })
            .collect();
        // The first `claim` took at most 250 µs; with the second's, at most 0.5 ms.
        let header = server_timing(&steps).unwrap();
        let (claim, adopt) = header.split_once(", ").unwrap();
        assert_eq!(adopt, "adopt;dur=0.250", "{header}");
        let ms: f64 = claim.strip_prefix("claim;dur=").unwrap().parse().unwrap();
        assert!((0.25..=0.5).contains(&ms), "{header}");
    }

    #[tokio::test]
    async fn steps_outside_collect_or_in_other_tasks_are_not_gathered() {
        step("alone", async {}).await;
        let (_, steps) = collect(async {
            tokio::spawn(step("elsewhere", async {})).await.unwrap();
        })
        .await;
        assert!(steps.is_empty(), "{steps:?}");
        assert_eq!(server_timing(&steps), None);
    }
}
