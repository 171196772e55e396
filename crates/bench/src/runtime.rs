//! `bench runtime`: sandbox start-up and exec latency through the namespace runtime library, and what
//! a pause costs and what the first command after a resume pays (an auto-resumed request's extra).
//!
//! Guarantees: every sandbox the bench asks for is recorded in its `Fleet` *before* `create` is
//! called, and `Fleet::teardown` destroys each of them whatever happened (success, error, Ctrl-C,
//! panic of the measuring task); as a last resort dropping the fleet SIGKILLs the inits it knows.
//! Sandboxes use the cgroup parent [`CGROUP_PARENT`] and network slots from [`FIRST_SLOT`] up, clear of
//! the runtime tests (8000–11999) and a daemon (0 up), on a private state directory that is removed
//! afterwards.
//!
//! Assumes root, a static `sandboxd-agent`, and that no other bench run uses the same slots at once.

use crate::report::{Latency, Target};
use crate::{interrupted, Interrupt};
use anyhow::{bail, Context};
use sandboxd_envd::client::AgentConnections;
use sandboxd_envd::{EnvdClient, ExecOptions};
use sandboxd_runtime::gvisor::{GvisorConfig, GvisorRuntime};
use sandboxd_runtime::namespace::{NamespaceConfig, NamespaceRuntime};
use sandboxd_runtime::quota::{release_pool, DiskBackend, DiskMode};
use sandboxd_runtime::tiers::Tiers;
use sandboxd_runtime::{Runtime, SandboxSpec};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Cgroup parent of every bench sandbox (also passed to the daemon of `bench all`).
pub const CGROUP_PARENT: &str = "sandboxd-bench";
/// Network slot of the first bench sandbox.
pub const FIRST_SLOT: u32 = 12000;
/// Slots of the runtime's default subnet.
pub(crate) const SLOTS: u32 = 16384;
/// The agent of a source checkout, relative to the workspace root.
const AGENT_IN_CHECKOUT: &str = "target/x86_64-unknown-linux-gnu/release/sandboxd-agent";

const CREATE_FIRST_EXEC: Target = Target {
    p50_ms: Some(25.0),
    p99_ms: Some(80.0),
};
const EXEC_RTT: Target = Target {
    p50_ms: Some(2.0),
    p99_ms: None,
};
/// Execs run before the timed ones, to leave the first-call cost out of the round trip.
const EXEC_WARMUP: usize = 10;
/// Creates timed alone, each after [`QUIET`] in which nothing happens.
const ALONE: usize = 8;
/// The quiet before each create timed alone.
const QUIET: Duration = Duration::from_millis(300);

/// Options of `bench runtime`.
#[derive(Debug, Clone, clap::Args)]
pub struct RuntimeArgs {
    /// Sandboxes to create (sequentially) for the create→first-exec figure, and as many again on the
    /// shared id range, interleaved, for its peer.
    #[arg(long, default_value_t = 50)]
    pub sandboxes: usize,
    /// Timed exec round trips of /bin/true on one sandbox.
    #[arg(long, default_value_t = 200)]
    pub execs: usize,
    /// Timed pause, then resume→exec, cycles on one sandbox.
    #[arg(long, default_value_t = 50)]
    pub resumes: usize,
    /// Untimed sandboxes created first (cold caches, template first use).
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// The static sandboxd-agent (default: $SANDBOXD_AGENT_BIN, else the checkout's static build).
    #[arg(long)]
    pub agent: Option<PathBuf>,
    /// Disk quota mode of the runtime (auto, project, btrfs, off): run once with `off` to see what
    /// the quota'd writable layer adds to create.
    #[arg(long, default_value_t = DiskMode::Auto)]
    pub disk: DiskMode,
    /// Disk limit of each sandbox's writable layer in MiB (0: none; needs a disk backend).
    #[arg(long, default_value_t = 0)]
    pub disk_mb: u64,
    /// gVisor sandboxes to create for the gVisor tier's figures (after one untimed); 0 skips the
    /// tier.
    #[arg(long, default_value_t = 10)]
    pub gvisor_sandboxes: usize,
    /// Sandboxes with one volume mounted, and as many without, interleaved, for the volume figure
    /// (after one untimed of each); 0 skips it.
    #[arg(long, default_value_t = 20)]
    pub volume_sandboxes: usize,
}

