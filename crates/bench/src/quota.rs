//! `bench images`' figure 3: what the disk quota adds to creating a sandbox.
//!
//! Two namespace runtimes in this process, on state directories of their own: one with `--disk auto`
//! (each sandbox's writable layer its own quota'd unit — a btrfs subvolume with a qgroup limit, or an
//! XFS project — with a limit of `--quota-mb`, the daemon's default) and one with `--disk off`. N
//! sandboxes each, the two alternating (one untimed of each first), each destroyed (untimed) before
//! the next. The figure is create as `POST /v1/sandboxes` waits for it — `Runtime::create` (which
//! makes the quota'd layer) plus `Runtime::start` (which mounts the overlay on it) — and the
//! difference of the two p50s against [`QUOTA_EXTRA_TARGET_MS`]; each step's p50 is printed too.
//!
//! Guarantees: every sandbox is a [`Fleet`]'s, so it is destroyed and both state directories (and a
//! btrfs pool either made) are removed on success, error and Ctrl-C. Slots from [`FIRST_SLOT`] up
//! (two per pair), as `bench runtime` uses them: the two must not run at once.

use crate::images::ImageArgs;
use crate::report::{verdict, Latency};
use crate::runtime::{Fleet, FIRST_SLOT};
use crate::{interrupted, Interrupt};
use sandboxd_runtime::quota::{DiskBackend, DiskMode};
use sandboxd_runtime::SandboxSpec;
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// What the disk quota may add to create's p50, in milliseconds.
pub const QUOTA_EXTRA_TARGET_MS: f64 = 2.0;

/// Figure 3: creating a sandbox (`Runtime::create` + `Runtime::start`, what `POST /v1/sandboxes`
/// waits for) with and without the disk quota.
#[derive(Debug, Clone, Serialize)]
pub struct QuotaFigure {
    /// The backend `--disk auto` chose.
    pub backend: DiskBackend,
    pub limit_mb: u64,
    pub create_on: Latency,
    pub create_off: Latency,
    /// p50s of each step, `[on, off]`: `Runtime::create` (where the quota'd layer is made),
    /// `Runtime::start`, the first exec.
    pub runtime_create_p50_ms: [f64; 2],
    pub start_p50_ms: [f64; 2],
    pub first_exec_p50_ms: [f64; 2],
    /// `create_on.p50 − create_off.p50`, ms.
    pub extra_ms: f64,
    pub extra_target_ms: f64,
    pub met: bool,
}

impl QuotaFigure {
    /// Lines for people.
    pub fn print(&self) {
        let q = self;
        println!(
            "{}",
            q.create_on
                .line(&format!("create, quota {:?}", q.backend).to_lowercase())
        );
        println!("{}", q.create_off.line("create, quota off"));
        println!(
            "quota on − off create p50 {:+.2} ms  (target ≤+{} ms: {})",
            q.extra_ms,
            q.extra_target_ms,
            verdict(q.met)
        );
        let pair = |v: [f64; 2]| {
            let [on, off] = v.map(|x| crate::report::ms(x).trim().to_string());
            format!("{on} vs {off} ms")
        };
        println!(
            "  breakdown p50, on vs off: runtime create {}  start {}  first exec {}",
            pair(q.runtime_create_p50_ms),
            pair(q.start_p50_ms),
            pair(q.first_exec_p50_ms)
        );
    }
}

/// Figure 3: a runtime with `--disk auto` and one with `--disk off`, in this process.
pub async fn quota_part(
    agent: &Path,
    sizes: &ImageArgs,
    interrupt: Interrupt,
) -> anyhow::Result<QuotaFigure> {
    let dir = |kind: &str| {
        std::env::temp_dir().join(format!(
            "sandboxd-bench-quota-{kind}-{}",
            std::process::id()
        ))
    };
    let on = Arc::new(Fleet::start(dir("on"), agent, DiskMode::Auto).await?);
    let off = match Fleet::start(dir("off"), agent, DiskMode::Off).await {
        Ok(off) => Arc::new(off),
        Err(e) => {
            if let Err(t) = on.teardown().await {
                eprintln!("bench: {t:#}");
            }
            return Err(e);
        }
    };
    let work = tokio::spawn(quota_measure(on.clone(), off.clone(), sizes.clone()));
    let abort = work.abort_handle();
    let outcome = tokio::select! {
        r = work => r.unwrap_or_else(|e| Err(anyhow::anyhow!("the measuring task failed: {e}"))),
        _ = interrupted(interrupt) => {
            abort.abort();
            Err(anyhow::anyhow!("interrupted"))
        }
    };
    let on_down = on.teardown().await;
    let off_down = off.teardown().await;
    let figure = outcome?;
    on_down?;
    off_down?;
    Ok(figure)
}

async fn quota_measure(
    on: Arc<Fleet>,
    off: Arc<Fleet>,
    sizes: ImageArgs,
) -> anyhow::Result<QuotaFigure> {
    let backend = on.rt.namespace().disk_backend();
    if backend == DiskBackend::Off {
        eprintln!("bench: --disk auto found no quota backend; both runtimes run without one");
    }
    let limit_mb = if backend == DiskBackend::Off {
        0
    } else {
        sizes.quota_mb
    };
    let pid = std::process::id();
    // [on, off] × (create + start, Runtime::create, start, first exec)
    let mut samples: [[Vec<Duration>; 4]; 2] = Default::default();
    for i in 0..=sizes.quota_creates {
        for k in 0..2 {
            let which = (i + k) % 2; // 0: on, 1: off
            let (fleet, name, mb) = match which {
                0 => (&on, "qon", limit_mb),
                _ => (&off, "qoff", 0),
            };
            let mut spec = SandboxSpec {
                net_slot: FIRST_SLOT + (2 * i + k) as u32,
                ..SandboxSpec::base(
                    format!("bench-{name}-{pid}-{i}"),
                    format!("bench-token-{pid}-{i}-{k}"),
                )
            };
            spec.limits.disk_mb = mb;
            let (steps, _client) = fleet.boot(&spec).await?;
            fleet.destroy(&spec.id).await?;
            if i > 0 {
                let got = [
                    steps.create + steps.start,
                    steps.create,
                    steps.start,
                    steps.first_exec,
                ];
                for (v, d) in samples[which].iter_mut().zip(got) {
                    v.push(d);
                }
            }
        }
    }
    let p50 = |step: usize| {
        samples
            .each_ref()
            .map(|kind| crate::stats::Summary::of(&kind[step]).map_or(0.0, |s| s.p50_ms))
    };
    let create_on = Latency::new("create, quota on", &samples[0][0], None)?;
    let create_off = Latency::new("create, quota off", &samples[1][0], None)?;
    let extra_ms = create_on.summary.p50_ms - create_off.summary.p50_ms;
    Ok(QuotaFigure {
        backend,
        limit_mb,
        runtime_create_p50_ms: p50(1),
        start_p50_ms: p50(2),
        first_exec_p50_ms: p50(3),
        create_on,
        create_off,
        extra_ms,
        extra_target_ms: QUOTA_EXTRA_TARGET_MS,
        met: extra_ms <= QUOTA_EXTRA_TARGET_MS,
    })
}
