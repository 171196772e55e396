//! Cluster mode under failure, with real `sandboxd` processes in a network namespace of the test's own
//! (`cluster_support`): kill -9 of the leader during a create storm, a node lost and returning, and a
//! partition of five nodes.
//! After each, the history checker runs over every acknowledged create.

mod cluster_support;
mod common;

use cluster_support::{cluster_test, ip_of, History, TestCluster};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(420);

/// One create `{name}` at `url` (a node's `/v1/sandboxes`): the status, and the id when 201.
async fn create(http: reqwest::Client, url: String, name: String) -> (u16, Option<String>, String) {
    match http
        .post(&url)
        .json(&json!({"name": name, "timeoutSec": 900}))
        .timeout(Duration::from_secs(30))
        .send()
        .await
    {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            if status >= 500 {
                eprintln!("create {name} at {url}: {status} {body}");
            }
            (status, body["id"].as_str().map(str::to_string), name)
        }
        Err(_) => (0, None, name),
    }
}

/// Runs every node's reconcilers once.
async fn reconcile_everywhere(c: &TestCluster, nodes: &[usize]) {
    for &i in nodes {
        let d = c.node(i);
        let resp = d
            .http()
            .post(d.endpoint("/v1/admin/reconcile"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "reconcile on node {i}");
    }
}

/// How many live placements node `i`'s log holds.
async fn placements(c: &TestCluster, i: usize) -> u64 {
    c.status(i).await.expect("status")["placements"]
        .as_u64()
        .unwrap()
}

/// Waits until, on every one of `nodes`, the log's live placements are exactly the live sandboxes
/// the nodes' stores hold (a `failed` or `lost` row holds no name, and no placement): nothing
/// half-reserved is left.
async fn await_log_matches_stores(c: &TestCluster, nodes: &[usize]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        reconcile_everywhere(c, nodes).await;
        let mut rows = 0;
        for &i in nodes {
            let local = c.local_rows(i).await.expect("list");
            rows += local
                .values()
                .filter(|(_, state)| state != "failed" && state != "lost")
                .count() as u64;
        }
        let mut agree = true;
        for &i in nodes {
            agree &= placements(c, i).await == rows;
        }
        if agree {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the log's placements never matched the {rows} sandboxes the stores hold"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// kill -9 of the leader in a create storm: a new leader is elected within a few seconds, no
/// acknowledged create is lost, no name is held twice, nothing stays half-reserved once the
/// reconcilers ran, and the old leader rejoins and converges.
#[test]
fn killing_the_leader_in_a_create_storm_loses_no_acknowledged_create() {
    cluster_test(LIMIT, || async {
        // A grace far past the restart: the old leader comes back before anyone marks it lost.
        let mut c = TestCluster::start(
            3,
            &[
                "--cluster-grace-ms",
                "60000",
                "--reconcile-deadline-secs",
                "3",
            ],
        )
        .await;
        let leader = c.leader(0).await.expect("a leader");
        let survivors: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
        let targets: Vec<(reqwest::Client, String)> = (0..3)
            .map(|i| {
                (
                    c.node(i).http().clone(),
                    c.node(i).endpoint("/v1/sandboxes"),
                )
            })
            .collect();
        // 60 creates over all three nodes, names repeating (each name twice), the leader killed
        // after the first third are sent.
        let mut storm = Vec::new();
        for k in 0..60 {
            let (http, url) = targets[k % 3].clone();
            storm.push(tokio::spawn(create(http, url, format!("storm-{}", k % 30))));
            if k == 20 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                c.nodes[leader].kill9();
            }
        }
        let killed_at = Instant::now();
        // A new leader among the survivors within a few seconds.
        let elected = loop {
            if let Some(l) = c.leader(survivors[0]).await {
                if l != leader {
                    break killed_at.elapsed();
                }
            }
            assert!(
                killed_at.elapsed() < Duration::from_secs(10),
                "no new leader"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        eprintln!("new leader after {elected:?}");
        assert!(
            elected < Duration::from_secs(5),
            "new leader after {elected:?}"
        );
        let mut history = History::default();
        let mut outcomes = std::collections::BTreeMap::<u16, usize>::new();
        for task in storm {
            let (status, id, name) = task.await.unwrap();
            *outcomes.entry(status).or_default() += 1;
            if let (201, Some(id)) = (status, id) {
                history.created(&id, &name);
            }
        }
        // How many of the storm's creates got through depends on when the kill fell; what matters is
        // that none acknowledged is lost (the checker below).
        eprintln!("storm outcomes: {outcomes:?}");
        // The survivors go on: every create through them succeeds (a placement on the dead node is
        // offered to the next choice).
        for k in 0..10 {
            let (http, url) = targets[survivors[k % 2]].clone();
            let (status, id, name) = create(http, url, format!("after-the-kill-{k}")).await;
            assert_eq!(status, 201, "create {k} through a survivor after the kill");
            history.created(&id.unwrap(), &name);
        }
        // The old leader rejoins and converges.
        c.nodes[leader].restart().await;
        c.wait_healthy(&[0, 1, 2], 3).await;
        await_log_matches_stores(&c, &[0, 1, 2]).await;
        history.check(&c, &[0, 1, 2]).await;
    });
}

/// A node whose lease lapses past the grace is marked lost: through every other node its sandbox
/// shows as `lost` (and the E2B surface answers not found), a create mounting its volume is a 409
/// naming it, its name and hostname are free at once;
/// when it returns it learns that from the log and destroys the sandbox, and the log lets it go.
#[test]
fn a_lost_nodes_sandboxes_show_as_lost_free_their_names_and_are_destroyed_when_it_returns() {
    cluster_test(LIMIT, || async {
        let mut c = TestCluster::start(
            3,
            &[
                "--cluster-lease-ms",
                "1500",
                "--cluster-grace-ms",
                "2000",
                "--reconcile-deadline-secs",
                "3",
            ],
        )
        .await;
        let leader = c.leader(0).await.expect("a leader");
        let victim = (0..3).find(|i| *i != leader).unwrap();
        let survivor = (0..3).find(|i| *i != victim).unwrap();
        let mut history = History::default();
        // Creates through the victim until one is placed on it.
        let mut doomed = None;
        for k in 0..30 {
            let name = format!("doomed-{k}");
            let s = c.node(victim).create(json!({"name": name})).await;
            let id = s["id"].as_str().unwrap().to_string();
            if c.local_sandboxes(victim).await.unwrap().contains_key(&id) {
                doomed = Some((id, name));
                break;
            }
            history.created(&id, &name);
        }
        let (id, name) = doomed.expect("a create placed on the victim");
        let volume = c
            .node(victim)
            .post_json("/v1/volumes", &json!({"name": "on-the-victim"}))
            .await;
        assert_eq!(volume.status(), 201);
        let victim_id = c.status(victim).await.expect("the victim's status")["nodeId"]
            .as_str()
            .unwrap()
            .to_string();
        let hostname = "doomed.cluster.test";
        common::serve_port(c.node(survivor), &id, 8000).await;
        let bound = c
            .node(survivor)
            .post_json(
                &format!("/v1/sandboxes/{id}/domains"),
                &json!({"hostname": hostname, "port": 8000}),
            )
            .await;
        assert_eq!(bound.status(), 201, "{}", bound.text().await.unwrap());
        c.nodes[victim].kill9();
        // Through the survivor, it becomes `lost`, by id and by name.
        let deadline = Instant::now() + Duration::from_secs(30);
        let seen = loop {
            let got = c
                .node(survivor)
                .get_json(&format!("/v1/sandboxes/{id}"))
                .await;
            if got["state"] == "lost" {
                break got;
            }
            assert!(Instant::now() < deadline, "never shown lost: {got}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(seen["name"], name.as_str());
        assert!(
            seen["failureReason"]
                .as_str()
                .unwrap()
                .contains("marked lost"),
            "{seen}"
        );
        let by_name = c
            .node(survivor)
            .get_json(&format!("/v1/sandboxes/{name}"))
            .await;
        assert_eq!(by_name["id"], id.as_str(), "{by_name}");
        assert_eq!(by_name["state"], "lost");
        // The merged list shows it, as its query filters it.
        let listed_state = |list: Value| {
            list["sandboxes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["id"] == id.as_str())
                .map(|s| s["state"].clone())
        };
        let all = c.node(survivor).get_json("/v1/sandboxes").await;
        assert_eq!(listed_state(all), Some(json!("lost")), "listed as lost");
        let running = c
            .node(survivor)
            .get_json("/v1/sandboxes?state=running")
            .await;
        assert_eq!(
            listed_state(running),
            None,
            "not when the query asks for running"
        );
        let e2b = c
            .node(survivor)
            .http()
            .get(c.node(survivor).endpoint(&format!("/sandboxes/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(e2b.status(), 404, "E2B has no lost state: not found");
        let text = e2b.text().await.unwrap();
        assert!(text.contains("lost"), "the message says why: {text}");
        // A create mounting a volume of the lost node is a conflict that names it, and makes nothing.
        let mounting = c
            .node(survivor)
            .post_json(
                "/v1/sandboxes",
                &json!({"volumes": [{"name": "on-the-victim", "path": "/data"}]}),
            )
            .await;
        assert_eq!(mounting.status(), 409);
        let refusal: Value = mounting.json().await.unwrap();
        assert_eq!(refusal["code"], "volume_unavailable", "{refusal}");
        assert!(
            refusal["message"]
                .as_str()
                .unwrap()
                .contains(&format!("on-the-victim lives on node {victim_id}")),
            "{refusal}"
        );
        // Its name and hostname are free at once.
        let heir = c.node(survivor).create(json!({"name": name})).await;
        let heir_id = heir["id"].as_str().unwrap().to_string();
        history.created(&heir_id, &name);
        common::serve_port(c.node(survivor), &heir_id, 8000).await;
        let rebound = c
            .node(survivor)
            .post_json(
                &format!("/v1/sandboxes/{heir_id}/domains"),
                &json!({"hostname": hostname, "port": 8000}),
            )
            .await;
        assert_eq!(rebound.status(), 201, "{}", rebound.text().await.unwrap());
        // The node returns, learns it was lost, destroys the sandbox; the log lets it go.
        c.nodes[victim].restart().await;
        c.wait_healthy(&[0, 1, 2], 3).await;
        await_log_matches_stores(&c, &[0, 1, 2]).await;
        let gone = c
            .node(survivor)
            .http()
            .get(c.node(survivor).endpoint(&format!("/v1/sandboxes/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(gone.status(), 404, "destroyed once its node returned");
        let by_name = c
            .node(victim)
            .get_json(&format!("/v1/sandboxes/{name}"))
            .await;
        assert_eq!(by_name["id"], heir_id.as_str(), "the name stays the heir's");
        history.lost(&id);
        history.check(&c, &[0, 1, 2]).await;
    });
}

/// A partitioned minority (2 of 5) answers 503 and creates nothing, the majority goes on, and after
/// healing every node has one history.
#[test]
fn a_partitioned_minority_creates_nothing_and_the_majority_goes_on() {
    cluster_test(LIMIT, || async {
        let c = TestCluster::start(
            5,
            &[
                "--cluster-grace-ms",
                "120000",
                "--cluster-write-timeout-ms",
                "2000",
                "--cluster-lease-ms",
                "1500",
                "--reconcile-deadline-secs",
                "3",
            ],
        )
        .await;
        let mut history = History::default();
        for i in 0..5 {
            let s = c
                .node(i)
                .create(json!({"name": format!("before-{i}")}))
                .await;
            history.created(s["id"].as_str().unwrap(), &format!("before-{i}"));
        }
        let (minority, majority) = ([0usize, 1], [2usize, 3, 4]);
        let before: Vec<_> = {
            let mut v = Vec::new();
            for i in minority {
                v.push(c.local_sandboxes(i).await.unwrap());
            }
            v
        };
        c.net.partition(&minority.map(ip_of), &majority.map(ip_of));
        // The majority sees the minority's leases lapse, and has a leader of its own.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = c.status(2).await.expect("the majority answers");
            let healthy: Vec<String> = s["members"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["health"] == "healthy")
                .map(|m| m["apiAddr"].as_str().unwrap().to_string())
                .collect();
            let majority_addrs: Vec<String> = majority
                .iter()
                .map(|i| c.node(*i).addr().to_string())
                .collect();
            let leader_in_majority = c.leader(2).await.is_some_and(|l| majority.contains(&l));
            if leader_in_majority
                && healthy.len() == 3
                && healthy.iter().all(|h| majority_addrs.contains(h))
            {
                break;
            }
            assert!(Instant::now() < deadline, "the majority never settled: {s}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The minority answers 503 and creates nothing.
        for i in minority {
            for k in 0..3 {
                let d = c.node(i);
                let (status, _, _) = create(
                    d.http().clone(),
                    d.endpoint("/v1/sandboxes"),
                    format!("minority-{i}-{k}"),
                )
                .await;
                assert_eq!(status, 503, "a create on minority node {i}");
            }
        }
        for (n, i) in minority.iter().enumerate() {
            assert_eq!(
                c.local_sandboxes(*i).await.unwrap(),
                before[n],
                "minority node {i} created nothing"
            );
        }
        // The majority goes on, names included.
        for k in 0..6 {
            let i = majority[k % 3];
            let d = c.node(i);
            let (status, id, name) = create(
                d.http().clone(),
                d.endpoint("/v1/sandboxes"),
                format!("majority-{k}"),
            )
            .await;
            assert_eq!(status, 201, "a create on majority node {i}");
            history.created(&id.unwrap(), &name);
        }
        // A minority name claimed by the majority meanwhile stays the majority's after healing.
        c.net.heal();
        c.wait_healthy(&[0, 1, 2, 3, 4], 5).await;
        await_log_matches_stores(&c, &[0, 1, 2, 3, 4]).await;
        history.check(&c, &[0, 1, 2, 3, 4]).await;
        // One history: every node resolves every name to the same sandbox.
        for (id, name) in &history.created {
            for i in 0..5 {
                let got = c.node(i).get_json(&format!("/v1/sandboxes/{name}")).await;
                assert_eq!(got["id"], id.as_str(), "node {i} resolves {name}");
            }
        }
    });
}
