//! `bench density`: how many idle sandboxes one host holds. A daemon of its own (private network
//! namespace, enough network slots) creates `--count` sandboxes of the `base` template,
//! `--concurrency` at a time, until the count is reached or a create fails; the failure is reported
//! with the host limits it most likely hit. Then, with every sandbox live and idle: the memory each
//! costs (the drop of the host's `MemAvailable`, over the count; and the agents' own proportional
//! share, `Pss`, sampled), the tasks (processes and threads) each holds, exec and list latency; then
//! every sandbox is deleted, `--concurrency` at a time.
//!
//! Guarantees: whatever happens, every sandbox of the run is deleted (the fleet's teardown) and the
//! daemon stopped; the figures are printed only for a run that reached its top.

use crate::daemon::{daemon_binary, Daemon, Node};
use crate::http::{run_ok, with_fleet, ApiFleet};
use crate::report::ms;
use crate::slabs::Slabs;
use crate::stats::Summary;
use crate::{interrupted, Interrupt};
use anyhow::{bail, Context};
use sandboxd_runtime::namespace::state::SandboxPaths;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The goal of the issue: memory per idle sandbox.
pub const TARGET_MIB_PER_SANDBOX: f64 = 1.0;
/// The lifetime of the run's sandboxes: a day, so the first of a long climb (3,000 took 20 minutes
/// in the emulated Debian VM, where the fleet's usual 15 minutes expired them) are there at the top.
const LIFETIME_SECS: u64 = 86_400;
/// Network slots the daemon can have (one /30 each from a /16).
const MAX_NET_SLOTS: usize = 16384;
/// Agents whose `Pss` is read at the top.
const PSS_SAMPLE: usize = 50;
/// Execs and lists timed at the top.
const TOP_SAMPLES: usize = 50;
/// The run stops creating once the host's `MemAvailable` falls under this share of `MemTotal`
/// (or [`MEMORY_FLOOR_MIN_KIB`], whichever is more), and says so: it measures, it does not run the
/// host out of memory.
const MEMORY_FLOOR_SHARE: u64 = 10;
const MEMORY_FLOOR_MIN_KIB: u64 = 1 << 20;

/// Options of `bench density`.
#[derive(Debug, Clone, clap::Args)]
pub struct DensityArgs {
    /// Sandboxes to create (at most 16384: the network slots of one daemon).
    #[arg(long, default_value_t = 10_000)]
    pub count: usize,
    /// Creates (and deletes) in flight at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Creates per line of the growth table.
    #[arg(long, default_value_t = 1000)]
    pub step: usize,
    /// The daemon's `--disk-backend` (`auto`, `project`, `btrfs`, `off`): run once with `off` to see
    /// what the disk-quota backend costs at density.
    #[arg(long, default_value = "auto")]
    pub disk_backend: String,
    /// The sandboxd binary (default: beside this executable, else target/release/sandboxd).
    #[arg(long)]
    pub daemon: Option<PathBuf>,
    /// The static agent binary (default: as `bench runtime` finds it).
    #[arg(long)]
    pub agent: Option<PathBuf>,
}

/// Creates per second over one stretch of the growth.
#[derive(Debug, Clone, Serialize)]
pub struct Growth {
    /// Live sandboxes at the end of the stretch.
    pub live: usize,
    pub creates_per_sec: f64,
    pub create_p50_ms: f64,
}

/// Figures of `bench density`.
#[derive(Debug, Clone, Serialize)]
pub struct DensityReport {
    pub asked: usize,
    /// The daemon's `--disk-backend`.
    pub disk_backend: String,
    /// Sandboxes live at the top.
    pub reached: usize,
    /// Why the run stopped short of `asked`, with the host's limits; `None` when it did not.
    pub stopped_by: Option<String>,
    pub growth: Vec<Growth>,
    /// The host's `MemAvailable` drop over the sandboxes live, MiB each.
    pub mib_per_sandbox: f64,
    pub target_mib_per_sandbox: f64,
    /// Mean `Pss` of a sampled sandbox's processes (its init, agent and what they run), MiB.
    pub sandbox_pss_mib: f64,
    /// The kernel's share of that drop, KiB per sandbox, by `/proc/meminfo` field
    /// ([`KERNEL_FIELDS`]): where the memory beyond the processes' goes.
    pub kernel_kib_per_sandbox: Vec<(String, f64)>,
    /// The slab caches that grew most, KiB per sandbox ([`SLABS_SHOWN`] of them); empty where
    /// `/proc/slabinfo` cannot be read.
    pub slab_kib_per_sandbox: Vec<(String, f64)>,
    /// The daemon's own resident memory at the top, MiB.
    pub daemon_rss_mib: f64,
    /// Tasks (processes and threads) on the host per live sandbox.
    pub tasks_per_sandbox: f64,
    pub exec_at_top: Summary,
    /// One page of `GET /v1/sandboxes` (the default page size).
    pub list_page_at_top: Summary,
    pub deletes_per_sec: f64,
}

