//! The state machine's unit tests: every entry applied, then the invariants checked.

use super::*;

fn lease(node: NodeId, at_ms: i64) -> Command {
    Command::Lease {
        node,
        member: Member::default(),
        capacity: Capacity::default(),
        at_ms,
        until_ms: at_ms + 3000,
    }
}

fn reserve(id: &str, owner: NodeId, name: &str, at_ms: i64) -> Command {
    Command::Reserve {
        id: id.into(),
        owner,
        name: name.into(),
        token_digest: token_digest(&format!("token of {id}")),
        summary: SandboxSummary::default(),
        at_ms,
    }
}

fn apply_all(state: &mut ClusterState, commands: &[Command]) -> Vec<Outcome> {
    commands
        .iter()
        .map(|c| {
            let outcome = state.apply(c);
            state.check_invariants().unwrap();
            outcome
        })
        .collect()
}

#[test]
fn first_committed_name_claim_wins_and_the_loser_learns_the_holder() {
    let mut state = ClusterState::default();
    let outcomes = apply_all(
        &mut state,
        &[
            lease(1, 0),
            lease(2, 0),
            reserve("a", 1, "web", 10),
            reserve("b", 2, "web", 11),
            reserve("c", 2, "", 12),
            reserve("d", 1, "", 13),
        ],
    );
    assert_eq!(outcomes[2], Outcome::Applied);
    assert_eq!(outcomes[3], Outcome::NameTaken { holder: "a".into() });
    // Unnamed sandboxes never conflict.
    assert_eq!(&outcomes[4..], &[Outcome::Applied, Outcome::Applied]);
    assert_eq!(state.holder_of_name("web"), Some("a"));
    assert!(!state.placements.contains_key("b"));
}

#[test]
fn a_released_name_can_be_claimed_again() {
    let mut state = ClusterState::default();
    let outcomes = apply_all(
        &mut state,
        &[
            lease(1, 0),
            reserve("a", 1, "web", 10),
            Command::Release { id: "a".into() },
            reserve("b", 1, "web", 20),
            Command::Release { id: "a".into() },
        ],
    );
    assert_eq!(outcomes[3], Outcome::Applied);
    assert_eq!(outcomes[4], Outcome::Unchanged);
    assert_eq!(state.holder_of_name("web"), Some("b"));
}

#[test]
fn an_access_token_routes_to_its_live_sandbox_only() {
    let mut state = ClusterState::default();
    apply_all(
        &mut state,
        &[
            lease(1, 0),
            reserve("a", 1, "", 10),
            reserve("b", 1, "", 11),
        ],
    );
    let of = |id: &str| token_digest(&format!("token of {id}"));
    assert_eq!(state.holder_of_token(&of("a")), Some("a"));
    assert_eq!(state.holder_of_token(&of("b")), Some("b"));
    assert_eq!(state.holder_of_token(&of("c")), None);
    // A placement reserved without a token is never found by the empty digest.
    apply_all(
        &mut state,
        &[Command::Reserve {
            id: "d".into(),
            owner: 1,
            name: String::new(),
            token_digest: String::new(),
            summary: SandboxSummary::default(),
            at_ms: 12,
        }],
    );
    assert_eq!(state.holder_of_token(""), None);
    apply_all(&mut state, &[Command::Release { id: "a".into() }]);
    assert_eq!(state.holder_of_token(&of("a")), None, "released");
    apply_all(
        &mut state,
        &[Command::MarkLost {
            node: 1,
            at_ms: 10_000,
            grace_ms: 0,
        }],
    );
    assert_eq!(state.holder_of_token(&of("b")), None, "lost");
    // The token itself is never in the state.
    let json = serde_json::to_string(&state).unwrap();
    assert!(!json.contains("token of"), "{json}");
}

