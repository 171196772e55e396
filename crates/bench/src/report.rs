//! Figures with their targets, and the one place they are formatted for people.
//!
//! Every latency the benches print is a [`Latency`]: the [`Summary`] of its samples plus, when the issue
//! sets one, its [`Target`] and whether it was met. The same values serialize for `--json`.

use crate::stats::Summary;
use serde::Serialize;
use std::time::Duration;

/// Upper bounds on a latency's p50 and/or p99, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Target {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
}

impl Target {
    /// Whether `s` is within every bound.
    pub fn met_by(&self, s: &Summary) -> bool {
        self.p50_ms.is_none_or(|t| s.p50_ms <= t) && self.p99_ms.is_none_or(|t| s.p99_ms <= t)
    }

    fn describe(&self) -> String {
        match (self.p50_ms, self.p99_ms) {
            (Some(a), Some(b)) => format!("target ≤{a} / ≤{b} ms"),
            (Some(a), None) => format!("target p50 ≤{a} ms"),
            (None, Some(b)) => format!("target p99 ≤{b} ms"),
            (None, None) => "no target".into(),
        }
    }
}

/// One measured latency.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    #[serde(flatten)]
    pub summary: Summary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub met: Option<bool>,
}

impl Latency {
    /// The latency of `samples` against `target`; an error when nothing was measured.
    pub fn new(
        what: &str,
        samples: &[Duration],
        target: Option<Target>,
    ) -> anyhow::Result<Latency> {
        let summary =
            Summary::of(samples).ok_or_else(|| anyhow::anyhow!("no samples of {what}"))?;
        Ok(Latency {
            summary,
            target,
            met: target.map(|t| t.met_by(&summary)),
        })
    }

    /// `label  p50 … p90 … p99 … max …  (n=…)  (target …: met)`.
    pub fn line(&self, label: &str) -> String {
        let s = &self.summary;
        let mut line = format!(
            "{label:<24} p50 {} ms  p90 {} ms  p99 {} ms  max {} ms  (n={})",
            ms(s.p50_ms),
            ms(s.p90_ms),
            ms(s.p99_ms),
            ms(s.max_ms),
            s.n
        );
        if let (Some(t), Some(met)) = (self.target, self.met) {
            line.push_str(&format!("  ({}: {})", t.describe(), verdict(met)));
        }
        line
    }
}

/// A latency against the same latency of a peer measured in the same run, with the ratio of their
/// p50s and a bound on it.
#[derive(Debug, Clone, Serialize)]
pub struct Versus {
    pub ours: Latency,
    pub peer: Latency,
    /// `ours.p50 / peer.p50`.
    pub ratio: f64,
    pub ratio_target: f64,
    /// `ratio ≤ ratio_target`.
    pub met: bool,
}

impl Versus {
    /// `ours` against `peer`, with `ratio ≤ target` as the goal.
    pub fn new(ours: Latency, peer: Latency, target: f64) -> Versus {
        let ratio = ours.summary.p50_ms / peer.summary.p50_ms;
        Versus {
            ours,
            peer,
            ratio,
            ratio_target: target,
            met: ratio <= target,
        }
    }

    /// `label 1.23  (target ≤1.5: met)`.
    pub fn ratio_line(&self, label: &str) -> String {
        format!(
            "{label} {:.2}  (target ≤{}: {})",
            self.ratio,
            self.ratio_target,
            verdict(self.met)
        )
    }
}

/// "met" or "NOT met".
pub fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}

/// Milliseconds with two decimals below 10 ms and one above, right-aligned.
pub fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:>6.2}")
    } else {
        format!("{v:>6.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(p50: f64, p99: f64) -> Summary {
        Summary {
            n: 1,
            min_ms: p50,
            p50_ms: p50,
            p90_ms: p50,
            p99_ms: p99,
            max_ms: p99,
            mean_ms: p50,
        }
    }

    #[test]
    fn a_target_is_met_only_when_every_bound_holds() {
        let t = Target {
            p50_ms: Some(25.0),
            p99_ms: Some(80.0),
        };
        assert!(t.met_by(&summary(25.0, 80.0)));
        assert!(!t.met_by(&summary(25.1, 30.0)));
        assert!(!t.met_by(&summary(10.0, 80.5)));
        let p50_only = Target {
            p50_ms: Some(2.0),
            p99_ms: None,
        };
        assert!(p50_only.met_by(&summary(1.9, 500.0)));
    }

    #[test]
    fn a_ratio_is_of_the_p50s_and_met_up_to_its_target() {
        let lat = |ms: &[u64]| {
            let samples: Vec<Duration> = ms.iter().map(|&m| Duration::from_millis(m)).collect();
            Latency::new("x", &samples, None).expect("samples")
        };
        // p50s 1500 and 1000 ms (exact in binary); the p99s, 9000 and 1100, play no part
        let v = Versus::new(lat(&[1500, 1400, 9000]), lat(&[1000, 900, 1100]), 1.5);
        assert_eq!((v.ratio, v.met), (1.5, true));
        assert_eq!(v.ratio_line("a/b"), "a/b 1.50  (target ≤1.5: met)");
        assert!(!Versus::new(lat(&[1501]), lat(&[1000]), 1.5).met);
    }

    #[test]
    fn lines_name_the_target_and_the_verdict() {
        let l = Latency::new(
            "x",
            &[Duration::from_micros(12_300)],
            Some(Target {
                p50_ms: Some(25.0),
                p99_ms: Some(80.0),
            }),
        )
        .expect("one sample");
        assert!(l
            .line("create→first-exec")
            .ends_with("(target ≤25 / ≤80 ms: met)"));
        assert!(l.line("x").contains("p50   12.3 ms"));
    }
}
