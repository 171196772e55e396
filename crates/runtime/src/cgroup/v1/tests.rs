//! Unit tests of the v1 backend: on a fake tree, and on the real hierarchies when run as root on
//! a v1 host.

use super::super::fake::{self, FakeTree};
use super::super::{Backend, CgroupManager, CgroupStats, CgroupVersion, Group as AnyGroup, Limits};
use super::*;

const MIB: u64 = 1024 * 1024;

fn limits() -> Limits {
    Limits {
        memory_bytes: Some(64 * MIB),
        cpu_millis: Some(500),
        pids_max: Some(20),
    }
}

fn manager(tree: &FakeTree) -> CgroupManager {
    tree.manager(CgroupVersion::V1)
}

#[test]
fn hybrid_host_is_detected_as_v1() {
    manager(&FakeTree::v1());
    manager(&FakeTree::v1_comounted());
}

#[test]
fn controllers_say_which_optional_hierarchies_a_host_lacks() {
    let tree = FakeTree::v1();
    let all = CgroupManager::detect_at(tree.root(), "sandboxd").unwrap();
    assert!(all.controllers().unwrap().iter().all(|(_, has)| *has));
    std::fs::remove_dir_all(tree.path("freezer")).unwrap();
    let some = CgroupManager::detect_at(tree.root(), "sandboxd").unwrap();
    let has = some.controllers().unwrap();
    assert!(
        has.contains(&("freezer", false)) && has.contains(&("cpu", true)),
        "{has:?}"
    );
    let v2 = FakeTree::v2();
    let v2 = CgroupManager::detect_at(v2.root(), "sandboxd").unwrap();
    assert!(v2.controllers().unwrap().iter().all(|(_, has)| *has));
}

#[test]
fn detection_names_the_missing_hierarchy() {
    let tree = FakeTree::v1();
    std::fs::remove_dir_all(tree.path("pids")).unwrap();
    let err = CgroupManager::detect_at(tree.root(), "sandboxd").unwrap_err();
    assert!(matches!(err, CgroupError::NotDetected { .. }));
    assert!(err.to_string().contains("v1 pids hierarchy"), "{err}");
}

#[test]
fn create_writes_each_limit_into_its_controller() {
    let tree = FakeTree::v1();
    manager(&tree).create("sb1", &limits()).unwrap();
    assert_eq!(
        tree.get("memory/sandboxd/sb1/memory.limit_in_bytes"),
        "67108864"
    );
    assert_eq!(tree.get("cpu/sandboxd/sb1/cpu.cfs_period_us"), "100000");
    assert_eq!(tree.get("cpu/sandboxd/sb1/cpu.cfs_quota_us"), "50000");
    assert_eq!(tree.get("pids/sandboxd/sb1/pids.max"), "20");
    assert!(tree.path("cpuacct/sandboxd/sb1").is_dir());
    assert!(tree.path("freezer/sandboxd/sb1").is_dir());
    // Controllers we do not use are left alone.
    assert!(!tree.path("blkio/sandboxd").exists());
    assert!(!tree
        .path("memory/sandboxd/sb1/memory.memsw.limit_in_bytes")
        .exists());
}

#[test]
fn swap_is_pinned_to_the_memory_limit_when_accounted() {
    let tree = FakeTree::v1();
    tree.v1_memory_group("sandboxd/sb1", true);
    manager(&tree).create("sb1", &limits()).unwrap();
    assert_eq!(
        tree.get("memory/sandboxd/sb1/memory.limit_in_bytes"),
        "67108864"
    );
    assert_eq!(
        tree.get("memory/sandboxd/sb1/memory.memsw.limit_in_bytes"),
        "67108864"
    );
}

