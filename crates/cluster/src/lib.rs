//! Cluster mode: several sandboxd hosts as one, on openraft embedded in the daemon.
//!
//! What is replicated is only what must be cluster-wide ([`state`]): node leases with their capacity,
//! placements (sandbox id → owner), the name index, the custom-hostname index, E2B create fingerprints
//! with their replay window, and lost marks with epochs. Everything else stays in each node's own
//! single-writer store. Uniqueness is decided inside [`state::ClusterState::apply`], by log order.
//!
//! The pieces, as openraft's examples split them:
//! - [`state`]: the state and its deterministic `apply`;
//! - [`log_store`]: the durable log (SQLite, fsync before acknowledging);
//! - [`state_machine`]: openraft's state machine and snapshots over the state;
//! - [`network`]: the client side of node-to-node RPC; [`rpc`] its server, both authenticated with the
//!   cluster secret;
//! - [`node`]: one running member ([`Cluster`]): start, init, join, proposals; [`status`] its view;
//! - [`placement`]: which node takes a new sandbox (power of two choices over capacity leases);
//! - [`watchdog`]: the leader marks nodes whose lease lapsed as lost.
//!
//! openraft is pinned to its stable 0.9 line with `storage-v2` (log store and state machine as separate
//! traits), the line its storage test suite and examples are written against.

// openraft's traits fix `StorageError` (over 200 bytes) as the storage error type; boxing it is not ours
// to choose.
#![allow(clippy::result_large_err)]

pub mod error;
pub mod log_store;
pub mod network;
pub mod node;
pub mod placement;
pub mod rpc;
pub mod state;
pub mod state_machine;
pub mod status;
pub mod watchdog;

pub use error::ClusterError;
pub use node::{Cluster, ClusterConfig};
pub use state::{
    Capacity, ClusterState, Command, KeyRecord, Member, NodeId, Outcome, SandboxSummary,
};

openraft::declare_raft_types!(
    /// The Raft types of the cluster's log.
    pub TypeConfig:
        D = Command,
        R = Outcome,
        NodeId = NodeId,
        Node = Member,
        SnapshotData = std::io::Cursor<Vec<u8>>,
);

/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// The Raft instance of a node.
pub type Raft = openraft::Raft<TypeConfig>;
