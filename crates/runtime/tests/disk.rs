//! The disk quota on a sandbox's writable layer, against real sandboxes: a full layer refuses writes
//! and the sandbox lives on; destroy takes the layer with it; without a backend a sandbox still works
//! and a limit is refused; sandboxes made without a quota are still found; a restart reuses the pool.
//! The tests on the default backend take what this host offers (btrfs here); the project-quota
//! tests make their own XFS with `prjquota` and skip, saying so, on a kernel without quota support.

mod common;

use common::{config, fixture, fixture_with, spec, text, Fixture};
use sandboxd_runtime::namespace::NamespaceRuntime;
use sandboxd_runtime::quota::{DiskBackend, DiskMode};
use sandboxd_runtime::{ResourceLimits, Runtime, RuntimeError};
use sandboxd_test_support::xfs::QuotaXfs;
use sandboxd_test_support::{require_root, test_slot};

const MIB: u64 = 1024 * 1024;

fn limited(disk_mb: u64) -> ResourceLimits {
    ResourceLimits {
        disk_mb,
        ..Default::default()
    }
}

/// How often `name` is mounted, from /proc/self/mountinfo (field 5 is the mount point).
fn mounts_on(path: &std::path::Path) -> usize {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = path.to_str().unwrap();
    info.lines()
        .filter(|l| l.split(' ').nth(4) == Some(want))
        .count()
}

