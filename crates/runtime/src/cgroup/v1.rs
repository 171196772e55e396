//! cgroup v1: one hierarchy per controller, a `<parent>/<id>` directory in each.
//!
//! Hierarchies are found by directory, so both layouts work: separate `cpu` and `cpuacct` mounts (these
//! machines) and a co-mounted `cpu,cpuacct` (with or without the usual `cpu`/`cpuacct` symlinks). The
//! memory and pids hierarchies are required; cpu, cpuacct and freezer are used when present.

use super::{
    cpu_quota_usec, create_dir, keyed, read, read_max, read_procs, read_u64, wait_until, write,
    CgroupError, CgroupStats, Limits, Result, CPU_PERIOD_USEC,
};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `memory.limit_in_bytes` reads as `PAGE_COUNTER_MAX * PAGE_SIZE` when unlimited (0x7FFFFFFFFFFFF000
/// with 4 KiB pages); anything this large is "no limit" whatever the page size.
const UNLIMITED_FLOOR: u64 = 0x7FFF_FFFF_FFF0_0000;

/// Mount points of the hierarchies we use, canonicalized (a co-mounted `cpu,cpuacct` appears once).
pub(super) struct Hierarchies {
    root: PathBuf,
    memory: PathBuf,
    pids: PathBuf,
    cpu: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
    freezer: Option<PathBuf>,
}

impl Hierarchies {
    pub(super) fn detect(root: &Path) -> Result<Self> {
        let memory = find(root, "memory");
        let pids = find(root, "pids");
        match (memory, pids) {
            (Some(memory), Some(pids)) => Ok(Self {
                root: root.to_path_buf(),
                memory,
                pids,
                cpu: find(root, "cpu"),
                cpuacct: find(root, "cpuacct"),
                freezer: find(root, "freezer"),
            }),
            (memory, _) => Err(CgroupError::NotDetected {
                root: root.to_path_buf(),
                missing: format!(
                    "no cgroup.controllers listing memory and pids (v2), and no v1 {} hierarchy \
                     (a directory with cgroup.procs)",
                    if memory.is_none() { "memory" } else { "pids" }
                ),
            }),
        }
    }

    /// The controllers of [`super::CgroupManager::controllers`], as found.
    pub(super) fn controllers(&self) -> Vec<(&'static str, bool)> {
        vec![
            ("memory", true),
            ("pids", true),
            ("cpu", self.cpu.is_some()),
            ("freezer", self.freezer.is_some()),
        ]
    }

    /// Every distinct hierarchy directory, memory first.
    pub(super) fn dirs(&self) -> impl Iterator<Item = &PathBuf> {
        let all = [
            Some(&self.memory),
            self.cpu.as_ref(),
            self.cpuacct.as_ref(),
            Some(&self.pids),
            self.freezer.as_ref(),
        ];
        let mut seen: Vec<&PathBuf> = Vec::new();
        for dir in all.into_iter().flatten() {
            if !seen.contains(&dir) {
                seen.push(dir);
            }
        }
        seen.into_iter()
    }

    pub(super) fn group(&self, parent: &str, id: &str) -> Group {
        let at = |h: &PathBuf| h.join(parent).join(id);
        Group {
            memory: at(&self.memory),
            pids: at(&self.pids),
            cpu: self.cpu.as_ref().map(at),
            cpuacct: self.cpuacct.as_ref().map(at),
            freezer: self.freezer.as_ref().map(at),
            dirs: self.dirs().map(at).collect(),
        }
    }

    /// Makes group `id` under `parent` (renaming a spare of `spares` when one is ready) and applies
    /// `limits` to it.
    pub(super) fn create(
        &self,
        parent: &str,
        id: &str,
        limits: &Limits,
        spares: Option<&super::spares::Spares>,
    ) -> Result<Group> {
        if limits.cpu_millis.is_some() && self.cpu.is_none() {
            return Err(CgroupError::ControllerMissing {
                controller: "cpu",
                root: self.root.clone(),
            });
        }
        let group = self.group(parent, id);
        if !spares.is_some_and(|s| s.take_as(id)) {
            for dir in &group.dirs {
                create_dir(dir)?;
            }
        }
        group.apply(limits)?;
        Ok(group)
    }
}

/// The hierarchy directory for `controller`: `<root>/<controller>`, else a co-mount naming it.
fn find(root: &Path, controller: &str) -> Option<PathBuf> {
    let usable = |dir: &Path| dir.join("cgroup.procs").is_file();
    let direct = root.join(controller);
    let dir = if usable(&direct) {
        direct
    } else {
        std::fs::read_dir(root)
            .ok()?
            .filter_map(|e| e.ok())
            .find(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.split(',').any(|c| c == controller) && usable(&e.path())
            })?
            .path()
    };
    Some(std::fs::canonicalize(&dir).unwrap_or(dir))
}

