//! cgroup v2: one unified hierarchy, the sandbox's group at `<root>/<parent>/<id>`.
//!
//! The controllers are enabled top-down (`+memory +cpu +pids` in the `cgroup.subtree_control` of the
//! root and of every level of `<parent>`), writing only those not yet enabled, so a host that already
//! enabled them (systemd does) is never written at its root. No process is ever put in `<parent>`.

use super::{
    cpu_quota_usec, create_dir, keyed, read, read_max, read_procs, read_u64, wait_until, write,
    CgroupError, CgroupStats, Limits, Result, CPU_PERIOD_USEC,
};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// True when `<root>` is a cgroup2 root that offers the memory and pids controllers.
pub(super) fn detect(root: &Path) -> Result<bool> {
    let path = root.join("cgroup.controllers");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let has = |c: &str| text.split_whitespace().any(|t| t == c);
            Ok(has("memory") && has("pids"))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(CgroupError::Read { path, source }),
    }
}

pub(super) fn create(root: &Path, parent: &str, id: &str, limits: &Limits) -> Result<Group> {
    let available = read(&root.join("cgroup.controllers"))?;
    let cpu = available.split_whitespace().any(|c| c == "cpu");
    if limits.cpu_millis.is_some() && !cpu {
        return Err(CgroupError::ControllerMissing {
            controller: "cpu",
            root: root.to_path_buf(),
        });
    }
    let wanted: &[&str] = if cpu {
        &["memory", "cpu", "pids"]
    } else {
        &["memory", "pids"]
    };
    // Top-down: each level must enable the controllers before its children can use them.
    let mut level = root.to_path_buf();
    enable(&level.join("cgroup.subtree_control"), wanted)?;
    for part in parent.split('/') {
        level.push(part);
        create_dir(&level)?;
        enable(&level.join("cgroup.subtree_control"), wanted)?;
    }
    let group = Group::new(root, parent, id);
    create_dir(&group.dir)?;
    group.apply(limits, cpu)?;
    Ok(group)
}

/// Enables the `wanted` controllers not yet listed in `subtree_control`, in one write.
///
/// A failed write is fine when the controllers turn out enabled anyway (another creator raced us).
fn enable(subtree_control: &Path, wanted: &[&str]) -> Result<()> {
    let missing = |text: &str| -> Vec<String> {
        wanted
            .iter()
            .filter(|c| !text.split_whitespace().any(|t| t == **c))
            .map(|c| format!("+{c}"))
            .collect()
    };
    let todo = missing(&read(subtree_control)?);
    if todo.is_empty() {
        return Ok(());
    }
    match write(subtree_control, &todo.join(" ")) {
        Ok(()) => Ok(()),
        Err(e) => match read(subtree_control) {
            Ok(now) if missing(&now).is_empty() => Ok(()),
            _ => Err(e),
        },
    }
}

/// One sandbox's group directory.
pub(super) struct Group {
    dir: PathBuf,
}

