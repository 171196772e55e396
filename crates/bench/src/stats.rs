//! Latency summaries: nearest-rank percentiles over a set of samples.
//!
//! Contract: [`Summary::of`] sorts a copy of the samples and reads percentile `p` as the sample of rank
//! `⌈p/100 · n⌉` (1-based), the nearest-rank definition: every reported figure is a latency that was
//! actually observed, p100 is the maximum, and with fewer than 100 samples p99 is the maximum too.
//! No interpolation, no histogram buckets: the benches collect at most a few tens of thousands of
//! samples, so keeping them all is cheap and exact.

use serde::Serialize;
use std::time::Duration;

/// Percentiles of one measurement, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    pub min_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

impl Summary {
    /// The summary of `samples`; `None` when there are none.
    pub fn of(samples: &[Duration]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let total: Duration = sorted.iter().sum();
        Some(Summary {
            n: sorted.len(),
            min_ms: ms(sorted[0]),
            p50_ms: ms(percentile(&sorted, 50.0)),
            p90_ms: ms(percentile(&sorted, 90.0)),
            p99_ms: ms(percentile(&sorted, 99.0)),
            max_ms: ms(sorted[sorted.len() - 1]),
            mean_ms: ms(total) / sorted.len() as f64,
        })
    }
}

/// The nearest-rank `p`th percentile (0 < p ≤ 100) of `sorted`, which must be sorted and non-empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    assert!(!sorted.is_empty(), "percentile of no samples");
    // p·n first, then /100: exact for integral p and n (0.9·10 would round up past 9).
    let rank = (p * sorted.len() as f64 / 100.0).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn percentiles_of_one_to_a_hundred_are_their_ranks() {
        let samples: Vec<Duration> = (1..=100).rev().map(ms).collect();
        let s = Summary::of(&samples).expect("samples");
        assert_eq!(s.n, 100);
        assert_eq!(
            (s.min_ms, s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms),
            (1.0, 50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(s.mean_ms, 50.5);
    }

    #[test]
    fn with_fewer_than_a_hundred_samples_p99_is_the_maximum() {
        let samples: Vec<Duration> = [7, 3, 9, 1, 5, 2, 8, 4, 10, 6].map(ms).to_vec();
        let s = Summary::of(&samples).expect("samples");
        // rank ⌈0.5·10⌉ = 5, ⌈0.9·10⌉ = 9, ⌈0.99·10⌉ = 10
        assert_eq!((s.p50_ms, s.p90_ms, s.p99_ms), (5.0, 9.0, 10.0));
    }

    #[test]
    fn every_percentile_of_one_sample_is_that_sample() {
        let s = Summary::of(&[Duration::from_micros(1500)]).expect("sample");
        assert_eq!(
            (s.min_ms, s.p50_ms, s.p99_ms, s.max_ms, s.mean_ms),
            (1.5, 1.5, 1.5, 1.5, 1.5)
        );
    }

    #[test]
    fn even_count_median_is_the_lower_middle_sample_not_an_average() {
        let sorted = [1, 2, 3, 4].map(ms);
        assert_eq!(percentile(&sorted, 50.0), ms(2));
        assert_eq!(percentile(&sorted, 75.0), ms(3));
        assert_eq!(percentile(&sorted, 76.0), ms(4));
        assert_eq!(percentile(&sorted, 100.0), ms(4));
        // tiny percentiles still name a sample (rank clamps to 1)
        assert_eq!(percentile(&sorted, 0.1), ms(1));
    }

    #[test]
    fn no_samples_have_no_summary() {
        assert_eq!(Summary::of(&[]), None);
    }
}
