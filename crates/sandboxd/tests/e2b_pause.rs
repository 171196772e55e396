//! Pause through the E2B control API of the real daemon: in place with memory (processes frozen,
//! connect resumes them) or to the files only (a stop that connect boots again).

mod common;
mod e2b_support;

use common::eventually;
use e2b_support::e2b_test;
use e2b_support::http::{create, exec, expect_e2b_error, get, post, sandbox_id};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Pause freezes the sandbox in place (the kernel reports its cgroup frozen, a process stops ticking,
/// commands are refused), a second pause is a 409, and connect resumes it with the process that was
/// started before the pause still alive.
#[test]
fn pause_freezes_in_place_and_connect_resumes_the_same_processes() {
    e2b_test(async {
        let d = e2b_support::start().await;
        let (status, created) = create(&d, &json!({"metadata": {"test": "pause"}})).await;
        assert_eq!(status, 201, "{created}");
        let id = sandbox_id(&created);
        let ticker = "nohup sh -c 'while :; do date +%s%N > /tmp/tick; sleep 0.05; done' \
                  >/dev/null 2>&1 & echo $!";
        let (status, started) = exec(&d, &id, &["sh", "-c", ticker]).await;
        assert_eq!(status, 200, "{started}");
        let pid = started["stdout"].as_str().unwrap().trim().to_string();
        assert!(pid.parse::<u32>().is_ok(), "ticker pid: {started}");
        let tick = d.upper_dir(&id).join("tmp/tick");
        let read_tick = || std::fs::read_to_string(&tick).unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(10);
        while read_tick().is_empty() {
            assert!(
                Instant::now() < deadline,
                "the ticker never wrote {}",
                tick.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let resp = post(&d, &format!("/sandboxes/{id}/pause"), json!({})).await;
        assert_eq!(resp.status(), 204);
        assert_eq!(
            d.cgroup_frozen(&id),
            Some(true),
            "the kernel reports the sandbox frozen"
        );
        let (status, info) = get(&d, &id).await;
        assert_eq!(
            (status, info["state"].as_str()),
            (200, Some("paused")),
            "{info}"
        );
        let frozen_at = read_tick();
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(read_tick(), frozen_at, "nothing runs while paused");
        let (status, refused) = exec(&d, &id, &["true"]).await;
        assert_eq!(status, 409, "commands are refused while paused: {refused}");
        let again = post(&d, &format!("/sandboxes/{id}/pause"), json!({})).await;
        expect_e2b_error("second pause", again, 409).await;
        let listed: Vec<Value> =
            serde_json::from_value(d.get_json("/v2/sandboxes?state=paused").await).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["sandboxID"], json!(id));

        let resumed = post(
            &d,
            &format!("/v2/sandboxes/{id}/connect"),
            json!({"timeout": 60}),
        )
        .await;
        assert_eq!(resumed.status(), 201, "connect resumes a paused sandbox");
        let resumed: Value = resumed.json().await.unwrap();
        assert_eq!(resumed["state"], "running");
        assert_eq!(resumed["envdAccessToken"], created["envdAccessToken"]);
        assert_eq!(d.cgroup_frozen(&id), Some(false));
        let (status, alive) = exec(&d, &id, &["kill", "-0", &pid]).await;
        assert_eq!(status, 200);
        assert_eq!(
            alive["exitCode"], 0,
            "the process started before the pause is alive: {alive}"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while read_tick() == frozen_at {
            assert!(Instant::now() < deadline, "it never ran again");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let connected = post(
            &d,
            &format!("/sandboxes/{id}/connect"),
            json!({"timeout": 60}),
        )
        .await;
        assert_eq!(connected.status(), 200, "connect to a running sandbox");

        // A paused sandbox can be killed.
        assert_eq!(
            post(&d, &format!("/sandboxes/{id}/pause"), json!({}))
                .await
                .status(),
            204
        );
        let killed = d
            .http()
            .delete(d.endpoint(&format!("/sandboxes/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(killed.status(), 204);
        let again = d
            .http()
            .delete(d.endpoint(&format!("/sandboxes/{id}")))
            .send()
            .await
            .unwrap();
        expect_e2b_error("second kill", again, 404).await;
        d.wait_torn_down(&id).await;
    });
}

/// A pause with `memory: false` keeps only the files: the sandbox is stopped, E2B lists it paused
/// with `pauseMode: "filesystem"`, a second pause is a 409, and connect boots it again on its files
/// (the process from before is gone, the file it wrote is there). A memory-paused sandbox connected
/// with `memory: false` is cold-booted the same way.
#[test]
fn a_filesystem_pause_keeps_the_files_and_connect_boots_them_again() {
    e2b_test(async {
        let d = e2b_support::start().await;
        let (status, created) = create(&d, &json!({"metadata": {"test": "fs-pause"}})).await;
        assert_eq!(status, 201, "{created}");
        let id = sandbox_id(&created);
        let (status, started) = exec(
            &d,
            &id,
            &[
                "sh",
                "-c",
                "echo kept > /tmp/kept; nohup sleep 4242 >/dev/null 2>&1 &",
            ],
        )
        .await;
        assert_eq!(status, 200, "{started}");
        // A pid of the old boot may be reused by the new one: the sleeper is known by its argument
        // (a pattern that does not match the grep itself).
        let check =
            "cat /tmp/kept; for c in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $c; echo; done \
                     2>/dev/null | grep -q 'sleep 424[2]' && echo alive || echo gone";

        let resp = post(
            &d,
            &format!("/sandboxes/{id}/pause"),
            json!({"memory": false}),
        )
        .await;
        assert_eq!(resp.status(), 204);
        let (status, info) = get(&d, &id).await;
        assert_eq!(
            (status, info["state"].as_str()),
            (200, Some("paused")),
            "{info}"
        );
        assert_eq!(info["pauseMode"], "filesystem", "{info}");
        let native = d.get_json(&format!("/v1/sandboxes/{id}")).await;
        assert_eq!(native["state"], "stopped", "{native}");
        let again = post(
            &d,
            &format!("/sandboxes/{id}/pause"),
            json!({"memory": false}),
        )
        .await;
        expect_e2b_error("second pause", again, 409).await;
        let listed: Vec<Value> =
            serde_json::from_value(d.get_json("/v2/sandboxes?state=paused").await).unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0]["pauseMode"], "filesystem");

        let resumed = post(
            &d,
            &format!("/v2/sandboxes/{id}/connect"),
            json!({"timeout": 60}),
        )
        .await;
        assert_eq!(
            resumed.status(),
            201,
            "connect boots a sandbox paused to its files"
        );
        let resumed: Value = resumed.json().await.unwrap();
        assert_eq!(resumed["state"], "running");
        let (status, after) = exec(&d, &id, &["sh", "-c", check]).await;
        assert_eq!(status, 200, "{after}");
        assert_eq!(after["stdout"], "kept\ngone\n", "{after}");

        // Paused with memory, then connected with `memory: false`: a cold boot.
        let (status, _) = exec(&d, &id, &["sh", "-c", "nohup sleep 4242 >/dev/null 2>&1 &"]).await;
        assert_eq!(status, 200);
        // Seen once it has run `sleep` (a process in the middle of its exec shows an empty
        // command line).
        eventually(
            || "the check never saw the sleeper alive".into(),
            Duration::from_secs(10),
            || async {
                let (_, alive) = exec(&d, &id, &["sh", "-c", check]).await;
                (alive["stdout"] == "kept\nalive\n").then_some(())
            },
        )
        .await;
        assert_eq!(
            post(&d, &format!("/sandboxes/{id}/pause"), json!({}))
                .await
                .status(),
            204
        );
        let (_, info) = get(&d, &id).await;
        assert_eq!(info["pauseMode"], "full", "{info}");
        let cold = post(
            &d,
            &format!("/v2/sandboxes/{id}/connect"),
            json!({"timeout": 60, "memory": false}),
        )
        .await;
        assert_eq!(cold.status(), 201);
        let (_, after) = exec(&d, &id, &["sh", "-c", check]).await;
        assert_eq!(after["stdout"], "kept\ngone\n", "{after}");
        assert_eq!(
            d.http()
                .delete(d.endpoint(&format!("/sandboxes/{id}")))
                .send()
                .await
                .unwrap()
                .status(),
            204
        );
        d.wait_torn_down(&id).await;
    });
}