impl Group {
    pub(super) fn new(root: &Path, parent: &str, id: &str) -> Self {
        Self {
            dir: root.join(parent).join(id),
        }
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Applies `limits` to the existing group (its CPU limit where the group has the controller).
    pub(super) fn set_limits(&self, limits: &Limits) -> Result<()> {
        self.apply(limits, self.file("cpu.max").is_file())
    }

    fn apply(&self, limits: &Limits, cpu: bool) -> Result<()> {
        let max = |v: Option<u64>| v.map_or_else(|| "max".to_string(), |v| v.to_string());
        write(&self.file("memory.max"), &max(limits.memory_bytes))?;
        // Absent when the kernel has no swap support (or swap accounting is off).
        let swap = self.file("memory.swap.max");
        if swap.is_file() {
            write(&swap, "0")?;
        }
        if cpu {
            let quota = max(limits.cpu_millis.map(cpu_quota_usec));
            write(&self.file("cpu.max"), &format!("{quota} {CPU_PERIOD_USEC}"))?;
        }
        write(&self.file("pids.max"), &max(limits.pids_max))
    }

    pub(super) fn procs_file(&self) -> PathBuf {
        self.file("cgroup.procs")
    }

    pub(super) fn add_pid(&self, pid: i32) -> Result<()> {
        write(&self.file("cgroup.procs"), &pid.to_string())
    }

    pub(super) fn pids(&self) -> Result<Vec<i32>> {
        let mut pids = read_procs(&self.file("cgroup.procs"))?;
        pids.sort_unstable();
        Ok(pids)
    }

    /// Writes `cgroup.kill` when the kernel has it (5.14+); false when it does not.
    pub(super) fn kill_atomically(&self) -> Result<bool> {
        let kill = self.file("cgroup.kill");
        if !kill.is_file() {
            return Ok(false);
        }
        write(&kill, "1")?;
        Ok(true)
    }

    pub(super) fn can_freeze(&self) -> bool {
        self.file("cgroup.freeze").is_file()
    }

    pub(super) fn freeze(&self, timeout: Duration) -> Result<()> {
        write(&self.file("cgroup.freeze"), "1")?;
        let events = self.file("cgroup.events");
        wait_until(&events, "frozen", timeout, || {
            Ok(keyed(&events, &read(&events)?, "frozen")? == 1)
        })
    }

    pub(super) fn thaw(&self) -> Result<()> {
        write(&self.file("cgroup.freeze"), "0")
    }

    pub(super) fn stats(&self) -> Result<CgroupStats> {
        let stat_path = self.file("memory.stat");
        let cpu_path = self.file("cpu.stat");
        let cpu_stat = read(&cpu_path)?;
        let events_path = self.file("memory.events");
        // `throttled_usec` is only there while the cpu controller is enabled for the group.
        let cpu_throttled_usec = if cpu_stat.lines().any(|l| l.starts_with("throttled_usec ")) {
            keyed(&cpu_path, &cpu_stat, "throttled_usec")?
        } else {
            0
        };
        Ok(CgroupStats {
            memory_usage_bytes: read_u64(&self.file("memory.current"))?,
            memory_limit_bytes: read_max(&self.file("memory.max"))?,
            memory_file_bytes: keyed(&stat_path, &read(&stat_path)?, "file")?,
            cpu_usage_usec: keyed(&cpu_path, &cpu_stat, "usage_usec")?,
            cpu_throttled_usec,
            pids_current: read_u64(&self.file("pids.current"))?,
            pids_max: read_max(&self.file("pids.max"))?,
            oom_kill_count: keyed(&events_path, &read(&events_path)?, "oom_kill")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::{self, FakeTree};
    use super::super::{
        CgroupManager, CgroupStats, CgroupVersion, Group as AnyGroup, Limits, SandboxCgroup,
    };
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn limits() -> Limits {
        Limits {
            memory_bytes: Some(64 * MIB),
            cpu_millis: Some(500),
            pids_max: Some(20),
        }
    }

    /// A v2 tree whose parent `sandboxd` already exists, as the kernel shows a fresh group.
    fn tree_with_parent() -> FakeTree {
        let tree = FakeTree::v2();
        tree.put("sandboxd/cgroup.subtree_control", "");
        tree.put("sandboxd/cgroup.procs", "");
        tree
    }

    fn manager(tree: &FakeTree) -> CgroupManager {
        tree.manager(CgroupVersion::V2)
    }

    #[test]
    fn pure_v2_host_is_detected_as_v2() {
        manager(&FakeTree::v2());
    }

    #[test]
    fn cgroup2_root_without_memory_is_not_usable() {
        let tree = FakeTree::v2();
        tree.put("cgroup.controllers", "hugetlb\n");
        let err = CgroupManager::detect_at(tree.root(), "sandboxd").unwrap_err();
        assert!(matches!(err, CgroupError::NotDetected { .. }), "{err:?}");
    }

    #[test]
    fn create_enables_missing_controllers_and_writes_limits() {
        let tree = tree_with_parent();
        tree.v2_group("sandboxd/sb1");
        manager(&tree).create("sb1", &limits()).unwrap();
        // Already enabled at the root: not written (a write would have replaced the contents).
        assert_eq!(tree.get("cgroup.subtree_control"), "cpu io memory pids\n");
        assert_eq!(
            tree.get("sandboxd/cgroup.subtree_control"),
            "+memory +cpu +pids"
        );
        assert_eq!(tree.get("sandboxd/sb1/memory.max"), "67108864");
        assert_eq!(tree.get("sandboxd/sb1/memory.swap.max"), "0");
        assert_eq!(tree.get("sandboxd/sb1/cpu.max"), "50000 100000");
        assert_eq!(tree.get("sandboxd/sb1/pids.max"), "20");
        // No process ever goes into the parent.
        assert_eq!(tree.get("sandboxd/cgroup.procs"), "");
    }

    /// A resize writes the new limits into the existing group, CPU included where it has one.
    #[test]
    fn set_limits_rewrites_the_groups_limits() {
        let tree = tree_with_parent();
        tree.v2_group("sandboxd/sb1");
        let m = manager(&tree);
        m.create("sb1", &limits()).unwrap();
        let bigger = Limits {
            memory_bytes: Some(128 * MIB),
            cpu_millis: Some(2000),
            pids_max: Some(20),
        };
        m.open("sb1").set_limits(&bigger).unwrap();
        assert_eq!(tree.get("sandboxd/sb1/memory.max"), "134217728");
        assert_eq!(tree.get("sandboxd/sb1/cpu.max"), "200000 100000");
        let invalid = Limits {
            memory_bytes: Some(0),
            ..bigger
        };
        assert!(m.open("sb1").set_limits(&invalid).is_err());
        assert_eq!(tree.get("sandboxd/sb1/memory.max"), "134217728", "kept");
    }

    #[test]
    fn root_controllers_are_enabled_when_off() {
        let tree = tree_with_parent();
        tree.put("cgroup.subtree_control", "io memory\n");
        manager(&tree).create("sb1", &limits()).unwrap();
        assert_eq!(tree.get("cgroup.subtree_control"), "+cpu +pids");
    }

    #[test]
    fn nested_parent_enables_controllers_at_every_level() {
        let tree = tree_with_parent();
        tree.put("sandboxd/test/cgroup.subtree_control", "memory\n");
        let m = CgroupManager::detect_at(tree.root(), "sandboxd/test").unwrap();
        m.create("sb1", &limits()).unwrap();
        assert_eq!(
            tree.get("sandboxd/cgroup.subtree_control"),
            "+memory +cpu +pids"
        );
        assert_eq!(
            tree.get("sandboxd/test/cgroup.subtree_control"),
            "+cpu +pids"
        );
        assert_eq!(tree.get("sandboxd/test/sb1/pids.max"), "20");
    }

    #[test]
    fn create_again_converges_and_skips_absent_swap() {
        let tree = tree_with_parent();
        let m = manager(&tree);
        m.create("sb1", &limits()).unwrap();
        m.create("sb1", &Limits::default()).unwrap();
        assert_eq!(tree.get("sandboxd/sb1/memory.max"), "max");
        assert_eq!(tree.get("sandboxd/sb1/cpu.max"), "max 100000");
        assert_eq!(tree.get("sandboxd/sb1/pids.max"), "max");
        assert!(!tree.path("sandboxd/sb1/memory.swap.max").exists());
    }

    #[test]
    fn host_without_cpu_controller_refuses_only_cpu_limits() {
        let tree = tree_with_parent();
        tree.put("cgroup.controllers", "memory pids\n");
        tree.put("cgroup.subtree_control", "memory pids\n");
        let m = manager(&tree);
        let err = m.create("sb1", &limits()).unwrap_err();
        assert!(matches!(
            err,
            CgroupError::ControllerMissing {
                controller: "cpu",
                ..
            }
        ));
        let no_cpu = Limits {
            cpu_millis: None,
            ..limits()
        };
        m.create("sb1", &no_cpu).unwrap();
        assert_eq!(tree.get("sandboxd/cgroup.subtree_control"), "+memory +pids");
        assert!(!tree.path("sandboxd/sb1/cpu.max").exists());
    }

    #[test]
    fn open_list_and_add_pid_use_the_group_directory() {
        let tree = tree_with_parent();
        let m = manager(&tree);
        assert_eq!(m.list().unwrap(), Vec::<String>::new());
        m.create("sb2", &limits()).unwrap();
        m.create("sb1", &limits()).unwrap();
        assert_eq!(m.list().unwrap(), vec!["sb1", "sb2"]);
        let group = m.open("sb1");
        group.add_pid(4242).unwrap();
        assert_eq!(tree.get("sandboxd/sb1/cgroup.procs"), "4242");
        tree.put("sandboxd/sb1/cgroup.procs", "31\n7\n");
        assert_eq!(group.pids().unwrap(), vec![7, 31]);
        assert_eq!(tree.get("sandboxd/cgroup.procs"), "");
    }

    #[test]
    fn remove_is_idempotent() {
        let tree = tree_with_parent();
        let m = manager(&tree);
        // A fake directory with files cannot be rmdir'ed; the kernel's can. Use an empty one.
        std::fs::create_dir(tree.path("sandboxd/sb1")).unwrap();
        m.open("sb1").remove().unwrap();
        assert!(!tree.path("sandboxd/sb1").exists());
        m.open("sb1").remove().unwrap();
        m.open("never-created").remove().unwrap();
    }

    #[test]
    fn freeze_writes_cgroup_freeze_and_waits_for_frozen() {
        let tree = tree_with_parent();
        tree.v2_group("sandboxd/sb1");
        let group = manager(&tree).create("sb1", &limits()).unwrap();
        let AnyGroup::V2(g) = &group.group else {
            panic!("v2 group expected")
        };
        // The fake kernel never reports frozen: the wait must time out.
        let err = g.freeze(Duration::from_millis(30)).unwrap_err();
        assert!(
            matches!(err, CgroupError::Timeout { what: "frozen", .. }),
            "{err:?}"
        );
        assert_eq!(tree.get("sandboxd/sb1/cgroup.freeze"), "1");
        tree.put("sandboxd/sb1/cgroup.events", "populated 1\nfrozen 1\n");
        group.freeze().unwrap();
        group.thaw().unwrap();
        assert_eq!(tree.get("sandboxd/sb1/cgroup.freeze"), "0");
    }

    #[test]
    fn kill_all_uses_cgroup_kill_when_present() {
        let tree = tree_with_parent();
        tree.v2_group("sandboxd/sb1");
        let group = manager(&tree).create("sb1", &limits()).unwrap();
        group.kill_all().unwrap();
        assert_eq!(tree.get("sandboxd/sb1/cgroup.kill"), "1");
        // Without cgroup.kill (before 5.14): freeze, kill, thaw; an empty group is done at once.
        std::fs::remove_file(tree.path("sandboxd/sb1/cgroup.kill")).unwrap();
        tree.put("sandboxd/sb1/cgroup.events", "populated 0\nfrozen 1\n");
        group.kill_all().unwrap();
        assert_eq!(tree.get("sandboxd/sb1/cgroup.freeze"), "0");
        // A group that is gone has nothing to kill.
        manager(&tree).open("gone").kill_all().unwrap();
    }

    #[test]
    fn stats_parse_the_kernel_files() {
        let tree = tree_with_parent();
        let group = manager(&tree).create("sb1", &limits()).unwrap();
        for (file, contents) in [
            ("memory.current", "5423104\n"),
            ("memory.stat", fake::V2_MEMORY_STAT),
            ("memory.events", fake::V2_MEMORY_EVENTS),
            ("cpu.stat", fake::V2_CPU_STAT),
            ("pids.current", "4\n"),
            ("pids.max", "max\n"),
        ] {
            tree.put(&format!("sandboxd/sb1/{file}"), contents);
        }
        assert_eq!(
            group.stats().unwrap(),
            CgroupStats {
                memory_usage_bytes: 5423104,
                memory_limit_bytes: Some(64 * MIB),
                memory_file_bytes: 4096000,
                cpu_usage_usec: 8512345,
                cpu_throttled_usec: 840000,
                pids_current: 4,
                pids_max: None,
                oom_kill_count: 2,
            }
        );
        tree.put(
            "sandboxd/sb1/memory.events",
            "low 0\nhigh 0\nmax 0\noom 0\n",
        );
        let err = group.stats().unwrap_err();
        let CgroupError::Parse { path, detail } = &err else {
            panic!("unexpected {err:?}")
        };
        assert!(path.ends_with("sb1/memory.events") && detail.contains("oom_kill"));
    }

    /// Kills whatever is left and removes the test's directories, whatever happened.
    struct RealGuard {
        dirs: Vec<PathBuf>,
        child: Option<std::process::Child>,
    }

    impl Drop for RealGuard {
        fn drop(&mut self) {
            if let Some(child) = &mut self.child {
                let _ = child.kill();
                let _ = child.wait();
            }
            for dir in &self.dirs {
                let _ = std::fs::write(dir.join("cgroup.kill"), "1");
                let _ = std::fs::remove_dir(dir);
            }
        }
    }

    /// The real cgroup2 mount: `/sys/fs/cgroup` on a pure v2 host, `/sys/fs/cgroup/unified` on a hybrid
    /// one (there without controllers: limits cannot be checked, freezing and killing can).
    #[test]
    fn real_host_cgroup2_freezes_kills_and_removes() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to write /sys/fs/cgroup");
            return;
        }
        let Some(root) = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .map(PathBuf::from)
            .into_iter()
            .find(|r| r.join("cgroup.controllers").is_file())
        else {
            eprintln!("skipped: no cgroup2 mount on this host");
            return;
        };
        let parent = format!("sandboxd-test-{}", std::process::id());
        let mut guard = RealGuard {
            dirs: vec![root.join(&parent).join("sb"), root.join(&parent)],
            child: None,
        };
        let full = detect(&root).unwrap_or(false);
        let group = if full {
            // A pure v2 host: the whole path, limits included.
            let m = CgroupManager::detect_at(&root, &parent).expect("detect v2");
            let group = m.create("sb", &limits()).expect("create");
            let max = std::fs::read_to_string(root.join(&parent).join("sb/pids.max")).unwrap();
            assert_eq!(max.trim(), "20");
            group
        } else {
            std::fs::create_dir_all(&guard.dirs[0]).expect("mkdir group");
            SandboxCgroup {
                id: "sb".into(),
                group: AnyGroup::V2(Group::new(&root, &parent, "sb")),
                invalid: None,
            }
        };
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id() as i32;
        guard.child = Some(child);
        group.add_pid(pid).expect("add_pid");
        assert_eq!(group.pids().unwrap(), vec![pid]);

        let events = || std::fs::read_to_string(guard.dirs[0].join("cgroup.events")).unwrap();
        group.freeze().expect("freeze");
        assert!(events().contains("frozen 1"), "{}", events());
        group.thaw().expect("thaw");
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !events().contains("frozen 0") && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(events().contains("frozen 0"), "{}", events());

        group.kill_all().expect("kill_all");
        assert_eq!(group.pids().unwrap(), Vec::<i32>::new());
        let status = guard.child.take().unwrap().wait().expect("reap sleep");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));

        group.remove().expect("remove");
        group.remove().expect("remove is idempotent");
        assert!(!guard.dirs[0].exists());
        std::fs::remove_dir(&guard.dirs[1]).expect("remove test parent");
        drop(guard);
    }
}
