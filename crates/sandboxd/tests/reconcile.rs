//! Reconcilers catch the failure that never reports itself: the daemon is killed (`kill -9`) while a
//! create or a delete is half done, restarted, and `POST /v1/admin/reconcile` must leave store and
//! runtime in agreement:
//! - no orphan: every sandbox the runtime holds (`<data-dir>/runtime/sandboxes/`) is one the API lists
//!   as running;
//! - no leaked network slot: the store's leased slots belong exactly to the running sandboxes;
//! - no lost acknowledged sandbox: what was created before the crash still runs and executes commands;
//! - the half-made one is `failed` with a reason and its name released (a create), or gone (a delete);
//! - a second reconcile right after changes nothing.
//!
//! Each crash point is a failpoint (`sleep(60000)` holds the flow there until the kill).

mod common;

use common::{e2e, id_of, Daemon};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

/// `POST /v1/admin/reconcile`; panics unless it answers 200. Returns the report.
async fn reconcile(d: &Daemon) -> Value {
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
async fn get(d: &Daemon, id: &str) -> (u16, Value) {
    let resp = d
        .http()
        .get(d.endpoint(&format!("/v1/sandboxes/{id}")))
        .send()
        .await
        .expect("get request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// The sandbox ids the runtime holds a directory for.
fn runtime_ids(d: &Daemon) -> BTreeSet<String> {
    std::fs::read_dir(d.data_dir().join("runtime/sandboxes"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Rows of `sql` against the daemon's database, opened read-only beside it (one line per row, columns
/// joined by `|`). Reads the store directly, so it works while a failpoint holds one of the daemon's
/// worker threads.
fn query(d: &Daemon, sql: &str) -> Vec<String> {
    let db = d.data_dir().join("sandboxd.db");
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys\n\
             c = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)\n\
             for row in c.execute(sys.argv[2]):\n\
             \x20   print('|'.join(str(v) for v in row))",
        )
        .arg(&db)
        .arg(sql)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The holders of the store's leased network slots.
fn slot_holders(d: &Daemon) -> BTreeSet<String> {
    query(
        d,
        "SELECT sandbox_id FROM network_slots WHERE sandbox_id IS NOT NULL",
    )
    .into_iter()
    .collect()
}

/// Polls the store until `sql` returns a row; returns its first line.
async fn wait_for_row(d: &Daemon, sql: &str) -> String {
    for _ in 0..400 {
        if let Some(row) = query(d, sql).into_iter().next() {
            return row;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no row for {sql}");
}

/// Store and runtime agree, and exactly `live` run: listed running, in the runtime, holding slots,
/// executing commands. Every other listed sandbox is `failed` or `lost` with a reason and no name.
async fn assert_agree(d: &Daemon, live: &[&str]) {
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
async fn restart_and_reconcile(d: &mut Daemon) -> Value {
    d.set_env("FAILPOINTS", "");
    d.restart().await;
    let first = reconcile(d).await;
    let second = reconcile(d).await;
    assert_eq!(second["totalActions"], 0, "not idempotent: {second}");
    first
}

/// Starts a request in the background (it will hang at the failpoint and die with the daemon).
fn in_background(
    d: &Daemon,
    req: impl FnOnce(&reqwest::Client, &str) -> reqwest::RequestBuilder,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let sent = req(d.http(), &d.url()).send();
    tokio::spawn(sent)
}

/// Invariant: a create killed after its row was written but before the runtime made anything ends
/// `failed` with its name and slot released; sandboxes acknowledged before the crash keep running.
#[test]
fn kill9_after_the_row_is_written_fails_the_create_and_frees_its_name() {
    e2e(|| async {
        let mut d = Daemon::start_with(
            &[],
            &[("FAILPOINTS", "create.after-insert=1*off->sleep(60000)")],
        )
        .await;
        let acked = d.create_id().await;
        let hung = in_background(&d, |c, url| {
            c.post(format!("{url}/v1/sandboxes"))
                .json(&json!({"name": "retry-me"}))
        });
        let half = wait_for_row(
            &d,
            "SELECT id FROM sandboxes WHERE name = 'retry-me' AND state = 'creating'",
        )
        .await;
        d.kill9();
        assert!(
            hung.await.unwrap().is_err(),
            "the create cannot have answered"
        );
        restart_and_reconcile(&mut d).await;
        let (status, row) = get(&d, &half).await;
        assert_eq!((status, &row["state"]), (200, &json!("failed")), "{row}");
        assert!(
            row["failureReason"]
                .as_str()
                .unwrap()
                .contains("create never finished"),
            "{row}"
        );
        assert_agree(&d, &[&acked]).await;
        // The name is free again: a retry with it succeeds instead of a 409 forever.
        let retry = id_of(&d.create(json!({"name": "retry-me"})).await);
        assert_agree(&d, &[&acked, &retry]).await;
    });
}

/// Invariant: a create killed after the runtime started its sandbox but before the row turned running
/// ends `failed` and its sandbox is destroyed (never acknowledged, so nobody holds it): no orphan, no
/// leaked slot.
#[test]
fn kill9_after_the_runtime_started_destroys_the_unacknowledged_sandbox() {
    e2e(|| async {
        let mut d = Daemon::start_with(
            &[],
            &[("FAILPOINTS", "create.after-runtime=1*off->sleep(60000)")],
        )
        .await;
        let acked = d.create_id().await;
        let hung = in_background(&d, |c, url| {
            c.post(format!("{url}/v1/sandboxes"))
                .json(&json!({"name": "half-started"}))
        });
        let half = wait_for_row(
            &d,
            "SELECT id FROM sandboxes WHERE name = 'half-started' AND state = 'creating'",
        )
        .await;
        // Wait until its init runs (the runtime recorded its pid), then a little for start to return.
        let state = d.sandbox_dir(&half).join("state.json");
        for _ in 0..400 {
            let pid = std::fs::read(&state)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .is_some_and(|v| v["pid"].is_i64());
            if pid {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            runtime_ids(&d).contains(&half),
            "the runtime never made {half}"
        );
        d.kill9();
        assert!(
            hung.await.unwrap().is_err(),
            "the create cannot have answered"
        );
        restart_and_reconcile(&mut d).await;
        let (status, row) = get(&d, &half).await;
        assert_eq!((status, &row["state"]), (200, &json!("failed")), "{row}");
        assert!(
            row["failureReason"]
                .as_str()
                .unwrap()
                .contains("started but was never acknowledged"),
            "{row}"
        );
        assert_agree(&d, &[&acked]).await;
        let retry = id_of(&d.create(json!({"name": "half-started"})).await);
        assert_agree(&d, &[&acked, &retry]).await;
    });
}

/// Invariant: a delete killed after the row was marked `deleting` but before the runtime destroyed the
/// sandbox is finished: the sandbox is gone from store and runtime, its slot free; the others run.
#[test]
fn kill9_after_a_delete_is_marked_finishes_the_delete() {
    e2e(|| async {
        let mut d =
            Daemon::start_with(&[], &[("FAILPOINTS", "delete.after-mark=sleep(60000)")]).await;
        let kept = d.create_id().await;
        let doomed = id_of(&d.create(json!({"name": "doomed"})).await);
        let path = format!("/v1/sandboxes/{doomed}");
        let hung = in_background(&d, |c, url| c.delete(format!("{url}{path}")));
        wait_for_row(
            &d,
            &format!("SELECT id FROM sandboxes WHERE id = '{doomed}' AND state = 'deleting'"),
        )
        .await;
        assert!(runtime_ids(&d).contains(&doomed));
        d.kill9();
        assert!(
            hung.await.unwrap().is_err(),
            "the delete cannot have answered"
        );
        restart_and_reconcile(&mut d).await;
        assert_eq!(get(&d, &doomed).await.0, 404);
        assert_agree(&d, &[&kept]).await;
        // Its name is free too.
        let again = id_of(&d.create(json!({"name": "doomed"})).await);
        assert_agree(&d, &[&kept, &again]).await;
    });
}

/// Invariant: a running sandbox whose processes die without anyone reporting it is found by the
/// reconciler: `lost` with a reason, its name and slot released, its remains destroyed.
#[test]
fn a_sandbox_whose_init_died_is_marked_lost_and_cleaned() {
    e2e(|| async {
        let d = Daemon::start_with(&["--reconcile-interval-secs", "0"], &[]).await;
        let kept = d.create_id().await;
        let victim = id_of(&d.create(json!({"name": "victim"})).await);
        let state: Value = serde_json::from_slice(
            &std::fs::read(d.sandbox_dir(&victim).join("state.json")).unwrap(),
        )
        .unwrap();
        let pid = state["pid"].as_i64().expect("init pid") as i32;
        // SAFETY: kill of the init this test's daemon just started and recorded.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        // The kernel takes a moment to tear the process down; the sweep is level-triggered, so poll.
        let mut report = Value::Null;
        for _ in 0..100 {
            report = reconcile(&d).await;
            if report["totalActions"].as_u64().unwrap() > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(report["totalActions"].as_u64().unwrap() >= 1, "{report}");
        assert_eq!(reconcile(&d).await["totalActions"], 0);
        let (_, row) = get(&d, &victim).await;
        assert_eq!(row["state"], "lost", "{row}");
        assert_agree(&d, &[&kept]).await;
        let again = id_of(&d.create(json!({"name": "victim"})).await);
        assert_agree(&d, &[&kept, &again]).await;
    });
}

/// The endpoint needs the token like the rest of `/v1`, and on a healthy daemon reports nothing to do.
#[test]
fn admin_reconcile_is_authenticated_and_a_no_op_when_all_agree() {
    e2e(|| async {
        let d = Daemon::start().await;
        let id = d.create_id().await;
        let anonymous = reqwest::Client::new()
            .post(d.endpoint("/v1/admin/reconcile"))
            .send()
            .await
            .unwrap();
        assert_eq!(anonymous.status(), 401);
        let report = reconcile(&d).await;
        assert_eq!(report["totalActions"], 0, "{report}");
        let names: Vec<&str> = report["reconcilers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["claims", "sandboxes", "ports", "slots"]);
        assert_agree(&d, &[&id]).await;
    });
}