/// Median of each step of create→first-exec.
#[derive(Debug, Clone, Serialize)]
pub struct Breakdown {
    pub create_p50_ms: f64,
    pub start_p50_ms: f64,
    pub first_exec_p50_ms: f64,
    pub destroy_p50_ms: Option<f64>,
}

/// Figures of `bench runtime`.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeReport {
    pub agent: PathBuf,
    /// The disk quota backend the runtime chose (`create_p50_ms` includes making the layer).
    pub disk_backend: DiskBackend,
    /// Sandboxes with host ids of their own (the daemon's default), every other one of the run.
    pub create_to_first_exec: Latency,
    /// The sandboxes in between, on the one shared id range (as before per-sandbox ranges): the
    /// peer of `create_to_first_exec`, so the cost of ranges (idmapped layers) is read in one run.
    pub shared_range_create_to_first_exec: Latency,
    /// [`ALONE`] creates→first exec, each after [`QUIET`]: what a user who creates a sandbox now and
    /// then sees, which the back-to-back loop hides (the first taker of a kernel lock after a quiet
    /// spell may wait out an RCU grace period).
    pub alone_create_to_first_exec: Latency,
    /// bwrap's floor after the same quiet, interleaved with those; `None` without bwrap.
    pub alone_bwrap_floor: Option<Latency>,
    /// `create_to_first_exec` p50 − `shared_range_create_to_first_exec` p50, ms (target ±1).
    pub id_range_cost_ms: f64,
    /// Over a connection kept between calls, as the daemon's.
    pub exec_round_trip: Latency,
    /// The same, interleaved, on a connection of each call's own: the peer that shows what keeping
    /// connections saves.
    pub exec_round_trip_fresh: Latency,
    /// Freezing a sandbox (with a process running in it).
    pub pause: Latency,
    /// Thawing it and running the first command: what an auto-resumed request pays over an exec.
    pub resume_to_exec: Latency,
    pub breakdown: Breakdown,
    /// `unshare --fork --pid --mount --net --uts --ipc --user --map-root-user true`, for reference.
    pub unshare_floor: Latency,
    /// `/bin/true` spawned and awaited by this process: the floor of any exec round trip.
    pub spawn_floor: Latency,
    /// `bwrap --unshare-all --ro-bind / / --proc /proc --dev /dev true`, for reference; `None`
    /// when bwrap is not installed.
    pub bwrap_floor: Option<Latency>,
    /// The gVisor tier in the same run; `None` when not asked for.
    pub gvisor: Option<crate::gvisor::GvisorFigures>,
    /// What one mounted volume adds to create→first exec; `None` when not asked for.
    pub volume: Option<crate::volumes::VolumeFigure>,
    /// A sandbox's cgroup made at create vs a spare renamed; `None` on cgroup v2.
    pub cgroups: Option<crate::cgroups::CgroupFigure>,
}

