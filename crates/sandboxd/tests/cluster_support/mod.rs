//! What the cluster tests add to [`crate::common`]: a network namespace of their own with nodes on
//! 127.0.0.1–.N, real `sandboxd` processes as members, partitions with nftables between those
//! addresses, and a checker over the history of acknowledged creates.
//!
//! The namespace. Nodes listen on 127.0.0.2 onwards ([`ip_of`]); the test talks to them from
//! 127.0.0.1. [`TestNet::enter`] moves the calling thread (the test's, which runs its current-thread
//! runtime) into a fresh network namespace and brings `lo` up; every daemon it spawns inherits it, so
//! nodes, their sandboxes' interfaces and the partition rules all live there and vanish with it.
//! Members dial each other from their own address (the daemon binds its peer and forwarding
//! connections to its listen address), so a rule on source and destination address cuts exactly the
//! traffic between two nodes, both ways.

#![allow(dead_code)] // each test file uses a different part

use crate::common::{run_serially, Daemon, Setup};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Cgroup parent of the cluster tests' sandboxes.
pub const CGROUP_PARENT: &str = "sandboxd-cluster";
/// The port every node's cluster listener uses (each node has an address of its own).
pub const CLUSTER_PORT: u16 = 7100;
/// Marks a request as forwarded: the node answers from its own store only.
pub const FORWARDED: &str = "x-sandboxd-forwarded";
const SECRET: &str = "cluster-test-secret-6a1f0e9d";
const NFT_TABLE: &str = "sandboxd_partition";

/// Runs one cluster test serially with the others of its binary, on a current-thread runtime (the
/// thread [`TestNet::enter`] moves into the test's namespace), failed (and cleaned up) after `limit`.
pub fn cluster_test<F, Fut>(limit: Duration, test: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    run_serially(
        &mut tokio::runtime::Builder::new_current_thread(),
        Some(limit),
        test,
    );
}

/// The test's own network namespace.
pub struct TestNet;

fn run(what: &str, cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TestNet {
    /// See the module doc.
    pub fn enter() -> TestNet {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        run(
            "ip link set lo up",
            Command::new("ip").args(["link", "set", "lo", "up"]),
        );
        let rules = format!(
            "table inet {NFT_TABLE} {{ chain out {{ type filter hook output priority 0; policy accept; }}\n}}\n"
        );
        nft("nft table", &rules);
        TestNet
    }

    /// Cuts all traffic between the addresses of `a` and those of `b`, both ways.
    pub fn partition(&self, a: &[Ipv4Addr], b: &[Ipv4Addr]) {
        let mut rules = String::new();
        for x in a {
            for y in b {
                rules += &format!("add rule inet {NFT_TABLE} out ip saddr {x} ip daddr {y} drop\n");
                rules += &format!("add rule inet {NFT_TABLE} out ip saddr {y} ip daddr {x} drop\n");
            }
        }
        nft("nft partition", &rules);
    }

    /// Lifts every partition.
    pub fn heal(&self) {
        run(
            "nft heal",
            Command::new("nft").args(["flush", "chain", "inet", NFT_TABLE, "out"]),
        );
    }
}

/// Runs `nft -f` on `rules`.
fn nft(what: &str, rules: &str) {
    let file = tempfile::NamedTempFile::new().expect("rules file");
    std::fs::write(file.path(), rules).expect("rules file");
    run(what, Command::new("nft").arg("-f").arg(file.path()));
}

/// The address of node `i` (0-based): 127.0.0.(i+2). 127.0.0.1 is the test's own: its requests leave
/// from there, so no partition between nodes cuts the test off from either side.
pub fn ip_of(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, i as u8 + 2)
}

/// A cluster of real daemons in a [`TestNet`].
pub struct TestCluster {
    /// The nodes, by index (node `i` listens on [`ip_of`]`(i)`).
    pub nodes: Vec<Daemon>,
    pub net: TestNet,
    secret: tempfile::NamedTempFile,
}

/// How long a node may take to start (joining included).
const READY: Duration = Duration::from_secs(60);

impl TestCluster {
    /// Starts `n` nodes (the first with `--cluster-init`, the others joining it) with `args` added,
    /// and waits until every node sees every member healthy.
    pub async fn start(n: usize, args: &[&str]) -> TestCluster {
        Self::start_with_env(n, args, &[]).await
    }

    /// [`TestCluster::start`] with `env` set for every node (e.g. `FAILPOINTS`).
    pub async fn start_with_env(n: usize, args: &[&str], env: &[(&str, &str)]) -> TestCluster {
        let cluster = Self::start_unwaited(n, args, env).await;
        cluster.wait_healthy(&(0..n).collect::<Vec<_>>(), n).await;
        cluster
    }

