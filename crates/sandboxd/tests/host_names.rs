//! The host is not one daemon's alone. Two daemons on one host with their own data dirs, and a
//! daemon started again on a wiped data dir while the old one's sandboxes still run, each create and
//! delete 50 sandboxes without one failure, and without touching the other's sandboxes: host
//! interfaces are named after each daemon's id, and a network slot whose addresses the host already
//! holds is set aside, never attached a second time.

mod common;

use common::{e2e, id_of, kill_leftover_sandboxes, serve_port, Daemon, Setup, CGROUP_PARENT};
use futures::future::join_all;
use serde_json::{json, Value};
use std::net::Ipv4Addr;
use std::time::Duration;

/// The slot a sandbox's runtime state says it has.
fn slot_of(state_dir: &std::path::Path, id: &str) -> u32 {
    let state: Value =
        serde_json::from_slice(&std::fs::read(state_dir.join(id).join("state.json")).unwrap())
            .unwrap();
    state["spec"]["net_slot"].as_u64().expect("net_slot") as u32
}

/// The sandbox end of `slot` on the default subnet.
fn sandbox_address(slot: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 201, 0, 0)) + slot * 4 + 2)
}

/// `GET http://<address>:8000/` from the host answers the sandbox's listing.
async fn answers(address: Ipv4Addr) -> bool {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    match client.get(format!("http://{address}:8000/")).send().await {
        Ok(r) => r
            .text()
            .await
            .is_ok_and(|t| t.contains("Directory listing")),
        Err(_) => false,
    }
}

/// 50 creates and deletes, at most 10 sandboxes alive at a time; panics on any failure, and when a
/// sandbox is given one of the slots in `held` (another daemon's).
async fn churn(d: &Daemon, what: &str, held: &[u32]) {
    let body = json!({});
    for round in 0..5 {
        let created = join_all((0..10).map(|_| d.post_json("/v1/sandboxes", &body))).await;
        let mut ids = Vec::new();
        for resp in created {
            let status = resp.status();
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            assert_eq!(status, 201, "{what}, round {round}: {body}");
            ids.push(id_of(&body));
        }
        for id in &ids {
            let out = d.exec(id, &["true"]).await;
            assert_eq!(out.exit_code, 0, "{what}: {id} does not run");
            let slot = slot_of(&d.data_dir().join("runtime/sandboxes"), id);
            assert!(
                !held.contains(&slot),
                "{what}: {id} got slot {slot}, held by another daemon"
            );
        }
        for id in ids {
            let status = d.delete(&format!("/v1/sandboxes/{id}")).await.status();
            assert_eq!(status, 204, "{what}: delete {id}");
        }
    }
}

/// Invariant: two daemons given the same network slots on one host never attach one slot twice:
/// each churns 50 sandboxes without a failure, and a sandbox of the first keeps answering on its
/// address throughout.
#[test]
fn two_daemons_on_one_host_share_nothing() {
    e2e(|| async {
        let a = Daemon::start().await;
        let range = a.slot_range();
        let b = Daemon::start_setup(Setup {
            slots: Some((range.start, range.end - range.start)),
            ..Setup::default()
        })
        .await;
        let kept = a.create_id().await;
        serve_port(&a, &kept, 8000).await;
        let kept_slot = slot_of(&a.data_dir().join("runtime/sandboxes"), &kept);
        let b_first = b.create_id().await;
        let b_slot = slot_of(&b.data_dir().join("runtime/sandboxes"), &b_first);
        assert_ne!(
            b_slot, kept_slot,
            "the second daemon attached a slot the first holds"
        );
        assert_ne!(
            a.host_ifname(0),
            b.host_ifname(0),
            "the daemons' interface names meet"
        );
        assert!(answers(sandbox_address(kept_slot)).await);

        let (held_by_b, held_by_a) = ([b_slot], [kept_slot]);
        futures::join!(
            churn(&a, "first daemon", &held_by_b),
            churn(&b, "second daemon", &held_by_a)
        );
        assert!(
            answers(sandbox_address(kept_slot)).await,
            "the first daemon's sandbox stopped answering while the second churned"
        );
        assert_eq!(a.exec(&kept, &["true"]).await.exit_code, 0);
        assert_eq!(b.exec(&b_first, &["true"]).await.exit_code, 0);
    });
}

