//! The disk quota through the daemon: `diskMB` on create limits everything a sandbox writes — on
//! the backend this host offers (btrfs here), and on XFS project quotas on a filesystem the test
//! makes (skipped, saying so, on a kernel without quota support).

mod common;

use common::{e2e, free_bytes, id_of, Daemon, Setup};
use sandboxd_test_support::xfs::QuotaXfs;
use serde_json::{json, Value};

/// A write past `diskMB` fails inside the sandbox while the sandbox and the host go on; the host
/// loses at most about the quota; deleting files gives the space back; the sandbox and E2B's metrics
/// show the limit and the use.
#[test]
fn writes_stop_at_disk_mb_and_the_sandbox_lives_on() {
    e2e(|| async {
        let d = Daemon::start().await;
        let s = d.create(json!({ "diskMB": 64, "memoryMB": 128 })).await;
        assert_eq!(s["diskMB"], 64, "{s}");
        let id = id_of(&s);
        let before = free_bytes(&d.data_dir());
        let out = d
            .exec(
                &id,
                &["sh", "-c", "dd if=/dev/zero of=/home/user/fill bs=1M count=200 2>&1; sync; wc -c < /home/user/fill"],
            )
            .await;
        let text = out.stdout.to_lowercase();
        assert!(
            text.contains("quota exceeded") || text.contains("no space left"),
            "dd was not stopped: {}",
            out.stdout
        );
        let written: u64 = out.stdout.lines().last().unwrap().trim().parse().unwrap();
        assert!(
            written <= 64 << 20,
            "wrote {written} bytes past a 64 MiB quota"
        );
        let lost = before.saturating_sub(free_bytes(&d.data_dir()));
        assert!(
            lost <= 80 << 20,
            "the host lost {lost} bytes for a 64 MiB quota"
        );
        // The sandbox answers, and a smaller write fits once the file is gone.
        assert_eq!(d.exec(&id, &["echo", "alive"]).await.stdout.trim(), "alive");
        let again = d
            .exec(&id, &["sh", "-c", "rm /home/user/fill && sync && dd if=/dev/zero of=/home/user/f2 bs=1M count=30 2>/dev/null && echo ok"])
            .await;
        assert_eq!(again.stdout.trim(), "ok", "{again:?}");
        let metrics = d.get_json(&format!("/sandboxes/{id}/metrics")).await;
        assert_eq!(metrics[0]["diskTotal"], 64u64 << 20, "{metrics}");
        // Sizes too large or too small for the daemon's bounds are refused.
        for disk in [1, 10_000_000] {
            let resp = d
                .post_json("/v1/sandboxes", &json!({ "diskMB": disk }))
                .await;
            assert_eq!(resp.status(), 400, "diskMB {disk}");
            let v: Value = resp.json().await.unwrap();
            assert_eq!(v["code"], "invalid_request");
        }
        assert_eq!(d.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);
        d.wait_torn_down(&id).await;
    });
}

/// With `--disk-backend project` on a data dir whose layers live on an XFS with project quotas, a
/// sandbox's `diskMB` stops `dd` (with "No space left on device": XFS's answer for a project over its
/// limit) while the filesystem has room, and the sandbox lives on and E2B's metrics report the limit
/// and the use.
#[test]
fn project_quotas_limit_disk_mb_through_the_daemon() {
    e2e(|| async {
        let mut xfs = None;
        let d = Daemon::start_prepared(Setup::default(), |data, setup| {
            xfs = QuotaXfs::mount_on(&data.join("runtime/layers"), 512);
            if xfs.is_some() {
                setup
                    .args
                    .extend(["--disk-backend".into(), "project".into()]);
            }
        })
        .await;
        // Skipped on a kernel without quotas; else `xfs`, declared before `d`, outlives the daemon.
        if xfs.is_none() {
            return;
        }
        let s = d.create(json!({ "diskMB": 128, "memoryMB": 256 })).await;
        assert_eq!(s["diskMB"], 128, "{s}");
        let id = id_of(&s);
        let out = d
            .exec(
                &id,
                &["sh", "-c", "dd if=/dev/zero of=/home/user/fill bs=1M count=300 2>&1; sync; wc -c < /home/user/fill"],
            )
            .await;
        assert!(
            out.stdout.contains("No space left on device"),
            "dd was not stopped by the project quota: {}",
            out.stdout
        );
        let layers = d.data_dir().join("runtime/layers");
        assert!(
            free_bytes(&layers) > 256 << 20,
            "the XFS itself is full: {} bytes free",
            free_bytes(&layers)
        );
        let written: u64 = out.stdout.lines().last().unwrap().trim().parse().unwrap();
        assert!(
            (96 << 20..=128 << 20).contains(&written),
            "wrote {written} bytes under a 128 MiB quota"
        );
        assert_eq!(d.exec(&id, &["echo", "alive"]).await.stdout.trim(), "alive");
        let metrics = d.get_json(&format!("/sandboxes/{id}/metrics")).await;
        assert_eq!(metrics[0]["diskTotal"], 128u64 << 20, "{metrics}");
        let used = metrics[0]["diskUsed"].as_u64().unwrap_or(0);
        assert!(
            (written..=128 << 20).contains(&used),
            "diskUsed {used} after writing {written} bytes: {metrics}"
        );
        assert_eq!(d.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);
        d.wait_torn_down(&id).await;
    });
}
