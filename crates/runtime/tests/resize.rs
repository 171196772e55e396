//! Resizing real sandboxes: a running sandbox's cgroup takes new CPU and memory limits at once, a
//! stopped one's writable layer a bigger disk limit (a write past the old limit then fits), and a
//! start after a resize boots with the new limits (they are persisted, not only applied). On the
//! default disk backend (btrfs here) and on XFS project quotas (skipped, saying so, on a kernel
//! without quota support).

mod common;

use common::{config, fixture, text, Fixture};
use sandboxd_runtime::namespace::NamespaceRuntime;
use sandboxd_runtime::quota::{DiskBackend, DiskMode};
use sandboxd_runtime::{ResourceLimits, Runtime};
use sandboxd_test_support::require_root;
use sandboxd_test_support::xfs::QuotaXfs;

const MIB: u64 = 1024 * 1024;

async fn resize_applies_at_once_and_holds_after_a_restart(fx: &Fixture) {
    assert_ne!(
        fx.rt.disk_backend(),
        DiskBackend::Off,
        "no disk quota backend"
    );
    let small = ResourceLimits {
        memory_mb: 128,
        cpu_millis: 500,
        disk_mb: 32,
        ..Default::default()
    };
    let mut sb = fx.sandbox_with(small).await;
    let id = sb.info.id().to_string();
    let stats = fx.rt.stats(&id).await.expect("stats");
    assert_eq!(stats.memory_limit_bytes, Some(128 * MIB));

    let bigger = ResourceLimits {
        memory_mb: 256,
        cpu_millis: 1000,
        ..small
    };
    fx.rt.resize(&id, &bigger).await.expect("hot resize");
    let stats = fx.rt.stats(&id).await.expect("stats");
    assert_eq!(stats.memory_limit_bytes, Some(256 * MIB), "applied at once");
    assert_eq!(text(&sb.sh("echo alive").await.stdout), "alive\n");

    fx.rt.stop(&id).await.expect("stop");
    let roomy = ResourceLimits {
        disk_mb: 96,
        ..bigger
    };
    fx.rt
        .resize(&id, &roomy)
        .await
        .expect("resize while stopped");
    let info = fx.rt.start(&id).await.expect("start");
    let stats = fx.rt.stats(&id).await.expect("stats");
    assert_eq!(stats.memory_limit_bytes, Some(256 * MIB), "persisted");
    let usage = fx.rt.disk_usage(&id).await.expect("usage");
    assert_eq!(usage.limit_bytes, Some(96 * MIB));
    // 64 MiB did not fit the old 32 MiB; it fits the new limit.
    sb.restarted(info);
    let fill = sb
        .sh("dd if=/dev/zero of=/home/user/fill bs=1M count=64 2>&1 && sync && echo fits")
        .await;
    assert!(
        text(&fill.stdout).contains("fits"),
        "{}",
        text(&fill.stdout)
    );
    fx.destroy(&sb).await;
}

#[tokio::test]
async fn a_resize_holds_on_the_default_backend() {
    if !require_root() {
        return;
    }
    resize_applies_at_once_and_holds_after_a_restart(&fixture().await).await;
}

#[tokio::test]
async fn a_resize_holds_on_xfs_project_quotas() {
    if !require_root() {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("sandboxd-rt-")
        .tempdir()
        .expect("tempdir");
    let Some(_xfs) = QuotaXfs::mount_on(&dir.path().join("runtime/layers"), 512) else {
        return;
    };
    let mut config = config(dir.path());
    config.disk.mode = DiskMode::Project;
    let rt = NamespaceRuntime::new(config)
        .await
        .expect("runtime on project quotas");
    let fx = Fixture { rt, dir };
    assert_eq!(fx.rt.disk_backend(), DiskBackend::ProjectQuota);
    resize_applies_at_once_and_holds_after_a_restart(&fx).await;
}
