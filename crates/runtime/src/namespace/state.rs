//! What the namespace runtime persists per sandbox, so that a fresh process can adopt what an earlier one
//! started: the spec, and the host pid of the sandbox's init with its kernel start time (a pid alone
//! could have been recycled by an unrelated process).
//!
//! Two records, of two lifetimes. `state.json` holds what must outlive the host: the spec, written
//! with `fsync` ([`SandboxPaths::save`]). `init` holds what a boot learns, its init's pid and start
//! time ([`SandboxPaths::save_init`]), written without: a host that goes down takes the init with it,
//! so an `init` file lost, garbled or left half-written by that is read as no init at all, which is
//! the truth after such a crash; a daemon killed without the host keeps it in the page cache. A boot
//! thus waits for no disk: its `fsync`, queued behind the store's commit of `starting`, cost the
//! cold create most of a millisecond. An `init` file, when it parses, overrides the pid and start
//! time `state.json` holds, and marks the sandbox started; every [`SandboxPaths::save`] rewrites it
//! first, so the two never disagree.
//!
//! Layout under the runtime directory:
//! `sandboxes/<id>/{state.json, init, agent.sock, boot.log, upper/, work/, rootfs/}`, and for a gVisor
//! sandbox ([`crate::gvisor`]) also `{bundle/, runsc/, netns, shared/agent.sock}`. The directory is mode
//! 0700 and never mounted into any sandbox (a gVisor sandbox sees `shared/` alone). `upper` and `work` are directories, or, for a sandbox with
//! a quota'd writable layer ([`crate::quota`]), symbolic links to `upper/` and `work/` in
//! `layers/<id>/`; either way [`SandboxPaths::upper`] and [`SandboxPaths::work`] name them.

use crate::namespace::process::start_time;
use crate::{Isolation, RuntimeError, RuntimeState, SandboxSpec};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The persisted record of one sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Persisted {
    /// What was asked for.
    pub spec: SandboxSpec,
    /// Host pid of the init of the current (or last) boot.
    pub pid: Option<i32>,
    /// Kernel start time of that pid.
    pub start_time: Option<u64>,
    /// Whether it was ever started.
    pub started: bool,
    /// The host id the sandbox's root is, fixed at create ([`super::ids::IdRanges::base_of`]);
    /// `None` in records from before ranges existed: the runtime's shared range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_base: Option<u32>,
    /// The clone generation: 0 for a sandbox booted afresh, one more than its source's for a fork
    /// (`sandboxd_envd::init::GENERATION_FILE`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: u64,
    /// The name its host resources (cgroup, quota'd writable layer) were made under, when that is
    /// not its id: a sandbox made for a warm pool and then adopted under a create's id
    /// ([`crate::Runtime::adopt`]). `None`: its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Persisted {
    /// The name of its cgroup and quota'd writable layer ([`Persisted::key`]).
    pub fn key(&self) -> &str {
        self.key.as_deref().unwrap_or(&self.spec.id)
    }

    /// The pid of the init if that very process is still alive.
    pub fn live_pid(&self) -> Option<i32> {
        let pid = self.pid?;
        (start_time(pid)? == self.start_time?).then_some(pid)
    }

    /// The state this record and the process table imply.
    pub fn observed_state(&self) -> RuntimeState {
        if self.live_pid().is_some() {
            RuntimeState::Running
        } else if self.started {
            RuntimeState::Stopped
        } else {
            RuntimeState::Created
        }
    }
}

/// Paths of one sandbox's files.
pub struct SandboxPaths {
    /// The sandbox's directory.
    pub dir: PathBuf,
}

impl SandboxPaths {
    /// Where the agent of a sandbox of `tier` listens, on the host.
    pub fn agent_socket(&self, tier: Isolation) -> PathBuf {
        match tier {
            Isolation::Namespace => self.socket(),
            Isolation::Gvisor => self.shared().join(crate::gvisor::AGENT_SOCKET),
        }
    }

    /// The one directory of a gVisor sandbox's own that it sees (at
    /// [`crate::gvisor::SHARED_DIR`]): its agent's socket is made there.
    pub fn shared(&self) -> PathBuf {
        self.dir.join("shared")
    }

    /// A gVisor sandbox's OCI bundle (`config.json`).
    pub fn bundle(&self) -> PathBuf {
        self.dir.join("bundle")
    }

    /// `runsc`'s state directory for a gVisor sandbox (its `--root`).
    pub fn runsc_root(&self) -> PathBuf {
        self.dir.join("runsc")
    }

