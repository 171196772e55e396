//! Per-sandbox host id ranges through the real binary: two sandboxes' roots are different host ids,
//! a file root of one makes is owned by no id of the other (checked from the host), and a deleted
//! sandbox's range is handed to the next sandbox once its teardown is done.

mod common;

use common::{e2e, id_of, recorded_init, Daemon};
use serde_json::{json, Value};
use std::ops::Range;
use std::os::unix::fs::MetadataExt;

/// The host uids the user namespace of sandbox `id`'s init maps (from its `uid_map`).
fn host_uids(d: &Daemon, id: &str) -> Range<u32> {
    let (pid, _) = recorded_init(&d.sandbox_dir(id)).expect("a running sandbox's pid");
    let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
    let f: Vec<u32> = map.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert_eq!((f.len(), f[0]), (3, 0), "{map:?}");
    f[1]..f[1] + f[2]
}

/// Root of sandbox `id` makes `/root/mine`; returns its owner on the host.
async fn root_makes_a_file(d: &Daemon, id: &str) -> (u32, u32) {
    let body = json!({"cmd": ["sh", "-c", "touch /root/mine && stat -c %u:%g /etc/passwd /root/mine"],
                      "user": "root"});
    let (status, text) = d.exec_raw(id, &body).await;
    assert_eq!(status, 200, "{text}");
    let out: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(out["stdout"], "0:0\n0:0\n", "{out}");
    let meta = std::fs::metadata(d.upper_dir(id).join("root/mine")).unwrap();
    (meta.uid(), meta.gid())
}

#[test]
fn sandboxes_own_disjoint_host_ids_and_a_freed_range_is_reused() {
    e2e(|| async {
        let d = Daemon::start().await;
        let a = id_of(&d.create(json!({})).await);
        let b = id_of(&d.create(json!({})).await);
        let (a_ids, b_ids) = (host_uids(&d, &a), host_uids(&d, &b));
        let (a_file, b_file) = (
            root_makes_a_file(&d, &a).await,
            root_makes_a_file(&d, &b).await,
        );
        assert_eq!(a_file, (a_ids.start, a_ids.start));
        assert_eq!(b_file, (b_ids.start, b_ids.start));
        assert!(
            !b_ids.contains(&a_file.0) && !b_ids.contains(&a_file.1),
            "{a_file:?} in {b_ids:?}"
        );
        assert!(
            !a_ids.contains(&b_file.0) && !a_ids.contains(&b_file.1),
            "{b_file:?} in {a_ids:?}"
        );
        assert!(
            a_ids.end <= b_ids.start || b_ids.end <= a_ids.start,
            "{a_ids:?} {b_ids:?}"
        );

        // Once a's teardown is done its range is free, and the lowest: the next sandbox gets it.
        assert_eq!(d.delete(&format!("/v1/sandboxes/{a}")).await.status(), 204);
        d.wait_torn_down(&a).await;
        let c = id_of(&d.create(json!({})).await);
        assert_eq!(host_uids(&d, &c), a_ids);
        assert_eq!(root_makes_a_file(&d, &c).await, a_file);
    });
}
