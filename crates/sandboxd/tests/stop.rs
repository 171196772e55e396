//! Stop and start (`/v1/sandboxes/{id}/stop|start`, `sbx stop|start`; Daytona's `stop`/`start` are
//! the same flows): a stop ends every process and releases the sandbox's cgroup while its files,
//! name and slot stay; a start boots it again on the same files. And a daemon killed mid-stop
//! (`kill -9` while the failpoint `stop.after-claim` holds the row `stopping`) has the stop finished
//! by the reconciler after its restart, never undone and never turned into a delete.

mod common;

use common::{e2e, id_of, restart_and_reconcile, Daemon};
use serde_json::json;

async fn post(d: &Daemon, id: &str, action: &str) -> (u16, serde_json::Value) {
    let resp = d
        .post_json(&format!("/v1/sandboxes/{id}/{action}"), &json!({}))
        .await;
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

/// Invariant: a stopped sandbox runs nothing and holds no cgroup; its writable layer, its name and
/// its slot are kept, and a start gives it back its files.
#[test]
fn a_stop_ends_every_process_and_a_start_keeps_the_files() {
    e2e(|| async {
        let d = Daemon::start().await;
        let name = format!("stoppable-{}", std::process::id());
        let id = id_of(&d.create(json!({ "name": name })).await);
        let setup = d
            .exec(
                &id,
                &[
                    "sh",
                    "-c",
                    "echo kept > /home/user/kept.txt; nohup sleep 1000 >/dev/null 2>&1 &",
                ],
            )
            .await;
        assert_eq!(setup.exit_code, 0, "{setup:?}");
        assert!(
            !d.cgroup_dirs(&id).is_empty(),
            "a running sandbox has a cgroup"
        );

        let (status, stopped) = post(&d, &id, "stop").await;
        assert_eq!(
            (status, stopped["state"].as_str()),
            (200, Some("stopped")),
            "{stopped}"
        );
        assert!(
            d.cgroup_dirs(&id).is_empty(),
            "its cgroup (and every process in it) is gone"
        );
        assert!(
            d.upper_dir(&id).join("home/user/kept.txt").exists(),
            "its layer is kept"
        );
        let (status, body) = d.exec_raw(&id, &json!({ "cmd": ["true"] })).await;
        assert_eq!(status, 409, "a command in a stopped sandbox: {body}");
        assert_eq!(post(&d, &id, "pause").await.0, 409);
        assert_eq!(
            post(&d, &id, "stop").await.0,
            200,
            "stopping a stopped sandbox"
        );
        let taken = d.post_json("/v1/sandboxes", &json!({ "name": name })).await;
        assert_eq!(taken.status(), 409, "the name stays taken while stopped");

        let (status, started) = post(&d, &id, "start").await;
        assert_eq!(
            (status, started["state"].as_str()),
            (200, Some("running")),
            "{started}"
        );
        assert_eq!(
            d.exec(&id, &["cat", "/home/user/kept.txt"]).await.stdout,
            "kept\n"
        );
        let sleepers = d
            .exec(&id, &["sh", "-c", "pgrep -x sleep || echo none"])
            .await;
        assert_eq!(sleepers.stdout, "none\n", "a process outlived the stop");
        assert_eq!(
            post(&d, &id, "start").await.0,
            200,
            "starting a running sandbox"
        );

        // A stopped sandbox can be deleted, and its layer goes with it.
        assert_eq!(post(&d, &id, "stop").await.0, 200);
        assert_eq!(d.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);
        d.wait_torn_down(&id).await;
    });
}

/// Invariant: a stop interrupted by a crash is finished by the reconciler: the row ends `stopped`
/// (not deleted, not running), the processes are gone, and a start boots it on its files.
#[test]
fn kill9_mid_stop_is_finished_by_the_reconciler() {
    e2e(|| async {
        let mut d =
            Daemon::start_with(&[], &[("FAILPOINTS", "stop.after-claim=return(60000)")]).await;
        let id = d.create_id().await;
        d.exec(
            &id,
            &["sh", "-c", "echo before-crash > /home/user/note.txt"],
        )
        .await;
        let path = format!("/v1/sandboxes/{id}/stop");
        let hung = common::in_background(&d, |c, url| c.post(format!("{url}{path}")));
        common::wait_for_row(
            &d,
            &format!("SELECT state FROM sandboxes WHERE id = '{id}' AND state = 'stopping'"),
        )
        .await;
        d.kill9();
        assert!(
            hung.await.unwrap().is_err(),
            "the stop cannot have answered"
        );
        // The start-up pass finishes it (the explicit passes then find nothing left to do).
        restart_and_reconcile(&mut d).await;
        let row = d.get_json(&format!("/v1/sandboxes/{id}")).await;
        assert_eq!(row["state"], "stopped", "{row}");
        assert!(d.cgroup_dirs(&id).is_empty(), "its processes are gone");
        let (status, started) = post(&d, &id, "start").await;
        assert_eq!(status, 200, "{started}");
        assert_eq!(
            d.exec(&id, &["cat", "/home/user/note.txt"]).await.stdout,
            "before-crash\n"
        );
        assert_eq!(d.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);
    });
}