#[test]
fn create_again_converges_to_the_new_limits() {
    let tree = FakeTree::v1();
    let m = manager(&tree);
    m.create("sb1", &limits()).unwrap();
    m.create("sb1", &Limits::default()).unwrap();
    assert_eq!(tree.get("memory/sandboxd/sb1/memory.limit_in_bytes"), "-1");
    assert_eq!(tree.get("cpu/sandboxd/sb1/cpu.cfs_quota_us"), "-1");
    assert_eq!(tree.get("pids/sandboxd/sb1/pids.max"), "max");
}

#[test]
fn comounted_cpu_and_cpuacct_share_one_directory() {
    let tree = FakeTree::v1_comounted();
    let group = manager(&tree).create("sb1", &limits()).unwrap();
    assert_eq!(
        tree.get("cpu,cpuacct/sandboxd/sb1/cpu.cfs_quota_us"),
        "50000"
    );
    let AnyGroup::V1(g) = &group.group else {
        panic!("v1 group expected")
    };
    // memory, cpu,cpuacct, pids, freezer
    assert_eq!(g.dirs().len(), 4, "{:?}", g.dirs());
}

#[test]
fn cpu_limit_without_cpu_hierarchy_is_refused() {
    let tree = FakeTree::v1();
    std::fs::remove_dir_all(tree.path("cpu")).unwrap();
    let err = manager(&tree).create("sb1", &limits()).unwrap_err();
    assert!(matches!(
        err,
        CgroupError::ControllerMissing {
            controller: "cpu",
            ..
        }
    ));
}

#[test]
fn add_pid_writes_every_hierarchy_and_pids_is_their_union() {
    let tree = FakeTree::v1();
    let m = manager(&tree);
    let group = m.create("sb1", &Limits::default()).unwrap();
    group.add_pid(4242).unwrap();
    for c in ["memory", "cpu", "cpuacct", "pids", "freezer"] {
        assert_eq!(
            tree.get(&format!("{c}/sandboxd/sb1/cgroup.procs")),
            "4242",
            "{c}"
        );
    }
    // Never into the parent.
    assert!(!tree.path("memory/sandboxd/cgroup.procs").exists());
    tree.put("memory/sandboxd/sb1/cgroup.procs", "456\n123\n");
    tree.put("pids/sandboxd/sb1/cgroup.procs", "789\n456\n");
    assert_eq!(m.open("sb1").pids().unwrap(), vec![123, 456, 789, 4242]);
}

#[test]
fn list_finds_groups_in_any_hierarchy_and_open_readopts_them() {
    let tree = FakeTree::v1();
    let m = manager(&tree);
    assert_eq!(m.list().unwrap(), Vec::<String>::new());
    m.create("sb2", &Limits::default()).unwrap();
    m.create("sb1", &Limits::default()).unwrap();
    std::fs::create_dir_all(tree.path("pids/sandboxd/leftover")).unwrap();
    tree.put("memory/sandboxd/notify_on_release", "0\n");
    assert_eq!(m.list().unwrap(), vec!["leftover", "sb1", "sb2"]);
    tree.put("pids/sandboxd/sb1/cgroup.procs", "77\n");
    assert_eq!(m.open("sb1").pids().unwrap(), vec![77]);
}

#[test]
fn remove_deletes_every_directory_and_is_idempotent() {
    let tree = FakeTree::v1();
    let m = manager(&tree);
    // A fake directory with files cannot be rmdir'ed; the kernel's can. Use empty ones.
    for c in ["memory", "cpu", "cpuacct", "pids", "freezer"] {
        std::fs::create_dir_all(tree.path(&format!("{c}/sandboxd/sb1"))).unwrap();
    }
    let group = m.open("sb1");
    group.remove().unwrap();
    assert_eq!(m.list().unwrap(), Vec::<String>::new());
    group.remove().unwrap();
    assert!(group.pids().is_err(), "a removed group has no cgroup.procs");
}

