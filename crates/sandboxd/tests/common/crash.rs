//! The crash-test harness: kill the daemon mid-flow, restart it, reconcile, and check that store and
//! runtime agree.

use super::{id_of, runtime_ids, slot_holders, Daemon};
use serde_json::Value;
use std::collections::BTreeSet;

/// `POST /v1/admin/reconcile`; panics unless it answers 200. Returns the report.
pub async fn reconcile(d: &Daemon) -> Value {
    let resp = d
        .http()
        .post(d.endpoint("/v1/admin/reconcile"))
        .send()
        .await
        .expect("reconcile request");
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    assert_eq!(status, 200, "reconcile: {text}");
    serde_json::from_str(&text).expect("reconcile answers a report")
}

/// `GET /v1/sandboxes/{id}`: (status, body).
pub async fn get(d: &Daemon, id: &str) -> (u16, Value) {
    let resp = d
        .http()
        .get(d.endpoint(&format!("/v1/sandboxes/{id}")))
        .send()
        .await
        .expect("get request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Store and runtime agree, and exactly `live` run: listed running, in the runtime, holding slots,
/// executing commands. Every other listed sandbox is `failed` or `lost` with a reason and no name.
pub async fn assert_agree(d: &Daemon, live: &[&str]) {
    let live: BTreeSet<String> = live.iter().map(|s| s.to_string()).collect();
    let listed = d.list_all().await;
    let running: BTreeSet<String> = listed
        .iter()
        .filter(|s| s["state"] == "running")
        .map(id_of)
        .collect();
    assert_eq!(running, live, "running sandboxes: {listed:?}");
    for s in listed.iter().filter(|s| s["state"] != "running") {
        assert!(
            s["state"] == "failed" || s["state"] == "lost",
            "a sandbox left in a transitional state: {s}"
        );
        assert!(s["failureReason"].is_string(), "no reason: {s}");
        assert_eq!(s["name"], "", "a settled sandbox keeps its name: {s}");
    }
    assert_eq!(runtime_ids(d), live, "runtime vs store (orphans?)");
    assert_eq!(slot_holders(d), live, "leased slots vs running sandboxes");
    for id in &live {
        let out = d.exec(id, &["sh", "-c", "echo alive"]).await;
        assert_eq!((out.exit_code, out.stdout.trim()), (0, "alive"), "{id}");
    }
}

/// Restarts without failpoints, reconciles twice (the second a no-op), returns the first report.
pub async fn restart_and_reconcile(d: &mut Daemon) -> Value {
    d.set_env("FAILPOINTS", "");
    d.restart().await;
    let first = reconcile(d).await;
    let second = reconcile(d).await;
    assert_eq!(second["totalActions"], 0, "not idempotent: {second}");
    first
}

/// Starts a request in the background (it will hang at the failpoint and die with the daemon).
pub fn in_background(
    d: &Daemon,
    req: impl FnOnce(&reqwest::Client, &str) -> reqwest::RequestBuilder,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let sent = req(d.http(), &d.url()).send();
    tokio::spawn(sent)
}

/// Starts `POST /v1/sandboxes {"name": name}` in the background (a failpoint may hold it).
pub fn create_in_background(
    d: &Daemon,
    name: &str,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let body = serde_json::json!({ "name": name });
    in_background(d, |c, url| {
        c.post(format!("{url}/v1/sandboxes")).json(&body)
    })
}

/// Starts a daemon with `FAILPOINTS=failpoints` and has it acknowledge one create (which passes the
/// failpoints' first hits: `1*off->…`); returns the daemon and that sandbox.
pub async fn start_with_one_acked(failpoints: &str) -> (Daemon, String) {
    let d = Daemon::start_with(&[], &[("FAILPOINTS", failpoints)]).await;
    let acked = d.create_id().await;
    (d, acked)
}