    /// The file a gVisor sandbox's network namespace is bound on while it runs.
    pub fn netns(&self) -> PathBuf {
        self.dir.join("netns")
    }

    /// Paths for sandbox `id` under `sandboxes_dir`.
    pub fn new(sandboxes_dir: &Path, id: &str) -> Self {
        Self {
            dir: sandboxes_dir.join(id),
        }
    }
    /// The state record.
    pub fn state(&self) -> PathBuf {
        self.dir.join("state.json")
    }
    /// The boot record: the pid and start time of the init of the current (or last) boot.
    pub fn init(&self) -> PathBuf {
        self.dir.join("init")
    }
    /// The agent's socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("agent.sock")
    }
    /// The boot log (stdout and stderr of the init).
    pub fn log(&self) -> PathBuf {
        self.dir.join("boot.log")
    }
    /// The writable layer.
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }
    /// The overlay work directory.
    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }
    /// Where the booting init attaches its idmapped views of the lower layers (used only inside the
    /// sandbox's mount namespace, see [`super::ids`]).
    pub fn idmapped(&self) -> PathBuf {
        self.dir.join("lowers")
    }
    /// The mount point of the merged root (used only inside the sandbox's mount namespace).
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }

    /// Reads the state record; `None` when the sandbox is unknown.
    ///
    /// The directory's name is the sandbox's id: a record found under another name (an adoption
    /// renames the directory before it rewrites the record) is read as the adopted sandbox, its
    /// host resources still under the name it was made with.
    pub fn load(&self) -> Result<Option<Persisted>, RuntimeError> {
        let path = self.state();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<Persisted>(&bytes)
                .map(|mut p| {
                    if let Some(name) = self.dir.file_name().and_then(|n| n.to_str()) {
                        if p.spec.id != name {
                            let made_as = std::mem::replace(&mut p.spec.id, name.to_string());
                            p.key.get_or_insert(made_as);
                        }
                    }
                    if let Some((pid, start_time)) = self.read_init() {
                        (p.pid, p.start_time, p.started) = (Some(pid), start_time, true);
                    }
                    Some(p)
                })
                .map_err(|e| RuntimeError::Io {
                    what: "parse",
                    path,
                    source: std::io::Error::other(e),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(RuntimeError::Io {
                what: "read",
                path,
                source: e,
            }),
        }
    }

    /// Records the init of a boot ([`SandboxPaths::init`]): written and renamed into place, without
    /// `fsync` (see the module's docs).
    pub fn save_init(&self, pid: i32, start_time: Option<u64>) -> Result<(), RuntimeError> {
        let line = match start_time {
            Some(t) => format!("{pid} {t}\n"),
            None => format!("{pid}\n"),
        };
        let (tmp, path) = (self.dir.join("init.tmp"), self.init());
        std::fs::write(&tmp, line).map_err(RuntimeError::io("write", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(RuntimeError::io("rename", &path))
    }

    /// The boot record, if there is one and it parses: a pid, and its start time when it was read.
    fn read_init(&self) -> Option<(i32, Option<u64>)> {
        let text = std::fs::read_to_string(self.init()).ok()?;
        let line = text.strip_suffix('\n')?;
        let mut fields = line.split(' ');
        let pid = fields.next()?.parse().ok().filter(|pid| *pid > 0)?;
        let start_time = match fields.next() {
            Some(t) => Some(t.parse().ok()?),
            None => None,
        };
        fields.next().is_none().then_some((pid, start_time))
    }

    /// Writes the state record atomically (write, fsync, rename), its boot record first.
    pub fn save(&self, state: &Persisted) -> Result<(), RuntimeError> {
        use std::io::Write;
        match state.pid {
            Some(pid) => self.save_init(pid, state.start_time)?,
            None => match std::fs::remove_file(self.init()) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(RuntimeError::io("remove", self.init())(e))
                }
                _ => {}
            },
        }
        let path = self.state();
        let tmp = self.dir.join("state.json.tmp");
        let bytes = serde_json::to_vec_pretty(state).map_err(|e| RuntimeError::Io {
            what: "encode",
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        let mut file = std::fs::File::create(&tmp).map_err(RuntimeError::io("create", &tmp))?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(RuntimeError::io("write", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(RuntimeError::io("rename", &path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SandboxSpec {
        SandboxSpec::base("sb", "t")
    }

    #[test]
    fn a_recycled_pid_is_not_mistaken_for_the_init() {
        let me = std::process::id() as i32;
        let mut p = Persisted {
            spec: spec(),
            pid: Some(me),
            start_time: start_time(me),
            started: true,
            id_base: None,
            generation: 0,
            key: None,
        };
        assert_eq!(p.observed_state(), RuntimeState::Running);
        p.start_time = p.start_time.map(|t| t + 1);
        assert_eq!(p.observed_state(), RuntimeState::Stopped);
        p.started = false;
        p.pid = None;
        assert_eq!(p.observed_state(), RuntimeState::Created);
    }

    #[test]
    fn state_round_trips_through_disk() {
        let dir = tempfile::tempdir().unwrap();
        let paths = SandboxPaths::new(dir.path(), "sb");
        std::fs::create_dir_all(&paths.dir).unwrap();
        assert!(paths.load().unwrap().is_none());
        let p = Persisted {
            spec: spec(),
            pid: Some(42),
            start_time: Some(7),
            started: true,
            id_base: Some(165_536),
            generation: 0,
            key: None,
        };
        paths.save(&p).unwrap();
        let back = paths.load().unwrap().unwrap();
        assert_eq!(back.spec, p.spec);
        assert_eq!(back.pid, Some(42));
        assert_eq!(back.id_base, Some(165_536));
    }

    /// Invariant: a boot's init is known from its `init` file alone, and a garbled or missing one
    /// (a host crash took it, and the init with it) is no init, never an error or another pid.
    #[test]
    fn the_boot_record_overrides_the_state_and_a_bad_one_is_no_init() {
        let dir = tempfile::tempdir().unwrap();
        let paths = SandboxPaths::new(dir.path(), "sb");
        std::fs::create_dir_all(&paths.dir).unwrap();
        let created = Persisted {
            spec: spec(),
            pid: None,
            start_time: None,
            started: false,
            id_base: None,
            generation: 0,
            key: None,
        };
        paths.save(&created).unwrap();
        let me = std::process::id() as i32;
        paths.save_init(me, start_time(me)).unwrap();
        let booted = paths.load().unwrap().unwrap();
        assert_eq!((booted.pid, booted.started), (Some(me), true));
        assert_eq!(booted.observed_state(), RuntimeState::Running);
        for garbled in ["", "12", "x 3\n", "12 y\n", "12 3 4\n", "-5 3\n", "0\n"] {
            std::fs::write(paths.init(), garbled).unwrap();
            let read = paths.load().unwrap().unwrap();
            assert_eq!((read.pid, read.started), (None, false), "{garbled:?}");
            assert_eq!(read.observed_state(), RuntimeState::Created);
        }
        std::fs::write(paths.init(), "12\n").unwrap();
        assert_eq!(paths.load().unwrap().unwrap().pid, Some(12));
        // A save rewrites the boot record with the state's pid, or removes it with none.
        paths.save(&booted).unwrap();
        assert_eq!(paths.load().unwrap().unwrap().pid, Some(me));
        paths.save(&created).unwrap();
        assert!(!paths.init().exists());
        assert_eq!(paths.load().unwrap().unwrap().pid, None);
    }

    /// A record read under another directory's name (an adoption cut short between its rename and
    /// its rewrite) is the sandbox that directory names, its host resources under the name it was
    /// made with; a record rewritten after the rename reads the same.
    #[test]
    fn a_renamed_directory_names_the_sandbox_and_keeps_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let pooled = SandboxPaths::new(dir.path(), "wp1");
        std::fs::create_dir_all(&pooled.dir).unwrap();
        let p = Persisted {
            spec: SandboxSpec::base("wp1", "t"),
            pid: None,
            start_time: None,
            started: true,
            id_base: None,
            generation: 0,
            key: None,
        };
        pooled.save(&p).unwrap();
        assert_eq!(pooled.load().unwrap().unwrap().key(), "wp1");
        std::fs::rename(&pooled.dir, dir.path().join("sb2")).unwrap();
        let adopted = SandboxPaths::new(dir.path(), "sb2");
        let read = adopted.load().unwrap().unwrap();
        assert_eq!((read.spec.id.as_str(), read.key()), ("sb2", "wp1"));
        adopted.save(&read).unwrap();
        let again = adopted.load().unwrap().unwrap();
        assert_eq!((again.spec.id.as_str(), again.key()), ("sb2", "wp1"));
    }
}
