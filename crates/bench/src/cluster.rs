//! `bench cluster`: cluster mode on a three-node loopback cluster.
//!
//! - **Name claim through the log**: three in-process cluster members (the daemon's own
//!   `sandboxd-cluster`, openraft with its durable log and HTTP RPC on loopback) and a `Reserve` of a
//!   fresh name proposed from a follower (forwarded to the leader, committed by a quorum, applied)
//!   and from the leader; p50/p99 of each (goal p50 ≤ 5 ms).
//! - **create→first exec, local vs forwarded**: three real daemons in one private network namespace
//!   (on 127.0.0.2–.4), each create and first exec sent to the first node; a sample is *local* when
//!   the placement kept the sandbox there and *forwarded* when it went to another node (both calls then
//!   cross to the owner). Both measured in the same run, so the difference is the forwarding's cost
//!   (goal ≤ +3 ms).
//! - **Creates per second across the cluster**: creates sent round-robin to the three nodes, a few in
//!   flight at once, until a count is reached; then every sandbox is deleted.

use crate::daemon::{private_netns, random_token, Daemon, Node};
use crate::report::{verdict, Latency, Target};
use crate::Interrupt;
use anyhow::{bail, Context};
use sandboxd_cluster::{Cluster, ClusterConfig, Command, Member, Outcome};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Options of `bench cluster`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    /// Name claims measured from each side.
    #[arg(long, default_value_t = 300)]
    pub claims: usize,
    /// create→first exec samples.
    #[arg(long, default_value_t = 30)]
    pub creates: usize,
    /// Creates of the throughput run.
    #[arg(long, default_value_t = 60)]
    pub throughput: usize,
    /// Creates in flight at once in the throughput run.
    #[arg(long, default_value_t = 6)]
    pub concurrency: usize,
    /// The sandboxd binary (default: beside this executable, else target/release/sandboxd).
    #[arg(long)]
    pub daemon: Option<PathBuf>,
    /// The static agent (default: as `bench runtime` finds it).
    #[arg(long)]
    pub agent: Option<PathBuf>,
}

/// What `bench cluster` measured.
#[derive(Debug, Serialize)]
pub struct ClusterReport {
    pub claim_from_follower: Latency,
    pub claim_from_leader: Latency,
    pub create_exec_local: Latency,
    pub create_exec_forwarded: Latency,
    /// `forwarded.p50 - local.p50`, ms.
    pub forwarding_cost_ms: f64,
    pub forwarding_cost_target_ms: f64,
    pub forwarding_cost_met: bool,
    pub creates_per_second: f64,
    pub throughput_creates: usize,
}

const CLAIM_TARGET: Target = Target {
    p50_ms: Some(5.0),
    p99_ms: None,
};
const FORWARDING_TARGET_MS: f64 = 3.0;

impl ClusterReport {
    /// The lines for people.
    pub fn print(&self) {
        println!("cluster (3 nodes on loopback)");
        println!("{}", self.claim_from_follower.line("name claim (follower)"));
        println!("{}", self.claim_from_leader.line("name claim (leader)"));
        println!("{}", self.create_exec_local.line("create→exec local"));
        println!(
            "{}",
            self.create_exec_forwarded.line("create→exec forwarded")
        );
        println!(
            "forwarding cost          {:+.2} ms at p50  (target ≤ +{} ms: {})",
            self.forwarding_cost_ms,
            self.forwarding_cost_target_ms,
            verdict(self.forwarding_cost_met)
        );
        println!(
            "creates per second       {:.1} across the cluster ({} creates)",
            self.creates_per_second, self.throughput_creates
        );
    }
}

