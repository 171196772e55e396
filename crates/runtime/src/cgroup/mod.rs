//! Per-sandbox cgroups with memory, cpu and pids limits, on cgroup v1 or v2.
//!
//! Contract:
//! - [`CgroupManager::detect`] picks the backend once, at start-up: v2 when `<root>/cgroup.controllers`
//!   lists `memory` and `pids` (a pure v2 host), otherwise v1 when the `memory` and `pids` hierarchies
//!   are mounted under `<root>` (hybrid hosts are treated as v1: their cgroup2 mount has no controllers).
//! - Every sandbox gets `<parent>/<id>`: on v1 one such directory in each hierarchy we use (memory, cpu,
//!   cpuacct, pids, freezer; co-mounted hierarchies such as `cpu,cpuacct` are shared), on v2 one
//!   directory. Processes are only ever put into `<parent>/<id>`, never into `<parent>` (v2's "no
//!   internal processes" rule).
//! - [`CgroupManager::create`] is idempotent and *applies* the limits: a `None` limit is written as
//!   "unlimited", so calling it again with other limits converges the group to them.
//! - [`SandboxCgroup::remove`] is idempotent: directories that are already gone are fine.
//! - With [`CgroupManager::with_spares`] on v1, a create renames an empty group made ahead of need
//!   (`spares`) instead of making one; what it yields is the same group `<parent>/<id>`. Spares
//!   are never listed as sandboxes.
//! - Ids are validated (no `/`, no `..`, not empty): a sandbox id can never name a path outside
//!   `<parent>`. [`CgroupManager::open`] cannot fail, so an invalid id there fails on first use.
//!
//! Assumes the caller may write the cgroup filesystem (real root, or a delegated subtree) and that it is
//! the only writer of `<parent>`. Nothing here watches a group: callers poll [`SandboxCgroup::stats`].
//! Everything is blocking file I/O, and `kill_all`, `freeze` and `remove` poll for up to a few seconds:
//! call them from `spawn_blocking` in async code.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod files;
mod spares;
mod v1;
mod v2;

use files::{
    create_dir, keyed, kill, read, read_max, read_procs, read_u64, remove_dir, wait_until, write,
};

#[cfg(test)]
mod fake;

/// Where the kernel mounts the cgroup filesystem(s).
pub const DEFAULT_ROOT: &str = "/sys/fs/cgroup";
/// The parent group every sandbox's group is created under.
pub const DEFAULT_PARENT: &str = "sandboxd";
/// The cpu period written with every quota (100 ms, the kernel's default).
pub const CPU_PERIOD_USEC: u64 = 100_000;

/// How long `kill_all` keeps killing before giving up.
const KILL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `freeze` waits for the kernel to report the group frozen.
const FREEZE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long `remove` retries an `rmdir` that fails with EBUSY (tasks still exiting).
const REMOVE_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest sleep between two looks at what the kernel reports ([`Backoff`]).
const POLL: Duration = Duration::from_millis(5);
/// The first sleep between two looks ([`Backoff`]).
const FIRST_POLL: Duration = Duration::from_micros(50);

/// The sleeps of a loop that waits for the kernel (a group frozen, emptied, removable): 50 µs
/// first, doubling up to [`POLL`]. What the kernel finishes at once (most freezes, the exit of a
/// killed agent) is seen within microseconds instead of after a whole [`POLL`], and what takes
/// longer is looked at no more often than every [`POLL`].
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Backoff(FIRST_POLL)
    }

    /// Sleeps this turn's time ([`Backoff::turn`]).
    fn sleep(&mut self) {
        std::thread::sleep(self.turn());
    }

    /// This turn's time; the next turn's is twice as long, at most [`POLL`].
    fn turn(&mut self) -> Duration {
        let now = self.0;
        self.0 = (now * 2).min(POLL);
        now
    }
}