impl RuntimeReport {
    /// Lines for people.
    pub fn print(&self) {
        println!(
            "== runtime (namespace runtime library, agent {}, disk backend {:?})",
            self.agent.display(),
            self.disk_backend
        );
        println!("{}", self.create_to_first_exec.line("create→first-exec"));
        println!(
            "{}",
            self.shared_range_create_to_first_exec
                .line("  … one shared id range")
        );
        println!(
            "  own id ranges cost {:+.2} ms at p50 (target within ±1 ms: {})",
            self.id_range_cost_ms,
            crate::report::verdict(self.id_range_cost_ms.abs() <= 1.0)
        );
        println!(
            "{}",
            self.alone_create_to_first_exec
                .line("  … alone (300 ms quiet)")
        );
        if let Some(bwrap) = &self.alone_bwrap_floor {
            println!("{}", bwrap.line("  … bwrap alone"));
            println!(
                "  alone create→first-exec / bwrap alone p50 ratio {:.2}",
                self.alone_create_to_first_exec.summary.p50_ms / bwrap.summary.p50_ms
            );
        }
        let b = &self.breakdown;
        println!(
            "  breakdown p50: create {} ms  start {} ms  first exec {} ms{}",
            crate::report::ms(b.create_p50_ms).trim(),
            crate::report::ms(b.start_p50_ms).trim(),
            crate::report::ms(b.first_exec_p50_ms).trim(),
            b.destroy_p50_ms
                .map(|d| format!("  (destroy {} ms)", crate::report::ms(d).trim()))
                .unwrap_or_default()
        );
        println!("{}", self.exec_round_trip.line("exec round trip"));
        println!(
            "{}",
            self.exec_round_trip_fresh.line("  … a connection per call")
        );
        println!(
            "  kept/per-call connection p50 ratio {:.2}",
            self.exec_round_trip.summary.p50_ms / self.exec_round_trip_fresh.summary.p50_ms
        );
        println!("{}", self.spawn_floor.line("floor: spawn /bin/true"));
        println!("{}", self.pause.line("pause"));
        println!("{}", self.resume_to_exec.line("resume→exec"));
        println!("{}", self.unshare_floor.line("floor: unshare … true"));
        match &self.bwrap_floor {
            Some(bwrap) => {
                println!("{}", bwrap.line("floor: bwrap … true"));
                println!(
                    "  create→first-exec / bwrap p50 ratio {:.2}",
                    self.create_to_first_exec.summary.p50_ms / bwrap.summary.p50_ms
                );
            }
            None => println!("floor: bwrap not installed (apt install bubblewrap)"),
        }
        if let Some(cgroups) = &self.cgroups {
            cgroups.print();
        }
        if let Some(volume) = &self.volume {
            volume.print();
        }
        if let Some(gvisor) = &self.gvisor {
            gvisor.print();
        }
    }
}

