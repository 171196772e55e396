//! The cluster as one node sees it (`GET /v1/cluster`, `sbx cluster status`).
//!
//! Members and roles come from openraft's membership, the leader and term from its metrics, health
//! and capacity from the leases in the replicated state, judged by this node's clock: `healthy` while
//! the lease holds, `stale` inside the grace after it, `unreachable` past the grace until the leader's
//! watchdog marks the node, `lost` once marked, `joining` before a first lease.

use crate::node::{now_ms, Cluster};
use crate::state::NodeId;
use sandboxd_api_types as api;
use std::collections::BTreeSet;

impl Cluster {
    /// The cluster as this node sees it.
    pub fn status(&self) -> api::ClusterStatus {
        let metrics = self.raft().metrics().borrow().clone();
        let membership = metrics.membership_config.membership().clone();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let now = now_ms();
        let grace = self.config().grace.as_millis() as i64;
        let (records, placements) = self.read(|s| {
            (
                s.nodes.clone(),
                s.placements.values().filter(|p| p.is_live()).count(),
            )
        });
        let members = membership
            .nodes()
            .map(|(id, member)| {
                let record = records.get(id);
                let health = match record {
                    None => "joining",
                    Some(r) if r.lost => "lost",
                    Some(r) if r.lease_until_ms >= now => "healthy",
                    Some(r) if r.lease_until_ms + grace >= now => "stale",
                    Some(_) => "unreachable",
                };
                let capacity = record.map(|r| r.capacity).unwrap_or_default();
                api::ClusterMember {
                    id: id.to_string(),
                    cluster_addr: member.cluster_addr.clone(),
                    api_addr: member.api_addr.clone(),
                    role: if voters.contains(id) {
                        "voter"
                    } else {
                        "learner"
                    }
                    .into(),
                    leader: metrics.current_leader == Some(*id),
                    health: health.into(),
                    cpu_millis_free: capacity.cpu_millis,
                    memory_mb_free: capacity.memory_mb,
                    disk_mb_free: capacity.disk_mb,
                    slots_free: capacity.slots,
                    epoch: record.map_or(0, |r| r.epoch),
                }
            })
            .collect();
        api::ClusterStatus {
            node_id: self.id().to_string(),
            leader_id: metrics.current_leader.map(|l| l.to_string()),
            term: metrics.current_term,
            applied_index: metrics.last_applied.map(|l| l.index),
            members,
            placements: placements as u64,
        }
    }
}