impl DensityReport {
    /// Lines for people.
    pub fn print(&self) {
        println!(
            "== density ({} sandboxes asked, --disk-backend {})",
            self.asked, self.disk_backend
        );
        for g in &self.growth {
            println!(
                "  {:>6} live: {:>6.1} creates/s  create p50 {} ms",
                g.live,
                g.creates_per_sec,
                ms(g.create_p50_ms)
            );
        }
        match &self.stopped_by {
            Some(why) => println!("stopped at {} sandboxes: {why}", self.reached),
            None => println!("reached {} sandboxes", self.reached),
        }
        println!(
            "memory per idle sandbox {:.2} MiB (host MemAvailable drop; target ≤{}: {}); its processes' Pss {:.2} MiB; daemon RSS {:.0} MiB; {:.1} tasks per sandbox",
            self.mib_per_sandbox,
            self.target_mib_per_sandbox,
            crate::report::verdict(self.mib_per_sandbox <= self.target_mib_per_sandbox),
            self.sandbox_pss_mib,
            self.daemon_rss_mib,
            self.tasks_per_sandbox,
        );
        let kernel: Vec<String> = self
            .kernel_kib_per_sandbox
            .iter()
            .map(|(field, kib)| format!("{field} {kib:.0}"))
            .collect();
        println!("  the kernel's, KiB per sandbox: {}", kernel.join(", "));
        if !self.slab_kib_per_sandbox.is_empty() {
            let slabs: Vec<String> = self
                .slab_kib_per_sandbox
                .iter()
                .map(|(cache, kib)| format!("{cache} {kib:.0}"))
                .collect();
            println!(
                "  its slab caches that grew most, KiB per sandbox: {}",
                slabs.join(", ")
            );
        }
        println!(
            "at the top: exec p50 {} ms p99 {} ms; list (one page) p50 {} ms p99 {} ms",
            ms(self.exec_at_top.p50_ms),
            ms(self.exec_at_top.p99_ms),
            ms(self.list_page_at_top.p50_ms),
            ms(self.list_page_at_top.p99_ms)
        );
        println!("deletes {:.1}/s", self.deletes_per_sec);
    }
}

/// Runs `bench density`.
pub async fn run(args: &DensityArgs, interrupt: Interrupt) -> anyhow::Result<DensityReport> {
    if args.count == 0 || args.concurrency == 0 || args.step == 0 {
        bail!("--count, --concurrency and --step must be at least 1");
    }
    if args.count > MAX_NET_SLOTS {
        bail!("--count is at most {MAX_NET_SLOTS} (the network slots of one daemon)");
    }
    let agent = crate::runtime::agent_binary(args.agent.as_deref())?;
    let binary = daemon_binary(args.daemon.as_deref())?;
    let (netns, port) = crate::daemon::private_netns().context("creating a network namespace")?;
    let node = Node {
        netns,
        listen: format!("127.0.0.1:{port}"),
        token: crate::daemon::random_token()?,
        workdir: std::env::temp_dir()
            .join(format!("sandboxd-bench-density-{}", std::process::id())),
        cgroup_parent: crate::runtime::CGROUP_PARENT.into(),
        args: vec![
            format!("--net-slots={}", net_slots(args.count)),
            // Nothing expires or pauses while the run climbs.
            format!("--default-timeout={LIFETIME_SECS}"),
            format!("--disk-backend={}", args.disk_backend),
        ],
    };
    let daemon = Daemon::start_node(&binary, &agent, node).await?;
    let (api, token, pid) = (daemon.api.clone(), daemon.token.clone(), daemon.pid());
    let runtime_dir = daemon.runtime_dir();
    let run_args = args.clone();
    let measured = daemon
        .run_inside(move || async move {
            with_fleet(&api, &token, interrupt.clone(), move |fleet| {
                measure(fleet, run_args, pid, runtime_dir, interrupt)
            })
            .await
        })
        .await;
    let failed = measured.is_err();
    let stopped = daemon.stop(failed).await;
    let report = measured?;
    stopped?;
    Ok(report)
}