/// Resource limits of one sandbox; `None` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Memory (RAM) limit in bytes; swap is disabled where the kernel lets us.
    pub memory_bytes: Option<u64>,
    /// CPU bandwidth in thousandths of one CPU: 1000 = one full CPU, 500 = half. At least 10.
    pub cpu_millis: Option<u32>,
    /// Maximum number of tasks (processes and threads).
    pub pids_max: Option<u64>,
}

/// Which cgroup interface the host offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// One hierarchy per controller (`/sys/fs/cgroup/<controller>/...`).
    V1,
    /// The unified hierarchy (`/sys/fs/cgroup/...`).
    V2,
}

/// What a sandbox's group reports about its usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CgroupStats {
    /// Memory charged to the group, page cache included.
    pub memory_usage_bytes: u64,
    /// The memory limit, `None` when unlimited.
    pub memory_limit_bytes: Option<u64>,
    /// The page-cache part of `memory_usage_bytes` (reclaimable under pressure).
    pub memory_file_bytes: u64,
    /// CPU time consumed, user and system.
    pub cpu_usage_usec: u64,
    /// Time the group spent throttled by its cpu quota.
    pub cpu_throttled_usec: u64,
    /// Tasks currently in the group.
    pub pids_current: u64,
    /// The tasks limit, `None` when unlimited.
    pub pids_max: Option<u64>,
    /// Processes the kernel's OOM killer killed in the group.
    pub oom_kill_count: u64,
}

/// A failed cgroup operation; each variant names the file or directory involved.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// Neither a v2 nor a v1 cgroup filesystem with the controllers we need was found.
    #[error("no usable cgroup filesystem under {root}: {missing}")]
    NotDetected { root: PathBuf, missing: String },
    /// A controller the requested limits need is not available.
    #[error("cgroup controller {controller} is not available under {root}")]
    ControllerMissing {
        controller: &'static str,
        root: PathBuf,
    },
    /// A sandbox id or parent name that would not name exactly one directory below the parent.
    #[error("invalid cgroup name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    /// A limit the kernel would reject.
    #[error("invalid cgroup limit: {0}")]
    InvalidLimit(&'static str),
    #[error("cannot create cgroup directory {path}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot remove cgroup directory {path}")]
    RemoveDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot list cgroup directory {path}")]
    ListDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {value:?} to {path}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: std::io::Error,
    },
    #[error("unexpected contents of {path}: {detail}")]
    Parse { path: PathBuf, detail: String },
    #[error("cannot send SIGKILL to pid {pid}")]
    Kill {
        pid: i32,
        #[source]
        source: nix::errno::Errno,
    },
    /// The kernel did not reach the awaited state in time.
    #[error("cgroup {path} did not become {what} within {waited:?}")]
    Timeout {
        path: PathBuf,
        what: &'static str,
        waited: Duration,
    },
}

type Result<T, E = CgroupError> = std::result::Result<T, E>;

enum Backend {
    V1(v1::Hierarchies),
    V2,
}

/// Creates, finds and lists the cgroups of sandboxes under one parent group.
pub struct CgroupManager {
    root: PathBuf,
    parent: String,
    backend: Backend,
    /// Groups made ahead of need ([`CgroupManager::with_spares`]; cgroup v1 only).
    spares: Option<spares::Spares>,
}

impl std::fmt::Debug for CgroupManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CgroupManager")
            .field("root", &self.root)
            .field("parent", &self.parent)
            .field("version", &self.version())
            .finish()
    }
}

impl CgroupManager {
    /// Detects the backend of the real cgroup filesystem at [`DEFAULT_ROOT`].
    pub fn detect(parent: &str) -> Result<Self> {
        Self::detect_at(Path::new(DEFAULT_ROOT), parent)
    }