/// The agent binary: the flag, `$SANDBOXD_AGENT_BIN`, the checkout's static build (from the current
/// directory, then from this executable's `target/`), the one beside this executable.
pub fn agent_binary(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = flag {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("SANDBOXD_AGENT_BIN") {
        return Ok(p.into());
    }
    let mut candidates = vec![PathBuf::from(AGENT_IN_CHECKOUT)];
    if let Some(dir) = std::env::current_exe()?.parent() {
        // target/release/bench → target/x86_64-unknown-linux-gnu/release/sandboxd-agent
        if let Some(target) = dir.parent() {
            candidates.push(target.join("x86_64-unknown-linux-gnu/release/sandboxd-agent"));
        }
        candidates.push(dir.join("sandboxd-agent"));
    }
    let found = candidates.iter().find(|p| p.is_file()).with_context(|| {
        format!("no sandboxd-agent found (tried {candidates:?}): run scripts/build-agent or pass --agent")
    })?;
    Ok(std::fs::canonicalize(found)?)
}

/// Runs `bench runtime`.
pub async fn run(args: &RuntimeArgs, interrupt: Interrupt) -> anyhow::Result<RuntimeReport> {
    let total = args.warmup + 2 * args.sandboxes + ALONE + args.gvisor_sandboxes + 1;
    if args.sandboxes == 0 || args.execs == 0 || args.resumes == 0 {
        bail!("--sandboxes, --execs and --resumes must be at least 1");
    }
    if FIRST_SLOT as usize + total > crate::volumes::first_slot(args.volume_sandboxes) as usize {
        bail!(
            "at most {} sandboxes fit above slot {FIRST_SLOT}",
            SLOTS - FIRST_SLOT
        );
    }
    let agent = agent_binary(args.agent.as_deref())?;
    let state_dir = std::env::temp_dir().join(format!("sandboxd-bench-{}", std::process::id()));
    let fleet = Arc::new(Fleet::start(state_dir, &agent, args.disk).await?);
    let work = tokio::spawn(measure(fleet.clone(), args.clone(), agent));
    let abort = work.abort_handle();
    let outcome = tokio::select! {
        r = work => r.unwrap_or_else(|e| Err(anyhow::anyhow!("the measuring task failed: {e}"))),
        _ = interrupted(interrupt) => {
            abort.abort();
            Err(anyhow::anyhow!("interrupted"))
        }
    };
    let destroy = fleet.teardown().await;
    let mut report = outcome?;
    let destroy = destroy?;
    report.breakdown.destroy_p50_ms = crate::stats::Summary::of(&destroy).map(|s| s.p50_ms);
    Ok(report)
}

async fn measure(
    fleet: Arc<Fleet>,
    args: RuntimeArgs,
    agent: PathBuf,
) -> anyhow::Result<RuntimeReport> {
    let tag = std::process::id();
    let (mut create, mut start, mut first, mut whole) = (vec![], vec![], vec![], vec![]);
    let mut shared = vec![];
    let mut last = None;
    for i in 0..args.warmup + 2 * args.sandboxes {
        let slot = FIRST_SLOT + i as u32;
        // Alternately a range of its own (as the daemon makes them) and the shared one.
        let own = i % 2 == 0;
        let mut spec = SandboxSpec {
            net_slot: slot,
            id_range: own.then_some(slot),
            ..SandboxSpec::base(format!("bench-{tag}-{i}"), format!("bench-token-{tag}-{i}"))
        };
        spec.limits.disk_mb = args.disk_mb;
        let (steps, client) = fleet.boot(&spec).await?;
        if i >= args.warmup && !own {
            shared.push(steps.whole());
        } else if i >= args.warmup {
            create.push(steps.create);
            start.push(steps.start);
            first.push(steps.first_exec);
            whole.push(steps.whole());
        }
        last = Some(client);
    }
    let alone_slot = FIRST_SLOT + (args.warmup + 2 * args.sandboxes) as u32;
    let (alone, alone_bwrap) = alone_creates(&fleet, &args, alone_slot).await?;
    let client = last.expect("at least one sandbox");
    let (rtt, rtt_fresh) = kept_vs_fresh_round_trips(&client, args.execs).await?;
    let (pause, resume_to_exec) = pause_cycles(&fleet, &client, args.resumes).await?;
    let floor = unshare_floor(args.sandboxes).await?;
    let bwrap = bwrap_floor(args.sandboxes).await?;
    let spawn = spawn_floor("/bin/true", &[], args.execs).await?;
    let n = args.sandboxes;
    let cgroups = tokio::task::spawn_blocking(move || crate::cgroups::measure(CGROUP_PARENT, n))
        .await
        .context("the cgroup measurement panicked")??;
    let volume = match args.volume_sandboxes {
        0 => None,
        n => Some(crate::volumes::measure(&fleet, n).await?),
    };
    let gvisor = match args.gvisor_sandboxes {
        0 => None,
        n => {
            let first = alone_slot + ALONE as u32;
            Some(crate::gvisor::measure(&fleet, n, args.execs, first).await?)
        }
    };
    let p50 = |v: &[Duration]| crate::stats::Summary::of(v).map_or(0.0, |s| s.p50_ms);
    Ok(RuntimeReport {
        agent,
        disk_backend: fleet.rt.namespace().disk_backend(),
        create_to_first_exec: Latency::new("create→first-exec", &whole, Some(CREATE_FIRST_EXEC))?,
        shared_range_create_to_first_exec: Latency::new(
            "shared-range create→first-exec",
            &shared,
            None,
        )?,
        alone_create_to_first_exec: Latency::new("alone create→first-exec", &alone, None)?,
        alone_bwrap_floor: alone_bwrap
            .map(|b| Latency::new("bwrap alone", &b, None))
            .transpose()?,
        id_range_cost_ms: p50(&whole) - p50(&shared),
        exec_round_trip: Latency::new("exec round trip", &rtt, Some(EXEC_RTT))?,
        exec_round_trip_fresh: Latency::new(
            "exec round trip, a connection per call",
            &rtt_fresh,
            None,
        )?,
        pause: Latency::new("pause", &pause, None)?,
        resume_to_exec: Latency::new("resume→exec", &resume_to_exec, None)?,
        breakdown: Breakdown {
            create_p50_ms: p50(&create),
            start_p50_ms: p50(&start),
            first_exec_p50_ms: p50(&first),
            destroy_p50_ms: None,
        },
        unshare_floor: Latency::new("unshare", &floor, None)?,
        spawn_floor: Latency::new("spawn", &spawn, None)?,
        bwrap_floor: bwrap.map(|b| Latency::new("bwrap", &b, None)).transpose()?,
        gvisor,
        volume,
        cgroups,
    })
}

/// `n` timed round trips of `/bin/true` through `client`, after [`EXEC_WARMUP`] untimed ones; a
/// client of [`Fleet::boot`]'s keeps its connection between calls, as the daemon's do.
pub(crate) async fn exec_round_trips(
    client: &EnvdClient,
    n: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut rtt = Vec::with_capacity(n);
    for i in 0..EXEC_WARMUP + n {
        let took = round_trip(client).await?;
        if i >= EXEC_WARMUP {
            rtt.push(took);
        }
    }
    Ok(rtt)
}

/// One `/bin/true` through `client`, timed.
async fn round_trip(client: &EnvdClient) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let out = client
        .exec(&["/bin/true".to_string()], ExecOptions::default())
        .await?;
    if out.exit_code != 0 {
        bail!("/bin/true exited {}", out.exit_code);
    }
    Ok(t.elapsed())
}

