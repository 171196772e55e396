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
//! Each crash point is a failpoint (`return(60000)` holds the flow there until the kill; see
//! `sandboxd_service::failpoints`).

mod common;

use common::{
    assert_agree, create_in_background, e2e, get, id_of, in_background, query, reconcile,
    recorded_init, restart_and_reconcile, runtime_ids, start_with_one_acked, tamper, wait_for_row,
    Daemon,
};
use serde_json::{json, Value};
use std::time::Duration;

/// Invariant: a create killed after its row was written but before the runtime made anything ends
/// `failed` with its name and slot released; sandboxes acknowledged before the crash keep running.
#[test]
fn kill9_after_the_row_is_written_fails_the_create_and_frees_its_name() {
    e2e(|| async {
        let (mut d, acked) = start_with_one_acked("create.after-insert=1*off->return(60000)").await;
        let hung = create_in_background(&d, "retry-me");
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

/// Invariant: a create killed after the runtime booted its sandbox, once its agent reported ready, leaves
/// a sandbox that is `running` in store and runtime alike (its readiness committed; only the create's
/// answer was lost): kept, executing, holding its slot and its name — no orphan, nothing leaked.
#[test]
fn kill9_after_the_runtime_started_keeps_the_sandbox_its_agent_reported_ready() {
    e2e(|| async {
        let (mut d, acked) =
            start_with_one_acked("create.after-runtime=1*off->return(60000)").await;
        let hung = create_in_background(&d, "half-started");
        // The create holds at the failpoint; the agent's call-home does not wait for it.
        let half = wait_for_row(
            &d,
            "SELECT id FROM sandboxes WHERE name = 'half-started' AND state = 'running'",
        )
        .await;
        d.kill9();
        assert!(
            hung.await.unwrap().is_err(),
            "the create cannot have answered"
        );
        // The store loses where the sandbox is (as a row from an older build never had it): the first
        // request that needs it asks the runtime (the authority), stores the answer, and is served.
        let endpoint = format!("SELECT address FROM sandbox_endpoints WHERE sandbox_id = '{half}'");
        assert_eq!(query(&d, &endpoint).len(), 1, "the create stored it");
        tamper(
            &d,
            &format!("DELETE FROM sandbox_endpoints WHERE sandbox_id = '{half}'"),
        );
        restart_and_reconcile(&mut d).await;
        assert!(query(&d, &endpoint).is_empty());
        assert_agree(&d, &[&acked, &half]).await;
        assert_eq!(
            query(&d, &endpoint).len(),
            1,
            "read-repair stored the answer"
        );
        let (_, row) = get(&d, &half).await;
        assert_eq!(row["name"], "half-started", "{row}");
    });
}

/// Invariant: a delete killed after the row was marked `deleting` but before the runtime destroyed the
/// sandbox is finished: the sandbox is gone from store and runtime, its slot free; the others run.
#[test]
fn kill9_after_a_delete_is_marked_finishes_the_delete() {
    e2e(|| async {
        let mut d =
            Daemon::start_with(&[], &[("FAILPOINTS", "delete.after-mark=return(60000)")]).await;
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

/// Invariant: a delete answers once the sandbox's processes have ended; from then on it is gone for
/// every caller and its name is free, and a teardown a crash interrupts is finished by the reconciler.
#[test]
fn kill9_during_a_teardown_behind_a_delete_finishes_it() {
    e2e(|| async {
        let mut d =
            Daemon::start_with(&[], &[("FAILPOINTS", "delete.teardown=return(60000)")]).await;
        let kept = d.create_id().await;
        let doomed = id_of(&d.create(json!({"name": "doomed"})).await);
        let (pid, _) = recorded_init(&d.sandbox_dir(&doomed)).expect("init pid");
        let path = format!("/v1/sandboxes/{doomed}");
        assert_eq!(d.delete(&path).await.status(), 204);
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            stat.rsplit(')')
                .next()
                .is_none_or(|r| r.trim_start().is_empty() || r.trim_start().starts_with('Z')),
            "the delete answered while the sandbox's init {pid} still ran: {stat}"
        );
        assert_eq!(get(&d, &doomed).await.0, 404);
        let listed: Vec<String> = d.list_all().await.iter().map(id_of).collect();
        assert_eq!(listed, vec![kept.clone()]);
        assert!(!d.remains(&doomed).is_empty(), "the teardown is held");
        let again = id_of(&d.create(json!({"name": "doomed"})).await);
        d.kill9();
        restart_and_reconcile(&mut d).await;
        assert!(d.remains(&doomed).is_empty(), "{:?}", d.remains(&doomed));
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
        let (pid, _) = recorded_init(&d.sandbox_dir(&victim)).expect("init pid");
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
        assert_eq!(
            names,
            [
                "claims",
                "images",
                "templates",
                "sandboxes",
                "ports",
                "slots",
                "placements",
                "template-homes"
            ]
        );
        assert_agree(&d, &[&id]).await;
    });
}
