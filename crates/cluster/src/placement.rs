//! Which node takes a new sandbox: the power of two choices over the capacity leases.
//!
//! Candidates are the nodes whose lease holds at `now_ms`, that are not marked lost, and whose last
//! reported capacity fits the request (CPU, memory, disk and a free network slot). Two of them are
//! drawn at random and the one with more room (free slots, then memory) wins: nearly as even as
//! asking every node, without every create herding onto the one that looked emptiest at the last
//! lease. With no candidate, `None`: the caller creates locally and lets its own limits answer.
//!
//! A create of a template the log knows homes for ([`ClusterState::templates`]) is placed among
//! those homes only: a template's layers are in its node's own image store. A template the log
//! knows nothing of (`base`, an image reference pulled where it runs, a name no node has) leaves
//! every node a candidate.

use crate::state::{Capacity, ClusterState, NodeId};
use rand::seq::IndexedRandom;
use std::collections::BTreeSet;

/// What a create needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Need {
    /// The template it is made from, if the request names one.
    pub template: Option<String>,
    /// CPU in thousandths.
    pub cpu_millis: u64,
    /// Memory, MiB.
    pub memory_mb: u64,
    /// Disk, MiB (0: no limit asked).
    pub disk_mb: u64,
}

fn fits(capacity: &Capacity, need: &Need) -> bool {
    capacity.slots > 0
        && capacity.cpu_millis >= need.cpu_millis
        && capacity.memory_mb >= need.memory_mb
        && capacity.disk_mb >= need.disk_mb
}

/// The node to place a sandbox needing `need` on, leaving out `exclude` (nodes a caller found
/// unreachable). See the module doc.
pub fn choose(
    state: &ClusterState,
    need: &Need,
    now_ms: i64,
    exclude: &BTreeSet<NodeId>,
) -> Option<NodeId> {
    let homes = need.template.as_ref().and_then(|t| state.templates.get(t));
    let candidates: Vec<(NodeId, Capacity)> = state
        .nodes
        .iter()
        .filter(|(id, _)| !exclude.contains(id))
        .filter(|(id, _)| homes.is_none_or(|h| h.contains(id)))
        .filter(|(_, r)| !r.lost && r.lease_until_ms >= now_ms && fits(&r.capacity, need))
        .map(|(id, r)| (*id, r.capacity))
        .collect();
    let mut rng = rand::rng();
    let drawn: Vec<_> = candidates.choose_multiple(&mut rng, 2).collect();
    drawn
        .into_iter()
        .max_by_key(|(_, c)| (c.slots, c.memory_mb))
        .map(|(id, _)| *id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::NodeRecord;

    fn node(slots: u64, lease_until_ms: i64, lost: bool) -> NodeRecord {
        NodeRecord {
            capacity: Capacity {
                cpu_millis: 4000,
                memory_mb: 8192,
                disk_mb: 10_000,
                slots,
            },
            lease_until_ms,
            lost,
            ..Default::default()
        }
    }

    #[test]
    fn only_leased_unlost_nodes_with_room_are_chosen() {
        let mut state = ClusterState::default();
        state.nodes.insert(1, node(10, 100, false));
        state.nodes.insert(2, node(10, 10, false)); // lease lapsed
        state.nodes.insert(3, node(10, 100, true)); // lost
        state.nodes.insert(4, node(0, 100, false)); // full
        for _ in 0..50 {
            assert_eq!(
                choose(&state, &Need::default(), 50, &BTreeSet::new()),
                Some(1)
            );
        }
        let big = Need {
            memory_mb: 1 << 20,
            ..Default::default()
        };
        assert_eq!(choose(&state, &big, 50, &BTreeSet::new()), None);
        assert_eq!(
            choose(&state, &Need::default(), 50, &BTreeSet::from([1])),
            None
        );
    }

    #[test]
    fn a_known_template_is_placed_only_where_it_is_ready() {
        let mut state = ClusterState::default();
        for id in 1..=3 {
            state.nodes.insert(id, node(10, 100, false));
        }
        state.templates.insert("py".into(), BTreeSet::from([2]));
        let py = Need {
            template: Some("py".into()),
            ..Default::default()
        };
        for _ in 0..50 {
            assert_eq!(choose(&state, &py, 50, &BTreeSet::new()), Some(2));
        }
        assert_eq!(choose(&state, &py, 50, &BTreeSet::from([2])), None);
        let unknown = Need {
            template: Some("base".into()),
            ..Default::default()
        };
        let chosen: BTreeSet<_> = (0..200)
            .filter_map(|_| choose(&state, &unknown, 50, &BTreeSet::new()))
            .collect();
        assert_eq!(chosen, BTreeSet::from([1, 2, 3]), "any node");
    }

    #[test]
    fn of_two_drawn_the_emptier_wins() {
        let mut state = ClusterState::default();
        state.nodes.insert(1, node(1, 100, false));
        state.nodes.insert(2, node(50, 100, false));
        // With two candidates both are always drawn.
        for _ in 0..50 {
            assert_eq!(
                choose(&state, &Need::default(), 50, &BTreeSet::new()),
                Some(2)
            );
        }
    }
}