/// Runs `bench cluster`.
pub async fn run(args: &ClusterArgs, interrupt: Interrupt) -> anyhow::Result<ClusterReport> {
    let (claim_from_follower, claim_from_leader) = claims(args.claims).await?;
    if *interrupt.borrow() {
        bail!("interrupted");
    }
    let agent = crate::runtime::agent_binary(args.agent.as_deref())?;
    let binary = crate::daemon::daemon_binary(args.daemon.as_deref())?;
    let nodes = start_daemons(&binary, &agent).await?;
    let urls: Vec<String> = nodes.iter().map(|d| d.api.clone()).collect();
    let token = nodes[0].token.clone();
    let (creates, throughput, concurrency) = (args.creates, args.throughput, args.concurrency);
    let measured = nodes[0]
        .run_inside(move || async move {
            daemons_part(&urls, &token, creates, throughput, concurrency).await
        })
        .await;
    let mut failed = measured.is_err();
    for node in nodes {
        failed |= node.stop(measured.is_err()).await.is_err();
    }
    let (local, forwarded, creates_per_second) = measured?;
    if failed {
        eprintln!("bench: a cluster node did not stop cleanly");
    }
    let create_exec_local = Latency::new("local create→exec", &local, None)?;
    let create_exec_forwarded = Latency::new("forwarded create→exec", &forwarded, None)?;
    let cost = create_exec_forwarded.summary.p50_ms - create_exec_local.summary.p50_ms;
    Ok(ClusterReport {
        claim_from_follower,
        claim_from_leader,
        create_exec_local,
        create_exec_forwarded,
        forwarding_cost_ms: cost,
        forwarding_cost_target_ms: FORWARDING_TARGET_MS,
        forwarding_cost_met: cost <= FORWARDING_TARGET_MS,
        creates_per_second,
        throughput_creates: args.throughput,
    })
}

/// Name claims through three in-process members: from a follower, then from the leader.
async fn claims(n: usize) -> anyhow::Result<(Latency, Latency)> {
    let dir = tempfile::tempdir()?;
    let secret = random_token()?;
    let mut members = Vec::new();
    for id in 1..=3u64 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let member = Member {
            cluster_addr: format!("127.0.0.1:{port}"),
            api_addr: String::new(),
        };
        let config = ClusterConfig::new(
            id,
            member,
            format!("127.0.0.1:{port}").parse()?,
            secret.clone(),
            dir.path().join(id.to_string()),
        );
        members.push(Cluster::start(config).await?);
    }
    members[0].initialize().await?;
    for m in &members[1..] {
        m.join(&members[0].member().cluster_addr, Duration::from_secs(30))
            .await?;
    }
    for m in &members {
        let lease = Command::Lease {
            node: m.id(),
            member: m.member().clone(),
            capacity: Default::default(),
            at_ms: 0,
            until_ms: i64::MAX / 2,
        };
        m.propose(lease).await?;
    }
    let leader = members
        .iter()
        .position(|m| m.is_leader())
        .context("no leader among the members")?;
    let follower = (leader + 1) % members.len();
    let mut figures = Vec::new();
    for (side, from) in [("follower", follower), ("leader", leader)] {
        let mut samples = Vec::with_capacity(n);
        for k in 0..n {
            let claim = Command::Reserve {
                id: format!("bench-{side}-{k}"),
                owner: members[from].id(),
                name: format!("bench-{side}-{k}"),
                token_digest: String::new(),
                summary: Default::default(),
                at_ms: k as i64,
            };
            let started = Instant::now();
            let outcome = members[from].propose(claim).await?;
            samples.push(started.elapsed());
            anyhow::ensure!(
                outcome == Outcome::Applied,
                "a fresh name was refused: {outcome:?}"
            );
        }
        figures.push(Latency::new("name claim", &samples, Some(CLAIM_TARGET))?);
    }
    for m in &members {
        m.shutdown().await;
    }
    let leader_figure = figures.pop().expect("two figures");
    Ok((figures.pop().expect("two figures"), leader_figure))
}