async fn measure(
    fleet: Arc<ApiFleet>,
    args: DensityArgs,
    daemon_pid: Option<u32>,
    runtime_dir: PathBuf,
    interrupt: Interrupt,
) -> anyhow::Result<DensityReport> {
    let before = Host::read()?;
    let slabs_before = Slabs::read();
    let floor_kib = (before.mem_total_kib / MEMORY_FLOOR_SHARE).max(MEMORY_FLOOR_MIN_KIB);
    let live = Arc::new(Mutex::new(Vec::<String>::with_capacity(args.count)));
    let took = Arc::new(Mutex::new(Vec::<(Instant, Duration)>::with_capacity(
        args.count,
    )));
    let next = Arc::new(AtomicUsize::new(0));
    let failure = Arc::new(Mutex::new(None::<String>));
    let started = Instant::now();
    // A set: dropped (the run interrupted, its task aborted), it aborts the workers too.
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.concurrency {
        let (fleet, live, took, next, failure) = (
            fleet.clone(),
            live.clone(),
            took.clone(),
            next.clone(),
            failure.clone(),
        );
        let (count, step) = (args.count, args.step);
        workers.spawn(async move {
            while next.fetch_add(1, Ordering::SeqCst) < count {
                if failure.lock().expect("failure lock").is_some() {
                    return;
                }
                match Host::read() {
                    Ok(host) if host.mem_available_kib < floor_kib => {
                        failure.lock().expect("failure lock").get_or_insert(format!(
                            "host memory: MemAvailable {} MiB, under the run's floor of {} MiB",
                            host.mem_available_kib / 1024,
                            floor_kib / 1024
                        ));
                        return;
                    }
                    _ => {}
                }
                let t = Instant::now();
                let lasting = sandboxd_client::types::CreateSandbox {
                    timeout_sec: Some(LIFETIME_SECS),
                    ..Default::default()
                };
                match fleet.create_with(lasting).await {
                    Ok(sandbox) => {
                        took.lock().expect("took lock").push((t, t.elapsed()));
                        let mut live = live.lock().expect("live lock");
                        live.push(sandbox.id);
                        if live.len() % step == 0 {
                            // Progress, for a run cut short.
                            eprintln!("bench density: {} live", live.len());
                        }
                    }
                    Err(e) => {
                        failure
                            .lock()
                            .expect("failure lock")
                            .get_or_insert(format!("{e:#}"));
                        return;
                    }
                }
            }
        });
    }
    let all = async { while workers.join_next().await.is_some() {} };
    tokio::select! {
        _ = all => {}
        _ = interrupted(interrupt.clone()) => bail!("interrupted"),
    }
    let live = std::mem::take(&mut *live.lock().expect("live lock"));
    let mut took = std::mem::take(&mut *took.lock().expect("took lock"));
    took.sort_by_key(|(at, _)| *at);
    let growth = growth(&took, started, args.step);
    let reached = live.len();
    if reached == 0 {
        bail!(
            "not one sandbox was created: {}",
            failure
                .lock()
                .expect("failure lock")
                .clone()
                .unwrap_or_default()
        );
    }
    let stopped_by = failure
        .lock()
        .expect("failure lock")
        .clone()
        .map(|e| format!("{e}; {}", Host::limits(reached, net_slots(args.count))));
    // Idle: whatever the creates set going (refills, first calls home) settles.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let top = Host::read()?;
    let mib_per_sandbox = before
        .mem_available_kib
        .saturating_sub(top.mem_available_kib) as f64
        / 1024.0
        / reached as f64;
    let tasks_per_sandbox = top.tasks.saturating_sub(before.tasks) as f64 / reached as f64;
    let kernel_kib_per_sandbox = KERNEL_FIELDS
        .iter()
        .zip(before.kernel_kib.iter().zip(&top.kernel_kib))
        .map(|(field, (then, now))| {
            let each = (*now as f64 - *then as f64) / reached as f64;
            (field.trim_end_matches(':').to_string(), each)
        })
        .collect();
    let slab_kib_per_sandbox = match (&slabs_before, Slabs::read()) {
        (Ok(then), Ok(now)) => now.grown_since(then, reached, SLABS_SHOWN),
        _ => Vec::new(),
    };
    let sandbox_pss_mib = sandbox_pss_mib(&runtime_dir, &live)?;
    let daemon_rss_mib = daemon_pid.map_or(Ok(0.0), rss_mib)?;
    let (exec_at_top, list_page_at_top) = at_the_top(&fleet, &live).await?;
    let deletes_per_sec = delete_all(&fleet, live, args.concurrency).await?;
    Ok(DensityReport {
        asked: args.count,
        disk_backend: args.disk_backend.clone(),
        reached,
        stopped_by,
        growth,
        mib_per_sandbox,
        target_mib_per_sandbox: TARGET_MIB_PER_SANDBOX,
        sandbox_pss_mib,
        kernel_kib_per_sandbox,
        slab_kib_per_sandbox,
        daemon_rss_mib,
        tasks_per_sandbox,
        exec_at_top,
        list_page_at_top,
        deletes_per_sec,
    })
}