/// One sandbox's directories, one per distinct hierarchy.
pub(super) struct Group {
    memory: PathBuf,
    pids: PathBuf,
    cpu: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
    freezer: Option<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl Group {
    pub(super) fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Applies `limits` to the existing group.
    pub(super) fn set_limits(&self, limits: &Limits) -> Result<()> {
        self.apply(limits)
    }

    fn apply(&self, limits: &Limits) -> Result<()> {
        let memory = limits
            .memory_bytes
            .map_or_else(|| "-1".to_string(), |b| b.to_string());
        // With swap accounting on, memsw (RAM + swap) must stay >= the RAM limit at every step: lift it,
        // set the RAM limit, then pin memsw to the same value so the sandbox cannot swap.
        let memsw = self.memory.join("memory.memsw.limit_in_bytes");
        let has_memsw = memsw.is_file();
        if has_memsw {
            write(&memsw, "-1")?;
        }
        write(&self.memory.join("memory.limit_in_bytes"), &memory)?;
        if has_memsw {
            write(&memsw, &memory)?;
        }
        if let Some(cpu) = &self.cpu {
            write(&cpu.join("cpu.cfs_period_us"), &CPU_PERIOD_USEC.to_string())?;
            let quota = limits
                .cpu_millis
                .map_or_else(|| "-1".to_string(), |m| cpu_quota_usec(m).to_string());
            write(&cpu.join("cpu.cfs_quota_us"), &quota)?;
        }
        let pids = limits
            .pids_max
            .map_or_else(|| "max".to_string(), |p| p.to_string());
        write(&self.pids.join("pids.max"), &pids)
    }

    /// Each hierarchy's `tasks` file, through which a thread moves itself.
    pub(super) fn tasks_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|dir| dir.join("tasks")).collect()
    }

    pub(super) fn add_pid(&self, pid: i32) -> Result<()> {
        let pid = pid.to_string();
        self.dirs
            .iter()
            .try_for_each(|dir| write(&dir.join("cgroup.procs"), &pid))
    }

    /// The union over the hierarchies that still exist; an error if none does.
    pub(super) fn pids(&self) -> Result<Vec<i32>> {
        let mut pids = Vec::new();
        let mut missing = None;
        for dir in &self.dirs {
            match read_procs(&dir.join("cgroup.procs")) {
                Ok(found) => pids.extend(found),
                Err(CgroupError::Read { path, source })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    missing = Some(CgroupError::Read { path, source })
                }
                Err(e) => return Err(e),
            }
        }
        match missing {
            Some(e) if pids.is_empty() && !self.dirs.iter().any(|d| d.is_dir()) => Err(e),
            _ => {
                pids.sort_unstable();
                pids.dedup();
                Ok(pids)
            }
        }
    }

    pub(super) fn can_freeze(&self) -> bool {
        self.freezer.is_some()
    }

    pub(super) fn freeze(&self, timeout: Duration) -> Result<()> {
        let state = self.freezer_state()?;
        write(&state, "FROZEN")?;
        wait_until(&state, "FROZEN", timeout, || {
            if read(&state)?.trim() == "FROZEN" {
                return Ok(true);
            }
            // A freeze the kernel could not finish (a task caught mid-fork) stays FREEZING until
            // FROZEN is written again: the v1 freezer's documented retry.
            write(&state, "FROZEN")?;
            Ok(false)
        })
    }

    pub(super) fn thaw(&self) -> Result<()> {
        write(&self.freezer_state()?, "THAWED")
    }

    fn freezer_state(&self) -> Result<PathBuf> {
        match &self.freezer {
            Some(dir) => Ok(dir.join("freezer.state")),
            None => Err(CgroupError::ControllerMissing {
                controller: "freezer",
                root: self.memory.clone(),
            }),
        }
    }

    pub(super) fn stats(&self) -> Result<CgroupStats> {
        let mem = |f: &str| self.memory.join(f);
        let limit = read_u64(&mem("memory.limit_in_bytes"))?;
        let stat_path = mem("memory.stat");
        let stat = read(&stat_path)?;
        let file = keyed(&stat_path, &stat, "total_cache")
            .or_else(|_| keyed(&stat_path, &stat, "cache"))?;
        let oom_path = mem("memory.oom_control");
        let oom = read(&oom_path)?;
        // Kernels before 4.13 have no oom_kill line; they cannot have counted any.
        let oom_kill_count = if oom.lines().any(|l| l.starts_with("oom_kill ")) {
            keyed(&oom_path, &oom, "oom_kill")?
        } else {
            0
        };
        let cpuacct = self
            .cpuacct
            .as_ref()
            .ok_or_else(|| CgroupError::ControllerMissing {
                controller: "cpuacct",
                root: self.memory.clone(),
            })?;
        let cpu_usage_usec = read_u64(&cpuacct.join("cpuacct.usage"))? / 1000;
        // Without a cpu hierarchy no quota can be set, so nothing was throttled.
        let cpu_throttled_usec = match &self.cpu {
            Some(cpu) => {
                let path = cpu.join("cpu.stat");
                keyed(&path, &read(&path)?, "throttled_time")? / 1000
            }
            None => 0,
        };
        Ok(CgroupStats {
            memory_usage_bytes: read_u64(&mem("memory.usage_in_bytes"))?,
            memory_limit_bytes: (limit < UNLIMITED_FLOOR).then_some(limit),
            memory_file_bytes: file,
            cpu_usage_usec,
            cpu_throttled_usec,
            pids_current: read_u64(&self.pids.join("pids.current"))?,
            pids_max: read_max(&self.pids.join("pids.max"))?,
            oom_kill_count,
        })
    }
}

#[cfg(test)]
mod tests;