    /// Detects the backend of the cgroup filesystem at `root` (a fake tree in tests).
    ///
    /// `parent` is a relative path (`sandboxd`, or `sandboxd/test-1` for a nested parent).
    pub fn detect_at(root: &Path, parent: &str) -> Result<Self> {
        validate_parent(parent)?;
        let backend = if v2::detect(root)? {
            Backend::V2
        } else {
            Backend::V1(v1::Hierarchies::detect(root)?)
        };
        Ok(Self {
            root: root.to_path_buf(),
            parent: parent.to_string(),
            backend,
            spares: None,
        })
    }

    /// Keeps `wanted` empty groups made ahead of need, which creates rename instead of making their
    /// own (see `spares`); on cgroup v2, which cannot rename a group, this changes nothing.
    pub fn with_spares(mut self, wanted: usize) -> Self {
        if let (Backend::V1(h), true) = (&self.backend, wanted > 0) {
            let parents = h.dirs().map(|d| d.join(&self.parent)).collect();
            self.spares = Some(spares::Spares::start(parents, wanted));
        }
        self
    }

    /// The backend chosen at detection.
    pub fn version(&self) -> CgroupVersion {
        match self.backend {
            Backend::V1(_) => CgroupVersion::V1,
            Backend::V2 => CgroupVersion::V2,
        }
    }

    /// The controllers sandboxes use and whether this host has each: `memory` and `pids` (always, or
    /// detection would have failed), `cpu` (cpu limits) and `freezer` (pause in place; part of
    /// cgroup v2 itself).
    pub fn controllers(&self) -> Result<Vec<(&'static str, bool)>> {
        Ok(match &self.backend {
            Backend::V1(h) => h.controllers(),
            Backend::V2 => {
                let available = read(&self.root.join("cgroup.controllers"))?;
                let has = |c: &str| available.split_whitespace().any(|t| t == c);
                vec![
                    ("memory", has("memory")),
                    ("pids", has("pids")),
                    ("cpu", has("cpu")),
                    ("freezer", true),
                ]
            }
        })
    }

    /// Creates (or finds) the group of sandbox `id` and applies `limits` to it.
    pub fn create(&self, id: &str, limits: &Limits) -> Result<SandboxCgroup> {
        validate_id(id)?;
        validate_limits(limits)?;
        let group = match &self.backend {
            Backend::V1(h) => {
                Group::V1(h.create(&self.parent, id, limits, self.spares.as_ref())?)
            }
            Backend::V2 => Group::V2(v2::create(&self.root, &self.parent, id, limits)?),
        };
        tracing::debug!(sandbox_id = id, ?limits, "cgroup created");
        Ok(SandboxCgroup {
            id: id.to_string(),
            group,
            invalid: None,
        })
    }

    /// Makes the spare groups creates took since the last call (see `spares`), behind the caller:
    /// call it once a boot that created a group is done with the kernel's cgroup lock.
    pub fn replenish_spares(&self) {
        if let Some(spares) = &self.spares {
            spares.replenish();
        }
    }

    /// Whether every spare group the pool keeps is ready (true without a pool).
    pub fn spares_ready(&self) -> bool {
        self.spares.as_ref().is_none_or(|s| s.ready() >= s.wanted())
    }

    /// The group of sandbox `id`, whether or not it exists (to re-adopt a sandbox after a restart).
    ///
    /// An invalid id yields a handle whose every operation fails with [`CgroupError::InvalidName`].
    pub fn open(&self, id: &str) -> SandboxCgroup {
        let invalid = validate_id(id).err().map(|e| match e {
            CgroupError::InvalidName { reason, .. } => reason,
            _ => "invalid",
        });
        let id_for_path = if invalid.is_some() { "" } else { id };
        let group = match &self.backend {
            Backend::V1(h) => Group::V1(h.group(&self.parent, id_for_path)),
            Backend::V2 => Group::V2(v2::Group::new(&self.root, &self.parent, id_for_path)),
        };
        SandboxCgroup {
            id: id.to_string(),
            group,
            invalid,
        }
    }