    /// Starts `n` nodes as [`TestCluster::start_with_env`] does, and answers once each answers
    /// `/health`, without waiting for any node's view of the others.
    pub async fn start_unwaited(n: usize, args: &[&str], env: &[(&str, &str)]) -> TestCluster {
        let net = TestNet::enter();
        let secret = tempfile::NamedTempFile::new().expect("secret file");
        std::fs::write(secret.path(), SECRET).expect("secret");
        let mut nodes = Vec::new();
        for i in 0..n {
            let mut node_args: Vec<String> = vec![
                "--cluster-listen".into(),
                format!("{}:{CLUSTER_PORT}", ip_of(i)),
                "--cluster-secret-file".into(),
                secret.path().display().to_string(),
                "--reconcile-interval-secs".into(),
                "1".into(),
            ];
            if i == 0 {
                node_args.push("--cluster-init".into());
            } else {
                node_args.push("--join".into());
                node_args.push(format!("{}:{CLUSTER_PORT}", ip_of(0)));
            }
            node_args.extend(args.iter().map(|a| a.to_string()));
            let setup = Setup {
                cgroup_parent: CGROUP_PARENT,
                ready_timeout: READY,
                listen_ip: ip_of(i),
                args: node_args,
                env: [(
                    "SB_LOG".to_string(),
                    "info,openraft=error,openraft::replication=off".to_string(),
                )]
                .into_iter()
                .chain(env.iter().map(|(k, v)| (k.to_string(), v.to_string())))
                .collect(),
                ..Setup::default()
            };
            nodes.push(Daemon::start_setup(setup).await);
        }
        TestCluster { nodes, net, secret }
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &Daemon {
        &self.nodes[i]
    }

    /// `GET /v1/cluster` on node `i`, if it answers.
    pub async fn status(&self, i: usize) -> Option<Value> {
        let resp = self.nodes[i]
            .http()
            .get(self.nodes[i].endpoint("/v1/cluster"))
            .timeout(Duration::from_secs(3))
            .send()
            .await
            .ok()?;
        (resp.status() == 200).then_some(())?;
        resp.json().await.ok()
    }

    /// Waits until each of `nodes` knows a leader and sees `members` members of which every one it
    /// can reach reports capacity and a healthy lease.
    pub async fn wait_healthy(&self, nodes: &[usize], members: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        for &i in nodes {
            loop {
                if let Some(s) = self.status(i).await {
                    let list = s["members"].as_array().cloned().unwrap_or_default();
                    let healthy = list
                        .iter()
                        .filter(|m| m["health"] == "healthy" && m["slotsFree"].as_u64() > Some(0))
                        .count();
                    if s["leaderId"].is_string() && list.len() == members && healthy == members {
                        break;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "node {i} never saw a healthy cluster: {s}"
                    );
                } else {
                    assert!(
                        Instant::now() < deadline,
                        "node {i} never answered /v1/cluster"
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// The index of the node that leads, as node `asking` sees it.
    pub async fn leader(&self, asking: usize) -> Option<usize> {
        let s = self.status(asking).await?;
        let leader = s["leaderId"].as_str()?.to_string();
        let addr = s["members"]
            .as_array()?
            .iter()
            .find(|m| m["id"] == leader.as_str())?["apiAddr"]
            .as_str()?
            .to_string();
        self.nodes.iter().position(|d| d.addr().to_string() == addr)
    }

    /// The sandboxes node `i` holds in its own store (`id → name`), if it answers.
    pub async fn local_sandboxes(&self, i: usize) -> Option<BTreeMap<String, String>> {
        Some(
            self.local_rows(i)
                .await?
                .into_iter()
                .map(|(id, (name, _))| (id, name))
                .collect(),
        )
    }

    /// The rows of node `i`'s own store (`id → (name, state)`), if it answers.
    pub async fn local_rows(&self, i: usize) -> Option<BTreeMap<String, (String, String)>> {
        let resp = self.nodes[i]
            .http()
            .get(self.nodes[i].endpoint("/v1/sandboxes?limit=1000"))
            .header(FORWARDED, "test")
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        (resp.status() == 200).then_some(())?;
        let body: Value = resp.json().await.ok()?;
        Some(
            body["sandboxes"]
                .as_array()?
                .iter()
                .map(|s| {
                    let text = |k: &str| s[k].as_str().unwrap_or_default().to_string();
                    (text("id"), (text("name"), text("state")))
                })
                .collect(),
        )
    }

    /// The secret file's path.
    pub fn secret_path(&self) -> PathBuf {
        self.secret.path().to_path_buf()
    }
}

/// What the clients of a test were told: every acknowledged create and delete.
#[derive(Debug, Default)]
pub struct History {
    /// Acknowledged creates: id → name.
    pub created: BTreeMap<String, String>,
    /// Acknowledged deletes.
    pub deleted: BTreeSet<String>,
    /// Sandboxes lost with their node: destroyed when it returned.
    pub lost: BTreeSet<String>,
}

impl History {
    /// Records an acknowledged create.
    pub fn created(&mut self, id: &str, name: &str) {
        self.created.insert(id.to_string(), name.to_string());
    }

    /// Records an acknowledged delete.
    pub fn deleted(&mut self, id: &str) {
        self.deleted.insert(id.to_string());
    }

    /// Records a sandbox lost with its node.
    pub fn lost(&mut self, id: &str) {
        self.lost.insert(id.to_string());
    }

    /// The checker: across the stores of `nodes` (each must answer), every acknowledged create that
    /// was not deleted or lost exists on exactly one node, a lost one on none (its node destroyed it
    /// when it returned), and no non-empty name is held by two sandboxes.
    pub async fn check(&self, cluster: &TestCluster, nodes: &[usize]) {
        let mut holders: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for &i in nodes {
            let local = cluster
                .local_sandboxes(i)
                .await
                .unwrap_or_else(|| panic!("node {i} does not answer its list"));
            for (id, name) in local {
                holders.entry(id.clone()).or_default().push(i);
                if !name.is_empty() {
                    names.entry(name).or_default().insert(id);
                }
            }
        }
        for id in &self.lost {
            assert!(
                !holders.contains_key(id),
                "lost sandbox {id} is still on nodes {:?}",
                holders[id]
            );
        }
        for (id, name) in &self.created {
            if self.deleted.contains(id) || self.lost.contains(id) {
                continue;
            }
            let on = holders.get(id).cloned().unwrap_or_default();
            assert_eq!(
                on.len(),
                1,
                "acknowledged create {id} ({name:?}) is on nodes {on:?}"
            );
        }
        for (name, ids) in &names {
            assert_eq!(ids.len(), 1, "name {name:?} is held by {ids:?}");
        }
    }
}