/// Creates per second and create p50 over each `step` creates, in the order they ended.
fn growth(took: &[(Instant, Duration)], started: Instant, step: usize) -> Vec<Growth> {
    let mut out = Vec::new();
    let mut from = started;
    for (i, chunk) in took.chunks(step).enumerate() {
        let (last_start, last_took) = chunk[chunk.len() - 1];
        let end = last_start + last_took;
        let secs = end.saturating_duration_since(from).as_secs_f64().max(1e-6);
        let samples: Vec<Duration> = chunk.iter().map(|(_, d)| *d).collect();
        out.push(Growth {
            live: i * step + chunk.len(),
            creates_per_sec: chunk.len() as f64 / secs,
            create_p50_ms: Summary::of(&samples).map_or(0.0, |s| s.p50_ms),
        });
        from = end;
    }
    out
}

/// Exec (`true` in sandboxes spread over the fleet) and one list page, [`TOP_SAMPLES`] times each.
async fn at_the_top(fleet: &ApiFleet, live: &[String]) -> anyhow::Result<(Summary, Summary)> {
    let mut execs = Vec::with_capacity(TOP_SAMPLES);
    let mut lists = Vec::with_capacity(TOP_SAMPLES);
    let stride = (live.len() / TOP_SAMPLES).max(1);
    for id in live.iter().step_by(stride).take(TOP_SAMPLES) {
        let t = Instant::now();
        run_ok(&fleet.client, id, &["true"]).await?;
        execs.push(t.elapsed());
        let t = Instant::now();
        fleet
            .client
            .list(&sandboxd_client::ListQuery::default())
            .await
            .context("listing sandboxes")?;
        lists.push(t.elapsed());
    }
    Ok((
        Summary::of(&execs).context("no exec")?,
        Summary::of(&lists).context("no list")?,
    ))
}

/// Deletes `live`, `concurrency` at a time; deletes per second.
async fn delete_all(
    fleet: &Arc<ApiFleet>,
    live: Vec<String>,
    concurrency: usize,
) -> anyhow::Result<f64> {
    let n = live.len();
    let queue = Arc::new(Mutex::new(live));
    let t = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (fleet, queue) = (fleet.clone(), queue.clone());
        workers.spawn(async move {
            loop {
                let Some(id) = queue.lock().expect("queue lock").pop() else {
                    return Ok::<_, anyhow::Error>(());
                };
                fleet.delete(&id).await?;
            }
        });
    }
    while let Some(w) = workers.join_next().await {
        w.context("a delete worker died")??;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64().max(1e-6))
}

/// The `/proc/meminfo` fields of the kernel's own memory that a sandbox adds to: its objects
/// (namespaces, cgroups, mounts, sockets), the page tables and kernel stacks of its tasks, and
/// per-CPU data (a memory cgroup's statistics, say). A field this kernel lacks reads 0.
const KERNEL_FIELDS: [&str; 5] = [
    "SUnreclaim:",
    "SReclaimable:",
    "PageTables:",
    "KernelStack:",
    "Percpu:",
];

/// How many of the slab caches that grew most the report names.
const SLABS_SHOWN: usize = 6;

/// The host figures read before and at the top.
struct Host {
    mem_total_kib: u64,
    mem_available_kib: u64,
    /// [`KERNEL_FIELDS`], in that order.
    kernel_kib: [u64; KERNEL_FIELDS.len()],
    /// Tasks (processes and threads) on the host.
    tasks: u64,
}