#[tokio::test]
async fn a_full_layer_refuses_writes_and_the_sandbox_lives_on() {
    if !require_root() {
        return;
    }
    let fx = fixture().await;
    assert_ne!(
        fx.rt.disk_backend(),
        DiskBackend::Off,
        "no disk quota backend on this host (project quotas, or btrfs with btrfs-progs)"
    );
    let sb = fx.sandbox_with(limited(64)).await;
    let id = sb.info.id().to_string();
    let usage = fx.rt.disk_usage(&id).await.expect("usage");
    assert_eq!(usage.limit_bytes, Some(64 * MIB));

    // /home/user is on the overlay (no tmpfs there), so this writes into the quota'd upper layer.
    let fill = sb
        .sh("dd if=/dev/zero of=/home/user/fill bs=1M count=200; echo rc=$?; sync; stat -c %s /home/user/fill")
        .await;
    let (stdout, stderr) = (text(&fill.stdout), text(&fill.stderr));
    assert!(
        stderr.contains("Disk quota exceeded") || stderr.contains("No space left on device"),
        "dd was not stopped by the quota: {stderr}"
    );
    assert!(!stdout.contains("rc=0"), "dd succeeded: {stdout}");
    let written: u64 = stdout
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no size in {stdout:?}"));
    assert!(
        (32 * MIB..=66 * MIB).contains(&written),
        "{written} bytes written under a 64 MiB limit"
    );
    let usage = fx.rt.disk_usage(&id).await.expect("usage");
    assert!(
        (32 * MIB..=66 * MIB).contains(&usage.used_bytes),
        "usage {usage:?} after filling the layer"
    );

    let alive = sb.sh("echo alive").await;
    assert_eq!(text(&alive.stdout), "alive\n");

    // Space comes back once the file is gone (freed at the transaction commit `sync` forces).
    let again = sb
        .sh("rm /home/user/fill && sync && dd if=/dev/zero of=/home/user/again bs=1M count=30 && sync && stat -c %s /home/user/again")
        .await;
    assert_eq!(again.exit_code, 0, "stderr: {}", text(&again.stderr));
    assert_eq!(text(&again.stdout).lines().last(), Some("31457280"));

    let layer = fx.rt.layer_dir(&id);
    assert!(layer.is_dir());
    fx.destroy(&sb).await;
    assert!(!layer.exists(), "destroy left {}", layer.display());
    let subvolumes = std::process::Command::new("btrfs")
        .args(["subvolume", "list", "-o"])
        .arg(layer.parent().unwrap())
        .output()
        .unwrap();
    if fx.rt.disk_backend() == DiskBackend::Btrfs {
        assert!(subvolumes.status.success());
        assert!(
            !text(&subvolumes.stdout).contains(&id),
            "subvolume still listed: {}",
            text(&subvolumes.stdout)
        );
    }
    assert!(matches!(
        fx.rt.disk_usage(&id).await,
        Err(RuntimeError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_layer_without_a_limit_is_measured_but_not_limited() {
    if !require_root() {
        return;
    }
    let fx = fixture().await;
    assert_ne!(fx.rt.disk_backend(), DiskBackend::Off);
    let slot = test_slot();
    let spec = spec(slot.slot, limited(0));
    fx.rt.create(&spec).await.expect("create");
    let usage = fx.rt.disk_usage(&spec.id).await.expect("usage");
    assert_eq!(usage.limit_bytes, None);
    fx.rt.destroy(&spec.id).await.expect("destroy");
    assert!(!fx.rt.layer_dir(&spec.id).exists());
}

#[tokio::test]
async fn without_a_backend_a_sandbox_works_and_a_limit_is_refused() {
    if !require_root() {
        return;
    }
    let fx = fixture_with(|c| c.disk.mode = DiskMode::Off).await;
    assert_eq!(fx.rt.disk_backend(), DiskBackend::Off);
    let sb = fx.sandbox_with(limited(0)).await;
    let out = sb
        .sh("dd if=/dev/zero of=/home/user/f bs=1M count=8 2>/dev/null && stat -c %s /home/user/f")
        .await;
    assert_eq!(text(&out.stdout), "8388608\n", "{}", text(&out.stderr));
    assert!(matches!(
        fx.rt.disk_usage(sb.info.id()).await,
        Err(RuntimeError::Unsupported(_))
    ));
    fx.destroy(&sb).await;

    let slot = test_slot();
    let spec = spec(slot.slot, limited(64));
    assert!(matches!(
        fx.rt.create(&spec).await,
        Err(RuntimeError::Unsupported(_))
    ));
    assert!(fx.rt.inspect(&spec.id).await.unwrap().is_none());
}

/// A sandbox made without a quota (here by a runtime with the backend off, as by a daemon from
/// before quotas) is found, started and destroyed by a runtime with one; and a second runtime on a
/// state directory whose pool is mounted reuses it and its limits.
#[tokio::test]
async fn sandboxes_made_without_a_quota_and_pools_mounted_earlier_are_adopted() {
    if !require_root() {
        return;
    }
    let fx = fixture_with(|c| c.disk.mode = DiskMode::Off).await;
    let old_slot = test_slot();
    let old = spec(old_slot.slot, limited(0));
    fx.rt.create(&old).await.expect("create without quota");

    let state_dir = fx.dir.path().join("runtime");
    let rt = NamespaceRuntime::new(config(fx.dir.path()))
        .await
        .expect("runtime with quota");
    assert_ne!(rt.disk_backend(), DiskBackend::Off);
    let found: Vec<String> = rt
        .list()
        .await
        .unwrap()
        .iter()
        .map(|i| i.id().to_string())
        .collect();
    assert_eq!(found, vec![old.id.clone()]);
    let info = rt.start(&old.id).await.expect("start the old sandbox");
    let client = sandboxd_envd::EnvdClient::new(&info.agent.socket, &info.agent.token);
    let out = client
        .exec(
            &[
                "/bin/sh".into(),
                "-c".into(),
                "echo old > /home/user/f && cat /home/user/f".into(),
            ],
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(text(&out.stdout), "old\n");
    assert!(matches!(
        rt.disk_usage(&old.id).await,
        Err(RuntimeError::Unsupported(_))
    ));
    rt.destroy(&old.id).await.expect("destroy the old sandbox");
    assert!(rt.inspect(&old.id).await.unwrap().is_none());

    let new_slot = test_slot();
    let new = spec(new_slot.slot, limited(64));
    rt.create(&new).await.expect("create with quota");
    drop(rt);
    let again = NamespaceRuntime::new(config(fx.dir.path()))
        .await
        .expect("restarted runtime");
    assert_eq!(
        mounts_on(&state_dir.join("layers")),
        1,
        "the pool is mounted once"
    );
    let usage = again
        .disk_usage(&new.id)
        .await
        .expect("usage after restart");
    assert_eq!(usage.limit_bytes, Some(64 * MIB));
    again.destroy(&new.id).await.expect("destroy");
    assert!(!again.layer_dir(&new.id).exists());
}

/// A create that fails after claiming the id removes what it made and nothing else: here a layer
/// left behind by someone else makes the layer step fail; the sandbox is not created and the foreign
/// layer is untouched.
#[tokio::test]
async fn a_failed_create_rolls_back_only_what_it_made() {
    if !require_root() {
        return;
    }
    let fx = fixture().await;
    assert_ne!(fx.rt.disk_backend(), DiskBackend::Off);
    let slot = test_slot();
    let spec = spec(slot.slot, limited(64));
    let foreign = fx.rt.layer_dir(&spec.id);
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("keep"), "x").unwrap();
    let err = fx
        .rt
        .create(&spec)
        .await
        .expect_err("create over a foreign layer");
    assert!(matches!(err, RuntimeError::Quota(_)), "{err:?}");
    assert!(fx.rt.inspect(&spec.id).await.unwrap().is_none());
    assert_eq!(std::fs::read_to_string(foreign.join("keep")).unwrap(), "x");
    // destroy cleans up an orphan layer even without a sandbox record.
    fx.rt.destroy(&spec.id).await.expect("destroy");
    assert!(!foreign.exists());
}

/// A runtime in project-quota mode whose `layers/` is a fresh XFS mounted with `prjquota` (the
/// backend of a host whose data directory is on XFS), and that XFS; `None` when the kernel has no
/// quota support (the test is then skipped, see [`QuotaXfs::mount_on`]).
async fn project_fixture() -> Option<(Fixture, QuotaXfs)> {
    let dir = tempfile::Builder::new()
        .prefix("sandboxd-rt-")
        .tempdir()
        .expect("tempdir");
    let xfs = QuotaXfs::mount_on(&dir.path().join("runtime/layers"), 512)?;
    let rt = NamespaceRuntime::new(project_config(dir.path()))
        .await
        .expect("runtime on project quotas");
    Some((Fixture { rt, dir }, xfs))
}

fn project_config(dir: &std::path::Path) -> sandboxd_runtime::namespace::NamespaceConfig {
    let mut config = config(dir);
    config.disk.mode = DiskMode::Project;
    config
}

/// The bytes `stat` printed on the last line of `stdout`.
fn last_size(stdout: &str) -> u64 {
    stdout
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no size in {stdout:?}"))
}

/// Project quotas on XFS: a 128 MiB limit stops `dd` for the sandbox's user and its root alike — with
/// ENOSPC, XFS's answer for a project over its limit, on a filesystem with room to spare — usage is
/// exact (and comes back when files go), another sandbox's project is its own, a restarted runtime
/// reads the limits back, and destroy clears the project's limit.
#[tokio::test]
async fn project_quotas_on_xfs_stop_writes_at_the_limit() {
    if !require_root() {
        return;
    }
    let Some((fx, xfs)) = project_fixture().await else {
        return;
    };
    assert_eq!(fx.rt.disk_backend(), DiskBackend::ProjectQuota);
    let sb = fx.sandbox_with(limited(128)).await;
    let other = fx.sandbox_with(limited(64)).await;
    let id = sb.info.id().to_string();
    let usage = fx.rt.disk_usage(&id).await.expect("usage");
    assert_eq!(usage.limit_bytes, Some(128 * MIB));
    assert!(usage.used_bytes < MIB, "a fresh layer uses {usage:?}");

    // The XFS (512 MiB) has room to spare: the quota, not the filesystem, stops this (the other
    // sandbox still writes below, and the filesystem's free space is checked).
    let fill = sb
        .sh("dd if=/dev/zero of=/home/user/fill bs=1M count=300; echo rc=$?; sync; stat -c %s /home/user/fill")
        .await;
    let (stdout, stderr) = (text(&fill.stdout), text(&fill.stderr));
    assert!(
        stderr.contains("No space left on device"),
        "dd was not stopped by the quota: {stderr}"
    );
    let free = nix::sys::statvfs::statvfs(xfs.path()).expect("statvfs");
    let free = free.blocks_available() * free.fragment_size();
    assert!(
        free > 256 * MIB,
        "the XFS itself is full: {free} bytes free"
    );
    assert!(!stdout.contains("rc=0"), "dd succeeded: {stdout}");
    let written = last_size(&stdout);
    assert!(
        (96 * MIB..=128 * MIB).contains(&written),
        "{written} bytes written under a 128 MiB limit"
    );
    let usage = fx.rt.disk_usage(&id).await.expect("usage");
    assert!(
        (written..=128 * MIB).contains(&usage.used_bytes),
        "usage {usage:?} after writing {written} bytes"
    );

    // Root in the sandbox is held as well: XFS enforces project limits whatever the capabilities.
    let as_root = sb
        .sh_as(
            Some("root"),
            "dd if=/dev/zero of=/home/user/more bs=1M count=50; echo rc=$?",
        )
        .await;
    assert!(
        text(&as_root.stderr).contains("No space left on device"),
        "root wrote past the quota: {} {}",
        text(&as_root.stdout),
        text(&as_root.stderr)
    );
    assert_eq!(text(&sb.sh("echo alive").await.stdout), "alive\n");

    // The other sandbox has a project of its own: the full one does not hold it back.
    let beside = other
        .sh("dd if=/dev/zero of=/home/user/f bs=1M count=30 && sync && stat -c %s /home/user/f")
        .await;
    assert_eq!(beside.exit_code, 0, "stderr: {}", text(&beside.stderr));
    assert_eq!(last_size(&text(&beside.stdout)), 30 * MIB);
    let other_usage = fx.rt.disk_usage(other.info.id()).await.expect("usage");
    assert_eq!(other_usage.limit_bytes, Some(64 * MIB));
    assert!(
        (30 * MIB..40 * MIB).contains(&other_usage.used_bytes),
        "{other_usage:?}"
    );

    // Space comes back as soon as the files are gone.
    let again = sb
        .sh("rm -f /home/user/fill /home/user/more && dd if=/dev/zero of=/home/user/again bs=1M count=30 && sync && stat -c %s /home/user/again")
        .await;
    assert_eq!(again.exit_code, 0, "stderr: {}", text(&again.stderr));
    let usage = fx.rt.disk_usage(&id).await.expect("usage");
    assert!(
        (30 * MIB..40 * MIB).contains(&usage.used_bytes),
        "usage {usage:?} after freeing all but 30 MiB"
    );

    // A runtime started again on the same state directory takes the same backend and limits.
    let restarted = NamespaceRuntime::new(project_config(fx.dir.path()))
        .await
        .expect("restarted runtime");
    assert_eq!(restarted.disk_backend(), DiskBackend::ProjectQuota);
    let seen = restarted
        .disk_usage(&id)
        .await
        .expect("usage after restart");
    assert_eq!(seen.limit_bytes, Some(128 * MIB));
    drop(restarted);

    // Destroy removes the layers and clears their projects' limits on the filesystem.
    let layer = fx.rt.layer_dir(&id);
    fx.destroy(&sb).await;
    fx.destroy(&other).await;
    assert!(!layer.exists(), "destroy left {}", layer.display());
    assert!(matches!(
        fx.rt.disk_usage(&id).await,
        Err(RuntimeError::NotFound(_))
    ));
    let report = std::process::Command::new("xfs_quota")
        .args(["-x", "-c", "report -p -n -b -N"])
        .arg(xfs.path())
        .output()
        .expect("run xfs_quota");
    assert!(report.status.success(), "{}", text(&report.stderr));
    let report = text(&report.stdout);
    // Lines: "#<project id> <used> <soft> <hard> <warnings> <grace>" (KiB).
    let limited: Vec<&str> = report
        .lines()
        .filter(|l| l.split_whitespace().nth(3).is_some_and(|hard| hard != "0"))
        .collect();
    assert!(limited.is_empty(), "projects still limited: {limited:?}");
}