/// Invariant: a daemon started on a wiped data dir leaves the old daemon's still-running sandboxes
/// alone: it churns 50 sandboxes without a failure and the old sandboxes keep running and answering.
#[test]
fn a_daemon_on_a_wiped_data_dir_leaves_the_old_sandboxes_alone() {
    e2e(|| async {
        let mut d = Daemon::start().await;
        let old: Vec<String> = join_all((0..3).map(|_| d.create_id())).await;
        serve_port(&d, &old[0], 8000).await;
        let old_dir = d.data_dir().with_extension("wiped");
        let old_state = old_dir.join("runtime/sandboxes");
        let old_slot = slot_of(&d.data_dir().join("runtime/sandboxes"), &old[0]);
        let old_slots: Vec<u32> = old
            .iter()
            .map(|id| slot_of(&d.data_dir().join("runtime/sandboxes"), id))
            .collect();
        let old_ifname = d.host_ifname(old_slot);
        d.kill9();
        std::fs::rename(d.data_dir(), &old_dir).unwrap();
        d.restart().await;
        assert_ne!(
            d.host_ifname(old_slot),
            old_ifname,
            "a new data dir gets a new daemon id"
        );

        churn(&d, "daemon on the wiped data dir", &old_slots).await;
        assert!(
            std::path::Path::new(&format!("/sys/class/net/{old_ifname}")).exists(),
            "the old sandbox's interface was taken"
        );
        assert!(
            answers(sandbox_address(old_slot)).await,
            "the old daemon's sandbox stopped answering"
        );
        assert!(d.list_all().await.is_empty());
        kill_leftover_sandboxes(&old_state, CGROUP_PARENT);
        let _ = sandboxd_runtime::quota::release_pool(&old_dir.join("runtime"));
    });
}

/// A veth pair named `name` (its peer `peer`), as a sandbox of some daemon would leave it.
fn leave_interface(name: &str, peer: &str) {
    let ok = std::process::Command::new("ip")
        .args(["link", "add", name, "type", "veth", "peer", "name", peer])
        .status()
        .unwrap()
        .success();
    assert!(ok, "ip link add {name}");
}

fn interface_exists(name: &str) -> bool {
    std::path::Path::new(&format!("/sys/class/net/{name}")).exists()
}

/// At start a daemon removes the host interfaces of its own name that no sandbox of its own runs on,
/// and keeps those of its running sandboxes and every interface of another daemon's name.
#[test]
fn a_daemon_reclaims_its_own_orphan_interfaces_and_nothing_else() {
    e2e(|| async {
        let mut d = Daemon::start().await;
        let live = d.create_id().await;
        let live_slot = slot_of(&d.data_dir().join("runtime/sandboxes"), &live);
        let orphan_slot = d.slot_range().end - 1;
        assert_ne!(orphan_slot, live_slot);
        let (ours, foreign) = (d.host_ifname(orphan_slot), format!("sbhzzzz{orphan_slot}"));
        assert_ne!(ours, foreign, "this daemon's id is not zzzz");
        leave_interface(&ours, &format!("sbtp{}a", std::process::id() % 100_000));
        leave_interface(&foreign, &format!("sbtp{}b", std::process::id() % 100_000));
        d.restart().await;
        let kept_foreign = interface_exists(&foreign);
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &foreign])
            .status();
        assert!(!interface_exists(&ours), "{ours} outlived the restart");
        assert!(kept_foreign, "another daemon's {foreign} was taken");
        assert!(
            interface_exists(&d.host_ifname(live_slot)),
            "the live sandbox's interface went"
        );
        assert_eq!(d.exec(&live, &["true"]).await.exit_code, 0);
    });
}