    /// Ids of the sandboxes that have a group (in any hierarchy on v1), sorted.
    pub fn list(&self) -> Result<Vec<String>> {
        let parents = match &self.backend {
            Backend::V1(h) => h.dirs().map(|d| d.join(&self.parent)).collect(),
            Backend::V2 => vec![self.root.join(&self.parent)],
        };
        let mut ids = Vec::new();
        for parent in parents {
            let entries = match std::fs::read_dir(&parent) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(CgroupError::ListDir {
                        path: parent,
                        source,
                    })
                }
            };
            for entry in entries {
                let entry = entry.map_err(|source| CgroupError::ListDir {
                    path: parent.clone(),
                    source,
                })?;
                let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
                if let (true, Some(name)) = (is_dir, entry.file_name().to_str()) {
                    if !spares::is_spare(name) {
                        ids.push(name.to_string());
                    }
                }
            }
        }
        ids.sort();
        ids.dedup();
        Ok(ids)
    }
}

enum Group {
    V1(v1::Group),
    V2(v2::Group),
}

/// The cgroup of one sandbox.
pub struct SandboxCgroup {
    id: String,
    group: Group,
    invalid: Option<&'static str>,
}

impl std::fmt::Debug for SandboxCgroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxCgroup")
            .field("id", &self.id)
            .finish()
    }
}

impl SandboxCgroup {
    /// The sandbox id this group belongs to.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Moves process `pid` (all its threads) into the group: into every hierarchy on v1. Sandbox
    /// processes are not put in this way: they join before they run ([`Self::self_join_files`]).
    pub fn add_pid(&self, pid: i32) -> Result<()> {
        self.check()?;
        match &self.group {
            Group::V1(g) => g.add_pid(pid),
            Group::V2(g) => g.add_pid(pid),
        }
    }

    /// The files a new, still single-threaded process writes `0` to, to move itself into the group
    /// before it runs anything: on v1 each hierarchy's `tasks`, on v2 `cgroup.procs`.
    ///
    /// Moving a process through `cgroup.procs` takes the kernel's global threadgroup lock for
    /// writing, and the first writer after a quiet spell waits out an RCU grace period (5–14 ms
    /// on these hosts): a create that comes alone would pay it. A thread that moves itself through
    /// v1's `tasks` skips that lock. v2 has no such file for a domain group: there a child is born
    /// in the group instead ([`Self::birth_directory`]), and `cgroup.procs` is the fallback.
    pub fn self_join_files(&self) -> Result<Vec<std::path::PathBuf>> {
        self.check()?;
        Ok(match &self.group {
            Group::V1(g) => g.tasks_files(),
            Group::V2(g) => vec![g.procs_file()],
        })
    }

    /// v2: the group's directory, which `clone3(CLONE_INTO_CGROUP)` takes so that a child is born in
    /// the group without any migration; `None` on v1.
    pub fn birth_directory(&self) -> Result<Option<&Path>> {
        self.check()?;
        Ok(match &self.group {
            Group::V1(_) => None,
            Group::V2(g) => Some(g.dir()),
        })
    }

    /// Processes in the group (on v1 the union over its hierarchies), sorted.
    pub fn pids(&self) -> Result<Vec<i32>> {
        self.check()?;
        match &self.group {
            Group::V1(g) => g.pids(),
            Group::V2(g) => g.pids(),
        }
    }

    /// Kills every process in the group and returns once the group is empty.
    ///
    /// v2 with `cgroup.kill` (Linux 5.14+) kills atomically; otherwise the group is frozen (so nothing
    /// can fork), every listed pid gets SIGKILL, the group is thawed (so the signals are delivered), and
    /// this repeats until no process is left. An empty or missing group succeeds.
    pub fn kill_all(&self) -> Result<()> {
        self.check()?;
        if let Group::V2(g) = &self.group {
            if g.kill_atomically()? {
                return self.wait_empty();
            }
        }
        let started = Instant::now();
        let mut backoff = Backoff::new();
        loop {
            // Best effort: a group stuck FREEZING must not keep us from killing.
            let frozen = self.can_freeze() && self.freeze_within(FREEZE_TIMEOUT / 10).is_ok();
            let pids = self.pids_or_none()?;
            for &pid in &pids {
                kill(pid)?;
            }
            if frozen {
                self.thaw()?;
            }
            if pids.is_empty() {
                return Ok(());
            }
            if started.elapsed() > KILL_TIMEOUT {
                return Err(self.timeout("empty", started));
            }
            backoff.sleep();
        }
    }

