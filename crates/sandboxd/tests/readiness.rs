//! Readiness by call-home against the real binary: a sandbox is `running` only once its agent reported
//! `environment-ready` to the daemon's callback socket — and that report may arrive twice, late, or
//! never.
//!
//! The failpoint `agent.exit-before-ready` (action `return`) has the runtime tell the booting agent to
//! exit right after the boot handshake, before its first call home: the reporter dies before first
//! contact. The tests then speak for the agent themselves, with the sandbox's own token.

mod common;

use common::{
    agent_token, create_in_background, e2e, failed_event, get, id_of, post_agent_event, query,
    ready_event, reconcile, register_outbox_webhook, runtime_ids, slot_holders, wait_for_row,
    Daemon,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The agent dies before first contact on every create.
const SILENT_AGENT: (&str, &str) = ("FAILPOINTS", "agent.exit-before-ready=return");

/// Webhook outbox rows of `kind` about sandbox `id`.
fn outbox_rows(d: &Daemon, kind: &str, id: &str) -> usize {
    query(
        d,
        &format!(
            "SELECT count(*) FROM webhook_outbox WHERE kind = '{kind}' AND sandbox_id = '{id}'"
        ),
    )[0]
    .parse()
    .unwrap()
}

/// Starts a create whose agent never calls; returns the sandbox id (once `starting`) and the request.
async fn create_silent(
    d: &Daemon,
    name: &str,
) -> (
    String,
    tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
) {
    let pending = create_in_background(d, name);
    let id = wait_for_row(
        d,
        &format!("SELECT id FROM sandboxes WHERE name = '{name}' AND state = 'starting'"),
    )
    .await;
    (id, pending)
}

/// Twice: fifty concurrent copies of one readiness report, and fifty more after the fact, make one
/// state change, one webhook outbox row and one ledger entry; the real agent's own report, replayed
/// fifty times after the fact, changes nothing either.
#[test]
fn readiness_replayed_fifty_times_changes_state_once() {
    e2e(|| async {
        let d =
            Daemon::start_with(&[], &[("FAILPOINTS", "agent.exit-before-ready=1*return")]).await;
        register_outbox_webhook(&d, &["sandbox.running", "sandbox.failed"]).await;
        let (id, pending) = create_silent(&d, "twice").await;
        let token = agent_token(&d, &id);
        let event = ready_event(&id, "dlv-twice-0001");
        let copies = (0..50).map(|_| post_agent_event(&d, &token, &event));
        let answers = futures::future::join_all(copies).await;
        let applied = answers
            .iter()
            .filter(|(status, body)| {
                assert_eq!(*status, 200, "{body}");
                assert_eq!(body["state"], "running", "{body}");
                body["applied"] == true
            })
            .count();
        assert_eq!(applied, 1, "exactly one copy applies");
        let created = pending.await.unwrap().unwrap();
        assert_eq!(created.status(), 201, "the waiting create is released");
        for _ in 0..50 {
            let (status, body) = post_agent_event(&d, &token, &event).await;
            assert_eq!((status, &body["applied"]), (200, &json!(false)), "{body}");
        }
        assert_eq!(outbox_rows(&d, "sandbox.running", &id), 1);
        let ledger = d
            .get_json(&format!("/v1/sandboxes/{id}/agent-events"))
            .await;
        assert_eq!(ledger["events"].as_array().unwrap().len(), 1, "{ledger}");
        assert_eq!(ledger["events"][0]["deliveryId"], "dlv-twice-0001");

        // A sandbox whose real agent reported: its delivery, replayed, is a duplicate too.
        let real = d.create_id().await;
        let ledger = d
            .get_json(&format!("/v1/sandboxes/{real}/agent-events"))
            .await;
        assert_eq!(
            ledger["events"][0]["event"], "environment-ready",
            "{ledger}"
        );
        let delivery = ledger["events"][0]["deliveryId"].as_str().unwrap();
        let token = agent_token(&d, &real);
        let replay = ready_event(&real, delivery);
        let replays = (0..50).map(|_| post_agent_event(&d, &token, &replay));
        for (status, body) in futures::future::join_all(replays).await {
            assert_eq!((status, &body["applied"]), (200, &json!(false)), "{body}");
        }
        assert_eq!(outbox_rows(&d, "sandbox.running", &real), 1);
        let out = d.exec(&real, &["sh", "-c", "echo still"]).await;
        assert_eq!(out.stdout.trim(), "still");
        // Operators see what the deliveries came to: two applied (one per sandbox), the rest dropped.
        let metrics = d
            .http()
            .get(d.endpoint("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for line in [
            "sandboxd_agent_events_total{outcome=\"applied\"} 2",
            "sandboxd_agent_events_total{outcome=\"duplicate\"} 149",
        ] {
            assert!(
                metrics.lines().any(|l| l == line),
                "{line} not in:\n{metrics}"
            );
        }
    });
}

/// Late: readiness for a sandbox already failed (here by its deadline) is refused and revives
/// nothing; a ready and a failed report racing about one sandbox end `failed` in either order.
#[test]
fn late_readiness_is_refused_and_racing_reports_converge() {
    e2e(|| async {
        let d = Daemon::start_with(&["--ready-timeout-ms", "20000"], &[SILENT_AGENT]).await;
        register_outbox_webhook(&d, &["sandbox.running", "sandbox.failed"]).await;
        let orders: [(&str, &[&str]); 3] = [
            ("ready-first", &["ready", "failed"]),
            ("failed-first", &["failed", "ready"]),
            ("together", &[]),
        ];
        for (name, order) in orders {
            let (id, pending) = create_silent(&d, name).await;
            let token = agent_token(&d, &id);
            let ready = ready_event(&id, &format!("dlv-{name}-r"));
            let failed = failed_event(&id, &format!("dlv-{name}-f"), "setup script crashed");
            let statuses: Vec<u16> = if order.is_empty() {
                let (a, b) = futures::join!(
                    post_agent_event(&d, &token, &ready),
                    post_agent_event(&d, &token, &failed)
                );
                vec![a.0, b.0]
            } else {
                let mut out = vec![];
                for step in order {
                    let event = if *step == "ready" { &ready } else { &failed };
                    out.push(post_agent_event(&d, &token, event).await.0);
                }
                out
            };
            let (_, row) = get(&d, &id).await;
            assert_eq!(row["state"], "failed", "{name}: {statuses:?} {row}");
            assert_eq!(
                row["failureReason"], "its agent reported: setup script crashed",
                "{name}"
            );
            if *order == ["failed", "ready"] {
                assert_eq!(statuses, [200, 409], "late readiness is refused");
            }
            assert_eq!(outbox_rows(&d, "sandbox.failed", &id), 1, "{name}");
            let answered = pending.await.unwrap().unwrap();
            let status = answered.status();
            // Either the create saw `running` first (ready won the race) or it was released failed.
            assert!(status == 201 || status == 500, "{name}: {status}");
            assert!(!runtime_ids(&d).contains(&id), "{name}: torn down");
            assert!(!slot_holders(&d).contains(&id), "{name}: slot released");
            // After the fact, readiness is refused, recorded nowhere, and revives nothing.
            let (status, body) = post_agent_event(&d, &token, &ready_event(&id, "dlv-late")).await;
            assert_eq!(status, 409, "{body}");
            assert_eq!(get(&d, &id).await.1["state"], "failed");
        }
    });
}

/// Never: an agent that dies before first contact → the sandbox is `failed` with a reason within its
/// deadline, its name, slot and runtime released, and the create waiting for it answers with that
/// reason.
#[test]
fn agent_dying_before_first_contact_fails_the_sandbox_within_its_deadline() {
    e2e(|| async {
        let d = Daemon::start_with(
            &[
                "--ready-timeout-ms",
                "2000",
                "--reconcile-interval-secs",
                "0",
            ],
            &[SILENT_AGENT],
        )
        .await;
        let begun = Instant::now();
        let resp = d
            .http()
            .post(d.endpoint("/v1/sandboxes"))
            .json(&json!({"name": "never"}))
            .send()
            .await
            .unwrap();
        let took = begun.elapsed();
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap();
        assert_eq!(
            (status, &body["code"]),
            (500, &json!("sandbox_failed")),
            "{body}"
        );
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains("exited before reporting ready"),
            "{message}"
        );
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(6),
            "released after {took:?}"
        );
        let listed = d.list_all().await;
        assert_eq!(listed.len(), 1, "{listed:?}");
        let id = id_of(&listed[0]);
        assert!(
            message.contains(&id),
            "the error names the sandbox: {message}"
        );
        assert_eq!(listed[0]["state"], "failed");
        assert_eq!(listed[0]["name"], "", "its name is released");
        assert!(listed[0]["failureReason"]
            .as_str()
            .unwrap()
            .contains("exited before reporting ready"));
        assert!(runtime_ids(&d).is_empty(), "runtime torn down");
        assert!(slot_holders(&d).is_empty(), "slot released");
        let ports = query(&d, "SELECT count(*) FROM exposed_ports");
        assert_eq!(ports, ["0"]);
        // Nothing was left for the reconciler.
        let report = reconcile(&d).await;
        assert_eq!(report["totalActions"], 0, "{report}");
    });
}
