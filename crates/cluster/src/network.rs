//! The client side of node-to-node RPC: openraft's `RaftNetwork` over HTTP, authenticated with the
//! cluster secret.
//!
//! Every call is a `POST http://{cluster_addr}/cluster/…` with `Authorization: Bearer <secret>` and a
//! JSON body; the answer is the JSON of the callee's `Result` (see [`crate::rpc`]). A connection that
//! cannot be made is reported to openraft as `Unreachable` (it backs off), anything else as a network
//! error; both bounded by the RPC's own time limit.

use crate::state::{Member, NodeId};
use crate::TypeConfig;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// The RPC paths.
pub mod paths {
    /// openraft's AppendEntries.
    pub const APPEND: &str = "/cluster/raft/append";
    /// openraft's RequestVote.
    pub const VOTE: &str = "/cluster/raft/vote";
    /// openraft's InstallSnapshot.
    pub const SNAPSHOT: &str = "/cluster/raft/snapshot";
    /// A client write, forwarded to the leader.
    pub const PROPOSE: &str = "/cluster/propose";
    /// A node asking to join.
    pub const JOIN: &str = "/cluster/join";
    /// A follower asking the leader for its read index ([`crate::Cluster::catch_up`]).
    pub const READ_INDEX: &str = "/cluster/read-index";
}

/// An authenticated HTTP client for cluster peers.
#[derive(Clone)]
pub struct PeerClient {
    http: reqwest::Client,
    secret: Arc<str>,
}

/// Why a peer call failed.
#[derive(Debug)]
pub enum CallError {
    /// No connection could be made (or it timed out before an answer).
    Unreachable(reqwest::Error),
    /// The peer answered something else than the expected JSON.
    Network(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unreachable(e) => write!(f, "unreachable: {e}"),
            CallError::Network(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CallError {}

impl PeerClient {
    /// A client sending `secret`, its connections leaving from `local` when given (so firewall rules
    /// between members' addresses hold for them).
    pub fn new(secret: &str, local: Option<std::net::IpAddr>) -> Self {
        let http = reqwest::Client::builder()
            .local_address(local)
            .connect_timeout(Duration::from_secs(2))
            .pool_idle_timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            .build()
            .expect("a reqwest client without TLS always builds");
        Self {
            http,
            secret: secret.into(),
        }
    }

    /// `POST http://{addr}{path}` with `body`, bounded by `timeout`.
    pub async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        addr: &str,
        path: &str,
        body: &Req,
        timeout: Duration,
    ) -> Result<Resp, CallError> {
        let resp = self
            .http
            .post(format!("http://{addr}{path}"))
            .bearer_auth(&*self.secret)
            .timeout(timeout)
            .json(body)
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() || e.is_timeout() {
                    CallError::Unreachable(e)
                } else {
                    CallError::Network(e.to_string())
                }
            })?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            return Err(CallError::Network(format!("answered {status}: {text}")));
        }
        resp.json()
            .await
            .map_err(|e| CallError::Network(format!("an answer that does not parse: {e}")))
    }
}

/// Makes a [`Peer`] per target for openraft.
#[derive(Clone)]
pub struct Network {
    client: PeerClient,
}

impl Network {
    /// The factory over `client`.
    pub fn new(client: PeerClient) -> Self {
        Self { client }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> Peer {
        Peer {
            target,
            addr: node.cluster_addr.clone(),
            client: self.client.clone(),
        }
    }
}

/// The RPC connection to one member.
pub struct Peer {
    target: NodeId,
    addr: String,
    client: PeerClient,
}

impl Peer {
    async fn send<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, Member, E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let answer: Result<Resp, E> = self
            .client
            .call(&self.addr, path, req, option.hard_ttl())
            .await
            .map_err(|e| match e {
                CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
                other => RPCError::Network(NetworkError::new(&other)),
            })?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Member, RaftError<NodeId>>> {
        self.send(paths::APPEND, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Member, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.send(paths::SNAPSHOT, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Member, RaftError<NodeId>>> {
        self.send(paths::VOTE, &rpc, &option).await
    }
}