/// `n` timed round trips of `/bin/true` through `client` (its connections kept) and as many on a
/// new connection each, alternating, after [`EXEC_WARMUP`] untimed ones of each.
async fn kept_vs_fresh_round_trips(
    client: &EnvdClient,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let fresh = client.connection_per_call();
    let (mut kept_rtt, mut fresh_rtt) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..EXEC_WARMUP + n {
        let (kept, new) = (round_trip(client).await?, round_trip(&fresh).await?);
        if i >= EXEC_WARMUP {
            kept_rtt.push(kept);
            fresh_rtt.push(new);
        }
    }
    Ok((kept_rtt, fresh_rtt))
}

/// `n` cycles on the sandbox of `client`, with a process looping in it: pause, then resume and run
/// /bin/true. Returns the pause and the resume→exec latencies.
async fn pause_cycles(
    fleet: &Fleet,
    client: &EnvdClient,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let id = {
        let live = fleet.live.lock().expect("fleet lock");
        live.last().expect("at least one sandbox").0.clone()
    };
    let busy = [
        "/bin/sh",
        "-c",
        "nohup sh -c 'while :; do sleep 0.01; done' >/dev/null 2>&1 &",
    ];
    let busy: Vec<String> = busy.iter().map(|s| s.to_string()).collect();
    client.exec(&busy, ExecOptions::default()).await?;
    let cmd = ["/bin/true".to_string()];
    let (mut pause, mut resume) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let t = Instant::now();
        fleet.rt.pause(&id).await.context("pause")?;
        pause.push(t.elapsed());
        let t = Instant::now();
        fleet.rt.resume(&id).await.context("resume")?;
        let out = client.exec(&cmd, ExecOptions::default()).await?;
        resume.push(t.elapsed());
        if out.exit_code != 0 {
            bail!("/bin/true exited {} after a resume", out.exit_code);
        }
    }
    Ok((pause, resume))
}

/// `n` spawns of `bwrap --unshare-all --ro-bind / / --proc /proc --dev /dev true`: a bare
/// sandbox of a well-known tool (namespaces and a root, no cgroup, network or agent); `None` when
/// bwrap is not installed.
/// `bwrap`'s arguments for its floor: every namespace, the host's root read-only, `true`.
const BWRAP_ARGS: [&str; 9] = [
    "--unshare-all",
    "--ro-bind",
    "/",
    "/",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "true",
];

pub(crate) async fn bwrap_floor(n: usize) -> anyhow::Result<Option<Vec<Duration>>> {
    match tokio::process::Command::new("bwrap")
        .arg("--version")
        .output()
        .await
    {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        other => {
            other.context("running bwrap --version")?;
        }
    }
    spawn_floor("bwrap", &BWRAP_ARGS, n).await.map(Some)
}

