//! Cluster mode with real `sandboxd` processes: three members on 127.0.0.2–.4 in a network namespace
//! of the test's own (`cluster_support`).

mod cluster_support;
mod common;

use cluster_support::{cluster_test, History, TestCluster};
use serde_json::{json, Value};
use std::time::Duration;

/// Longest one of these tests may run.
const LIMIT: Duration = Duration::from_secs(300);

/// POSTs `body` to `path` on node `i`; answers the status and the JSON body.
async fn post(c: &TestCluster, i: usize, path: &str, body: &Value) -> (u16, Value) {
    let d = c.node(i);
    let resp = d
        .http()
        .post(d.endpoint(path))
        .json(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path} on node {i}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Invariant (cluster-wide names, the seed's "Hazard 2"): of 100 creates of one name spread over
/// three nodes, exactly one succeeds and 99 answer 409, and the name then maps to one sandbox on one
/// node. Decided in `sandboxd_cluster::state::ClusterState::apply`, first committed entry wins.
#[test]
fn hundred_same_name_creates_over_three_nodes_make_one_sandbox() {
    cluster_test(LIMIT, || async {
        let c = TestCluster::start(3, &[]).await;
        let body = json!({"name": "only-one", "timeoutSec": 600});
        let answers =
            futures::future::join_all((0..100).map(|i| post(&c, i % 3, "/v1/sandboxes", &body)))
                .await;
        let mut history = History::default();
        let mut conflicts = 0;
        for (status, answer) in &answers {
            match status {
                201 => history.created(answer["id"].as_str().unwrap(), "only-one"),
                409 => {
                    assert_eq!(answer["code"], "name_conflict", "{answer}");
                    conflicts += 1;
                }
                other => panic!("a create answered {other}: {answer}"),
            }
        }
        assert_eq!(history.created.len(), 1, "exactly one create wins");
        assert_eq!(conflicts, 99);
        history.check(&c, &[0, 1, 2]).await;
        // The name is found through every node.
        let id = history.created.keys().next().unwrap().clone();
        for i in 0..3 {
            let got = c.node(i).get_json("/v1/sandboxes/only-one").await;
            assert_eq!(got["id"], id.as_str(), "node {i}");
        }
        // Deleted through another node, the name is free cluster-wide at once.
        let del = c
            .node(2)
            .http()
            .delete(c.node(2).endpoint("/v1/sandboxes/only-one"))
            .send()
            .await
            .unwrap();
        assert_eq!(del.status(), 204);
        history.deleted(&id);
        let (status, again) = post(&c, 1, "/v1/sandboxes", &body).await;
        assert_eq!(status, 201, "{again}");
        history.created(again["id"].as_str().unwrap(), "only-one");
        history.check(&c, &[0, 1, 2]).await;
        // `sbx cluster status` through any node shows the three members and one leader.
        let out = c.node(1).sbx(&["--json", "cluster", "status"]);
        common::assert_success("sbx cluster status", &out);
        let status: Value = serde_json::from_slice(&out.stdout).unwrap();
        let members = status["members"].as_array().unwrap();
        assert_eq!(members.len(), 3, "{status}");
        assert_eq!(members.iter().filter(|m| m["leader"] == true).count(), 1);
        assert!(members
            .iter()
            .all(|m| m["role"] == "voter" && m["health"] == "healthy"));
        let table = common::stdout(&c.node(2).sbx(&["cluster", "status"]));
        assert!(table.starts_with("leader "), "{table}");
        assert_eq!(
            table.lines().count(),
            5,
            "leader line, header, three members: {table}"
        );
    });
}

/// A node takes creates from the moment it answers: a create on each node right after it answers
/// `/health` (a name, so it is reserved in the log), before any view of the cluster is waited for,
/// answers 201 — it waits (bounded) for the node's first lease rather than refusing with
/// `503 cluster_unavailable` — and so does one on a follower as soon as node 0 lists every member
/// healthy.
#[test]
fn a_node_takes_creates_as_soon_as_it_answers() {
    cluster_test(LIMIT, || async {
        let c = TestCluster::start_unwaited(3, &[], &[]).await;
        for i in [2, 1, 0] {
            let name = format!("at-once-{i}");
            let (status, answer) = post(
                &c,
                i,
                "/v1/sandboxes",
                &json!({"name": name, "timeoutSec": 60}),
            )
            .await;
            assert_eq!(status, 201, "a create on node {i}: {answer}");
        }
        c.wait_healthy(&[0], 3).await;
        let leader = c.leader(0).await.expect("node 0 names the leader");
        for i in (0..3).filter(|&i| i != leader) {
            let name = format!("healthy-{i}");
            let (status, answer) = post(
                &c,
                i,
                "/v1/sandboxes",
                &json!({"name": name, "timeoutSec": 60}),
            )
            .await;
            assert_eq!(status, 201, "a create on follower {i}: {answer}");
        }
    });
}

/// Without cluster flags the daemon is a single node: `GET /v1/cluster` answers 404 `not_clustered`
/// and `sbx cluster status` exits 1 saying so.
#[test]
fn a_single_node_says_it_is_not_clustered() {
    common::e2e(|| async {
        let d = common::Daemon::start().await;
        let resp = d
            .http()
            .get(d.endpoint("/v1/cluster"))
            .send()
            .await
            .unwrap();
        common::expect_error("GET /v1/cluster", resp, 404, Some("not_clustered")).await;
        let out = d.sbx(&["cluster", "status"]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            common::stderr(&out).contains("single node"),
            "{}",
            common::stderr(&out)
        );
    });
}

/// Invariant (cluster-wide E2B dedupe, past the seed's per-process one): 200 identical E2B creates
/// spread over three nodes all answer one sandbox id. The log routes every create of one fingerprint
/// to one node (`sandboxd_cluster::state::ClusterState::apply`, `RouteFingerprint`), whose own claim
/// dedupes them (`sandboxd_service::e2b`).
#[test]
fn two_hundred_identical_e2b_creates_over_three_nodes_answer_one_sandbox() {
    cluster_test(LIMIT, || async {
        let c = TestCluster::start(3, &[]).await;
        let body = json!({"templateID": "base", "timeout": 300, "metadata": {"run": "dedupe"}});
        let answers =
            futures::future::join_all((0..200).map(|i| post(&c, i % 3, "/sandboxes", &body))).await;
        let mut ids = std::collections::BTreeSet::new();
        for (status, answer) in &answers {
            assert_eq!(*status, 201, "{answer}");
            ids.insert(answer["sandboxID"].as_str().unwrap().to_string());
        }
        assert_eq!(ids.len(), 1, "one sandbox for every caller: {ids:?}");
        let mut history = History::default();
        history.created(ids.iter().next().unwrap(), "");
        history.check(&c, &[0, 1, 2]).await;
    });
}

/// Invariant (cluster-wide hostnames, the seed's "Hazard 2"): one hostname bound to two sandboxes
/// from two nodes at once: one 201, one 409; the winner's port then answers that host on every node.
#[test]
fn a_hostname_bound_from_two_nodes_at_once_goes_to_one_sandbox() {
    cluster_test(LIMIT, || async {
        let c = TestCluster::start(3, &[]).await;
        let a = c.node(0).create(json!({})).await["id"]
            .as_str()
            .unwrap()
            .to_string();
        let b = c.node(1).create(json!({})).await["id"]
            .as_str()
            .unwrap()
            .to_string();
        for id in [&a, &b] {
            common::serve_port(c.node(2), id, 8000).await;
        }
        let body = json!({"hostname": "app.cluster.test", "port": 8000});
        let (path_a, path_b) = (
            format!("/v1/sandboxes/{a}/domains"),
            format!("/v1/sandboxes/{b}/domains"),
        );
        let (one, two) = futures::join!(post(&c, 0, &path_a, &body), post(&c, 1, &path_b, &body));
        let mut statuses = [one.0, two.0];
        statuses.sort();
        assert_eq!(statuses, [201, 409], "{one:?} {two:?}");
        for i in 0..3 {
            let status = status_by_host(&c, i, "app.cluster.test").await;
            assert_eq!(status, 200, "node {i} routes the bound hostname");
        }
        let mut history = History::default();
        history.created(&a, "");
        history.created(&b, "");
        history.check(&c, &[0, 1, 2]).await;
    });
}

/// A template is placed where it is: sandboxes of a snapshot taken on node N, created through the
/// other nodes right after, all land on N (its layers are in N's image store) and see its files.
#[test]
fn creates_of_a_template_are_placed_on_the_node_that_has_it() {
    cluster_test(LIMIT, || async {
        let c = TestCluster::start(3, &[]).await;
        let source = c.node(0).create_id().await;
        let home = owner_node(&c, &source).await;
        let wrote = c
            .node(0)
            .exec(&source, &["sh", "-c", "echo kept > /home/user/marker"])
            .await;
        assert_eq!(wrote.exit_code, 0, "{wrote:?}");
        let (status, template) = post(
            &c,
            0,
            &format!("/v1/sandboxes/{source}/snapshot"),
            &json!({"name": "snap-t"}),
        )
        .await;
        assert_eq!(status, 201, "{template}");
        let mut history = History::default();
        history.created(&source, "");
        for k in 0..6 {
            let entry = (home + 1 + k % 2) % 3;
            let s = c.node(entry).create(json!({"template": "snap-t"})).await;
            let id = s["id"].as_str().unwrap().to_string();
            history.created(&id, "");
            assert_eq!(
                owner_node(&c, &id).await,
                home,
                "create {k} through node {entry}"
            );
            let out = c.node(entry).exec(&id, &["cat", "/home/user/marker"]).await;
            assert_eq!(out.stdout, "kept\n");
        }
        history.check(&c, &[0, 1, 2]).await;
    });
}

/// Invariant: a volume lives on the node that made it; its name is one volume's across the
/// cluster; a create that mounts it, through any node, lands on that node and sees its files, the
/// volume's own routes through any node are served there, and every node lists every volume once.
#[test]
fn creates_mounting_a_volume_are_placed_on_its_node() {
    cluster_test(LIMIT, || async {
        let c = TestCluster::start(3, &[]).await;
        let made = c
            .node(1)
            .post_json("/v1/volumes", &json!({"name": "shared"}))
            .await;
        assert_eq!(made.status(), 201);
        // The name is the cluster's: another node cannot make a second volume of it.
        let again = c
            .node(2)
            .post_json("/v1/volumes", &json!({"name": "shared"}))
            .await;
        assert_eq!(again.status(), 409, "{:?}", again.text().await);
        let put = c
            .node(1)
            .http()
            .put(c.node(1).endpoint("/v1/volumes/shared/files/content"))
            .query(&[("path", "/marker")])
            .body("on node 1")
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 201);
        let mut history = History::default();
        for entry in [0, 2, 0, 2] {
            let s = c
                .node(entry)
                .create(json!({"volumes": [{"name": "shared", "path": "/data"}]}))
                .await;
            let id = s["id"].as_str().unwrap().to_string();
            history.created(&id, "");
            assert_eq!(
                owner_node(&c, &id).await,
                1,
                "a create through node {entry}"
            );
            let out = c.node(entry).exec(&id, &["cat", "/data/marker"]).await;
            assert_eq!(out.stdout, "on node 1");
        }
        // The volume's own routes through any node are served by its node.
        let detail = c.node(2).get_json("/v1/volumes/shared").await;
        assert_eq!(
            detail["mounts"].as_array().map(Vec::len),
            Some(4),
            "{detail}"
        );
        let marker = c
            .node(0)
            .get_text("/v1/volumes/shared/files/content?path=/marker")
            .await;
        assert_eq!(marker, "on node 1");
        // Every node lists every node's volumes, each once, on every surface.
        let other = c
            .node(0)
            .post_json("/v1/volumes", &json!({"name": "other"}))
            .await;
        assert_eq!(other.status(), 201);
        for entry in 0..3 {
            let d = c.node(entry);
            let v1 = d.get_json("/v1/volumes").await;
            let e2b = d.get_json("/volumes").await;
            let daytona = d.get_json("/api/volumes").await;
            for (surface, items) in [("v1", &v1["volumes"]), ("e2b", &e2b), ("daytona", &daytona)] {
                let mut names: Vec<&str> = items
                    .as_array()
                    .unwrap_or_else(|| panic!("{surface} through node {entry}: {items}"))
                    .iter()
                    .filter_map(|v| v["name"].as_str())
                    .collect();
                names.sort();
                assert_eq!(names, ["other", "shared"], "{surface} through node {entry}");
            }
        }
        history.check(&c, &[0, 1, 2]).await;
    });
}

/// `GET /v1/sandboxes` on node `i` with `key`: the status.
async fn list_with(c: &TestCluster, i: usize, key: &str) -> u16 {
    let d = c.node(i);
    d.http_plain()
        .get(d.endpoint("/v1/sandboxes"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// API keys are cluster-wide: a key made through one node is accepted by every node from the
/// answer on, listed by every node, and refused everywhere once revoked (through another node:
/// there at once, on the rest within a heartbeat).
#[test]
fn an_api_key_made_through_one_node_works_on_every_node_until_revoked() {
    cluster_test(LIMIT, || async {
        let c = TestCluster::start(3, &[]).await;
        let (status, made) = post(
            &c,
            0,
            "/v1/api-keys",
            &json!({"name": "everywhere", "scope": "user"}),
        )
        .await;
        assert_eq!(status, 201, "{made}");
        let key = made["key"].as_str().unwrap().to_string();
        let id = made["id"].as_str().unwrap().to_string();
        for i in [2, 1, 0] {
            assert_eq!(
                list_with(&c, i, &key).await,
                200,
                "node {i} accepts the key"
            );
        }
        // A user key creates, and its sandbox is reached through another node with it.
        let d = c.node(1);
        let created = d
            .http_plain()
            .post(d.endpoint("/v1/sandboxes"))
            .bearer_auth(&key)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
        let sandbox: Value = created.json().await.unwrap();
        let sid = sandbox["id"].as_str().unwrap().to_string();
        let got = c
            .node(2)
            .http_plain()
            .get(c.node(2).endpoint(&format!("/v1/sandboxes/{sid}")))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), 200);
        for i in 0..3 {
            let listed = c.node(i).get_json("/v1/api-keys").await;
            let found = listed["apiKeys"]
                .as_array()
                .unwrap_or_else(|| panic!("a key list: {listed}"))
                .iter()
                .filter(|k| k["id"] == id.as_str())
                .count();
            assert_eq!(found, 1, "node {i} lists the key once: {listed}");
        }
        let revoked = c
            .node(1)
            .http()
            .delete(c.node(1).endpoint(&format!("/v1/api-keys/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(revoked.status(), 204);
        assert_eq!(
            list_with(&c, 1, &key).await,
            401,
            "refused at once where revoked"
        );
        // The others once they applied the revoke (a heartbeat; a busy machine may take longer).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for i in [0, 2] {
            while list_with(&c, i, &key).await != 401 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "node {i} still accepts the revoked key"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        let mut history = History::default();
        history.created(&sid, "");
        history.check(&c, &[0, 1, 2]).await;
    });
}

/// The status of `GET /` with `Host: host` on node `i`.
async fn status_by_host(c: &TestCluster, i: usize, host: &str) -> u16 {
    let d = c.node(i);
    d.http_plain()
        .get(d.endpoint("/"))
        .header("Host", host)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// The node whose store holds sandbox `id`.
async fn owner_node(c: &TestCluster, id: &str) -> usize {
    for i in 0..3 {
        if c.local_sandboxes(i).await.unwrap().contains_key(id) {
            return i;
        }
    }
    panic!("{id} is on no node");
}

/// Binds `hostname` to port 8000 of sandbox `id`, through node 1.
async fn bind(c: &TestCluster, id: &str, hostname: &str) -> (u16, Value) {
    let body = json!({"hostname": hostname, "port": 8000});
    post(c, 1, &format!("/v1/sandboxes/{id}/domains"), &body).await
}

/// A bind whose local write fails after the log bound the hostname gives back only what it made:
/// a new hostname is unbound in the log again (another sandbox may take it), but a retry of a
/// binding the sandbox had already leaves the log's binding in place (the seed's "reused" flag).
/// Failpoint `domain.bind-write`: each node's first bind writes, every later one fails.
#[test]
fn a_failed_bind_gives_back_only_the_hostname_it_bound_in_the_log() {
    cluster_test(LIMIT, || async {
        let c = TestCluster::start_with_env(
            3,
            &[],
            &[("FAILPOINTS", "domain.bind-write=1*off->return")],
        )
        .await;
        let s = c.node(0).create_id().await;
        let owner = owner_node(&c, &s).await;
        let mut other = None;
        for _ in 0..30 {
            let t = c.node(0).create_id().await;
            if owner_node(&c, &t).await != owner {
                other = Some(t);
                break;
            }
        }
        let t = other.expect("a sandbox on another node");
        for id in [&s, &t] {
            common::serve_port(c.node(0), id, 8000).await;
        }
        // The owner's first bind writes; its later ones fail locally.
        assert_eq!(bind(&c, &s, "kept.cluster.test").await.0, 201);
        let retry = bind(&c, &s, "kept.cluster.test").await;
        assert_eq!(retry.0, 500, "the failpoint fails the write: {retry:?}");
        let fresh = bind(&c, &s, "fresh.cluster.test").await;
        assert_eq!(fresh.0, 500, "{fresh:?}");
        // The retry's failure left the binding it did not make; the new one was given back.
        let taken = bind(&c, &t, "kept.cluster.test").await;
        assert_eq!(taken.0, 409, "still the first sandbox's: {taken:?}");
        let free = bind(&c, &t, "fresh.cluster.test").await;
        assert_eq!(free.0, 201, "given back to the log: {free:?}");
        for i in 0..3 {
            let status = status_by_host(&c, i, "kept.cluster.test").await;
            assert_eq!(status, 200, "node {i} still routes the kept hostname");
        }
        let mut history = History::default();
        history.created(&s, "");
        history.created(&t, "");
        history.check(&c, &[0, 1, 2]).await;
    });
}

/// A create on node A that the placement puts on node B is served through A: exec, files, a
/// sandbox port through the proxy (also by a Daytona signed link), and the E2B envd calls by
/// `E2b-Sandbox-Id` or by access token.
#[test]
fn a_sandbox_placed_on_another_node_is_served_through_the_entry_node() {
    cluster_test(LIMIT, || async {
        let c = TestCluster::start(3, &[]).await;
        // Creates through node 0 until one lands elsewhere (two of three nodes are not node 0).
        let mut history = History::default();
        let mut placed = None;
        for _ in 0..30 {
            let (status, created) =
                post(&c, 0, "/sandboxes", &json!({"templateID": "base", "secure": true, "metadata": {"n": placed.is_none().to_string() + &rand_tag()}})).await;
            assert_eq!(status, 201, "{created}");
            let id = created["sandboxID"].as_str().unwrap().to_string();
            history.created(&id, "");
            let on_zero = c.local_sandboxes(0).await.unwrap().contains_key(&id);
            if !on_zero {
                placed = Some(created);
                break;
            }
        }
        let created = placed.expect("a create placed on another node");
        let id = created["sandboxID"].as_str().unwrap().to_string();
        let entry = c.node(0);
        // Exec and files, through node 0.
        let out = entry
            .exec(&id, &["sh", "-c", "echo forwarded > /tmp/f && cat /tmp/f"])
            .await;
        assert_eq!(out.stdout, "forwarded\n");
        let put = entry
            .http()
            .put(entry.endpoint(&format!("/v1/sandboxes/{id}/files?path=/tmp/up.txt")))
            .body("uploaded through node 0")
            .send()
            .await
            .unwrap();
        assert!(put.status().is_success(), "upload: {}", put.status());
        let got = entry
            .http()
            .get(entry.endpoint(&format!("/v1/sandboxes/{id}/files?path=/tmp/up.txt")))
            .send()
            .await
            .unwrap();
        assert_eq!(got.text().await.unwrap(), "uploaded through node 0");
        // A sandbox port by `{port}-{id}.{domain}`, through node 0's proxy.
        common::serve_port(entry, &id, 8000).await;
        let proxied = status_by_host(&c, 0, &format!("8000-{id}.localhost:{}", entry.port())).await;
        assert_eq!(proxied, 200, "the sandbox's port through node 0");
        // A Daytona signed preview link, made through node 0 (on the owner, which stores it) and
        // opened through node 0: its token names the sandbox, so node 0 knows where it goes.
        let signed = entry
            .get_json(&format!("/api/sandbox/{id}/ports/8000/signed-preview-url"))
            .await;
        let token = signed["token"].as_str().expect("a signed link's token");
        let opened =
            status_by_host(&c, 0, &format!("8000-{token}.localhost:{}", entry.port())).await;
        assert_eq!(opened, 200, "the signed link through node 0");
        let forged = format!("8000-pv{}-{id}.localhost:{}", "0".repeat(30), entry.port());
        let forged = status_by_host(&c, 0, &forged).await;
        assert_eq!(forged, 401, "a forged link naming the sandbox");
        // envd by `E2b-Sandbox-Id`, as the E2B SDK calls it, through node 0.
        let envd = entry
            .http_plain()
            .get(entry.endpoint("/files?path=/tmp/f"))
            .header("E2b-Sandbox-Id", &id)
            .header("E2b-Sandbox-Port", "49983")
            .header(
                "X-Access-Token",
                created["envdAccessToken"].as_str().unwrap(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(envd.status(), 200);
        assert_eq!(envd.text().await.unwrap(), "forwarded\n");
        // envd by its access token alone, as older SDKs call it after `connect`: node 0 finds the
        // sandbox by the token's digest in the log.
        let by_token = entry
            .http_plain()
            .get(entry.endpoint("/files?path=/tmp/up.txt"))
            .header(
                "X-Access-Token",
                created["envdAccessToken"].as_str().unwrap(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(
            by_token.status(),
            200,
            "envd by access token through node 0"
        );
        assert_eq!(by_token.text().await.unwrap(), "uploaded through node 0");
        let wrong = entry
            .http_plain()
            .get(entry.endpoint("/files?path=/tmp/up.txt"))
            .header("X-Access-Token", "not-a-token-of-any-sandbox")
            .send()
            .await
            .unwrap();
        assert!(
            wrong.status().is_client_error(),
            "an unknown token reaches nothing: {}",
            wrong.status()
        );
        // The merged list through node 0 has it once.
        let listed = entry.get_json("/v1/sandboxes").await;
        let count = listed["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["id"] == id.as_str())
            .count();
        assert_eq!(count, 1);
        history.check(&c, &[0, 1, 2]).await;
    });
}

fn rand_tag() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed).to_string()
}
