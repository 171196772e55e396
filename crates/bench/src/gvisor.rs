//! The gVisor tier's figures in `bench runtime`, measured in the same run as the namespace tier's.
//!
//! create→first exec and the exec round trip of gVisor sandboxes (goals ≤ 300 ms and ≤ 3 ms here),
//! beside the round trip's floor — one `posix_spawn` and wait of `/bin/true` inside the sandbox,
//! the way the agent starts a command, timed by Python there —,
//! the memory an idle one holds (its cgroup's charge, page cache excluded; goal ≤ 40 MiB), and
//! pause with memory of a sandbox holding 256 MiB (checkpoint to disk, goal ≤ 1 s) with its
//! resume→first exec (restore, goal ≤ 400 ms), and a fork ×10 of a running sandbox until all ten
//! have answered a first command (goal ≤ 3 s).

use crate::report::{Latency, Target};
use crate::runtime::{Fleet, Steps};
use anyhow::{bail, Context};
use sandboxd_envd::ExecOptions;
use sandboxd_runtime::{Isolation, Runtime, SandboxSpec};
use serde::Serialize;
use std::time::{Duration, Instant};

const CREATE_FIRST_EXEC: Target = Target {
    p50_ms: Some(300.0),
    p99_ms: None,
};
const EXEC_RTT: Target = Target {
    p50_ms: Some(3.0),
    p99_ms: None,
};
const PAUSE: Target = Target {
    p50_ms: Some(1000.0),
    p99_ms: None,
};
const RESUME_TO_EXEC: Target = Target {
    p50_ms: Some(400.0),
    p99_ms: None,
};
/// Pause/resume cycles timed on the sandbox holding memory.
const MEMORY_CYCLES: usize = 5;
/// What the sandbox holds while it is paused, MiB.
const HELD_MIB: usize = 256;
/// Idle memory goal per sandbox, MiB.
const IDLE_MIB_GOAL: f64 = 40.0;
/// `posix_spawn`s timed inside the sandbox for the exec round trip's floor.
const SPAWNS: usize = 100;
/// Forks made of one running sandbox in one call.
const FORKS: usize = 10;
const FORK_ALL_RUNNING: Target = Target {
    p50_ms: Some(3000.0),
    p99_ms: None,
};
/// Fork ×[`FORKS`] rounds timed.
const FORK_ROUNDS: usize = 2;

/// The gVisor tier's figures, or why the host has no such tier.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GvisorFigures {
    /// The tier ran.
    Measured(Box<Measured>),
    /// The host offers no gVisor tier (the reason).
    NotOffered(String),
}

/// What the gVisor tier did.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub create_to_first_exec: Latency,
    pub start_p50_ms: f64,
    pub exec_round_trip: Latency,
    /// p50 of one `posix_spawn` and wait of `/bin/true` inside the sandbox, ms.
    pub spawn_floor_ms: f64,
    /// Memory charged to an idle sandbox's cgroup (sandbox process, gofer, agent), page cache
    /// excluded, MiB, median over the sandboxes made.
    pub idle_mib: f64,
    /// Pause with memory (checkpoint to disk, sandbox stopped) holding 256 MiB.
    pub pause_with_memory: Latency,
    /// Restore of that sandbox and its first command (`/bin/true`, as in every first-exec figure).
    pub resume_to_exec: Latency,
    /// Its parts, p50 ms: the runtime's resume (the restore until the agent answers) and the
    /// first command.
    pub resume_p50_ms: f64,
    pub resume_first_exec_p50_ms: f64,
    /// One fork call making ten copies of a running sandbox, until each has answered a command.
    pub fork_ten: Latency,
}

impl GvisorFigures {
    /// Lines for people.
    pub fn print(&self) {
        match self {
            GvisorFigures::NotOffered(why) => println!("== gVisor tier: not offered here ({why})"),
            GvisorFigures::Measured(m) => {
                println!("== gVisor tier (same run)");
                println!(
                    "{}",
                    m.create_to_first_exec.line("gVisor create→first-exec")
                );
                println!(
                    "  start p50 {} ms",
                    crate::report::ms(m.start_p50_ms).trim()
                );
                println!("{}", m.exec_round_trip.line("gVisor exec round trip"));
                println!(
                    "  floor: posix_spawn /bin/true inside p50 {} ms; round trip / floor p50 ratio {:.2}",
                    crate::report::ms(m.spawn_floor_ms).trim(),
                    m.exec_round_trip.summary.p50_ms / m.spawn_floor_ms
                );
                println!(
                    "  idle memory per sandbox p50 {:.1} MiB (goal ≤ {IDLE_MIB_GOAL} MiB: {})",
                    m.idle_mib,
                    crate::report::verdict(m.idle_mib <= IDLE_MIB_GOAL)
                );
                println!("{}", m.pause_with_memory.line("gVisor pause with 256 MiB"));
                println!("{}", m.resume_to_exec.line("gVisor resume→first exec"));
                println!(
                    "  breakdown p50: resume {} ms  first exec {} ms",
                    crate::report::ms(m.resume_p50_ms).trim(),
                    crate::report::ms(m.resume_first_exec_p50_ms).trim()
                );
                println!("{}", m.fork_ten.line("gVisor fork ×10, all running"));
            }
        }
    }
}