#[test]
fn remove_reports_the_directory_it_could_not_delete() {
    let tree = FakeTree::v1();
    let m = manager(&tree);
    m.create("sb1", &limits()).unwrap();
    let err = m.open("sb1").remove().unwrap_err();
    let CgroupError::RemoveDir { path, .. } = &err else {
        panic!("unexpected {err:?}")
    };
    assert!(path.ends_with("sandboxd/sb1"), "{path:?}");
}

#[test]
fn invalid_ids_touch_nothing() {
    let tree = FakeTree::v1();
    let m = manager(&tree);
    assert!(matches!(
        m.create("../escape", &limits()),
        Err(CgroupError::InvalidName { .. })
    ));
    let group = m.open("../escape");
    assert!(matches!(
        group.remove(),
        Err(CgroupError::InvalidName { .. })
    ));
    assert!(matches!(
        group.kill_all(),
        Err(CgroupError::InvalidName { .. })
    ));
    assert!(!tree.path("memory/escape").exists());
    assert!(!tree.path("memory/sandboxd").exists());
}

#[test]
fn freeze_and_thaw_write_the_freezer_state() {
    let tree = FakeTree::v1();
    let group = manager(&tree).create("sb1", &limits()).unwrap();
    group.freeze().unwrap();
    assert_eq!(tree.get("freezer/sandboxd/sb1/freezer.state"), "FROZEN");
    group.thaw().unwrap();
    assert_eq!(tree.get("freezer/sandboxd/sb1/freezer.state"), "THAWED");
    // An empty group: kill_all freezes, finds nobody, thaws.
    group.kill_all().unwrap();
    assert_eq!(tree.get("freezer/sandboxd/sb1/freezer.state"), "THAWED");
}

#[test]
fn freeze_waits_for_the_kernel_to_report_frozen() {
    let tree = FakeTree::v1();
    let group = manager(&tree).create("sb1", &limits()).unwrap();
    let AnyGroup::V1(g) = &group.group else {
        panic!("v1 group expected")
    };
    // Make freezer.state a directory: every read fails, so the wait must surface the error.
    let state = tree.path("freezer/sandboxd/sb1/freezer.state");
    assert!(g.freeze(Duration::from_millis(20)).is_ok());
    std::fs::remove_file(&state).unwrap();
    std::fs::create_dir(&state).unwrap();
    assert!(g.freeze(Duration::from_millis(20)).is_err());
}

#[test]
fn freeze_without_freezer_hierarchy_is_an_error() {
    let tree = FakeTree::v1();
    std::fs::remove_dir_all(tree.path("freezer")).unwrap();
    let group = manager(&tree).create("sb1", &limits()).unwrap();
    assert!(matches!(
        group.freeze(),
        Err(CgroupError::ControllerMissing {
            controller: "freezer",
            ..
        })
    ));
    // kill_all still works without a freezer.
    group.kill_all().unwrap();
}

#[test]
fn stats_parse_the_kernel_files() {
    let tree = FakeTree::v1();
    let group = manager(&tree).create("sb1", &limits()).unwrap();
    tree.put("memory/sandboxd/sb1/memory.usage_in_bytes", "16142336\n");
    tree.put("memory/sandboxd/sb1/memory.stat", fake::V1_MEMORY_STAT);
    tree.put(
        "memory/sandboxd/sb1/memory.oom_control",
        fake::V1_OOM_CONTROL,
    );
    tree.put("cpuacct/sandboxd/sb1/cpuacct.usage", "51726760975\n");
    tree.put("cpu/sandboxd/sb1/cpu.stat", fake::V1_CPU_STAT);
    tree.put("pids/sandboxd/sb1/pids.current", "3\n");
    assert_eq!(
        group.stats().unwrap(),
        CgroupStats {
            memory_usage_bytes: 16142336,
            memory_limit_bytes: Some(64 * MIB),
            memory_file_bytes: 9801728,
            cpu_usage_usec: 51726760,
            cpu_throttled_usec: 351000,
            pids_current: 3,
            pids_max: Some(20),
            oom_kill_count: 3,
        }
    );
    tree.put(
        "memory/sandboxd/sb1/memory.limit_in_bytes",
        "9223372036854771712\n",
    );
    tree.put("pids/sandboxd/sb1/pids.max", "max\n");
    let stats = group.stats().unwrap();
    assert_eq!((stats.memory_limit_bytes, stats.pids_max), (None, None));
    tree.put("pids/sandboxd/sb1/pids.current", "three\n");
    assert!(matches!(group.stats(), Err(CgroupError::Parse { .. })));
}

