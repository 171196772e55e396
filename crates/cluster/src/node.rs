//! One running member of the cluster: its Raft node, its RPC listener, its lease.
//!
//! Contract:
//! - [`Cluster::start`] opens the node's log and state machine under its directory, starts openraft and
//!   serves the peers' RPC ([`crate::rpc`]) on `--cluster-listen`. A node that was a member before
//!   resumes as one (its log says so); a new node is a member of nothing until [`Cluster::initialize`]
//!   (the first node, `--cluster-init`) or [`Cluster::join`] (the others, `--join`: added as a learner,
//!   then promoted to voter by the leader).
//! - [`Cluster::propose`] commits one [`Command`] through whichever node leads, and answers its
//!   [`Outcome`]. Every command is idempotent (a retried `Reserve` of the same id answers
//!   [`Outcome::Unchanged`]), so a proposal retried after a lost answer is harmless. Past
//!   [`ClusterConfig::propose_timeout`] without a commit (no quorum, no leader) it answers
//!   [`ClusterError::Unavailable`]; such an entry may still commit later, which is why the daemon's
//!   reconciler releases reservations that never became sandboxes.
//! - Reads ([`Cluster::read`]) see this node's applied state, which may lag the leader's: good for
//!   routing (a stale answer is corrected by the owner), never for deciding uniqueness — only `apply`
//!   decides that. [`Cluster::catch_up`] first applies everything the leader had committed when
//!   asked (openraft's read index: the leader confirms with a quorum that it still leads), so a read
//!   after it sees every write acknowledged before it, whichever node took the write.
//! - Every [`ClusterConfig::lease`]/3 the node renews its lease with its capacity; the leader's
//!   [`crate::watchdog`] marks a node lost once its lease lapsed by more than the grace.

use crate::error::ClusterError;
use crate::log_store::LogStore;
use crate::network::{paths, Network, PeerClient};
use crate::state::{Capacity, ClusterState, Command, Member, NodeId, Outcome};
use crate::state_machine::{SharedState, StateMachineStore};
use crate::Raft;
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::{ChangeMembers, ServerState};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// How a node runs in the cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This node's id.
    pub node_id: NodeId,
    /// Where peers and forwarded requests reach it.
    pub member: Member,
    /// The address the RPC listener binds.
    pub listen: SocketAddr,
    /// The shared secret every RPC carries.
    pub secret: String,
    /// Where the log and snapshots live.
    pub dir: PathBuf,
    /// How long a lease holds; renewed every third of it.
    pub lease: Duration,
    /// How long past its lease a node is marked lost.
    pub grace: Duration,
    /// How long a proposal may wait for a commit before [`ClusterError::Unavailable`].
    pub propose_timeout: Duration,
    /// openraft's heartbeat interval.
    pub heartbeat: Duration,
}

impl ClusterConfig {
    /// Defaults for node `node_id` at `member`, listening on `listen`, with `secret`, under `dir`.
    pub fn new(
        node_id: NodeId,
        member: Member,
        listen: SocketAddr,
        secret: String,
        dir: PathBuf,
    ) -> Self {
        Self {
            node_id,
            member,
            listen,
            secret,
            dir,
            lease: Duration::from_secs(3),
            grace: Duration::from_secs(5),
            propose_timeout: Duration::from_secs(5),
            heartbeat: Duration::from_millis(100),
        }
    }
}

/// A running member. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    config: ClusterConfig,
    raft: Raft,
    state: SharedState,
    client: PeerClient,
    capacity: Mutex<Capacity>,
}

/// A node asking to join (the body of [`paths::JOIN`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinRequest {
    /// Its id.
    pub node_id: NodeId,
    /// Its addresses.
    pub member: Member,
}