#[test]
fn duplicate_fingerprints_inside_the_window_go_to_the_first_node() {
    let mut state = ClusterState::default();
    let route = |owner, at_ms| Command::RouteFingerprint {
        fingerprint: "fp".into(),
        owner,
        replay_ms: 100,
        at_ms,
    };
    let outcomes = apply_all(
        &mut state,
        &[
            lease(1, 0),
            lease(2, 0),
            route(1, 10),
            route(2, 50),
            route(2, 200),
            Command::MarkLost {
                node: 2,
                at_ms: 10_000,
                grace_ms: 0,
            },
            route(1, 10_001),
            route(2, 10_002),
        ],
    );
    assert_eq!(outcomes[2], Outcome::Routed { owner: 1 });
    assert_eq!(
        outcomes[3],
        Outcome::Routed { owner: 1 },
        "inside the window"
    );
    assert_eq!(outcomes[4], Outcome::Routed { owner: 2 }, "past the window");
    // A lost node's holds go with it.
    assert_eq!(outcomes[6], Outcome::Routed { owner: 1 });
    assert_eq!(outcomes[7], Outcome::Routed { owner: 1 });
}

#[test]
fn hostname_binds_to_one_live_sandbox() {
    let mut state = ClusterState::default();
    let bind = |h: &str, id: &str| Command::BindHostname {
        hostname: h.into(),
        id: id.into(),
    };
    let outcomes = apply_all(
        &mut state,
        &[
            lease(1, 0),
            reserve("a", 1, "", 1),
            reserve("b", 1, "", 2),
            bind("app.example.com", "a"),
            bind("app.example.com", "b"),
            bind("app.example.com", "a"),
            bind("x.example.com", "gone"),
            Command::Release { id: "a".into() },
            bind("app.example.com", "b"),
        ],
    );
    assert_eq!(outcomes[3], Outcome::Applied);
    assert_eq!(outcomes[4], Outcome::HostnameTaken { holder: "a".into() });
    assert_eq!(outcomes[5], Outcome::Unchanged);
    assert_eq!(outcomes[6], Outcome::UnknownSandbox);
    assert_eq!(outcomes[8], Outcome::Applied);
}

#[test]
fn a_lost_node_releases_its_names_and_takes_no_placement_until_recovered() {
    let mut state = ClusterState::default();
    let lost = |at_ms| Command::MarkLost {
        node: 2,
        at_ms,
        grace_ms: 1000,
    };
    let outcomes = apply_all(
        &mut state,
        &[
            lease(1, 0),
            lease(2, 0),
            reserve("a", 2, "web", 10),
            Command::Commit { id: "a".into() },
            // Lease until 3000, grace 1000: not lost at 3500.
            lost(3500),
            lost(4001),
            reserve("b", 1, "web", 4002),
            reserve("c", 2, "", 4003),
            Command::Recovered { node: 2, epoch: 0 },
            Command::Recovered { node: 2, epoch: 1 },
            reserve("c", 2, "", 4004),
        ],
    );
    assert_eq!(outcomes[4], Outcome::Unchanged);
    assert_eq!(outcomes[5], Outcome::Applied);
    assert_eq!(
        outcomes[6],
        Outcome::Applied,
        "the lost node's name is free"
    );
    assert_eq!(outcomes[7], Outcome::OwnerUnavailable);
    assert_eq!(
        outcomes[8],
        Outcome::Unchanged,
        "a stale epoch clears nothing"
    );
    assert_eq!(outcomes[9], Outcome::Applied);
    assert_eq!(outcomes[10], Outcome::Applied);
    assert!(!state.placements.contains_key("a"));
}

#[test]
fn a_lost_sandbox_is_found_by_id_and_by_its_last_name_until_recovered() {
    let mut state = ClusterState::default();
    let lost = Command::MarkLost {
        node: 2,
        at_ms: 10_000,
        grace_ms: 0,
    };
    apply_all(
        &mut state,
        &[
            lease(1, 0),
            lease(2, 0),
            reserve("a", 2, "web", 10),
            reserve("z", 1, "", 11),
        ],
    );
    assert!(state.lost_sandbox("a").is_none(), "live");
    assert!(state.lost_sandbox("web").is_none(), "live");
    apply_all(&mut state, &[lost, reserve("b", 1, "web", 10_001)]);
    assert_eq!(state.lost_sandbox("a").map(|(id, _)| id), Some("a"));
    assert_eq!(state.lost_sandbox("web").map(|(id, _)| id), Some("a"));
    assert_eq!(state.holder_of_name("web"), Some("b"), "the name is free");
    assert!(state.lost_sandbox("z").is_none(), "on a live node");
    assert!(state.lost_sandbox("nothing").is_none());
    apply_all(&mut state, &[Command::Recovered { node: 2, epoch: 1 }]);
    assert!(state.lost_sandbox("a").is_none(), "recovered: destroyed");
}