/// [`ALONE`] creates→first exec on slots from `first_slot`, each after [`QUIET`], with one bwrap
/// after the same quiet between them (`None` without bwrap).
async fn alone_creates(
    fleet: &Fleet,
    args: &RuntimeArgs,
    first_slot: u32,
) -> anyhow::Result<(Vec<Duration>, Option<Vec<Duration>>)> {
    let tag = std::process::id();
    let mut bwrap = bwrap_floor(1).await?.map(|_| Vec::with_capacity(ALONE));
    let mut ours = Vec::with_capacity(ALONE);
    for i in 0..ALONE {
        let slot = first_slot + i as u32;
        let mut spec = SandboxSpec {
            net_slot: slot,
            id_range: Some(slot),
            ..SandboxSpec::base(
                format!("bench-{tag}-alone-{i}"),
                format!("bench-token-{tag}-alone-{i}"),
            )
        };
        spec.limits.disk_mb = args.disk_mb;
        tokio::time::sleep(QUIET).await;
        ours.push(fleet.boot(&spec).await?.0.whole());
        if let Some(bwrap) = bwrap.as_mut() {
            tokio::time::sleep(QUIET).await;
            bwrap.extend(spawn_floor("bwrap", &BWRAP_ARGS, 1).await?);
        }
    }
    Ok((ours, bwrap))
}

/// `n` timed spawns of `program args`, each of which must succeed.
pub(crate) async fn spawn_floor(
    program: &str,
    args: &[&str],
    n: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let status = tokio::process::Command::new(program)
            .args(args)
            .status()
            .await
            .with_context(|| format!("running {program}"))?;
        samples.push(t.elapsed());
        if !status.success() {
            bail!("{program} {} failed: {status}", args.join(" "));
        }
    }
    Ok(samples)
}

/// `n` spawns of `unshare … true`: the cost of the namespaces alone, without rootfs, cgroup, network
/// or agent.
async fn unshare_floor(n: usize) -> anyhow::Result<Vec<Duration>> {
    let args = [
        "--fork",
        "--pid",
        "--mount",
        "--net",
        "--uts",
        "--ipc",
        "--user",
        "--map-root-user",
        "true",
    ];
    spawn_floor("unshare", &args, n).await
}

/// Removes a runtime state directory the bench made, unless something is mounted inside it (a leaked
/// mount would make `remove_dir_all` reach into the host's files): then it is left for a human.
pub fn remove_state_dir(dir: &Path) -> anyhow::Result<()> {
    // The runtime's btrfs pool (if it made one) is ours to detach: it never does so itself.
    release_pool(dir).with_context(|| format!("detaching the disk pool of {}", dir.display()))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").context("mountinfo")?;
    // Field 5 is the mount point; octal escapes (\040) never matter for our own /tmp paths.
    if let Some(m) = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .find(|m| Path::new(m).starts_with(dir))
    {
        bail!("not removing {}: {m} is mounted inside it", dir.display());
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", dir.display())),
    }
}

/// How long each step of one sandbox's create→first-exec took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Steps {
    /// `Runtime::create` (root, cgroup, writable layer with its quota).
    pub create: Duration,
    /// `Runtime::start` (namespaces, network, agent ready).
    pub start: Duration,
    /// The first `/bin/true` through the agent.
    pub first_exec: Duration,
}

impl Steps {
    /// create→first-exec.
    pub fn whole(&self) -> Duration {
        self.create + self.start + self.first_exec
    }
}

/// The namespace runtime `rt` with the gVisor tier beside it when the host has one.
fn tiers(rt: NamespaceRuntime) -> Tiers {
    let rt = Arc::new(rt);
    let gvisor = sandboxd_runtime::gvisor::probe(&GvisorConfig::default())
        .and_then(|runsc| GvisorRuntime::new(rt.clone(), runsc).map_err(|e| e.to_string()));
    Tiers::new(rt, gvisor)
}

/// Every sandbox this run asked for, and the runtime that made them (also `bench images`' quota
/// on/off runtimes).
pub(crate) struct Fleet {
    /// Both tiers (gVisor when the host has it) on one namespace runtime.
    pub(crate) rt: Tiers,
    state_dir: PathBuf,
    /// The connections its clients keep to agents, as the daemon's do.
    connections: AgentConnections,
    /// (id, init pid once started), in creation order.
    live: Mutex<Vec<(String, Option<i32>)>>,
}

