//! Starting `runsc` for one sandbox.
//!
//! Contract: [`spawn`] starts `runsc run --detach` on the sandbox's bundle such that, before `runsc`
//! runs a single instruction, it already is
//! - in the sandbox's cgroup (so the sandbox process, the gofer and every stub process they make are
//!   born there, and the runtime's limits hold from the first byte), and
//! - in a private mount namespace of its own, where [`PROCFS_NET_WORKAROUND`] applies and where a
//!   tmpfs on [`STAGE`] holds what the sandbox's gofer serves: the overlay root at [`Stage::root`]
//!   and binds of the host paths the bundle names ([`Stage::shared`], [`Stage::callback`],
//!   [`Stage::agent`]), and at [`Stage::volume`] each volume's directory, as the caller opened it
//!   before the fork (a detached mount: a link planted on its path since changes nothing). The gofer
//!   runs as the sandbox's (unprivileged) root and could not traverse
//!   the runtime's private state directories to reach them where they lie; the stage is visible to
//!   nothing on the host and goes with the last process of the sandbox.
//!
//! Everything the child does between `fork` and `exec` is a raw system call on memory prepared before
//! the fork: nothing allocates or takes a lock there.

use crate::RuntimeError;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// How runsc is invoked: its binary and the flags every command of ours passes.
#[derive(Debug, Clone)]
pub struct Runsc {
    /// The `runsc` binary.
    pub binary: PathBuf,
    /// Its platform (`systrap`).
    pub platform: String,
}

impl Runsc {
    /// A `runsc` command with the flags every sandbox of ours is run with, its state under `root`.
    pub fn command(&self, root: &Path) -> Command {
        let mut cmd = Command::new(&self.binary);
        cmd.arg(format!("--root={}", root.display()))
            .arg(format!("--platform={}", self.platform))
            // The sandbox's own veth, taken into gVisor's network stack.
            .arg("--network=sandbox")
            // Writes go to the overlay we mounted (the quota'd writable layer), not to memory.
            .arg("--overlay2=none")
            // The agent listens on, and calls home through, unix sockets in bound host directories.
            .arg("--host-uds=all")
            // The runtime makes the cgroup and puts runsc in it before it starts.
            .arg("--ignore-cgroups");
        if let Some(dir) = std::env::var_os("SANDBOXD_RUNSC_DEBUG_DIR") {
            let dir = Path::new(&dir).join("%ID%").join("");
            cmd.arg("--debug")
                .arg(format!("--debug-log={}", dir.display()));
        }
        cmd
    }
}

/// The workaround for runsc's "root network namespace" check on kernels 6.x and later.
///
/// `runsc` refuses `--network=sandbox` when it believes it runs in the host's network namespace, which
/// it decides by the existence of `/proc/sys/net/core/rmem_default` — a file every network namespace
/// shows on those kernels. A tmpfs over `/proc/sys/net` in runsc's private mount namespace hides it;
/// the sandbox's network is the namespace its bundle names either way. This is the mount's target.
pub const PROCFS_NET_WORKAROUND: &std::ffi::CStr = c"/proc/sys/net";

/// The host directory every runsc of ours mounts its private stage on (in its own mount namespace;
/// on the host it stays an empty directory, made at the tier's start).
pub const STAGE: &str = "/run/sandboxd-gvisor";

/// Where things are on a sandbox's stage, as its bundle names them.
pub struct Stage;

impl Stage {
    /// The sandbox's overlay root.
    pub fn root() -> PathBuf {
        Path::new(STAGE).join("root")
    }

    /// The sandbox's `shared/` directory.
    pub fn shared() -> PathBuf {
        Path::new(STAGE).join("shared")
    }

    /// The daemon's call-home directory.
    pub fn callback() -> PathBuf {
        Path::new(STAGE).join("callback")
    }

    /// The agent binary.
    pub fn agent() -> PathBuf {
        Path::new(STAGE).join("agent")
    }

    /// The sandbox's `n`th volume (in the order of its root plan).
    pub fn volume(n: usize) -> PathBuf {
        Path::new(STAGE).join(format!("volume-{n}"))
    }
}

/// The host paths a sandbox's stage is made of.
pub struct StagePlan<'a> {
    /// The overlay mount options of its root ([`overlay_options`]).
    pub overlay: &'a str,
    /// Its `shared/` directory.
    pub shared: &'a Path,
    /// The daemon's call-home directory, if the daemon listens.
    pub callback: Option<&'a Path>,
    /// The agent binary.
    pub agent: &'a Path,
    /// Its volumes' directories, in order, as detached mounts
    /// ([`sandboxd_idmap::detached_clone`]).
    pub volumes: &'a [OwnedFd],
}

/// What the child needs, prepared before the fork.
struct Prepared {
    join: Vec<CString>,
    stage: CString,
    root: CString,
    overlay: CString,
    /// (host source, stage target, whether the target is a file) of every bind.
    binds: Vec<(CString, CString, bool)>,
    /// (detached mount, stage target) of every volume.
    volumes: Vec<(RawFd, CString)>,
}

fn cstring(what: &'static str, bytes: &[u8]) -> Result<CString, RuntimeError> {
    CString::new(bytes).map_err(|_| RuntimeError::Host(format!("{what} contains a NUL byte")))
}

/// The overlay mount options of a root of `layers` (highest first) over `upper` and `work`.
pub fn overlay_options(layers: &[PathBuf], upper: &Path, work: &Path) -> String {
    let lowers: Vec<String> = layers.iter().map(|p| p.display().to_string()).collect();
    format!(
        "lowerdir={},upperdir={},workdir={}",
        lowers.join(":"),
        upper.display(),
        work.display()
    )
}