#[test]
fn a_key_is_in_force_from_its_entry_until_its_revoke() {
    let mut state = ClusterState::default();
    let key = KeyRecord {
        name: "ci".into(),
        scope: "user".into(),
        digest: "d1".into(),
        prefix: "e2b_123456".into(),
        created_at_ms: 5,
    };
    let put = Command::PutKey {
        id: "k1".into(),
        key: key.clone(),
    };
    let revoke = Command::RevokeKey { id: "k1".into() };
    assert_eq!(
        apply_all(&mut state, &[put.clone(), put]),
        [Outcome::Applied, Outcome::Unchanged]
    );
    assert_eq!(state.key_by_digest("d1"), Some(("k1", &key)));
    assert_eq!(state.key_by_digest("d2"), None);
    assert_eq!(
        apply_all(&mut state, &[revoke.clone(), revoke]),
        [Outcome::Applied, Outcome::Unchanged]
    );
    assert_eq!(state.key_by_digest("d1"), None);
}

#[test]
fn a_template_is_at_home_where_it_was_built() {
    let mut state = ClusterState::default();
    let home = |node, present| Command::TemplateHome {
        name: "py".into(),
        node,
        present,
    };
    let outcomes = apply_all(
        &mut state,
        &[home(1, true), home(1, true), home(2, true), home(1, false)],
    );
    assert_eq!(
        outcomes,
        [
            Outcome::Applied,
            Outcome::Unchanged,
            Outcome::Applied,
            Outcome::Applied
        ]
    );
    assert_eq!(state.templates["py"], BTreeSet::from([2]));
    apply_all(&mut state, &[home(2, false)]);
    assert!(state.templates.is_empty(), "no empty entries stay");
    assert_eq!(
        apply_all(&mut state, &[home(3, false)]),
        [Outcome::Unchanged]
    );
}

#[test]
fn replicas_applying_one_log_agree() {
    let log = [
        lease(1, 0),
        lease(2, 0),
        reserve("a", 1, "x", 1),
        reserve("b", 2, "x", 2),
        Command::BindHostname {
            hostname: "h".into(),
            id: "a".into(),
        },
        Command::MarkLost {
            node: 1,
            at_ms: 10_000,
            grace_ms: 1,
        },
        reserve("b", 2, "x", 10_001),
    ];
    let (mut one, mut two) = (ClusterState::default(), ClusterState::default());
    apply_all(&mut one, &log);
    apply_all(&mut two, &log);
    assert_eq!(one, two);
    let copy: ClusterState = serde_json::from_str(&serde_json::to_string(&one).unwrap()).unwrap();
    assert_eq!(copy, one);
}

/// Invariant: a volume name is one volume's cluster-wide, at home on one node; a repeat of the same
/// claim changes nothing, another volume's claim of the name is refused, and only the holder's
/// release frees it.
#[test]
fn a_volume_name_is_one_volumes_and_it_lives_on_one_node() {
    let home = |id: &str, node, present| Command::VolumeHome {
        name: "data".into(),
        id: id.into(),
        node,
        present,
    };
    let mut state = ClusterState::default();
    assert_eq!(state.apply(&home("v1", 1, true)), Outcome::Applied);
    assert_eq!(state.apply(&home("v1", 1, true)), Outcome::Unchanged);
    assert_eq!(
        state.apply(&home("v2", 2, true)),
        Outcome::NameTaken {
            holder: "v1".into()
        }
    );
    assert_eq!(state.volume_node("data"), Some(1));
    assert_eq!(state.volume_node("v1"), Some(1));
    assert_eq!(state.volume_node("v2"), None);
    assert_eq!(state.apply(&home("v2", 2, false)), Outcome::Unchanged);
    assert_eq!(state.volume_node("data"), Some(1));
    assert_eq!(state.apply(&home("v1", 1, false)), Outcome::Applied);
    assert_eq!(state.apply(&home("v2", 2, true)), Outcome::Applied);
    assert_eq!(state.volume_node("data"), Some(2));
}
