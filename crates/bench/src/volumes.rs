//! `bench runtime`'s volume figure: what mounting one volume adds to create→first exec.
//!
//! One volume on the fleet's runtime; sandboxes booted alternately with it mounted at `/data` and
//! without (one untimed of each first), each destroyed before the next, all with id ranges of their
//! own as the daemon makes them (so the volume is an idmapped mount). The figure is the difference
//! of the two p50s against [`VOLUME_EXTRA_TARGET_MS`]. The volume is removed whatever happens.
//! Slots from [`first_slot`] up, clear of the other figures' slots.

use crate::report::{verdict, Latency};
use crate::runtime::{Fleet, SLOTS};
use anyhow::Context;
use sandboxd_runtime::{Runtime, SandboxSpec, VolumeBind};
use serde::Serialize;
use std::time::Duration;

/// What one mounted volume may add to create→first exec's p50, in milliseconds.
pub const VOLUME_EXTRA_TARGET_MS: f64 = 1.0;

/// create→first exec with one volume and with none.
#[derive(Debug, Clone, Serialize)]
pub struct VolumeFigure {
    pub with_volume: Latency,
    pub without: Latency,
    /// `with_volume.p50 − without.p50`, ms.
    pub extra_ms: f64,
    pub extra_target_ms: f64,
    pub met: bool,
}

impl VolumeFigure {
    /// Lines for people.
    pub fn print(&self) {
        println!("{}", self.with_volume.line("create→first-exec, 1 volume"));
        println!("{}", self.without.line("  … no volume"));
        println!(
            "  one volume adds {:+.2} ms at p50 (target ≤+{} ms: {})",
            self.extra_ms,
            self.extra_target_ms,
            verdict(self.met)
        );
    }
}

/// The first slot of `n` pairs: the top of the subnet, above every other figure's.
pub fn first_slot(n: usize) -> u32 {
    SLOTS - 2 * (n as u32 + 1)
}

/// `n` sandboxes with the volume and `n` without, alternating, after one untimed of each.
pub(crate) async fn measure(fleet: &Fleet, n: usize) -> anyhow::Result<VolumeFigure> {
    let store = fleet.rt.volumes()?;
    let tag = std::process::id();
    let volume = format!("bench-vol-{tag}");
    store
        .create(&volume, None)
        .context("making the bench volume")?;
    let outcome = boots(fleet, n, &volume, tag).await;
    let removed = store.remove(&volume).context("removing the bench volume");
    let (with, without) = outcome?;
    removed?;
    let with_volume = Latency::new("create→first-exec, 1 volume", &with, None)?;
    let without = Latency::new("create→first-exec, no volume", &without, None)?;
    let extra_ms = with_volume.summary.p50_ms - without.summary.p50_ms;
    Ok(VolumeFigure {
        with_volume,
        without,
        extra_ms,
        extra_target_ms: VOLUME_EXTRA_TARGET_MS,
        met: extra_ms <= VOLUME_EXTRA_TARGET_MS,
    })
}

async fn boots(
    fleet: &Fleet,
    n: usize,
    volume: &str,
    tag: u32,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let first = first_slot(n);
    for i in 0..2 * (n + 1) {
        let slot = first + i as u32;
        let mounted = i % 2 == 0;
        let spec = SandboxSpec {
            net_slot: slot,
            id_range: Some(slot),
            volumes: if mounted {
                vec![VolumeBind {
                    volume_id: volume.to_string(),
                    target: "/data".into(),
                    subpath: String::new(),
                    read_only: false,
                }]
            } else {
                Vec::new()
            },
            ..SandboxSpec::base(
                format!("bench-v-{tag}-{i}"),
                format!("bench-token-v-{tag}-{i}"),
            )
        };
        let (steps, _client) = fleet.boot(&spec).await?;
        fleet.destroy(&spec.id).await?;
        if i >= 2 {
            match mounted {
                true => with.push(steps.whole()),
                false => without.push(steps.whole()),
            }
        }
    }
    Ok((with, without))
}