/// Starts three cluster daemons in one private network namespace.
async fn start_daemons(binary: &Path, agent: &Path) -> anyhow::Result<Vec<Daemon>> {
    let (netns, port) = private_netns().context("creating a network namespace")?;
    let base = std::env::temp_dir().join(format!("sandboxd-bench-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    let secret = base.join("secret");
    std::fs::write(&secret, random_token()?)?;
    let token = random_token()?;
    let mut nodes: Vec<Daemon> = Vec::new();
    for i in 0..3u32 {
        let ip = format!("127.0.0.{}", i + 2);
        let mut args = vec![
            "--cluster-listen".to_string(),
            format!("{ip}:7100"),
            "--cluster-secret-file".into(),
            secret.display().to_string(),
            "--net-slot-base".into(),
            (i * 500).to_string(),
            "--net-slots".into(),
            "500".into(),
            "--host-ports".into(),
            format!("{}-{}", 30000 + i * 1000, 30000 + i * 1000 + 900),
        ];
        if i == 0 {
            args.push("--cluster-init".into());
        } else {
            args.extend(["--join".into(), "127.0.0.2:7100".into()]);
        }
        let node = Node {
            netns: netns.try_clone()?,
            listen: format!("{ip}:{port}"),
            token: token.clone(),
            workdir: base.join(format!("node{i}")),
            cgroup_parent: format!("{}-cluster{i}", crate::runtime::CGROUP_PARENT),
            args,
        };
        match Daemon::start_node(binary, agent, node).await {
            Ok(d) => nodes.push(d),
            Err(e) => {
                for d in nodes {
                    let _ = d.stop(true).await;
                }
                return Err(e.context(format!("starting cluster node {i}")));
            }
        }
    }
    Ok(nodes)
}

/// The daemons' figures, from inside their namespace: create→exec samples (local, forwarded) and
/// creates per second.
async fn daemons_part(
    urls: &[String],
    token: &str,
    creates: usize,
    throughput: usize,
    concurrency: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>, f64)> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let auth = format!("Bearer {token}");
    await_healthy(&http, &urls[0], &auth, urls.len()).await?;
    let (mut local, mut forwarded) = (Vec::new(), Vec::new());
    // One warm-up, then the samples.
    for k in 0..=creates {
        let started = Instant::now();
        let id = create(&http, &urls[0], &auth).await?;
        let exec: Value = http
            .post(format!("{}/v1/sandboxes/{id}/exec", urls[0]))
            .header("authorization", &auth)
            .json(&json!({"cmd": ["true"]}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let took = started.elapsed();
        anyhow::ensure!(exec["exitCode"] == 0, "first exec: {exec}");
        let here = http
            .get(format!("{}/v1/sandboxes/{id}", urls[0]))
            .header("authorization", &auth)
            .header("x-sandboxd-forwarded", "bench")
            .send()
            .await?
            .status()
            == 200;
        if k > 0 {
            if here { &mut local } else { &mut forwarded }.push(took);
        }
        delete(&http, &urls[0], &auth, &id).await?;
    }
    // Throughput: round-robin over the nodes, `concurrency` in flight.
    let started = Instant::now();
    let mut made = Vec::new();
    let mut next = 0;
    while next < throughput {
        let batch: Vec<_> = (next..(next + concurrency).min(throughput))
            .map(|k| create(&http, &urls[k % urls.len()], &auth))
            .collect();
        next += batch.len();
        for id in futures::future::join_all(batch).await {
            made.push(id?);
        }
    }
    let rate = throughput as f64 / started.elapsed().as_secs_f64();
    for id in &made {
        delete(&http, &urls[0], &auth, id).await?;
    }
    Ok((local, forwarded, rate))
}

async fn await_healthy(
    http: &reqwest::Client,
    url: &str,
    auth: &str,
    members: usize,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status: Option<Value> = match http
            .get(format!("{url}/v1/cluster"))
            .header("authorization", auth)
            .send()
            .await
        {
            Ok(resp) => resp.json().await.ok(),
            Err(_) => None,
        };
        let healthy = status.as_ref().map_or(0, |s| {
            s["members"].as_array().map_or(0, |m| {
                m.iter()
                    .filter(|m| m["health"] == "healthy" && m["slotsFree"].as_u64() > Some(0))
                    .count()
            })
        });
        if healthy == members {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the cluster never became healthy: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create(http: &reqwest::Client, url: &str, auth: &str) -> anyhow::Result<String> {
    let created: Value = http
        .post(format!("{url}/v1/sandboxes"))
        .header("authorization", auth)
        .json(&json!({"timeoutSec": 600}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    created["id"]
        .as_str()
        .map(str::to_string)
        .context("a create without an id")
}

async fn delete(http: &reqwest::Client, url: &str, auth: &str, id: &str) -> anyhow::Result<()> {
    http.delete(format!("{url}/v1/sandboxes/{id}"))
        .header("authorization", auth)
        .send()
        .await?
        .error_for_status()?;
    Ok(())
}
