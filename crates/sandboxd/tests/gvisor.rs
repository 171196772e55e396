//! The gVisor tier through the real daemon: a create names its tier, everything of a sandbox works
//! behind gVisor's kernel, and pause keeps its memory on disk across a kill -9 of the daemon.

mod common;

use common::{
    assert_agree, built, e2e, expect_error, id_of, in_background, require_gvisor,
    restart_and_reconcile, runtime_ids, Daemon,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

async fn count(daemon: &Daemon, id: &str) -> u64 {
    let out = daemon.exec(id, &["cat", "/tmp/count"]).await;
    out.stdout.trim().parse().unwrap_or(0)
}

async fn wait_count_past(daemon: &Daemon, id: &str, past: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = count(daemon, id).await;
        if now > past {
            return now;
        }
        assert!(Instant::now() < deadline, "{id} stopped counting at {now}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A shell counting in memory in a gVisor sandbox goes on from where it was after pause → kill -9
/// of the daemon → restart → resume; meanwhile the sandbox is paused (nothing of it runs) and stays
/// so across the restart. Files, exec and delete work as on the namespace tier, and nothing is left.
#[test]
fn a_gvisor_sandbox_keeps_its_memory_across_pause_and_a_daemon_kill9() {
    if !require_gvisor() {
        return;
    }
    e2e(|| async {
        let mut daemon = Daemon::start().await;
        let made = daemon
            .create(json!({ "isolation": "gvisor", "timeoutSec": 600 }))
            .await;
        assert_eq!(made["isolation"], "gvisor", "{made}");
        let id = id_of(&made);
        let kernel = daemon.exec(&id, &["sh", "-c", "dmesg | head -1"]).await;
        assert!(
            kernel.stdout.contains("gVisor"),
            "not gVisor's kernel: {kernel:?}"
        );
        daemon
            .put_file(&id, "/home/user/mark.txt", b"kept".to_vec())
            .await;
        assert_eq!(daemon.get_file(&id, "/home/user/mark.txt").await, b"kept");
        let looper = "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done";
        let line = format!("nohup sh -c '{looper}' >/dev/null 2>&1 &");
        daemon.exec(&id, &["sh", "-c", &line]).await;
        let before = wait_count_past(&daemon, &id, 5).await;
        let paused = daemon
            .post_json(&format!("/v1/sandboxes/{id}/pause"), &json!({}))
            .await;
        assert_eq!(
            paused.status(),
            200,
            "{}",
            paused.text().await.unwrap_or_default()
        );
        daemon.kill9();
        daemon.restart().await;
        let seen = daemon.get_json(&format!("/v1/sandboxes/{id}")).await;
        assert_eq!(seen["state"], "paused", "{seen}");
        let resumed = daemon
            .post_json(&format!("/v1/sandboxes/{id}/resume"), &json!({}))
            .await;
        assert_eq!(
            resumed.status(),
            200,
            "{}",
            resumed.text().await.unwrap_or_default()
        );
        let after = count(&daemon, &id).await;
        assert!(
            after >= before,
            "the count restarted: {before}, then {after}"
        );
        wait_count_past(&daemon, &id, after).await;
        assert_eq!(daemon.get_file(&id, "/home/user/mark.txt").await, b"kept");
        let deleted = daemon.delete(&format!("/v1/sandboxes/{id}")).await;
        assert_eq!(deleted.status(), 204);
        daemon.wait_torn_down(&id).await;
        assert!(
            daemon.remains(&id).is_empty(),
            "left: {:?}",
            daemon.remains(&id)
        );
    });
}

/// A tier that is no tier, and one the daemon does not offer (its runsc unusable here), are the
/// client's mistakes: 400 saying why, nothing made.
#[test]
fn an_unknown_or_unoffered_tier_is_refused_saying_why() {
    e2e(|| async {
        let daemon = Daemon::start_with(&["--runsc", "/nonexistent/runsc"], &[]).await;
        for (tier, says) in [
            ("vm", "unknown isolation"),
            ("gvisor", "bookworm-backports"),
        ] {
            let resp = daemon
                .post_json("/v1/sandboxes", &json!({ "isolation": tier }))
                .await;
            assert_eq!(resp.status(), 400, "{tier}");
            let body: Value = resp.json().await.unwrap();
            assert!(
                body["message"].as_str().unwrap_or_default().contains(says),
                "{tier}: {body}"
            );
        }
        let listed = daemon.get_json("/v1/sandboxes").await;
        assert_eq!(
            listed["sandboxes"].as_array().map(Vec::len),
            Some(0),
            "{listed}"
        );
        let made = daemon.create(json!({})).await;
        assert_eq!(made["isolation"], "namespace");
    });
}

/// How many processes in sandbox `id` run `sleep 4242`.
async fn sleepers(daemon: &Daemon, id: &str) -> String {
    let count = "ps -eo args | grep -c '^sleep 4242$'";
    let out = daemon.exec(id, &["sh", "-c", count]).await;
    out.stdout.trim().to_string()
}

/// `sbx fork ID -n 2` prints two new sandboxes that carry the source's files; the /v1 answer has
/// one result per fork. A namespace sandbox is refused (exit 1, naming the tier), and so is a count
/// outside 1..20. The claim (`orphan_terminals`): a terminal open in the source is the source's
/// alone; a fork does not keep its copy, whose caller is attached to the source.
#[test]
fn sbx_forks_a_gvisor_sandbox_and_refuses_a_namespace_one() {
    if !require_gvisor() {
        return;
    }
    e2e(|| async {
        let daemon = Daemon::start().await;
        let source = id_of(&daemon.create(json!({ "isolation": "gvisor" })).await);
        daemon
            .put_file(&source, "/home/user/mark", b"source".to_vec())
            .await;
        let terminal = daemon.terminal_request(&source, "cmd=sleep&cmd=4242");
        let (_terminal, _) = tokio_tungstenite::connect_async(terminal)
            .await
            .expect("open a terminal in the source");
        assert_eq!(sleepers(&daemon, &source).await, "1", "the terminal runs");
        let out = daemon.sbx(&["--json", "fork", &source, "-n", "2"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let forks: Value = serde_json::from_slice(&out.stdout).unwrap();
        let ids: Vec<String> = forks["forks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| id_of(&f["sandbox"]))
            .collect();
        assert_eq!(ids.len(), 2, "{forks}");
        for id in &ids {
            assert_ne!(id, &source);
            assert_eq!(daemon.get_file(id, "/home/user/mark").await, b"source");
            let seen = daemon.get_json(&format!("/v1/sandboxes/{id}")).await;
            assert_eq!(
                (seen["state"].as_str(), seen["isolation"].as_str()),
                (Some("running"), Some("gvisor"))
            );
            assert_eq!(sleepers(&daemon, id).await, "0", "a fork kept the terminal");
        }
        assert_eq!(
            sleepers(&daemon, &source).await,
            "1",
            "the source's terminal runs"
        );
        for count in [0, 21] {
            let resp = daemon
                .post_json(
                    &format!("/v1/sandboxes/{source}/fork"),
                    &json!({ "count": count }),
                )
                .await;
            assert_eq!(resp.status(), 400, "count {count}");
        }
        let plain = daemon.create_id().await;
        let refused = daemon.sbx(&["fork", &plain]);
        assert!(!refused.status.success());
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains("gvisor"), "{said}");
        for id in ids.iter().chain([&source, &plain]) {
            assert_eq!(
                daemon.delete(&format!("/v1/sandboxes/{id}")).await.status(),
                204
            );
        }
    });
}

/// Invariant: a fork killed after its copies were restored, before they were recorded running,
/// leaves no half copy: after a restart and a reconcile the copies are settled with a reason, and
/// nothing of them is left on the host (runsc processes, runtime directory, layer, cgroup, slot);
/// the source runs on and answers.
#[test]
fn a_fork_killed_mid_way_leaves_no_half_copy() {
    if !require_gvisor() {
        return;
    }
    e2e(|| async {
        let mut d =
            Daemon::start_with(&[], &[("FAILPOINTS", "fork.after-restore=return(60000)")]).await;
        let source = id_of(
            &d.create(json!({ "isolation": "gvisor", "timeoutSec": 600 }))
                .await,
        );
        let path = format!("/v1/sandboxes/{source}/fork");
        let hung = in_background(&d, |c, url| {
            c.post(format!("{url}{path}")).json(&json!({ "count": 2 }))
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        while !d.log_tail(200).contains("holding at a failpoint") {
            assert!(
                Instant::now() < deadline,
                "the fork never reached its failpoint"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let forks: Vec<String> = runtime_ids(&d)
            .into_iter()
            .filter(|id| *id != source)
            .collect();
        assert_eq!(forks.len(), 2, "{forks:?}");
        let running = |id: &str| {
            std::process::Command::new("pgrep")
                .args(["-f", &format!("runsc.* {id}$")])
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        };
        assert!(forks.iter().all(|f| running(f)), "the copies run");
        d.kill9();
        assert!(
            hung.await.unwrap().is_err(),
            "the fork cannot have answered"
        );
        restart_and_reconcile(&mut d).await;
        assert_agree(&d, &[&source]).await;
        for f in &forks {
            assert!(d.remains(f).is_empty(), "left of {f}: {:?}", d.remains(f));
            assert!(!running(f), "a runsc process of {f} outlived the reconcile");
        }
    });
}

/// A volume is one tree across tiers: what a gVisor sandbox writes there a namespace sandbox reads
/// at once, owned by `user` in both; a pause (a checkpoint) and a fork keep the mount, and what was
/// written while the sandbox was paused is there after its resume; a snapshot copies the sandbox's
/// own files, not the volume's; a subpath mount is the directory it names in the gVisor tier too,
/// and one through a link a sandbox planted is refused.
#[test]
fn a_volume_is_shared_between_a_gvisor_and_a_namespace_sandbox() {
    e2e(|| async {
        if !require_gvisor() {
            return;
        }
        let d = Daemon::start().await;
        let made = d.post_json("/v1/volumes", &json!({"name": "across"})).await;
        assert_eq!(made.status(), 201);
        let mount = json!([{"name": "across", "path": "/data"}]);
        let boxed = id_of(
            &d.create(json!({"isolation": "gvisor", "volumes": mount}))
                .await,
        );
        let plain = id_of(&d.create(json!({"volumes": mount})).await);
        let wrote = d
            .exec(
                &boxed,
                &[
                    "sh",
                    "-c",
                    "echo from-gvisor > /data/f && stat -c %U /data/f",
                ],
            )
            .await;
        assert_eq!(wrote.stdout.trim(), "user", "{wrote:?}");
        let read = d
            .exec(&plain, &["sh", "-c", "cat /data/f; stat -c %U /data/f"])
            .await;
        assert_eq!(read.stdout, "from-gvisor\nuser\n", "{read:?}");
        // A pause keeps the mount: what was written meanwhile is there after the resume.
        let paused = d
            .post_json(&format!("/v1/sandboxes/{boxed}/pause"), &json!({}))
            .await;
        assert!(paused.status().is_success(), "{:?}", paused.text().await);
        let meanwhile = d
            .exec(&plain, &["sh", "-c", "echo meanwhile > /data/g"])
            .await;
        assert_eq!(meanwhile.exit_code, 0, "{meanwhile:?}");
        let resumed = d
            .post_json(&format!("/v1/sandboxes/{boxed}/resume"), &json!({}))
            .await;
        assert!(resumed.status().is_success(), "{:?}", resumed.text().await);
        let after = d
            .exec(
                &boxed,
                &["sh", "-c", "cat /data/g && echo resumed > /data/h"],
            )
            .await;
        assert_eq!(after.stdout, "meanwhile\n", "{after:?}");
        // A fork mounts it too.
        let forked = d
            .post_json(&format!("/v1/sandboxes/{boxed}/fork"), &json!({"count": 1}))
            .await;
        assert!(forked.status().is_success(), "{:?}", forked.text().await);
        let forked: Value = forked.json().await.unwrap();
        let fork = id_of(&forked["forks"][0]["sandbox"]);
        let from_fork = d
            .exec(&fork, &["sh", "-c", "cat /data/h && echo forked > /data/i"])
            .await;
        assert_eq!(from_fork.stdout, "resumed\n", "{from_fork:?}");
        let seen = d.exec(&plain, &["cat", "/data/i"]).await;
        assert_eq!(seen.stdout, "forked\n", "{seen:?}");
        // A snapshot keeps the sandbox's own files, not the volume's.
        d.put_file(&plain, "/home/user/own", b"own".to_vec()).await;
        let snap = d
            .post_json(
                &format!("/v1/sandboxes/{plain}/snapshot"),
                &json!({"name": "with-a-volume"}),
            )
            .await;
        assert!(snap.status().is_success(), "{:?}", snap.text().await);
        assert_eq!(built(&d, "with-a-volume").await["state"], "ready");
        let copy = id_of(&d.create(json!({"template": "with-a-volume"})).await);
        let looked = d
            .exec(
                &copy,
                &[
                    "sh",
                    "-c",
                    "cat /home/user/own; ls -A /data 2>/dev/null | wc -l",
                ],
            )
            .await;
        assert_eq!(looked.stdout, "own0\n", "{looked:?}");
        let at = |subpath: &str| json!({"isolation": "gvisor", "volumes": [{"name": "across", "path": "/w", "subpath": subpath}]});
        let sub = id_of(&d.create(at("x/y")).await);
        let wrote = d
            .exec(&sub, &["sh", "-c", "echo sub > /w/s && ls -A /w"])
            .await;
        assert_eq!(wrote.stdout, "s\n", "{wrote:?}");
        let seen = d.exec(&plain, &["cat", "/data/x/y/s"]).await;
        assert_eq!(seen.stdout, "sub\n", "{seen:?}");
        let planted = d.exec(&plain, &["ln", "-s", "/", "/data/escape"]).await;
        assert_eq!(planted.exit_code, 0, "{planted:?}");
        let refused = d.post_json("/v1/sandboxes", &at("escape/etc")).await;
        expect_error("a gVisor subpath through a link", refused, 400, None).await;
    });
}