impl Fleet {
    /// A namespace runtime on the fresh state directory `state_dir` (removed again if it cannot
    /// start) with the bench's cgroup parent, `agent` and disk mode `disk`.
    pub(crate) async fn start(
        state_dir: PathBuf,
        agent: &Path,
        disk: DiskMode,
    ) -> anyhow::Result<Fleet> {
        let mut config = NamespaceConfig::new(&state_dir, agent);
        config.cgroup_parent = CGROUP_PARENT.into();
        config.disk.mode = disk;
        match NamespaceRuntime::new(config).await {
            Ok(rt) => Ok(Fleet {
                rt: tiers(rt),
                state_dir,
                connections: AgentConnections::new(),
                live: Mutex::new(Vec::new()),
            }),
            Err(e) => {
                let _ = remove_state_dir(&state_dir);
                Err(e).context("starting the namespace runtime")
            }
        }
    }

    /// Records `spec`'s sandbox, creates and starts it and runs `/bin/true` in it once; returns how
    /// long each step took and a client of its agent.
    pub(crate) async fn boot(&self, spec: &SandboxSpec) -> anyhow::Result<(Steps, EnvdClient)> {
        self.record(&spec.id, None);
        let t0 = Instant::now();
        self.rt.create(spec).await.context("create")?;
        let t1 = Instant::now();
        let info = self.rt.start(&spec.id).await.context("start")?;
        let t2 = Instant::now();
        self.record(&spec.id, info.pid);
        let client = EnvdClient::new(&info.agent.socket, &info.agent.token)
            .with_connections(&self.connections);
        let out = client
            .exec(&["/bin/true".to_string()], ExecOptions::default())
            .await?;
        let t3 = Instant::now();
        if out.exit_code != 0 {
            bail!("/bin/true exited {} in {}", out.exit_code, spec.id);
        }
        let steps = Steps {
            create: t1 - t0,
            start: t2 - t1,
            first_exec: t3 - t2,
        };
        Ok((steps, client))
    }

    /// Destroys one recorded sandbox and forgets it.
    pub(crate) async fn destroy(&self, id: &str) -> anyhow::Result<()> {
        self.rt
            .destroy(id)
            .await
            .with_context(|| format!("destroying {id}"))?;
        self.live
            .lock()
            .expect("fleet lock")
            .retain(|(i, _)| i != id);
        Ok(())
    }

    /// Remembers sandbox `id` (with its process, once known) for [`Fleet::teardown`].
    pub(crate) fn record(&self, id: &str, pid: Option<i32>) {
        let mut live = self.live.lock().expect("fleet lock");
        match live.iter_mut().find(|(i, _)| i == id) {
            Some(entry) => entry.1 = pid,
            None => live.push((id.to_string(), pid)),
        }
    }

    /// Destroys every recorded sandbox (each is tried even when one fails), then removes the state
    /// directory. Returns the destroy latencies.
    pub(crate) async fn teardown(&self) -> anyhow::Result<Vec<Duration>> {
        let ids: Vec<String> = {
            let live = self.live.lock().expect("fleet lock");
            live.iter().map(|(id, _)| id.clone()).collect()
        };
        let mut took = Vec::with_capacity(ids.len());
        let mut failed = Vec::new();
        for id in ids {
            let t = Instant::now();
            match self.rt.destroy(&id).await {
                Ok(()) => {
                    took.push(t.elapsed());
                    self.live
                        .lock()
                        .expect("fleet lock")
                        .retain(|(i, _)| *i != id);
                }
                Err(e) => failed.push(format!("{id}: {e}")),
            }
        }
        if !failed.is_empty() {
            bail!("destroying bench sandboxes failed: {}", failed.join("; "));
        }
        remove_state_dir(&self.state_dir)?;
        Ok(took)
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let live = self.live.get_mut().map(std::mem::take).unwrap_or_default();
        for (id, pid) in live {
            if let Some(pid) = pid {
                // SAFETY: kill(2) on the init of a sandbox this run started and did not destroy; it
                // takes the sandbox's whole pid namespace (and with it its veth pair) down.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            eprintln!("bench: sandbox {id} was not destroyed cleanly");
        }
    }
}
