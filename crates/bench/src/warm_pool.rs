//! API create→first exec from a warm pool: the daemon's `base` pool is filled with as many sandboxes
//! as there are creates, so every create takes a booted one (the figure a pool buys), then emptied.
//!
//! [`snapshot_cold_vs_pooled`] gives the same figure for a snapshot (a template made from an image,
//! as Daytona's snapshots are) beside cold creates of that snapshot in the same run.

use crate::http::{create_exec_samples, ApiFleet};
use crate::report::{Latency, Target, Versus};
use crate::steps::{StepBreakdown, StepSamples};
use anyhow::{bail, Context};
use sandboxd_client::types::{CreateSandbox, CreateTemplate, WarmPool};
use std::time::{Duration, Instant};

/// The goal: the work was done before the request, so below the bare-sandbox floor.
pub const TARGET_P50_MS: f64 = 3.0;
/// A create from a pooled snapshot over a cold create of it, p50: at least 5× faster.
pub const POOLED_OVER_COLD_TARGET: f64 = 0.2;
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
        full(fleet, "base", size).await?;
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
        let hits = hits(fleet, "base").await?;
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

/// Waits until `template`'s pool holds `size` booted sandboxes.
async fn full(fleet: &ApiFleet, template: &str, size: u32) -> anyhow::Result<()> {
    settled(fleet, template, "fill", |pool| {
        pool.is_some_and(|p| p.ready >= size)
    })
    .await
}

/// Sets `template`'s pool to 0 and waits until it holds no sandbox, booted or booting: only then
/// can the template go.
async fn empty(fleet: &ApiFleet, template: &str) -> anyhow::Result<()> {
    fleet.client.set_warm_pool(template, 0).await?;
    settled(fleet, template, "empty", |pool| {
        pool.is_none_or(|p| p.ready + p.warming == 0)
    })
    .await
}

/// Waits until `done` holds of `template`'s pool (`None`: the daemon lists none), for at most
/// [`FILL_DEADLINE`]; `what` names the wait in its error.
async fn settled(
    fleet: &ApiFleet,
    template: &str,
    what: &str,
    done: impl Fn(Option<&WarmPool>) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + FILL_DEADLINE;
    loop {
        let pools = fleet.client.warm_pools().await?;
        let pool = pools.warm_pools.iter().find(|p| p.template == template);
        if done(pool) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the {template} warm pool did not {what} within {FILL_DEADLINE:?}: {pool:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Create→first exec of `n` sandboxes of a snapshot of `image` made cold (its pool empty), then of
/// `n` taken from its full pool (`ours`, against the cold ones as `peer`). The snapshot is a
/// template named `name`, made for this and deleted afterwards with its pool, whatever happened.
pub(crate) async fn snapshot_cold_vs_pooled(
    fleet: &ApiFleet,
    name: &str,
    image: &str,
    n: usize,
) -> anyhow::Result<SnapshotPool> {
    let client = &fleet.client;
    let body = CreateTemplate {
        name: name.to_string(),
        image: Some(image.to_string()),
        ..CreateTemplate::default()
    };
    client
        .create_template(&body)
        .await
        .with_context(|| format!("making the snapshot {name} of {image}"))?;
    let measured = async {
        crate::http::template_ready(client, name, FILL_DEADLINE, Duration::from_millis(20)).await?;
        let size = u32::try_from(n).context("too many creates for a pool")?;
        // One untimed cold create first, as the other figures have.
        let mut cold = Vec::with_capacity(n);
        let mut cold_steps = create_exec_samples();
        create_then_true(fleet, name, &mut create_exec_samples()).await?;
        for _ in 0..n {
            cold.push(create_then_true(fleet, name, &mut cold_steps).await?);
        }
        client.set_warm_pool(name, size).await?;
        full(fleet, name, size).await?;
        let mut pooled = Vec::with_capacity(n);
        let mut pooled_steps = create_exec_samples();
        for _ in 0..n {
            pooled.push(create_then_true(fleet, name, &mut pooled_steps).await?);
        }
        let hits = hits(fleet, name).await?;
        if hits < n as u64 {
            bail!("only {hits} of {n} creates of {name} took a pooled sandbox");
        }
        let versus = Versus::new(
            Latency::new("pooled snapshot create→first-exec", &pooled, None)?,
            Latency::new("cold snapshot create→first-exec", &cold, None)?,
            POOLED_OVER_COLD_TARGET,
        );
        let breakdown = |samples: [StepSamples; 2]| {
            samples
                .iter()
                .filter_map(StepSamples::summary)
                .collect::<Vec<_>>()
        };
        Ok(SnapshotPool {
            versus,
            pooled_breakdown: breakdown(pooled_steps),
            cold_breakdown: breakdown(cold_steps),
        })
    }
    .await;
    // Its pooled sandboxes go first: a template with a pool cannot be deleted.
    let emptied = empty(fleet, name).await;
    let deleted = client.delete_template(name).await;
    let figure = measured?;
    emptied.context("emptying the snapshot's warm pool")?;
    deleted.with_context(|| format!("deleting the snapshot {name}"))?;
    Ok(figure)
}

/// Creates of a snapshot from its warm pool against cold ones, with where each one's time went.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SnapshotPool {
    /// The pooled creates (`ours`) against the cold ones (`peer`).
    #[serde(flatten)]
    pub versus: Versus,
    pub pooled_breakdown: Vec<StepBreakdown>,
    pub cold_breakdown: Vec<StepBreakdown>,
}

/// Creates of `template` that took a pooled sandbox since the daemon started.
async fn hits(fleet: &ApiFleet, template: &str) -> anyhow::Result<u64> {
    let pools = fleet.client.warm_pools().await?;
    Ok(pools
        .warm_pools
        .iter()
        .find(|p| p.template == template)
        .map_or(0, |p| p.hits))
}

/// One sandbox of template `name`: create, run `true`, timed, its steps added to `samples`; then
/// deleted, untimed.
async fn create_then_true(
    fleet: &ApiFleet,
    name: &str,
    samples: &mut [StepSamples; 2],
) -> anyhow::Result<Duration> {
    let body = CreateSandbox {
        template: Some(name.to_string()),
        ..CreateSandbox::default()
    };
    let (id, took) = fleet.create_then_true_with(body, samples).await?;
    fleet.delete(&id).await?;
    Ok(took)
}
