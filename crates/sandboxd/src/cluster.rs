//! The daemon in cluster mode: its flags checked, its node started, its capacity reported.
//!
//! Contract: without `--cluster-listen` nothing here runs and the daemon is exactly a single node
//! (and the other cluster flags are refused, so a typo does not silently leave a node alone). With it,
//! the node's id is made once and kept in `<data-dir>/cluster/node-id`, the log and snapshots live
//! beside it, and the node is initialized (`--cluster-init`) or joins (`--join`) before the API
//! serves. Every second it reports what it can still take, for the next lease.

use crate::config::ServeConfig;
use anyhow::Context;
use sandboxd_cluster::{Capacity, Cluster, ClusterConfig, Member, NodeId};
use sandboxd_service::Service;
use sandboxd_store::SandboxState;
use std::path::Path;
use std::time::Duration;

/// How long `--join` keeps trying before the daemon gives up starting.
const JOIN_WITHIN: Duration = Duration::from_secs(120);
/// The shortest secret accepted.
const MIN_SECRET: usize = 16;

/// Starts the cluster node the flags ask for, if any (see the module doc).
pub async fn start(config: &ServeConfig, data_dir: &Path) -> anyhow::Result<Option<Cluster>> {
    let Some(listen) = config.cluster_listen else {
        anyhow::ensure!(
            config.cluster_secret_file.is_none() && !config.cluster_init && config.join.is_none(),
            "--cluster-secret-file, --cluster-init and --join need --cluster-listen"
        );
        return Ok(None);
    };
    let secret_file = config
        .cluster_secret_file
        .as_ref()
        .context("--cluster-listen needs --cluster-secret-file")?;
    let secret = std::fs::read_to_string(secret_file)
        .with_context(|| format!("reading the cluster secret {}", secret_file.display()))?
        .trim()
        .to_string();
    anyhow::ensure!(
        secret.len() >= MIN_SECRET,
        "the cluster secret in {} is shorter than {MIN_SECRET} characters",
        secret_file.display()
    );
    let dir = data_dir.join("cluster");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let node_id = node_id(&dir)?;
    let member = Member {
        cluster_addr: config
            .cluster_advertise
            .clone()
            .unwrap_or_else(|| listen.to_string()),
        api_addr: config
            .api_advertise
            .clone()
            .unwrap_or_else(|| config.listen.to_string()),
    };
    let mut cluster_config = ClusterConfig::new(node_id, member, listen, secret, dir);
    cluster_config.lease = Duration::from_millis(config.cluster_lease_ms.max(300));
    cluster_config.grace = Duration::from_millis(config.cluster_grace_ms);
    cluster_config.propose_timeout =
        Duration::from_millis(config.cluster_write_timeout_ms.max(100));
    let cluster = Cluster::start(cluster_config)
        .await
        .context("starting the cluster node")?;
    if config.cluster_init {
        cluster
            .initialize()
            .await
            .context("initializing the cluster")?;
        tracing::info!(node_id, "cluster initialized with this node");
    } else if let Some(seed) = &config.join {
        cluster
            .join(seed, JOIN_WITHIN)
            .await
            .context("joining the cluster")?;
        tracing::info!(node_id, %seed, "joined the cluster");
    } else if !cluster.is_initialized().await {
        anyhow::bail!("this node is in no cluster yet: start it with --cluster-init (the first node) or --join ADDR");
    }
    Ok(Some(cluster))
}

/// The node id kept in `dir/node-id`, made at the first start (random, below 2^53 so that JSON
/// readers keep it exact).
fn node_id(dir: &Path) -> anyhow::Result<NodeId> {
    let path = dir.join("node-id");
    match std::fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse()
            .with_context(|| format!("{} holds {text:?}, not a node id", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = rand::random_range(1..(1u64 << 53));
            std::fs::write(&path, format!("{id}\n"))
                .with_context(|| format!("writing {}", path.display()))?;
            Ok(id)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Reports this node's capacity to `cluster` every second, for as long as the daemon runs.
pub async fn report_capacity(cluster: Cluster, service: Service, data_dir: std::path::PathBuf) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match capacity(&service, &data_dir).await {
            Ok(capacity) => cluster.report_capacity(capacity),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "could not measure this node's capacity")
            }
        }
    }
}

async fn capacity(service: &Service, data_dir: &Path) -> anyhow::Result<Capacity> {
    let live: Vec<_> = service
        .reader()
        .read(|tx| {
            tx.sandboxes_in_states(&[
                SandboxState::Creating,
                SandboxState::Starting,
                SandboxState::Running,
                SandboxState::Paused,
                SandboxState::Stopping,
                SandboxState::Deleting,
            ])
        })
        .await?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let promised: u64 = live.iter().map(|s| s.cpu_millis as u64).sum();
    let slots = (service.config().net_slots as u64).saturating_sub(live.len() as u64);
    let stat = nix::sys::statvfs::statvfs(data_dir)?;
    let disk_mb = (stat.blocks_available() as u64 * stat.fragment_size() as u64) >> 20;
    Ok(Capacity {
        // CPU is shared, not reserved: what is not promised, never below one CPU's worth, so a busy
        // node still ranks by memory and slots.
        cpu_millis: (cpus * 1000).saturating_sub(promised).max(1000),
        memory_mb: mem_available_mb().unwrap_or(0),
        disk_mb,
        slots,
    })
}

fn mem_available_mb() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}
