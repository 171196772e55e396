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
//! every node a candidate. A create that mounts volumes the log knows is placed on their node only
//! (volumes on two nodes: no candidate); a volume the log does not know leaves every node a
//! candidate (the node that takes it answers it is not found). [`volume_conflict`] says why a
//! create no node can take for its volumes is refused: they live on two nodes, or on one that is
//! down.

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
    /// The volumes it mounts (names or ids): only their node can take it.
    pub volumes: Vec<String>,
}

/// Why no node can take a create, when the volumes it mounts are the reason: the caller refuses it
/// (a conflict with the cluster's state, not a capacity the caller may wait for).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeConflict {
    /// The volume's node is lost or its lease has lapsed.
    #[error("volume {volume} lives on node {node}, which is not serving (lost, or its lease lapsed); a sandbox can mount it once that node is back")]
    NodeDown { volume: String, node: NodeId },
    /// Two of the volumes live on different nodes.
    #[error("volume {first} lives on node {first_node} and volume {second} on node {second_node}: one sandbox mounts volumes of one node only")]
    Split {
        first: String,
        first_node: NodeId,
        second: String,
        second_node: NodeId,
    },
}

/// The conflict that keeps every node from taking a create mounting `volumes` at `now_ms`, if any.
/// Volumes the log does not know are no conflict (the node that takes the create answers them).
pub fn volume_conflict(
    state: &ClusterState,
    volumes: &[String],
    now_ms: i64,
) -> Option<VolumeConflict> {
    let homes: Vec<(&String, NodeId)> = volumes
        .iter()
        .filter_map(|v| Some((v, state.volume_node(v)?)))
        .collect();
    let (first, first_node) = *homes.first()?;
    if let Some((second, second_node)) = homes.iter().find(|(_, n)| *n != first_node) {
        return Some(VolumeConflict::Split {
            first: first.clone(),
            first_node,
            second: (*second).clone(),
            second_node: *second_node,
        });
    }
    let serving = state
        .nodes
        .get(&first_node)
        .is_some_and(|r| !r.lost && r.lease_until_ms >= now_ms);
    (!serving).then(|| VolumeConflict::NodeDown {
        volume: first.clone(),
        node: first_node,
    })
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
    let volume_nodes: BTreeSet<NodeId> = need
        .volumes
        .iter()
        .filter_map(|v| state.volume_node(v))
        .collect();
    let candidates: Vec<(NodeId, Capacity)> = state
        .nodes
        .iter()
        .filter(|(id, _)| !exclude.contains(id))
        .filter(|(id, _)| homes.is_none_or(|h| h.contains(id)))
        .filter(|(id, _)| volume_nodes.iter().all(|n| n == *id))
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

    /// Three nodes; volume `data` (id `vol1`) lives on node 3, `other` (`vol2`) on node 1.
    fn three_nodes_with_volumes() -> ClusterState {
        let mut state = ClusterState::default();
        for id in 1..=3 {
            state.nodes.insert(id, node(10, 100, false));
        }
        let home = |name: &str, id: &str, node| crate::state::Command::VolumeHome {
            name: name.into(),
            id: id.into(),
            node,
            present: true,
        };
        state.apply(&home("data", "vol1", 3));
        state.apply(&home("other", "vol2", 1));
        state
    }

    #[test]
    fn volumes_on_two_nodes_or_on_a_node_down_are_a_conflict() {
        let mut state = three_nodes_with_volumes();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(volume_conflict(&state, &names(&["data", "vol1"]), 50), None);
        assert_eq!(volume_conflict(&state, &names(&["nope"]), 50), None);
        assert_eq!(volume_conflict(&state, &[], 50), None);
        assert_eq!(
            volume_conflict(&state, &names(&["nope", "data", "other"]), 50),
            Some(VolumeConflict::Split {
                first: "data".into(),
                first_node: 3,
                second: "other".into(),
                second_node: 1,
            })
        );
        state.nodes.get_mut(&3).unwrap().lost = true;
        let down = volume_conflict(&state, &names(&["data"]), 50).unwrap();
        assert_eq!(
            down,
            VolumeConflict::NodeDown {
                volume: "data".into(),
                node: 3
            }
        );
        assert!(down.to_string().contains("node 3"), "{down}");
        // A lapsed lease is down too, before anyone marks the node lost.
        assert_eq!(volume_conflict(&state, &names(&["other"]), 50), None);
        assert!(volume_conflict(&state, &names(&["other"]), 101).is_some());
    }

    #[test]
    fn a_create_mounting_a_known_volume_goes_to_its_node() {
        let state = three_nodes_with_volumes();
        let mounting = |volumes: &[&str]| Need {
            volumes: volumes.iter().map(|v| v.to_string()).collect(),
            ..Default::default()
        };
        for _ in 0..50 {
            assert_eq!(
                choose(&state, &mounting(&["data"]), 50, &BTreeSet::new()),
                Some(3)
            );
            assert_eq!(
                choose(&state, &mounting(&["vol1"]), 50, &BTreeSet::new()),
                Some(3)
            );
        }
        // Volumes on two nodes: no node can take it; an unknown one leaves every node.
        assert_eq!(
            choose(&state, &mounting(&["data", "other"]), 50, &BTreeSet::new()),
            None
        );
        let chosen: BTreeSet<_> = (0..200)
            .filter_map(|_| choose(&state, &mounting(&["nope"]), 50, &BTreeSet::new()))
            .collect();
        assert_eq!(chosen, BTreeSet::from([1, 2, 3]));
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
