//! The API exec round trip: `POST /v1/sandboxes/{id}/exec` of `/bin/true` in one sandbox, one call
//! after the other through the bench's client (the goal: p50 ≤ 1.3 ms), each beside a spawn
//! of `/bin/true` by the bench itself, the floor of any exec, measured interleaved.

use crate::http::{run_ok, ApiFleet};
use crate::report::{Latency, Target};
use serde::Serialize;
use std::time::Instant;

/// The goal for the API exec round trip.
const TARGET: Target = Target {
    p50_ms: Some(1.3),
    p99_ms: None,
};

/// Untimed calls first (the sandbox's first command, the client's connection).
const WARMUP: usize = 10;

/// Timed calls.
pub const CALLS: usize = 200;

/// The API exec round trip beside its floor.
#[derive(Debug, Clone, Serialize)]
pub struct ApiExecFigure {
    pub round_trip: Latency,
    pub spawn_floor: Latency,
}

impl ApiExecFigure {
    /// Lines for people.
    pub fn print(&self) {
        println!("{}", self.round_trip.line("API exec round trip"));
        println!("{}", self.spawn_floor.line("  … floor: spawn /bin/true"));
        println!(
            "  API exec / spawn p50 ratio {:.2}",
            self.round_trip.summary.p50_ms / self.spawn_floor.summary.p50_ms
        );
    }
}

/// [`CALLS`] API execs of `/bin/true` in a sandbox of its own (deleted afterwards, or by the
/// fleet's teardown), interleaved with as many spawns of it by this process.
pub(crate) async fn measure(fleet: &ApiFleet) -> anyhow::Result<ApiExecFigure> {
    let sandbox = fleet.create().await?;
    let (mut calls, mut spawns) = (Vec::with_capacity(CALLS), Vec::with_capacity(CALLS));
    for i in 0..WARMUP + CALLS {
        let t = Instant::now();
        run_ok(&fleet.client, &sandbox.id, &["/bin/true"]).await?;
        let took = t.elapsed();
        let spawned = crate::runtime::spawn_floor("/bin/true", &[], 1).await?;
        if i >= WARMUP {
            calls.push(took);
            spawns.extend(spawned);
        }
    }
    fleet.delete(&sandbox.id).await?;
    Ok(ApiExecFigure {
        round_trip: Latency::new("API exec round trip", &calls, Some(TARGET))?,
        spawn_floor: Latency::new("spawn /bin/true", &spawns, None)?,
    })
}