/// Removes the test's parent groups from the real hierarchies, whatever happened.
struct RealGuard {
    manager: CgroupManager,
    parent: String,
    children: Vec<std::process::Child>,
}

impl Drop for RealGuard {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for id in self.manager.list().unwrap_or_default() {
            let group = self.manager.open(&id);
            let _ = group.kill_all();
            let _ = group.remove();
        }
        // Its spares go with the pool.
        self.manager.spares.take();
        let Backend::V1(h) = &self.manager.backend else {
            return;
        };
        for dir in h.dirs() {
            let _ = std::fs::remove_dir(dir.join(&self.parent));
        }
    }
}

#[test]
fn real_host_v1_group_limits_holds_and_kills_a_process() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to write /sys/fs/cgroup");
        return;
    }
    let parent = format!("sandboxd-test-{}", std::process::id());
    let manager = match CgroupManager::detect(&parent) {
        Ok(m) if m.version() == CgroupVersion::V1 => m,
        other => {
            eprintln!("skipped: this host is not cgroup v1 ({other:?})");
            return;
        }
    };
    let mut guard = RealGuard {
        manager,
        parent: parent.clone(),
        children: Vec::new(),
    };
    let m = &guard.manager;
    let group = m.create("sb", &limits()).expect("create");
    m.create("sb", &limits()).expect("create is idempotent");
    let root = Path::new(super::super::DEFAULT_ROOT);
    let read = |rel: String| std::fs::read_to_string(root.join(rel)).expect("read back");
    assert_eq!(
        read(format!("memory/{parent}/sb/memory.limit_in_bytes")).trim(),
        "67108864"
    );
    assert_eq!(read(format!("pids/{parent}/sb/pids.max")).trim(), "20");
    assert_eq!(
        read(format!("cpu/{parent}/sb/cpu.cfs_quota_us")).trim(),
        "50000"
    );
    assert_eq!(m.list().unwrap(), vec!["sb"]);

    let child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep");
    let pid = child.id() as i32;
    guard.children.push(child);
    group.add_pid(pid).expect("add_pid");
    assert_eq!(group.pids().unwrap(), vec![pid]);
    let stats = group.stats().expect("stats");
    assert_eq!(stats.pids_current, 1);
    assert_eq!(stats.pids_max, Some(20));
    assert_eq!(stats.memory_limit_bytes, Some(64 * MIB));
    // v1 does not move a task's existing charges with it, so usage may still read 0 here.

    group.freeze().expect("freeze");
    assert_eq!(
        read(format!("freezer/{parent}/sb/freezer.state")).trim(),
        "FROZEN"
    );
    group.thaw().expect("thaw");

    // pids.max holds: a shell that forks 40 sleeps inside the group gets no more than 20 tasks.
    let mut forker = std::process::Command::new("sh")
        .args([
            "-c",
            "read go; i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done; wait",
        ])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sh");
    group.add_pid(forker.id() as i32).expect("add_pid sh");
    let go = forker
        .stdin
        .take()
        .map(|mut s| std::io::Write::write_all(&mut s, b"go\n"));
    guard.children.push(forker);
    go.expect("stdin").expect("start forking");
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let events = format!("pids/{parent}/sb/pids.events");
    while read(events.clone()).trim() == "max 0" && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_ne!(read(events).trim(), "max 0", "no fork was refused");
    assert!(group.pids().unwrap().len() <= 20);
    assert!(group.stats().unwrap().pids_current <= 20);

    group.kill_all().expect("kill_all");
    assert_eq!(group.pids().unwrap(), Vec::<i32>::new());
    let status = guard.children[0].wait().expect("reap sleep");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));

    let m = &guard.manager;
    m.open("sb").remove().expect("remove");
    m.open("sb").remove().expect("remove is idempotent");
    assert_eq!(m.list().unwrap(), Vec::<String>::new());
    for c in ["memory", "cpu", "cpuacct", "pids", "freezer"] {
        assert!(
            !root.join(format!("{c}/{parent}/sb")).exists(),
            "{c} left behind"
        );
    }
    drop(guard);
    for c in ["memory", "cpu", "cpuacct", "pids", "freezer"] {
        assert!(
            !root.join(format!("{c}/{parent}")).exists(),
            "{c} parent left behind"
        );
    }
}