/// Boots `n` gVisor sandboxes on slots from `first_slot`, then times `execs` round trips on the last.
pub(crate) async fn measure(
    fleet: &Fleet,
    n: usize,
    execs: usize,
    first_slot: u32,
) -> anyhow::Result<GvisorFigures> {
    if let Err(why) = fleet.rt.offers(Isolation::Gvisor) {
        return Ok(GvisorFigures::NotOffered(why.to_string()));
    }
    let tag = std::process::id();
    let (mut whole, mut start, mut idle) = (vec![], vec![], vec![]);
    let mut last = None;
    // One untimed boot first: the template's and runsc's first use.
    for i in 0..=n {
        let spec = SandboxSpec {
            net_slot: first_slot + i as u32,
            isolation: Isolation::Gvisor,
            ..SandboxSpec::base(
                format!("bench-gv-{tag}-{i}"),
                format!("bench-token-gv-{tag}-{i}"),
            )
        };
        let (steps, client): (Steps, _) = fleet.boot(&spec).await.context("a gVisor sandbox")?;
        if i > 0 {
            whole.push(steps.whole());
            start.push(steps.start);
            let stats = fleet.rt.stats(&spec.id).await?;
            let charged = stats
                .memory_usage_bytes
                .saturating_sub(stats.memory_file_bytes);
            idle.push(charged as f64 / (1024.0 * 1024.0));
        }
        last = Some(client);
    }
    let client = last.context("at least one gVisor sandbox")?;
    let rtt = crate::runtime::exec_round_trips(&client, execs).await?;
    let spawn_floor_ms = spawn_floor(&client).await?;
    let last_id = format!("bench-gv-{tag}-{n}");
    let cycles = memory_cycles(fleet, &client, &last_id).await?;
    let fork_slots = first_slot + n as u32 + 1;
    let fork_ten = fork_rounds(fleet, &format!("bench-gv-{tag}-1"), fork_slots).await?;
    idle.sort_by(f64::total_cmp);
    let p50 = |v: &[Duration]| crate::stats::Summary::of(v).map_or(0.0, |s| s.p50_ms);
    Ok(GvisorFigures::Measured(Box::new(Measured {
        create_to_first_exec: Latency::new(
            "gVisor create→first-exec",
            &whole,
            Some(CREATE_FIRST_EXEC),
        )?,
        start_p50_ms: p50(&start),
        exec_round_trip: Latency::new("gVisor exec round trip", &rtt, Some(EXEC_RTT))?,
        spawn_floor_ms,
        idle_mib: idle.get(idle.len() / 2).copied().unwrap_or(0.0),
        pause_with_memory: Latency::new("gVisor pause with memory", &cycles.pause, Some(PAUSE))?,
        resume_to_exec: Latency::new(
            "gVisor resume→first exec",
            &cycles.resume_to_exec,
            Some(RESUME_TO_EXEC),
        )?,
        resume_p50_ms: p50(&cycles.resume),
        resume_first_exec_p50_ms: p50(&cycles.first_exec),
        fork_ten: Latency::new("gVisor fork ×10", &fork_ten, Some(FORK_ALL_RUNNING))?,
    })))
}

