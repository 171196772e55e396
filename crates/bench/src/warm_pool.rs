//! API create→first exec from a warm pool: the daemon's `base` pool is filled with as many sandboxes
//! as there are creates, so every create takes a booted one (the figure a pool buys), then emptied.

use crate::http::{create_exec_samples, ApiFleet};
use crate::report::{Latency, Target};
use crate::steps::{StepBreakdown, StepSamples};
use anyhow::{bail, Context};
use std::time::{Duration, Instant};

/// The goal: the work was done before the request, so below the bare-sandbox floor.
pub const TARGET_P50_MS: f64 = 3.0;
/// How long the pool may take to fill.
const FILL_DEADLINE: Duration = Duration::from_secs(120);

/// `n` creates from a full pool of `n`, each followed by `true`; the pool is emptied afterwards
/// whatever happened.
pub(crate) async fn create_first_exec(
    fleet: &ApiFleet,
    n: usize,
) -> anyhow::Result<(Latency, Vec<StepBreakdown>)> {
    let size = u32::try_from(n).context("too many creates for a pool")?;
    let client = &fleet.client;
    client
        .set_warm_pool("base", size)
        .await
        .context("setting the base warm pool")?;
    let measured = async {
        // Like the cold figure's: `n` creates one after the other, then the deletes.
        full(fleet, size).await?;
        let mut took = Vec::with_capacity(n);
        let mut made = Vec::with_capacity(n);
        let mut samples = create_exec_samples();
        for _ in 0..n {
            let (id, t) = fleet.create_then_true(&mut samples).await?;
            took.push(t);
            made.push(id);
        }
        for id in made {
            fleet.delete(&id).await?;
        }
        let pool = client.warm_pools().await?;
        let hits = pool
            .warm_pools
            .iter()
            .find(|p| p.template == "base")
            .map_or(0, |p| p.hits);
        if hits < n as u64 {
            bail!("only {hits} of {n} creates took a pooled sandbox");
        }
        let latency = Latency::new(
            "API create→first-exec (warm pool)",
            &took,
            Some(Target {
                p50_ms: Some(TARGET_P50_MS),
                p99_ms: None,
            }),
        )?;
        let breakdown = samples.iter().filter_map(StepSamples::summary).collect();
        Ok((latency, breakdown))
    }
    .await;
    let emptied = client.set_warm_pool("base", 0).await;
    let latency = measured?;
    emptied.context("emptying the base warm pool")?;
    Ok(latency)
}

/// Waits until the `base` pool holds `size` booted sandboxes.
async fn full(fleet: &ApiFleet, size: u32) -> anyhow::Result<()> {
    let deadline = Instant::now() + FILL_DEADLINE;
    loop {
        let pools = fleet.client.warm_pools().await?;
        let base = pools.warm_pools.iter().find(|p| p.template == "base");
        if base.is_some_and(|p| p.ready >= size) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the base warm pool did not fill within {FILL_DEADLINE:?}: {base:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