/// Unix ms by the local clock (this node proposing: the one place time enters an entry).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Cluster {
    /// Opens the node's storage, starts openraft and serves peers' RPC. See the module doc.
    pub async fn start(config: ClusterConfig) -> Result<Cluster, ClusterError> {
        std::fs::create_dir_all(&config.dir).map_err(|source| ClusterError::Listen {
            addr: config.dir.display().to_string(),
            source,
        })?;
        let log_path = config.dir.join("raft-log.db");
        let log = LogStore::open(&log_path).map_err(|source| ClusterError::OpenLog {
            path: log_path.clone(),
            source,
        })?;
        let sm = StateMachineStore::open(&config.dir.join("snapshots"))
            .map_err(ClusterError::OpenStateMachine)?;
        let state = sm.shared();
        let heartbeat = config.heartbeat.as_millis().max(10) as u64;
        let raft_config = openraft::Config {
            cluster_name: "sandboxd".into(),
            heartbeat_interval: heartbeat,
            election_timeout_min: heartbeat * 5,
            election_timeout_max: heartbeat * 10,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(2000),
            max_in_snapshot_log_to_keep: 500,
            ..Default::default()
        }
        .validate()
        .map_err(|e| ClusterError::Start(e.to_string()))?;
        let local = Some(config.listen.ip()).filter(|ip| !ip.is_unspecified());
        let client = PeerClient::new(&config.secret, local);
        let raft = Raft::new(
            config.node_id,
            Arc::new(raft_config),
            Network::new(client.clone()),
            log,
            sm,
        )
        .await
        .map_err(|e| ClusterError::Start(e.to_string()))?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| ClusterError::Listen {
                addr: config.listen.to_string(),
                source,
            })?;
        let cluster = Cluster {
            inner: Arc::new(Inner {
                config,
                raft,
                state,
                client,
                capacity: Mutex::new(Capacity::default()),
            }),
        };
        tokio::spawn(crate::rpc::serve(listener, cluster.clone()));
        tokio::spawn(cluster.clone().renew_leases());
        tokio::spawn(crate::watchdog::run(cluster.clone()));
        Ok(cluster)
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.inner.config.node_id
    }

    /// This node's addresses.
    pub fn member(&self) -> &Member {
        &self.inner.config.member
    }

    /// The settings.
    pub fn config(&self) -> &ClusterConfig {
        &self.inner.config
    }

    pub(crate) fn raft(&self) -> &Raft {
        &self.inner.raft
    }

    pub(crate) fn secret(&self) -> &str {
        &self.inner.config.secret
    }

    /// Runs `f` on this node's applied state (which may lag the leader's).
    pub fn read<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> R {
        self.inner.state.read(f)
    }

    /// Waits, at most `within`, until this node's applied state holds its own lease record, and
    /// answers whether it does and is not marked lost. A node that has just joined takes sandboxes
    /// only from its first lease on: this is how a create waits for that lease instead of refusing.
    /// A node already marked lost answers `false` at once.
    pub async fn await_own_lease(&self, within: Duration) -> bool {
        let record = || self.read(|s| s.nodes.get(&self.id()).map(|r| !r.lost));
        let mut metrics = self.inner.raft.metrics();
        let wait = async {
            loop {
                if let Some(serving) = record() {
                    return serving;
                }
                // Each applied entry changes the metrics; the tick covers a change seen before the
                // state it reports.
                tokio::select! {
                    changed = metrics.changed() => if changed.is_err() { return false },
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
        };
        tokio::time::timeout(within, wait).await.unwrap_or(false)
    }

    /// What this node reports in its next lease.
    pub fn report_capacity(&self, capacity: Capacity) {
        *self
            .inner
            .capacity
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = capacity;
    }

    /// The leader and its addresses, if one is known.
    pub fn leader(&self) -> Option<(NodeId, Member)> {
        let metrics = self.inner.raft.metrics().borrow().clone();
        let leader = metrics.current_leader?;
        let member = metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .cloned()?;
        Some((leader, member))
    }

    /// Whether this node leads now.
    pub fn is_leader(&self) -> bool {
        self.inner.raft.metrics().borrow().state == ServerState::Leader
    }

    /// The members' addresses, by id (voters and learners).
    pub fn members(&self) -> BTreeMap<NodeId, Member> {
        let metrics = self.inner.raft.metrics().borrow().clone();
        metrics
            .membership_config
            .membership()
            .nodes()
            .map(|(id, m)| (*id, m.clone()))
            .collect()
    }

    /// Whether this node's log holds any membership (it was initialized, or joined, before).
    pub async fn is_initialized(&self) -> bool {
        self.inner.raft.is_initialized().await.unwrap_or(false)
    }

    /// Makes this node a cluster of one (`--cluster-init`). A node that is a member already is left
    /// as it is.
    pub async fn initialize(&self) -> Result<(), ClusterError> {
        if self.is_initialized().await {
            return Ok(());
        }
        let members = BTreeMap::from([(self.id(), self.member().clone())]);
        match self.inner.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(ClusterError::Init(e.to_string())),
        }
    }

    /// Joins the cluster through the member at `seed` (`--join`), retrying until `within` passes. A
    /// node that is a voter already returns at once.
    pub async fn join(&self, seed: &str, within: Duration) -> Result<(), ClusterError> {
        let deadline = Instant::now() + within;
        let request = JoinRequest {
            node_id: self.id(),
            member: self.member().clone(),
        };
        loop {
            if self.is_voter() {
                return Ok(());
            }
            let answer: Result<Result<(), String>, _> = self
                .inner
                .client
                .call(seed, paths::JOIN, &request, Duration::from_secs(30))
                .await;
            let reason = match answer {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(refused)) => refused,
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(ClusterError::Join {
                    seed: seed.to_string(),
                    reason,
                });
            }
            tracing::info!(%seed, %reason, "join not taken yet; retrying");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn is_voter(&self) -> bool {
        let metrics = self.inner.raft.metrics().borrow().clone();
        metrics
            .membership_config
            .membership()
            .voter_ids()
            .any(|id| id == self.id())
    }

    /// Adds `request`'s node as a learner, then as a voter; on a node that does not lead, asks the
    /// leader to.
    pub(crate) async fn add_member(&self, request: JoinRequest) -> Result<(), String> {
        if !self.is_leader() {
            let (_, leader) = self.leader().ok_or("no leader is known yet")?;
            let answer: Result<(), String> = self
                .inner
                .client
                .call(
                    &leader.cluster_addr,
                    paths::JOIN,
                    &request,
                    Duration::from_secs(30),
                )
                .await
                .map_err(|e| e.to_string())?;
            return answer;
        }
        let raft = &self.inner.raft;
        raft.add_learner(request.node_id, request.member.clone(), true)
            .await
            .map_err(|e| format!("adding node {} as a learner: {e}", request.node_id))?;
        raft.change_membership(
            ChangeMembers::AddVoterIds(BTreeSet::from([request.node_id])),
            false,
        )
        .await
        .map_err(|e| format!("promoting node {} to voter: {e}", request.node_id))?;
        tracing::info!(node_id = request.node_id, cluster_addr = %request.member.cluster_addr, "node joined the cluster");
        Ok(())
    }

    /// Commits `command` and answers what `apply` decided. See the module doc.
    pub async fn propose(&self, command: Command) -> Result<Outcome, ClusterError> {
        let timeout = self.inner.config.propose_timeout;
        let deadline = Instant::now() + timeout;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(ClusterError::Unavailable { waited: timeout });
            }
            match self.try_propose(&command, remaining).await {
                Ok(outcome) => return Ok(outcome),
                Err(reason) => {
                    tracing::debug!(%reason, "proposal not committed yet; retrying");
                    tokio::time::sleep(Duration::from_millis(50).min(remaining)).await;
                }
            }
        }
    }

    /// One attempt: here if this node leads, else on the leader it names.
    async fn try_propose(&self, command: &Command, within: Duration) -> Result<Outcome, String> {
        let written = tokio::time::timeout(within, self.inner.raft.client_write(command.clone()))
            .await
            .map_err(|_| "no commit in time".to_string())?;
        let forward = match written {
            Ok(response) => return Ok(response.data),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => forward,
            Err(e) => return Err(e.to_string()),
        };
        let leader = forward
            .leader_node
            .ok_or_else(|| "no leader is known yet".to_string())?;
        let answer: Result<Outcome, String> = self
            .inner
            .client
            .call(&leader.cluster_addr, paths::PROPOSE, command, within)
            .await
            .map_err(|e| e.to_string())?;
        answer
    }

    /// Waits until this node has applied every entry the leader had committed when asked: a read
    /// after it sees every write acknowledged before the call began, on any node (read-your-writes
    /// across nodes). Past `within` (no quorum, no leader) it answers [`ClusterError::Unavailable`].
    pub async fn catch_up(&self, within: Duration) -> Result<(), ClusterError> {
        let unavailable = || ClusterError::Unavailable { waited: within };
        let deadline = Instant::now() + within;
        let index = tokio::time::timeout(within, self.read_index())
            .await
            .map_err(|_| unavailable())?
            .map_err(|reason| {
                tracing::debug!(%reason, "no read index from the leader");
                unavailable()
            })?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        self.inner
            .raft
            .wait(Some(remaining))
            .applied_index_at_least(index, "catching up with the leader")
            .await
            .map(|_| ())
            .map_err(|_| unavailable())
    }

    /// The leader's read index: asked here if this node leads, else of the leader it names.
    async fn read_index(&self) -> Result<Option<u64>, String> {
        let forward = match self.inner.raft.get_read_log_id().await {
            Ok((read, _)) => return Ok(read.map(|id| id.index)),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(forward))) => forward,
            Err(e) => return Err(e.to_string()),
        };
        let leader = forward
            .leader_node
            .ok_or_else(|| "no leader is known yet".to_string())?;
        let answer: Result<Option<u64>, String> = self
            .inner
            .client
            .call(
                &leader.cluster_addr,
                paths::READ_INDEX,
                &(),
                self.inner.config.propose_timeout,
            )
            .await
            .map_err(|e| e.to_string())?;
        answer
    }

    /// The read index on this node only (the leader's side of [`paths::READ_INDEX`]): never asked of
    /// another node, so the question travels at most one hop.
    pub(crate) async fn read_index_here(&self) -> Result<Option<u64>, String> {
        self.inner
            .raft
            .get_read_log_id()
            .await
            .map(|(read, _)| read.map(|id| id.index))
            .map_err(|e| e.to_string())
    }

    /// A client write on this node only (the leader's side of [`paths::PROPOSE`]): never forwarded
    /// again, so a proposal travels at most one hop.
    pub(crate) async fn write_here(&self, command: Command) -> Result<Outcome, String> {
        self.inner
            .raft
            .client_write(command)
            .await
            .map(|r| r.data)
            .map_err(|e| e.to_string())
    }

    /// Renews this node's lease every third of it, for as long as the node runs.
    async fn renew_leases(self) {
        let every = self.inner.config.lease / 3;
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // Until this node is a member, look again soon: its first lease is what lets it take
            // sandboxes, so it goes out as soon as the membership names it.
            while !self.members().contains_key(&self.id()) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let at_ms = now_ms();
            let command = Command::Lease {
                node: self.id(),
                member: self.member().clone(),
                capacity: *self
                    .inner
                    .capacity
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()),
                at_ms,
                until_ms: at_ms + self.inner.config.lease.as_millis() as i64,
            };
            if let Err(e) = self.propose(command).await {
                tracing::debug!(error = %e, "lease not renewed");
            }
        }
    }

    /// Stops the Raft node (the listener goes with the runtime).
    pub async fn shutdown(&self) {
        let _ = self.inner.raft.shutdown().await;
    }
}
