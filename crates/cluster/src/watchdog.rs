//! The leader's watchdog: a node whose lease lapsed more than the grace ago is marked lost.
//!
//! Only the leader proposes marks, stamped with its own clock; [`crate::state::ClusterState::apply`]
//! checks the lapse again against that stamp, so a mark proposed by a leader that was deposed in
//! between, or for a node that renewed meanwhile, changes nothing. A node never marks itself.

use crate::node::{now_ms, Cluster};
use crate::state::Command;
use std::time::Duration;

/// Runs the watchdog of `cluster` for as long as the node runs.
pub async fn run(cluster: Cluster) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !cluster.is_leader() {
            continue;
        }
        let now = now_ms();
        let grace_ms = cluster.config().grace.as_millis() as i64;
        let lapsed: Vec<_> = cluster.read(|s| {
            s.nodes
                .iter()
                .filter(|(id, r)| {
                    **id != cluster.id() && !r.lost && r.lease_until_ms + grace_ms < now
                })
                .map(|(id, _)| *id)
                .collect()
        });
        for node in lapsed {
            tracing::warn!(
                node_id = node,
                "lease lapsed past the grace; marking the node lost"
            );
            let mark = Command::MarkLost {
                node,
                at_ms: now,
                grace_ms,
            };
            if let Err(e) = cluster.propose(mark).await {
                tracing::warn!(node_id = node, error = %e, "could not mark a node lost");
            }
        }
    }
}
