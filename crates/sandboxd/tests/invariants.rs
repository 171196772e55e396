//! Duplicates are unrepresentable: retries and races against the real daemon end with exactly one of
//! everything. Each test names the invariant it proves; the schema side is in `crates/store`.

mod common;

use common::{e2e, id_of, serve_port, Daemon};
use futures::future::join_all;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::Duration;

async fn post(d: &Daemon, path: &str, key: Option<&str>, body: &Value) -> (u16, Value, bool) {
    let mut req = d.http().post(d.endpoint(path)).json(body);
    if let Some(key) = key {
        req = req.header("Idempotency-Key", key);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let replayed = resp.headers().get("idempotent-replayed").is_some();
    let text = resp.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        replayed,
    )
}

/// Invariant: one Idempotency-Key creates at most one sandbox, and every caller gets the first answer.
#[test]
fn two_hundred_concurrent_creates_with_one_key_make_one_sandbox() {
    e2e(|| async {
        let d = Daemon::start().await;
        let body = json!({"metadata": {"race": "key"}});
        let answers = join_all((0..200).map(|_| async {
            // A 409 means the first attempt is still in flight: retry, as a client would.
            loop {
                let (status, value, _) = post(&d, "/v1/sandboxes", Some("same-key-1"), &body).await;
                if status != 409 {
                    return (status, value);
                }
                assert_eq!(value["code"], "request_in_flight", "{value}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }))
        .await;
        let first = &answers[0].1;
        for (status, value) in &answers {
            assert_eq!(*status, 201, "{value}");
            assert_eq!(value, first, "every caller gets the first response");
        }
        let all = d.list_all().await;
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(id_of(&all[0]), id_of(first));
        // Same key, different request: refused, nothing made.
        let (status, value, _) = post(&d, "/v1/sandboxes", Some("same-key-1"), &json!({})).await;
        assert_eq!(status, 422, "{value}");
        assert_eq!(value["code"], "idempotency_key_reused");
        assert_eq!(d.list_all().await.len(), 1);
    });
}

/// Invariant: a sandbox name belongs to one sandbox; racing creates get one 201 and typed 409s.
#[test]
fn hundred_concurrent_creates_with_one_name_yield_one_winner() {
    e2e(|| async {
        let d = Daemon::start().await;
        let body = json!({"name": "only-one"});
        let answers = join_all((0..100).map(|_| post(&d, "/v1/sandboxes", None, &body))).await;
        let created = answers.iter().filter(|(s, _, _)| *s == 201).count();
        let conflicts: Vec<_> = answers.iter().filter(|(s, _, _)| *s == 409).collect();
        assert_eq!(created, 1, "{answers:?}");
        assert_eq!(conflicts.len(), 99);
        assert!(conflicts
            .iter()
            .all(|(_, v, _)| v["code"] == "name_conflict"));
        assert_eq!(d.list_all().await.len(), 1);
    });
}

/// Invariant: (sandbox, port) is exposed once: concurrent exposes share one row, host port and URL.
#[test]
fn two_hundred_concurrent_exposes_share_one_host_port() {
    e2e(|| async {
        let d = Daemon::start().await;
        let id = d.create_id().await;
        serve_port(&d, &id, 8000).await;
        let path = format!("/v1/sandboxes/{id}/ports");
        let body = json!({"port": 8000, "protocol": "tcp"});
        let answers = join_all((0..200).map(|_| post(&d, &path, None, &body))).await;
        let urls: HashSet<String> = answers
            .iter()
            .map(|(s, v, _)| {
                assert!(*s == 201 || *s == 200, "{v}");
                v["publicUrl"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(urls.len(), 1, "{urls:?}");
        assert_eq!(answers.iter().filter(|(s, _, _)| *s == 201).count(), 1);
        let listed: Vec<Value> = serde_json::from_value(d.get_json(&path).await).unwrap();
        assert_eq!(listed.len(), 1);
        // The forwarder carries bytes: the listing comes back through the host port.
        let host_port = listed[0]["hostPort"].as_u64().unwrap();
        let page = reqwest::get(format!("http://127.0.0.1:{host_port}/"))
            .await
            .unwrap();
        assert!(page.text().await.unwrap().contains("Directory listing"));
        // An unused port is refused before anything is reserved.
        let (status, value, _) =
            post(&d, &path, None, &json!({"port": 8001, "protocol": "tcp"})).await;
        assert_eq!(
            (status, value["code"].as_str()),
            (409, Some("port_not_listening"))
        );
    });
}

/// Invariant: a pool port another process on the host listens on is skipped, not answered with a 503,
/// even while a hundred callers race to expose the same port.
#[test]
fn pool_ports_held_by_other_processes_are_skipped() {
    e2e(|| async {
        let d = Daemon::start_with(&["--host-ports", "23110-23113"], &[]).await;
        let _foreign: Vec<std::net::TcpListener> = (23110..=23112)
            .map(|p| std::net::TcpListener::bind(("0.0.0.0", p)).expect("hold a pool port"))
            .collect();
        let id = d.create_id().await;
        serve_port(&d, &id, 8000).await;
        let path = format!("/v1/sandboxes/{id}/ports");
        let body = json!({"port": 8000, "protocol": "tcp"});
        let answers = join_all((0..100).map(|_| post(&d, &path, None, &body))).await;
        for (status, value, _) in &answers {
            assert!(*status == 201 || *status == 200, "{value}");
            assert_eq!(value["hostPort"], 23113, "{value}");
        }
        let page = reqwest::get("http://127.0.0.1:23113/").await.unwrap();
        assert!(page.text().await.unwrap().contains("Directory listing"));
        // With every port held, the answer is the typed 503 and no row is left behind.
        serve_port(&d, &id, 8001).await;
        let (status, value, _) =
            post(&d, &path, None, &json!({"port": 8001, "protocol": "tcp"})).await;
        assert_eq!(
            (status, value["code"].as_str()),
            (503, Some("pool_exhausted")),
            "{value}"
        );
        let listed: Vec<Value> = serde_json::from_value(d.get_json(&path).await).unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");
    });
}

/// Invariant: a host port is bound to one exposure; a full pool is a typed 503, not a hang.
#[test]
fn racing_sandboxes_never_share_a_host_port_and_a_full_pool_is_503() {
    e2e(|| async {
        let d = Daemon::start_with(&["--host-ports", "23100-23105"], &[]).await;
        let a = d.create_id().await;
        let b = d.create_id().await;
        let ports: Vec<u16> = (9000..9004).collect();
        for id in [&a, &b] {
            for p in &ports {
                serve_port(&d, id, *p).await;
            }
        }
        let d = &d;
        let calls = [&a, &b].into_iter().flat_map(|id| {
            ports.iter().map(move |p| {
                let path = format!("/v1/sandboxes/{id}/ports");
                async move { post(d, &path, None, &json!({"port": p, "protocol": "tcp"})).await }
            })
        });
        let answers = tokio::time::timeout(Duration::from_secs(30), join_all(calls))
            .await
            .expect("exposes hung");
        let granted: Vec<u64> = answers
            .iter()
            .filter(|(s, _, _)| *s == 201)
            .map(|(_, v, _)| v["hostPort"].as_u64().unwrap())
            .collect();
        let distinct: HashSet<_> = granted.iter().collect();
        assert_eq!(
            distinct.len(),
            granted.len(),
            "a host port was granted twice: {granted:?}"
        );
        assert_eq!(granted.len(), 6, "the pool has 6 ports: {answers:?}");
        let exhausted: Vec<_> = answers.iter().filter(|(s, _, _)| *s == 503).collect();
        assert_eq!(exhausted.len(), 2, "{answers:?}");
        assert!(exhausted
            .iter()
            .all(|(_, v, _)| v["code"] == "pool_exhausted"));
    });
}

/// Invariant: a failed forwarder install leaves no half-installed exposure, and a retry succeeds.
#[test]
fn failed_forwarder_install_rolls_back_only_its_own_row() {
    e2e(|| async {
        // The failpoint fires once, then the daemon behaves normally.
        let d = Daemon::start_with(&[], &[("FAILPOINTS", "expose.forwarder=1*return")]).await;
        let id = d.create_id().await;
        serve_port(&d, &id, 8000).await;
        let path = format!("/v1/sandboxes/{id}/ports");
        let body = json!({"port": 8000, "protocol": "tcp"});
        let (status, value, _) = post(&d, &path, None, &body).await;
        assert_eq!(status, 503, "the injected failure: {value}");
        let listed: Vec<Value> = serde_json::from_value(d.get_json(&path).await).unwrap();
        assert!(
            listed.is_empty(),
            "a half-installed exposure was left: {listed:?}"
        );
        let (status, value, _) = post(&d, &path, None, &body).await;
        assert_eq!(status, 201, "{value}");
        let host_port = value["hostPort"].as_u64().unwrap();
        let page = reqwest::get(format!("http://127.0.0.1:{host_port}/"))
            .await
            .unwrap();
        assert!(page.text().await.unwrap().contains("Directory listing"));
    });
}

/// Invariant: an exposure another caller installed is never undone by a retry whose install failed.
#[test]
fn failed_reinstall_keeps_the_existing_exposure() {
    e2e(|| async {
        let mut d = Daemon::start().await;
        let id = d.create_id().await;
        serve_port(&d, &id, 8000).await;
        let path = format!("/v1/sandboxes/{id}/ports");
        let body = json!({"port": 8000, "protocol": "tcp"});
        let (status, first, _) = post(&d, &path, None, &body).await;
        assert_eq!(status, 201, "{first}");
        // Restart with every forwarder install failing: the row exists (reused), its install fails.
        d.kill9();
        d.set_env("FAILPOINTS", "expose.forwarder=return");
        d.restart().await;
        let (status, value, _) = post(&d, &path, None, &body).await;
        assert_eq!(status, 503, "{value}");
        let listed: Vec<Value> = serde_json::from_value(d.get_json(&path).await).unwrap();
        assert_eq!(
            listed.len(),
            1,
            "the existing exposure was torn down: {listed:?}"
        );
        assert_eq!(listed[0]["hostPort"], first["hostPort"]);
        // Without the failure the same exposure comes back on the same host port.
        d.kill9();
        d.set_env("FAILPOINTS", "");
        d.restart().await;
        let page = reqwest::get(format!("http://127.0.0.1:{}/", first["hostPort"]))
            .await
            .unwrap();
        assert!(page.text().await.unwrap().contains("Directory listing"));
    });
}

/// Invariant (the claim's case 4): an attempt that died holding its claim is redone once the lock
/// expires — and what the dead attempt made is undone — so the end state has exactly one sandbox.
#[test]
fn kill9_with_a_pending_claim_then_a_retry_redoes_the_work_once() {
    e2e(|| async {
        let mut d = Daemon::start_with(
            &["--idempotency-pending-ttl-ms", "3000"],
            &[("FAILPOINTS", "idempotency.before-complete=return(60000)")],
        )
        .await;
        let body = json!({"metadata": {"crash": "pending"}});
        // The first attempt makes its sandbox, then hangs before completing its claim.
        let (http, url, sent) = (d.http().clone(), d.endpoint("/v1/sandboxes"), body.clone());
        let first = tokio::spawn(async move {
            http.post(url)
                .header("Idempotency-Key", "crash-1")
                .json(&sent)
                .send()
                .await
        });
        let mut crashed = Vec::new();
        for _ in 0..200 {
            crashed = d.list_all().await;
            if crashed.iter().any(|s| s["state"] == "running") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(crashed.len(), 1, "the first attempt never made its sandbox");
        d.kill9();
        assert!(
            first.await.unwrap().is_err(),
            "the first attempt cannot have answered"
        );
        d.set_env("FAILPOINTS", "");
        d.restart().await;
        // While the dead attempt's lock lives, a retry is told to come back; after it, the work is redone.
        let (status, value) = loop {
            let (status, value, _) = post(&d, "/v1/sandboxes", Some("crash-1"), &body).await;
            if status != 409 {
                break (status, value);
            }
            assert_eq!(value["code"], "request_in_flight", "{value}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(status, 201, "{value}");
        let all = d.list_all().await;
        assert_eq!(all.len(), 1, "exactly one sandbox: {all:?}");
        assert_eq!(id_of(&all[0]), id_of(&value));
        assert_ne!(id_of(&value), id_of(&crashed[0]), "the work was redone");
        // And from now on the key replays.
        let (status, again, replayed) = post(&d, "/v1/sandboxes", Some("crash-1"), &body).await;
        assert_eq!((status, replayed), (201, true));
        assert_eq!(again, value);
    });
}

/// Invariant: an abandoned create (its daemon died holding the claim) is undone by the sweep even if
/// nobody retries: no sandbox outlives a request that never answered.
#[test]
fn abandoned_create_is_undone_without_any_retry() {
    e2e(|| async {
        let mut d = Daemon::start_with(
            &["--idempotency-pending-ttl-ms", "2000"],
            &[("FAILPOINTS", "idempotency.before-complete=return(60000)")],
        )
        .await;
        let (http, url) = (d.http().clone(), d.endpoint("/v1/sandboxes"));
        let first = tokio::spawn(async move {
            http.post(url)
                .header("Idempotency-Key", "abandon-1")
                .json(&json!({}))
                .send()
                .await
        });
        for _ in 0..200 {
            if d.list_all().await.iter().any(|s| s["state"] == "running") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(d.list_all().await.len(), 1);
        d.kill9();
        let _ = first.await;
        d.set_env("FAILPOINTS", "");
        d.restart().await;
        for _ in 0..100 {
            if d.list_all().await.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the abandoned sandbox is still there: {:?}",
            d.list_all().await
        );
    });
}

/// Invariant: a sandbox is deleted once; of racing deletes exactly one answers 204, the rest 404.
#[test]
fn fifty_concurrent_deletes_delete_once() {
    e2e(|| async {
        let d = Daemon::start().await;
        let id = d.create_id().await;
        let url = d.endpoint(&format!("/v1/sandboxes/{id}"));
        let answers = join_all((0..50).map(|_| async {
            d.http()
                .delete(&url)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }))
        .await;
        assert_eq!(
            answers.iter().filter(|s| **s == 204).count(),
            1,
            "{answers:?}"
        );
        assert!(
            answers.iter().all(|s| *s == 204 || *s == 404),
            "{answers:?}"
        );
        assert!(d.list_all().await.is_empty());
    });
}