impl Host {
    fn read() -> anyhow::Result<Host> {
        let meminfo = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
        let loadavg = std::fs::read_to_string("/proc/loadavg").context("reading /proc/loadavg")?;
        Ok(Host {
            mem_total_kib: field_kib(&meminfo, "MemTotal:").context("no MemTotal")?,
            mem_available_kib: field_kib(&meminfo, "MemAvailable:").context("no MemAvailable")?,
            kernel_kib: KERNEL_FIELDS.map(|f| field_kib(&meminfo, f).unwrap_or(0)),
            // The fourth field is `running/total` scheduling entities.
            tasks: loadavg
                .split_whitespace()
                .nth(3)
                .and_then(|f| f.split_once('/'))
                .and_then(|(_, total)| total.parse().ok())
                .context("no task count in /proc/loadavg")?,
        })
    }

    /// The host limits a create at `reached` live sandboxes may have hit, with their use.
    fn limits(reached: usize, slots: usize) -> String {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "?".into())
        };
        let (tasks, available) = match Host::read() {
            Ok(h) => (
                h.tasks.to_string(),
                format!("{} MiB", h.mem_available_kib / 1024),
            ),
            Err(_) => ("?".into(), "?".into()),
        };
        format!(
            "host limits at {reached} sandboxes: tasks {tasks} of kernel.pid_max {} (threads-max {}), MemAvailable {available}, network slots {reached} of {slots}",
            read("/proc/sys/kernel/pid_max"),
            read("/proc/sys/kernel/threads-max"),
        )
    }
}

/// The daemon's network slots for a run of `count`: a few more than asked, within one daemon's.
fn net_slots(count: usize) -> usize {
    (count + 16).min(MAX_NET_SLOTS)
}

/// `Name:  123 kB` → 123.
fn field_kib(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Mean `Pss` of the processes of up to [`PSS_SAMPLE`] of the sandboxes (each one's init, from
/// its runtime record under `runtime_dir`, and everything under it), MiB.
fn sandbox_pss_mib(runtime_dir: &std::path::Path, live: &[String]) -> anyhow::Result<f64> {
    let stride = (live.len() / PSS_SAMPLE).max(1);
    let mut total_kib = 0u64;
    let mut seen = 0u64;
    for id in live.iter().step_by(stride).take(PSS_SAMPLE) {
        let paths = SandboxPaths::new(&runtime_dir.join("sandboxes"), id);
        let Some(init) = paths
            .load()
            .ok()
            .flatten()
            .and_then(|r| r.pid)
            .map(|p| p as u64)
        else {
            continue;
        };
        let mut kib = 0;
        for pid in with_descendants(init) {
            let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"));
            kib += rollup.ok().and_then(|r| field_kib(&r, "Pss:")).unwrap_or(0);
        }
        total_kib += kib;
        seen += 1;
    }
    if seen == 0 {
        bail!(
            "no sandbox's processes were found under {}",
            runtime_dir.display()
        );
    }
    Ok(total_kib as f64 / 1024.0 / seen as f64)
}

/// `pid` and every process under it (`/proc/PID/task/TID/children`).
fn with_descendants(pid: u64) -> Vec<u64> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let p = all[i];
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for task in tasks.flatten() {
                let children =
                    std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
                all.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u64>().ok()),
                );
            }
        }
        i += 1;
    }
    all
}

/// Resident memory of process `pid`, MiB.
fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    Ok(field_kib(&status, "VmRSS:").context("no VmRSS")? as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_per_step_in_the_order_creates_ended() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let took = [
            (t0, ms(100)),
            (t0 + ms(100), ms(100)),
            (t0 + ms(200), ms(300)),
        ];
        let g = growth(&took, t0, 2);
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].live, g[1].live), (2, 3));
        assert!((g[0].creates_per_sec - 10.0).abs() < 0.01, "{g:?}");
        assert!((g[1].creates_per_sec - 1.0 / 0.3).abs() < 0.01, "{g:?}");
        assert_eq!(g[1].create_p50_ms, 300.0);
    }

    #[test]
    fn meminfo_fields_read_in_kib() {
        let text = "MemTotal:       24000000 kB\nMemAvailable:   23000000 kB\n";
        assert_eq!(field_kib(text, "MemAvailable:"), Some(23_000_000));
        assert_eq!(field_kib(text, "Pss:"), None);
    }
}