    /// Removes the group's directories; gone already is fine. The group must be empty (see `kill_all`).
    pub fn remove(&self) -> Result<()> {
        self.check()?;
        let dirs = match &self.group {
            Group::V1(g) => g.dirs().to_vec(),
            Group::V2(g) => vec![g.dir().to_path_buf()],
        };
        let mut first_error = None;
        for dir in dirs {
            if let Err(e) = remove_dir(&dir) {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => {
                tracing::debug!(sandbox_id = self.id, "cgroup removed");
                Ok(())
            }
        }
    }

    /// Applies `limits` to the existing group: a running sandbox's new size, effective at once. A
    /// memory limit below what the group uses is the kernel's to settle (v2 reclaims, v1 refuses).
    pub fn set_limits(&self, limits: &Limits) -> Result<()> {
        self.check()?;
        validate_limits(limits)?;
        match &self.group {
            Group::V1(g) => g.set_limits(limits),
            Group::V2(g) => g.set_limits(limits),
        }
    }

    /// Freezes every process in the group and waits until the kernel reports it frozen.
    pub fn freeze(&self) -> Result<()> {
        self.check()?;
        self.freeze_within(FREEZE_TIMEOUT)
    }

    /// Lets a frozen group run again.
    pub fn thaw(&self) -> Result<()> {
        self.check()?;
        match &self.group {
            Group::V1(g) => g.thaw(),
            Group::V2(g) => g.thaw(),
        }
    }

    /// Current usage and limits of the group.
    pub fn stats(&self) -> Result<CgroupStats> {
        self.check()?;
        match &self.group {
            Group::V1(g) => g.stats(),
            Group::V2(g) => g.stats(),
        }
    }

    fn check(&self) -> Result<()> {
        match self.invalid {
            Some(reason) => Err(CgroupError::InvalidName {
                name: self.id.clone(),
                reason,
            }),
            None => Ok(()),
        }
    }

    fn can_freeze(&self) -> bool {
        match &self.group {
            Group::V1(g) => g.can_freeze(),
            Group::V2(g) => g.can_freeze(),
        }
    }

    fn freeze_within(&self, timeout: Duration) -> Result<()> {
        match &self.group {
            Group::V1(g) => g.freeze(timeout),
            Group::V2(g) => g.freeze(timeout),
        }
    }

    /// `pids()`, but a group that does not exist (any more) has none.
    fn pids_or_none(&self) -> Result<Vec<i32>> {
        match self.pids() {
            Err(CgroupError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(Vec::new())
            }
            other => other,
        }
    }

    fn wait_empty(&self) -> Result<()> {
        let started = Instant::now();
        let mut backoff = Backoff::new();
        while !self.pids_or_none()?.is_empty() {
            if started.elapsed() > KILL_TIMEOUT {
                return Err(self.timeout("empty", started));
            }
            backoff.sleep();
        }
        Ok(())
    }

    fn timeout(&self, what: &'static str, started: Instant) -> CgroupError {
        let path = match &self.group {
            Group::V1(g) => g.dirs().first().cloned().unwrap_or_default(),
            Group::V2(g) => g.dir().to_path_buf(),
        };
        CgroupError::Timeout {
            path,
            what,
            waited: started.elapsed(),
        }
    }
}

fn validate_id(id: &str) -> Result<()> {
    let reason = if id.is_empty() {
        "empty"
    } else if id.contains('/') {
        "contains '/'"
    } else if id.contains("..") {
        "contains '..'"
    } else if id.contains('\0') {
        "contains NUL"
    } else if id == "." {
        "is '.'"
    } else if id.len() > 200 {
        "longer than 200 bytes"
    } else {
        return Ok(());
    };
    Err(CgroupError::InvalidName {
        name: id.to_string(),
        reason,
    })
}

fn validate_parent(parent: &str) -> Result<()> {
    if parent.starts_with('/') {
        return Err(CgroupError::InvalidName {
            name: parent.to_string(),
            reason: "parent must be relative",
        });
    }
    parent.split('/').try_for_each(validate_id)
}

fn validate_limits(limits: &Limits) -> Result<()> {
    if limits.cpu_millis.is_some_and(|m| m < 10) {
        return Err(CgroupError::InvalidLimit(
            "cpu_millis must be at least 10 (a 1 ms quota per 100 ms period)",
        ));
    }
    if limits.pids_max == Some(0) {
        return Err(CgroupError::InvalidLimit("pids_max must be at least 1"));
    }
    if limits.memory_bytes == Some(0) {
        return Err(CgroupError::InvalidLimit("memory_bytes must be positive"));
    }
    Ok(())
}

/// The cpu quota for `millis` thousandths of a CPU per [`CPU_PERIOD_USEC`].
fn cpu_quota_usec(millis: u32) -> u64 {
    u64::from(millis) * CPU_PERIOD_USEC / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The waits start at [`FIRST_POLL`], double, and never sleep longer than [`POLL`].
    #[test]
    fn a_wait_looks_again_soon_first_then_every_poll() {
        let mut backoff = Backoff::new();
        let slept: Vec<_> = (0..10).map(|_| backoff.turn()).collect();
        assert_eq!(slept[0], FIRST_POLL);
        assert_eq!(slept[1], FIRST_POLL * 2);
        assert!(slept.windows(2).all(|w| w[1] >= w[0] && w[1] <= POLL));
        assert_eq!(slept[9], POLL);
    }

    #[test]
    fn ids_that_could_escape_the_parent_are_rejected() {
        for bad in ["", "a/b", "..", "../x", "a..b", ".", "a\0b"] {
            assert!(
                matches!(validate_id(bad), Err(CgroupError::InvalidName { .. })),
                "{bad:?} accepted"
            );
        }
        for good in ["sb-1", "0f3a9c", "a.b", "x_y"] {
            assert!(validate_id(good).is_ok(), "{good:?} rejected");
        }
        assert!(validate_parent("sandboxd/test-1").is_ok());
        assert!(validate_parent("/sandboxd").is_err());
        assert!(validate_parent("sandboxd/../x").is_err());
        assert!(validate_parent("sandboxd//x").is_err());
    }

    #[test]
    fn limits_the_kernel_would_reject_are_refused() {
        let tiny_cpu = Limits {
            cpu_millis: Some(5),
            ..Limits::default()
        };
        assert!(matches!(
            validate_limits(&tiny_cpu),
            Err(CgroupError::InvalidLimit(_))
        ));
        assert_eq!(cpu_quota_usec(1000), 100_000);
        assert_eq!(cpu_quota_usec(250), 25_000);
        assert_eq!(cpu_quota_usec(10), 1_000);
    }

    #[test]
    fn flat_keyed_files_parse_by_exact_key() {
        let p = Path::new("memory.events");
        let text = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed(p, text, "oom_kill").unwrap(), 1);
        assert_eq!(keyed(p, text, "oom").unwrap(), 2);
        assert!(matches!(
            keyed(p, text, "nope"),
            Err(CgroupError::Parse { .. })
        ));
    }

    #[test]
    fn errors_name_the_file_and_chain_the_cause() {
        let err = read(Path::new("/nonexistent/memory.max")).unwrap_err();
        assert_eq!(err.to_string(), "cannot read /nonexistent/memory.max");
        let source = std::error::Error::source(&err).expect("chained io error");
        assert!(source.to_string().contains("No such file"));
    }
}
