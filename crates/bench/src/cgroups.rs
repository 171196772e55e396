//! What a sandbox's cgroup costs its boot: made on the spot, or a spare made ahead of need renamed
//! (`sandboxd_runtime::cgroup`'s spares, cgroup v1), interleaved in one run under the bench's parent.
//!
//! Making a memory cgroup costs the kernel per-group state for every superblock shrinker the host
//! ever had, so the first figure grows with what the host held before; the second should not.

use crate::report::Latency;
use anyhow::Context;
use sandboxd_runtime::cgroup::{CgroupManager, CgroupVersion, Limits};
use serde::Serialize;
use std::time::{Duration, Instant};

/// How long a spare may take to be made again before the run gives up.
const REFILL_WITHIN: Duration = Duration::from_secs(5);

/// The two ways a boot gets its group.
#[derive(Debug, Clone, Serialize)]
pub struct CgroupFigure {
    /// Making the group in every hierarchy and applying the limits.
    pub made: Latency,
    /// Renaming a ready spare and applying the limits.
    pub spare: Latency,
}

impl CgroupFigure {
    /// Lines for people.
    pub fn print(&self) {
        println!("{}", self.made.line("cgroup, made at create"));
        println!("{}", self.spare.line("cgroup, spare renamed"));
        println!(
            "  spare/made p50 ratio {:.2}",
            self.spare.summary.p50_ms / self.made.summary.p50_ms
        );
    }
}

/// `n` groups of each kind, alternately, under `<parent>-cgroups`; `None` on cgroup v2, where a
/// group cannot be renamed and every create makes its own.
pub fn measure(parent: &str, n: usize) -> anyhow::Result<Option<CgroupFigure>> {
    let parent = format!("{parent}-cgroups");
    let made_by = CgroupManager::detect(&parent).context("detecting cgroups")?;
    if made_by.version() != CgroupVersion::V1 {
        return Ok(None);
    }
    let spared_by = CgroupManager::detect(&parent)?.with_spares(1);
    let limits = Limits {
        memory_bytes: Some(512 << 20),
        cpu_millis: Some(1000),
        pids_max: Some(1024),
    };
    let (mut made, mut spare) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let tag = std::process::id();
    let measured = (|| -> anyhow::Result<()> {
        for i in 0..n {
            made.push(timed(&made_by, &format!("bench-{tag}-made-{i}"), &limits)?);
            spared_by.replenish_spares();
            let asked = Instant::now();
            while !spared_by.spares_ready() {
                anyhow::ensure!(
                    asked.elapsed() < REFILL_WITHIN,
                    "no spare cgroup within {REFILL_WITHIN:?}"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            spare.push(timed(
                &spared_by,
                &format!("bench-{tag}-spare-{i}"),
                &limits,
            )?);
        }
        Ok(())
    })();
    drop(spared_by);
    let _ = std::fs::read_dir("/sys/fs/cgroup").map(|hierarchies| {
        for h in hierarchies.flatten() {
            let _ = std::fs::remove_dir(h.path().join(&parent));
        }
    });
    measured?;
    Ok(Some(CgroupFigure {
        made: Latency::new("cgroup made", &made, None)?,
        spare: Latency::new("cgroup spare", &spare, None)?,
    }))
}

/// How long `manager` takes to give `id` its group; the group is removed again.
fn timed(manager: &CgroupManager, id: &str, limits: &Limits) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let group = manager.create(id, limits).context("creating a cgroup")?;
    let took = t.elapsed();
    group.remove().context("removing a cgroup")?;
    Ok(took)
}
