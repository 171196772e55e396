//! A fake cgroup filesystem for unit tests: a temporary directory holding the directories and files a
//! kernel would show, with realistic sample contents.
//!
//! It is not a simulation: writes just land in files and nothing reacts to them (no tasks move, no
//! freezer state changes, no `rmdir` of directories with files). Tests pre-populate what the kernel
//! would answer.

use std::path::{Path, PathBuf};

/// `memory.stat` of a v1 group running a small shell session (kernel 6.x, 4 KiB pages).
pub const V1_MEMORY_STAT: &str = "cache 9801728\nrss 6340608\nrss_huge 0\nshmem 9084928\n\
mapped_file 7659520\ndirty 32768\nwriteback 0\nswap 0\npgpgin 33252\npgpgout 29335\npgfault 36773\n\
pgmajfault 0\ninactive_anon 0\nactive_anon 1531904\ninactive_file 237568\nactive_file 479232\n\
unevictable 13893632\nhierarchical_memory_limit 67108864\nhierarchical_memsw_limit 67108864\n\
total_cache 9801728\ntotal_rss 6340608\ntotal_rss_huge 0\ntotal_shmem 9084928\n\
total_mapped_file 7659520\ntotal_dirty 32768\ntotal_writeback 0\ntotal_swap 0\n\
total_pgpgin 33252\ntotal_pgpgout 29335\ntotal_pgfault 36773\ntotal_pgmajfault 0\n\
total_inactive_anon 0\ntotal_active_anon 1531904\ntotal_inactive_file 237568\n\
total_active_file 479232\ntotal_unevictable 13893632\n";
/// `memory.oom_control` of a v1 group whose limit was hit three times.
pub const V1_OOM_CONTROL: &str = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
/// `cpu.stat` of a v1 group that was throttled (times in ns).
pub const V1_CPU_STAT: &str =
    "nr_periods 120\nnr_throttled 7\nthrottled_time 351000000\nnr_bursts 0\nburst_time 0\n";

/// `memory.stat` of a v2 group (first lines of a 6.x kernel's file).
pub const V2_MEMORY_STAT: &str = "anon 1327104\nfile 4096000\nkernel 389120\nkernel_stack 32768\n\
pagetables 81920\nsec_pagetables 0\npercpu 0\nsock 0\nvmalloc 0\nshmem 0\nzswap 0\nzswapped 0\n\
file_mapped 1245184\nfile_dirty 0\nfile_writeback 0\nswapcached 0\nanon_thp 0\nfile_thp 0\n\
shmem_thp 0\ninactive_anon 1323008\nactive_anon 4096\ninactive_file 2867200\nactive_file 1228800\n\
unevictable 0\nslab_reclaimable 102400\nslab_unreclaimable 155648\nslab 258048\n\
workingset_refault_anon 0\nworkingset_refault_file 0\npgfault 1234\npgmajfault 0\n";
/// `memory.events` of a v2 group that hit its limit and lost two processes to the OOM killer.
pub const V2_MEMORY_EVENTS: &str = "low 0\nhigh 0\nmax 57\noom 2\noom_kill 2\noom_group_kill 0\n";
/// `cpu.stat` of a v2 group with the cpu controller enabled.
pub const V2_CPU_STAT: &str = "usage_usec 8512345\nuser_usec 6012000\nsystem_usec 2500345\n\
core_sched.force_idle_usec 0\nnr_periods 300\nnr_throttled 12\nthrottled_usec 840000\n\
nr_bursts 0\nburst_usec 0\n";
/// `cgroup.controllers` of a fresh Debian 12 host's root.
pub const V2_ROOT_CONTROLLERS: &str = "cpuset cpu io memory hugetlb pids rdma misc\n";

/// A fake `/sys/fs/cgroup`.
pub struct FakeTree {
    dir: tempfile::TempDir,
}

impl FakeTree {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("create temp dir"),
        }
    }

    /// A manager of the parent `sandboxd` on this tree, checked to detect `version`.
    pub fn manager(&self, version: super::CgroupVersion) -> super::CgroupManager {
        let m = super::CgroupManager::detect_at(self.root(), "sandboxd").expect("detect");
        assert_eq!(m.version(), version);
        m
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    /// Writes `contents` to `rel`, creating directories on the way.
    pub fn put(&self, rel: &str, contents: &str) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().expect("file has a parent")).expect("mkdir");
        std::fs::write(&path, contents).expect("write fake file");
    }

    pub fn get(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    }

    fn hierarchy(&self, name: &str) {
        self.put(&format!("{name}/cgroup.procs"), "1\n");
        self.put(&format!("{name}/tasks"), "1\n");
    }

    /// A hybrid host like these machines: one mount per v1 controller, plus a cgroup2 mount at
    /// `unified` with no useful controllers.
    pub fn v1() -> Self {
        let tree = Self::new();
        for c in [
            "blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids",
        ] {
            tree.hierarchy(c);
        }
        tree.put("unified/cgroup.controllers", "hugetlb\n");
        tree.put("unified/cgroup.procs", "");
        tree
    }

    /// A v1 host with cpu and cpuacct co-mounted at `cpu,cpuacct`, with the usual symlinks.
    pub fn v1_comounted() -> Self {
        let tree = Self::new();
        for c in ["cpu,cpuacct", "freezer", "memory", "pids"] {
            tree.hierarchy(c);
        }
        for link in ["cpu", "cpuacct"] {
            std::os::unix::fs::symlink("cpu,cpuacct", tree.path(link)).expect("symlink");
        }
        tree
    }

    /// A pure v2 host (fresh Debian 12): systemd already enabled the common controllers at the root.
    pub fn v2() -> Self {
        let tree = Self::new();
        tree.put("cgroup.controllers", V2_ROOT_CONTROLLERS);
        tree.put("cgroup.subtree_control", "cpu io memory pids\n");
        tree.put("cgroup.procs", "1\n");
        tree
    }

    /// The files a v1 kernel shows in a new group `<hierarchy>/<rel>` of the memory hierarchy.
    pub fn v1_memory_group(&self, rel: &str, memsw: bool) {
        let unlimited = "9223372036854771712\n";
        self.put(&format!("memory/{rel}/cgroup.procs"), "");
        self.put(&format!("memory/{rel}/memory.limit_in_bytes"), unlimited);
        if memsw {
            self.put(
                &format!("memory/{rel}/memory.memsw.limit_in_bytes"),
                unlimited,
            );
        }
    }

    /// The files a v2 kernel shows in a new group `<rel>` (below the root).
    pub fn v2_group(&self, rel: &str) {
        for (file, contents) in [
            ("cgroup.procs", ""),
            ("cgroup.events", "populated 0\nfrozen 0\n"),
            ("cgroup.freeze", "0\n"),
            ("cgroup.kill", ""),
            ("memory.max", "max\n"),
            ("memory.swap.max", "max\n"),
            ("cpu.max", "max 100000\n"),
            ("pids.max", "max\n"),
        ] {
            self.put(&format!("{rel}/{file}"), contents);
        }
    }
}
