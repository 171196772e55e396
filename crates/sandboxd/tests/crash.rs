//! Crash tests over the expose and callback steps (the create and delete steps are in `reconcile.rs`):
//! the daemon is killed (`kill -9`) while a failpoint holds the step, restarted, and after a reconcile
//! pass store and runtime agree — no orphan, no leak, no lost acknowledged sandbox — and a second pass
//! does nothing ([`restart_and_reconcile`]).
//!
//! Failpoints: `expose.forwarder` (the exposure's row is written `exposing`, its forwarder not yet
//! listening), `callback.before-apply` (an agent's readiness received, nothing written) and
//! `callback.after-apply` (written, the 200 not yet sent: the sender must retry a delivery that was
//! applied).

mod common;

use common::{
    agent_token, assert_agree, create_in_background, e2e, get, id_of, in_background,
    post_agent_event, query, ready_event, register_outbox_webhook, restart_and_reconcile,
    serve_port, start_with_one_acked, wait_for_row, Daemon,
};
use serde_json::{json, Value};
use std::time::Duration;

/// The events sandbox `id`'s agent reported, as the API lists them.
async fn agent_events(d: &Daemon, id: &str) -> Vec<Value> {
    let list = d
        .get_json(&format!("/v1/sandboxes/{id}/agent-events"))
        .await;
    list["events"].as_array().cloned().unwrap_or_default()
}

/// Invariant: an exposure killed between its reservation and its forwarder is finished by the
/// reconciler: one row, `active`, its host port forwarding to the sandbox.
#[test]
fn kill9_while_exposing_installs_the_exposure_once() {
    e2e(|| async {
        let mut d =
            Daemon::start_with(&[], &[("FAILPOINTS", "expose.forwarder=sleep(60000)")]).await;
        let id = d.create_id().await;
        serve_port(&d, &id, 8000).await;
        let path = format!("/v1/sandboxes/{id}/ports");
        let hung = in_background(&d, |c, url| {
            c.post(format!("{url}{path}"))
                .json(&json!({"port": 8000, "protocol": "tcp"}))
        });
        let host_port = wait_for_row(
            &d,
            &format!("SELECT host_port FROM exposed_ports WHERE sandbox_id = '{id}' AND state = 'exposing'"),
        )
        .await;
        d.kill9();
        assert!(
            hung.await.unwrap().is_err(),
            "the expose cannot have answered"
        );
        restart_and_reconcile(&mut d).await;
        let rows = query(
            &d,
            &format!("SELECT host_port, state FROM exposed_ports WHERE sandbox_id = '{id}'"),
        );
        assert_eq!(rows, [format!("{host_port}|active")]);
        let got = reqwest::get(format!("http://127.0.0.1:{host_port}/"))
            .await
            .expect("the host port forwards");
        assert_eq!(got.status(), 200);
        assert_agree(&d, &[&id]).await;
    });
}

/// Invariant: readiness received but not applied when the daemon died leaves the sandbox `starting`
/// with no create waiting for it; the restarted daemon fails it (its agent never got an answer) and
/// tears it down, and the agent's retry is refused rather than reviving it.
#[test]
fn kill9_before_readiness_is_applied_fails_the_unanswered_sandbox() {
    e2e(|| async {
        let (mut d, acked) =
            start_with_one_acked("callback.before-apply=1*off->return(60000)").await;
        let hung = create_in_background(&d, "unready");
        let half = wait_for_row(
            &d,
            "SELECT id FROM sandboxes WHERE name = 'unready' AND state = 'starting'",
        )
        .await;
        // Its agent reports within moments of the boot, and the report is then held.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !d.log_tail(200).contains("holding at a failpoint") {
            assert!(
                std::time::Instant::now() < deadline,
                "the agent's report never reached the failpoint: {}",
                d.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        d.kill9();
        assert!(
            hung.await.unwrap().is_err(),
            "the create cannot have answered"
        );
        let token = agent_token(&d, &half);
        restart_and_reconcile(&mut d).await;
        let (_, row) = get(&d, &half).await;
        assert_eq!(row["state"], "failed", "{row}");
        assert!(
            row["failureReason"]
                .as_str()
                .unwrap()
                .contains("never reported ready"),
            "{row}"
        );
        assert_agree(&d, &[&acked]).await;
        // However late the agent's retry comes, it does not revive the sandbox.
        let (status, body) = post_agent_event(&d, &token, &ready_event(&half, "dlv-late")).await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(get(&d, &half).await.1["state"], "failed");
        assert!(agent_events(&d, &half).await.is_empty());
    });
}

/// Invariant: readiness applied but unanswered when the daemon died: the sandbox stays `running`, and
/// the agent's retry of the same delivery is a duplicate — one state change, one outbox row, one
/// ledger entry.
#[test]
fn kill9_after_readiness_is_applied_makes_the_retry_a_duplicate() {
    e2e(|| async {
        let mut d = Daemon::start_with(
            &[],
            &[("FAILPOINTS", "callback.after-apply=1*off->return(60000)")],
        )
        .await;
        register_outbox_webhook(&d, &["sandbox.running"]).await;
        let acked = d.create_id().await;
        let hung = create_in_background(&d, "answer-lost");
        let half = wait_for_row(
            &d,
            "SELECT id FROM sandboxes WHERE name = 'answer-lost' AND state = 'running'",
        )
        .await;
        d.kill9();
        // The create may have answered (it reads the committed `running`), the agent has not.
        let _ = hung.await;
        restart_and_reconcile(&mut d).await;
        // The agent heard no answer; its retry (about 1 s, then 5 s later) reaches the new daemon.
        let mut deduped = false;
        for _ in 0..150 {
            if d.log_tail(200).contains("duplicate agent event ignored") {
                deduped = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(deduped, "the agent never retried: {}", d.log_tail(40));
        assert_agree(&d, &[&acked, &half]).await;
        assert_eq!(agent_events(&d, &half).await.len(), 1);
        let running = query(
            &d,
            &format!(
                "SELECT count(*) FROM webhook_outbox WHERE kind = 'sandbox.running' AND sandbox_id = '{half}'"
            ),
        );
        assert_eq!(running, ["1"], "one state change, one outbox row");
        assert_eq!(id_of(&get(&d, &half).await.1), half);
    });
}