/// Times [`FORK_ROUNDS`] forks ×[`FORKS`] of running sandbox `source` (forks on slots from
/// `first_slot`), each until every fork has run a first command; the forks of a round are destroyed
/// before the next.
async fn fork_rounds(
    fleet: &Fleet,
    source: &str,
    first_slot: u32,
) -> anyhow::Result<Vec<Duration>> {
    let mut took = Vec::with_capacity(FORK_ROUNDS);
    for round in 0..FORK_ROUNDS {
        let clones: Vec<SandboxSpec> = (0..FORKS)
            .map(|i| SandboxSpec {
                net_slot: first_slot + i as u32,
                isolation: Isolation::Gvisor,
                ..SandboxSpec::base(
                    format!("{source}-f{round}-{i}"),
                    format!("bench-token-{source}-f{round}-{i}"),
                )
            })
            .collect();
        for spec in &clones {
            fleet.record(&spec.id, None);
        }
        let t = Instant::now();
        let made = fleet.rt.fork(source, &clones).await.context("fork ×10")?;
        let mut clients = Vec::with_capacity(made.len());
        for (spec, info) in clones.iter().zip(made) {
            let info = info.with_context(|| format!("fork {}", spec.id))?;
            fleet.record(&spec.id, info.pid);
            clients.push(sandboxd_envd::EnvdClient::new(
                &info.agent.socket,
                &info.agent.token,
            ));
        }
        let cmd = ["/bin/true".to_string()];
        let first_execs = clients.iter().map(|c| c.exec(&cmd, ExecOptions::default()));
        for out in futures::future::join_all(first_execs).await {
            if out?.exit_code != 0 {
                bail!("/bin/true failed in a fork of {source}");
            }
        }
        took.push(t.elapsed());
        for spec in &clones {
            fleet.destroy(&spec.id).await?;
        }
    }
    Ok(took)
}

/// The p50 of [`SPAWNS`] `posix_spawn`s and waits of `/bin/true`, timed inside the sandbox of
/// `client` by Python (after ten untimed), ms.
async fn spawn_floor(client: &sandboxd_envd::EnvdClient) -> anyhow::Result<f64> {
    let script = format!(
        "import os, time\n\
         t = []\n\
         for _ in range({SPAWNS} + 10):\n    \
             s = time.perf_counter(); os.waitpid(os.posix_spawn('/bin/true', ['true'], {{}}), 0)\n    \
             t.append(time.perf_counter() - s)\n\
         t = sorted(t[10:]); print(t[len(t) // 2] * 1000)"
    );
    let cmd = ["python3".to_string(), "-c".to_string(), script];
    let out = client.exec(&cmd, ExecOptions::default()).await?;
    let text = String::from_utf8_lossy(&out.stdout);
    if out.exit_code != 0 {
        bail!(
            "timing posix_spawn in the sandbox exited {}: {}",
            out.exit_code,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    text.trim()
        .parse()
        .with_context(|| format!("timing posix_spawn in the sandbox printed {text:?}"))
}

/// What [`memory_cycles`] timed, one entry per cycle.
#[derive(Default)]
struct MemoryCycles {
    pause: Vec<Duration>,
    resume_to_exec: Vec<Duration>,
    resume: Vec<Duration>,
    first_exec: Vec<Duration>,
}

/// Has the sandbox `id` hold [`HELD_MIB`] in a process, then times [`MEMORY_CYCLES`] pauses with
/// memory and resume→first exec, checking after each (untimed) that the process and its memory
/// came back.
async fn memory_cycles(
    fleet: &Fleet,
    client: &sandboxd_envd::EnvdClient,
    id: &str,
) -> anyhow::Result<MemoryCycles> {
    let sh = |script: String| ["/bin/sh".to_string(), "-c".to_string(), script];
    let hold = format!(
        "nohup python3 -c 'import time; b = bytearray({HELD_MIB} << 20); b[::4096] = b\"x\" * len(b[::4096]); open(\"/tmp/held\", \"w\").write(\"ready\"); time.sleep(1e9)' >/dev/null 2>&1 &"
    );
    client.exec(&sh(hold), ExecOptions::default()).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = client
            .exec(
                &sh("cat /tmp/held 2>/dev/null".into()),
                ExecOptions::default(),
            )
            .await?;
        if out.stdout == b"ready" {
            break;
        }
        if Instant::now() > deadline {
            bail!("the memory holder did not start in {id}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut cycles = MemoryCycles::default();
    let check = sh("pgrep -f bytearray >/dev/null && echo held".into());
    let first = ["/bin/true".to_string()];
    for _ in 0..MEMORY_CYCLES {
        let t = Instant::now();
        fleet.rt.pause(id).await.context("pause with memory")?;
        cycles.pause.push(t.elapsed());
        let t = Instant::now();
        fleet.rt.resume(id).await.context("resume")?;
        let resumed = t.elapsed();
        let ran = client.exec(&first, ExecOptions::default()).await?;
        let whole = t.elapsed();
        cycles.resume.push(resumed);
        cycles.first_exec.push(whole - resumed);
        cycles.resume_to_exec.push(whole);
        let out = client.exec(&check, ExecOptions::default()).await?;
        if ran.exit_code != 0 || out.stdout != b"held\n" {
            bail!("the memory holder did not come back in {id}");
        }
    }
    Ok(cycles)
}