/// On the real v1 hierarchies: a create takes a ready spare (renamed in every hierarchy, the
/// limits applied), none is made again until asked, a create onto an existing group with a
/// spare ready keeps the group and drops the spare, and nothing is left once the pool goes.
#[test]
fn real_host_v1_spares_become_groups_and_leave_nothing() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to write /sys/fs/cgroup");
        return;
    }
    let parent = format!("sandboxd-test-spares-{}", std::process::id());
    let manager = match CgroupManager::detect(&parent) {
        Ok(m) if m.version() == CgroupVersion::V1 => m.with_spares(1),
        other => {
            eprintln!("skipped: this host is not cgroup v1 ({other:?})");
            return;
        }
    };
    let guard = RealGuard {
        manager,
        parent: parent.clone(),
        children: Vec::new(),
    };
    let m = &guard.manager;
    let root = Path::new(super::super::DEFAULT_ROOT);
    let hierarchies = ["memory", "cpu", "cpuacct", "pids", "freezer"];
    let spares = |c: &str| -> usize {
        std::fs::read_dir(root.join(c).join(&parent))
            .map(|d| {
                d.flatten()
                    .filter(|e| super::super::spares::is_spare(&e.file_name().to_string_lossy()))
                    .count()
            })
            .unwrap_or(0)
    };
    let until_spares = |n: usize| {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        // The pool counts a spare ready once it is made in every hierarchy.
        while hierarchies.iter().any(|c| spares(c) != n) || (n > 0 && !m.spares_ready()) {
            assert!(
                std::time::Instant::now() < deadline,
                "no {n} spares in time"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    until_spares(1);
    let group = m.create("sb", &limits()).expect("create");
    for c in hierarchies {
        assert!(root.join(format!("{c}/{parent}/sb")).is_dir(), "{c}");
        assert_eq!(spares(c), 0, "the spare became the group in {c}");
    }
    let read = |rel: String| std::fs::read_to_string(root.join(rel)).expect("read back");
    assert_eq!(
        read(format!("memory/{parent}/sb/memory.limit_in_bytes")).trim(),
        "67108864"
    );
    assert_eq!(read(format!("pids/{parent}/sb/pids.max")).trim(), "20");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        spares("memory"),
        0,
        "no spare is made before one is asked for"
    );
    m.replenish_spares();
    until_spares(1);
    assert_eq!(
        m.list().unwrap(),
        vec!["sb"],
        "a ready spare is not listed as a sandbox"
    );
    m.create("sb", &limits())
        .expect("a create onto the existing group still succeeds");
    until_spares(0);
    assert_eq!(m.list().unwrap(), vec!["sb"]);
    group.remove().expect("remove");
    m.replenish_spares();
    until_spares(1);
    drop(guard);
    for c in hierarchies {
        assert!(
            !root.join(format!("{c}/{parent}")).exists(),
            "{c}: the parent (and every spare in it) is gone"
        );
    }
}