fn path(what: &'static str, path: &Path) -> Result<CString, RuntimeError> {
    cstring(what, path.as_os_str().as_bytes())
}

/// Starts `cmd` (a `runsc run --detach`) in the cgroup the child joins by writing `0` to each of
/// `join` (`SandboxCgroup::self_join_files`, before anything runs), in a
/// private mount namespace with the stage `plan` describes. Standard input is a pipe (the agent's
/// configuration goes there); standard output and error go to `log`.
pub fn spawn(
    mut cmd: Command,
    join: &[PathBuf],
    plan: &StagePlan<'_>,
    log: std::fs::File,
) -> Result<Child, RuntimeError> {
    let mut binds = vec![
        (
            path("the shared directory", plan.shared)?,
            path("", &Stage::shared())?,
            false,
        ),
        (
            path("the agent binary", plan.agent)?,
            path("", &Stage::agent())?,
            true,
        ),
    ];
    if let Some(callback) = plan.callback {
        binds.push((
            path("the callback directory", callback)?,
            path("", &Stage::callback())?,
            false,
        ));
    }
    let volumes = plan
        .volumes
        .iter()
        .enumerate()
        .map(|(n, tree)| Ok((tree.as_raw_fd(), path("", &Stage::volume(n))?)))
        .collect::<Result<_, RuntimeError>>()?;
    let prepared = Prepared {
        join: join
            .iter()
            .map(|p| path("a cgroup path", p))
            .collect::<Result<_, _>>()?,
        stage: path("", Path::new(STAGE))?,
        root: path("", &Stage::root())?,
        overlay: cstring("the overlay options", plan.overlay.as_bytes())?,
        binds,
        volumes,
    };
    let err_log = log.try_clone().map_err(RuntimeError::Spawn)?;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(err_log));
    // SAFETY: the closure runs in the child between fork and exec; it only makes raw system calls on
    // the C strings prepared above and on the plan's descriptors, which the caller holds until this
    // returns (after the exec), with no allocation and no locks, and reports failure through errno.
    unsafe {
        cmd.pre_exec(move || enter(&prepared));
    }
    cmd.spawn().map_err(RuntimeError::Spawn)
}

/// The child's side: join the cgroup, then make the private mount namespace and its stage.
fn enter(p: &Prepared) -> std::io::Result<()> {
    let fail = || Err(std::io::Error::last_os_error());
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: raw system calls on NUL-terminated strings that outlive the calls.
    unsafe {
        for file in &p.join {
            let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return fail();
            }
            let written = libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
            if written != 1 {
                return fail();
            }
        }
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return fail();
        }
        let flags = libc::MS_REC | libc::MS_PRIVATE;
        if libc::mount(null, c"/".as_ptr(), null, flags, std::ptr::null()) != 0 {
            return fail();
        }
        let hardened = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        let tmpfs = c"tmpfs".as_ptr();
        let target = PROCFS_NET_WORKAROUND.as_ptr();
        if libc::mount(tmpfs, target, tmpfs, hardened, std::ptr::null()) != 0 {
            return fail();
        }
        let mode = c"mode=755".as_ptr().cast();
        if libc::mount(
            tmpfs,
            p.stage.as_ptr(),
            tmpfs,
            libc::MS_NOSUID | libc::MS_NODEV,
            mode,
        ) != 0
        {
            return fail();
        }
        if libc::mkdir(p.root.as_ptr(), 0o755) != 0 {
            return fail();
        }
        let overlay = c"overlay".as_ptr();
        let options = p.overlay.as_ptr().cast();
        if libc::mount(overlay, p.root.as_ptr(), overlay, 0, options) != 0 {
            return fail();
        }
        for (source, target, file) in &p.binds {
            let made = if *file {
                let fd = libc::open(
                    target.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o644,
                );
                if fd >= 0 {
                    libc::close(fd);
                }
                fd >= 0
            } else {
                libc::mkdir(target.as_ptr(), 0o755) == 0
            };
            if !made {
                return fail();
            }
            if libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                null,
                libc::MS_BIND,
                std::ptr::null(),
            ) != 0
            {
                return fail();
            }
        }
        for (tree, target) in &p.volumes {
            if libc::mkdir(target.as_ptr(), 0o755) != 0
                || libc::syscall(
                    libc::SYS_move_mount,
                    *tree,
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    target.as_ptr(),
                    libc::MOVE_MOUNT_F_EMPTY_PATH,
                ) != 0
            {
                return fail();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overlay_stacks_the_layers_highest_first() {
        let options = overlay_options(
            &["/l/top".into(), "/l/base".into()],
            Path::new("/s/upper"),
            Path::new("/s/work"),
        );
        assert_eq!(
            options,
            "lowerdir=/l/top:/l/base,upperdir=/s/upper,workdir=/s/work"
        );
    }

    #[test]
    fn every_runsc_command_keeps_writes_on_the_host_and_cgroups_ours() {
        let runsc = Runsc {
            binary: "/usr/bin/runsc".into(),
            platform: "systrap".into(),
        };
        let cmd = runsc.command(Path::new("/s/runsc"));
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for flag in [
            "--root=/s/runsc",
            "--platform=systrap",
            "--network=sandbox",
            "--overlay2=none",
            "--ignore-cgroups",
        ] {
            assert!(
                args.iter().any(|a| a == flag),
                "{flag} missing from {args:?}"
            );
        }
    }
}
