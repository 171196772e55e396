//! Where an API call's time went: the steps the daemon named in its `Server-Timing` header (a
//! create's `prepare`, `admit`, `adopt`, …; an exec's `resolve` and `agent`), each as a p50 over the
//! run, beside the call's own p50 as the client saw it and what was spent outside every step (the
//! HTTP round trip, parsing, authentication, rendering the answer).
//!
//! Contract: each step's p50 is taken over the calls that took it; `outside` is, per call, the
//! client's time less the steps' sum, then its p50. The p50s of the parts need not add up to the
//! call's p50.

use crate::stats::Summary;
use serde::Serialize;
use std::time::Duration;

/// The samples of one kind of call.
#[derive(Debug, Clone)]
pub struct StepSamples {
    label: &'static str,
    total: Vec<Duration>,
    outside: Vec<Duration>,
    steps: Vec<(String, Vec<Duration>)>,
}

/// One kind of call's breakdown, as reported.
#[derive(Debug, Clone, Serialize)]
pub struct StepBreakdown {
    pub label: &'static str,
    pub p50_ms: f64,
    /// Each step's p50, in the order the daemon first took it.
    pub steps: Vec<(String, f64)>,
    /// The p50 of the time spent outside every step.
    pub outside_p50_ms: f64,
}

impl StepSamples {
    pub fn new(label: &'static str) -> Self {
        StepSamples {
            label,
            total: Vec::new(),
            outside: Vec::new(),
            steps: Vec::new(),
        }
    }

    /// One call that took `total` as the client saw it, with the steps the daemon named.
    pub fn add(&mut self, total: Duration, steps: &[(String, f64)]) {
        let mut inside = Duration::ZERO;
        for (name, step_ms) in steps {
            let took = Duration::from_secs_f64(step_ms.max(0.0) / 1e3);
            inside += took;
            match self.steps.iter_mut().find(|(n, _)| n == name) {
                Some((_, samples)) => samples.push(took),
                None => self.steps.push((name.clone(), vec![took])),
            }
        }
        self.total.push(total);
        self.outside.push(total.saturating_sub(inside));
    }

    /// The breakdown; `None` without calls.
    pub fn summary(&self) -> Option<StepBreakdown> {
        let p50 = |samples: &[Duration]| Summary::of(samples).map(|s| s.p50_ms);
        Some(StepBreakdown {
            label: self.label,
            p50_ms: p50(&self.total)?,
            steps: self
                .steps
                .iter()
                .filter_map(|(name, samples)| Some((name.clone(), p50(samples)?)))
                .collect(),
            outside_p50_ms: p50(&self.outside)?,
        })
    }
}

/// Milliseconds as the reports write them, unpadded.
fn fmt_ms(v: f64) -> String {
    crate::report::ms(v).trim().to_string()
}

impl StepBreakdown {
    /// One line for people: `label p50 X ms = a 0.1 + b 0.2 + … + outside 0.3`.
    pub fn line(&self) -> String {
        let parts: Vec<String> = self
            .steps
            .iter()
            .map(|(name, p50)| format!("{name} {}", fmt_ms(*p50)))
            .collect();
        format!(
            "  {} p50 {} ms: {}{}outside the steps {}",
            self.label,
            fmt_ms(self.p50_ms),
            parts.join(", "),
            if parts.is_empty() { "" } else { ", " },
            fmt_ms(self.outside_p50_ms)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1e3)
    }

    #[test]
    fn steps_and_the_time_outside_them_are_summarised_per_name() {
        let mut s = StepSamples::new("create");
        s.add(ms(5.0), &[("admit".into(), 1.0), ("adopt".into(), 2.0)]);
        s.add(ms(3.0), &[("admit".into(), 0.5)]);
        s.add(ms(4.0), &[("admit".into(), 3.0), ("adopt".into(), 4.0)]);
        let b = s.summary().unwrap();
        assert_eq!(b.p50_ms, 4.0);
        let names: Vec<_> = b.steps.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["admit", "adopt"]);
        assert_eq!(b.steps[0].1, 1.0);
        assert_eq!(b.steps[1].1, 2.0);
        // Outside: 2.0, 2.5 and 0 (the steps' sum is more than the call, so nothing).
        assert_eq!(b.outside_p50_ms, 2.0);
        assert!(
            b.line()
                .contains("admit 1.00, adopt 2.00, outside the steps 2.00"),
            "{}",
            b.line()
        );
    }

    #[test]
    fn no_calls_no_breakdown() {
        assert!(StepSamples::new("create").summary().is_none());
    }
}
