//! The cluster's one error type. Each variant describes its own layer and chains the cause.

use crate::state::NodeId;
use std::path::PathBuf;
use std::time::Duration;

/// What went wrong in cluster mode.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No leader could commit the entry in time: no quorum (a partition, or too many nodes down), or
    /// an election still running. Worth retrying.
    #[error("the cluster could not commit within {}s (no quorum, or no leader yet)", waited.as_secs_f32())]
    Unavailable {
        /// How long the proposal waited.
        waited: Duration,
    },
    /// The cluster log could not be opened.
    #[error("opening the cluster log at {path}")]
    OpenLog {
        /// The log's file.
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    /// The state machine's snapshots could not be read.
    #[error("opening the cluster state machine")]
    OpenStateMachine(#[source] openraft::StorageError<NodeId>),
    /// The cluster listener could not be bound.
    #[error("listening for cluster peers on {addr}")]
    Listen {
        /// The address of `--cluster-listen`.
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// openraft refused the node's configuration or could not start it.
    #[error("starting the Raft node: {0}")]
    Start(String),
    /// Initializing the cluster failed.
    #[error("initializing the cluster: {0}")]
    Init(String),
    /// Joining through a member failed.
    #[error("joining the cluster through {seed}: {reason}")]
    Join {
        /// The address of `--join`.
        seed: String,
        /// What the member answered, or why it could not be reached.
        reason: String,
    },
    /// A member's RPC failed (unreachable, refused, or an answer that did not parse).
    #[error("cluster peer {addr}: {reason}")]
    Peer {
        /// The peer's cluster address.
        addr: String,
        /// What happened.
        reason: String,
    },
}
