//! Per-sandbox id ranges: every sandbox's root is a host id of its own, yet the shared layers read
//! as they should inside each (idmapped), and what a sandbox writes is owned on disk by its own range
//! only. Checked from the host.

mod common;

use common::{config, text, Fixture};
use sandboxd_runtime::namespace::ids::RANGE_SIZE;
use sandboxd_runtime::namespace::NamespaceRuntime;
use sandboxd_runtime::Runtime;
use sandboxd_test_support::require_root;
use sandboxd_test_support::xfs::QuotaXfs;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;

/// A runtime whose state directory takes idmapped mounts: the test's temporary directory, or, where
/// that is a tmpfs (which takes them only from Linux 6.3 on, and the Debian VM's /tmp is one), an XFS
/// mounted on its `runtime/` (a fresh Debian host's data dir is on ext4 or XFS).
async fn fixture() -> (Fixture, Option<QuotaXfs>) {
    let dir = tempfile::Builder::new()
        .prefix("sandboxd-rt-")
        .tempdir()
        .expect("tempdir");
    let on_tmpfs = nix::sys::statfs::statfs(dir.path())
        .expect("statfs")
        .filesystem_type()
        == nix::sys::statfs::TMPFS_MAGIC;
    let xfs = if on_tmpfs {
        Some(
            QuotaXfs::mount_on(&dir.path().join("runtime"), 512).expect("an XFS for the state dir"),
        )
    } else {
        None
    };
    let rt = NamespaceRuntime::new(config(dir.path()))
        .await
        .expect("namespace runtime");
    (Fixture { rt, dir }, xfs)
}

/// The host uids sandbox init `pid`'s user namespace maps, from its `uid_map` (one line expected).
fn host_uids(pid: i32) -> Range<u32> {
    let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
    let fields: Vec<u32> = map.split_whitespace().map(|f| f.parse().unwrap()).collect();
    assert_eq!(fields.len(), 3, "one mapping line: {map:?}");
    assert_eq!(fields[0], 0, "{map:?}");
    fields[1]..fields[1] + fields[2]
}

/// Invariant: no two live sandboxes share a host id, and a file root of one makes is owned by no id
/// of the other. Inside each, the template's files read as root's and the user's home as the user's.
#[tokio::test]
async fn two_sandboxes_own_disjoint_host_ids_and_see_the_shared_layers_as_their_own() {
    if !require_root() {
        return;
    }
    let (fx, _xfs) = fixture().await;
    assert!(
        fx.rt.id_ranges_supported(),
        "this host's filesystem takes idmapped mounts"
    );
    let (a, b) = (fx.sandbox().await, fx.sandbox().await);
    let mut made = Vec::new();
    for sb in [&a, &b] {
        let out = sb
            .sh_as(
                Some("root"),
                "touch /root/mine && stat -c '%u:%g' /etc/passwd /home/user /root/mine && id -u user",
            )
            .await;
        assert_eq!(
            text(&out.stdout),
            "0:0\n1000:1000\n0:0\n1000\n",
            "stderr: {}",
            text(&out.stderr)
        );
        let user = sb
            .sh("touch /home/user/ok && stat -c %u /home/user/ok")
            .await;
        assert_eq!(text(&user.stdout), "1000\n", "{}", text(&user.stderr));
        let layer = fx.rt.writable_layer(sb.info.id()).await.unwrap();
        let mine = std::fs::metadata(layer.path.join("root/mine")).unwrap();
        let uids = host_uids(sb.info.pid.unwrap());
        assert_eq!(uids.len() as u32, RANGE_SIZE);
        assert_eq!(uids.start, layer.id_base);
        assert_eq!((mine.uid(), mine.gid()), (layer.id_base, layer.id_base));
        made.push((mine.uid(), uids));
    }
    let [(a_file, a_ids), (b_file, b_ids)] = [made[0].clone(), made[1].clone()];
    assert!(!b_ids.contains(&a_file), "{a_file} is in {b_ids:?}");
    assert!(!a_ids.contains(&b_file), "{b_file} is in {a_ids:?}");
    assert!(a_ids.end <= b_ids.start || b_ids.end <= a_ids.start);
    // Neither is the storage range the shared layers are owned by on disk.
    let storage = common::config(fx.dir.path()).id_map_base;
    for ids in [&a_ids, &b_ids] {
        assert!(!ids.contains(&storage), "{ids:?}");
    }
    fx.destroy(&a).await;
    fx.destroy(&b).await;
}

/// A sandbox made with a range keeps it across a stop and a start (it is fixed at create), and a
/// spec without one gets the shared range, as every sandbox did before ranges.
#[tokio::test]
async fn a_range_is_fixed_at_create_and_no_range_is_the_shared_one() {
    if !require_root() {
        return;
    }
    let (fx, _xfs) = fixture().await;
    let sb = fx.sandbox().await;
    let before = host_uids(sb.info.pid.unwrap());
    fx.rt.stop(sb.info.id()).await.unwrap();
    let again = fx.rt.start(sb.info.id()).await.unwrap();
    assert_eq!(host_uids(again.pid.unwrap()), before);
    fx.destroy(&sb).await;

    let slot = sandboxd_test_support::test_slot();
    let spec = sandboxd_runtime::SandboxSpec {
        id_range: None,
        ..common::spec(slot.slot, Default::default())
    };
    fx.rt.create(&spec).await.unwrap();
    let info = fx.rt.start(&spec.id).await.unwrap();
    let storage = common::config(fx.dir.path()).id_map_base;
    assert_eq!(host_uids(info.pid.unwrap()), storage..storage + RANGE_SIZE);
    let layer = fx.rt.writable_layer(&spec.id).await.unwrap();
    assert_eq!(layer.id_base, storage);
    fx.rt.destroy(&spec.id).await.unwrap();
}
