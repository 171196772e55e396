//! The sandbox's init process as seen from the host: cloning it into new namespaces, telling a live init
//! from a recycled pid, waiting for it to die, and reaping it.
//!
//! [`clone_boot`] is a fork-with-namespaces followed at once by `execve`: between the two, the child runs
//! only async-signal-safe system calls on values prepared before the clone, so it is sound in a
//! multi-threaded daemon. The child is never tied to its parent's life: it starts its own session and has
//! no parent-death signal, so sandboxes outlive the daemon that made them.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::time::Duration;
use tokio::io::unix::AsyncFd;

/// Namespaces a sandbox init starts in (the user namespace comes later, from inside).
const NAMESPACES: libc::c_int = libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC;

/// Descriptors the child gets, by number.
pub struct ChildFds<'a> {
    /// Becomes fds 1 and 2.
    pub log: &'a OwnedFd,
    /// Becomes fd 3 (`BOOT_SYNC_FD`).
    pub sync: &'a OwnedFd,
    /// Becomes fd 4 (`AGENT_LISTEN_FD`).
    pub listener: RawFd,
    /// Becomes fd 5 (`IDMAP_USERNS_FD`) when the lower layers are idmapped.
    pub idmap: Option<RawFd>,
    /// A network namespace made ahead of need, which the child enters instead of having `clone`
    /// make one; not passed on.
    pub netns: Option<RawFd>,
}

fn dup_high(fd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor we own, or -1.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 64) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` was just returned by fcntl and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// `CLONE_INTO_CGROUP` (Linux 5.7): the child of `clone3` is born in the cgroup `clone_args.cgroup`
/// names (libc's constant overflows its type).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// How the child of [`clone_boot`] enters its sandbox's cgroup before it runs anything, prepared
/// before the clone (see `SandboxCgroup::self_join_files` for why neither way moves a process
/// through `cgroup.procs` from outside).
pub struct CgroupJoin {
    /// v2: the group's directory, for `clone3(CLONE_INTO_CGROUP)`.
    birth: Option<OwnedFd>,
    /// The files the child writes `0` to itself: v1's `tasks`; on v2 `cgroup.procs`, used only when
    /// `clone3` is refused (a kernel before 5.7, or a seccomp filter around the daemon).
    files: Vec<CString>,
}

impl CgroupJoin {
    /// The way into `cgroup`.
    pub fn prepare(cgroup: &crate::cgroup::SandboxCgroup) -> std::io::Result<Self> {
        let cgroup_error = |e: crate::cgroup::CgroupError| std::io::Error::other(e.to_string());
        let birth = match cgroup.birth_directory().map_err(cgroup_error)? {
            Some(dir) => Some(OwnedFd::from(std::fs::File::open(dir).map_err(|e| {
                std::io::Error::new(e.kind(), format!("{}: {e}", dir.display()))
            })?)),
            None => None,
        };
        let files = cgroup
            .self_join_files()
            .map_err(cgroup_error)?
            .into_iter()
            .map(|file| {
                CString::new(file.into_os_string().into_vec())
                    .map_err(|_| std::io::Error::other("a cgroup path contains NUL"))
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Self { birth, files })
    }
}

/// Clones `agent boot` into fresh namespaces and into its sandbox's cgroup (`join`); returns its host
/// pid.
pub fn clone_boot(agent: &Path, fds: ChildFds<'_>, join: &CgroupJoin) -> std::io::Result<i32> {
    let program = CString::new(agent.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("agent path contains NUL"))?;
    // argv[0] names the agent without revealing where it lives on the host.
    let argv = [
        c"sandboxd-agent".as_ptr(),
        c"boot".as_ptr(),
        std::ptr::null(),
    ];
    let env_path = c"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
    let env_log = CString::new(format!(
        "RUST_LOG={}",
        std::env::var("SANDBOXD_AGENT_LOG").unwrap_or_else(|_| "info".into())
    ))
    .map_err(|_| std::io::Error::other("log filter contains NUL"))?;
    let envp = [env_path.as_ptr(), env_log.as_ptr(), std::ptr::null()];
    let devnull = std::fs::File::open("/dev/null")?;
    // Copies above every target number, so the dup2 calls below cannot clobber one another.
    let high = [
        dup_high(fds.log.as_raw_fd())?,
        dup_high(fds.sync.as_raw_fd())?,
        dup_high(fds.listener)?,
        dup_high(devnull.as_raw_fd())?,
    ];
    let [log, sync, listener, null] = high.each_ref().map(|fd| fd.as_raw_fd());
    let idmap_high = fds.idmap.map(dup_high).transpose()?;
    let idmap = idmap_high.as_ref().map_or(-1, |fd| fd.as_raw_fd());
    // Above the targets too, and close-on-exec: the agent never sees it.
    let netns_high = fds.netns.map(dup_high).transpose()?;
    let netns = netns_high.as_ref().map_or(-1, |fd| fd.as_raw_fd());
    let namespaces = if netns < 0 {
        NAMESPACES
    } else {
        NAMESPACES & !libc::CLONE_NEWNET
    };
    // SAFETY: a zeroed sigaction is SIG_DFL with no flags; the sigset is initialised by sigemptyset.
    let mut default_action: libc::sigaction = unsafe { std::mem::zeroed() };
    default_action.sa_sigaction = libc::SIG_DFL;
    let mut empty_set: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe { libc::sigemptyset(&mut empty_set) };

    // SAFETY: the child only makes async-signal-safe calls (setsid, dup2, setns, open, write,
    // close, sigaction, sigprocmask, execve, _exit) on memory prepared above.
    let (pid, born_in_group) = unsafe { fork_into(namespaces, join) };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // Child. SAFETY: see above; every call here is async-signal-safe.
        unsafe {
            libc::setsid();
            let ok = libc::dup2(null, 0) >= 0
                && libc::dup2(log, 1) >= 0
                && libc::dup2(log, 2) >= 0
                && libc::dup2(sync, sandboxd_envd::boot::BOOT_SYNC_FD) >= 0
                && libc::dup2(listener, sandboxd_envd::boot::AGENT_LISTEN_FD) >= 0
                && (idmap < 0 || libc::dup2(idmap, sandboxd_envd::boot::IDMAP_USERNS_FD) >= 0);
            if !ok {
                libc::_exit(126);
            }
            if netns >= 0 && libc::setns(netns, libc::CLONE_NEWNET) != 0 {
                let why = b"sandboxd: the sandbox's init could not enter its network namespace\n";
                libc::write(2, why.as_ptr().cast(), why.len());
                libc::_exit(124);
            }
            if !born_in_group && !join_self(&join.files) {
                let why = b"sandboxd: the sandbox's init could not join its cgroup\n";
                libc::write(2, why.as_ptr().cast(), why.len());
                libc::_exit(125);
            }
            for sig in [
                libc::SIGPIPE,
                libc::SIGTERM,
                libc::SIGINT,
                libc::SIGHUP,
                libc::SIGCHLD,
            ] {
                libc::sigaction(sig, &default_action, std::ptr::null_mut());
            }
            libc::sigprocmask(libc::SIG_SETMASK, &empty_set, std::ptr::null_mut());
            libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(127);
        }
    }
    Ok(pid as i32)
}

/// Forks (into the new namespaces of `namespaces`) with the child born in `join`'s v2 group where it
/// can be (`clone3` with `CLONE_INTO_CGROUP`); else a plain `clone`, whose child must then join by
/// [`join_self`]. Returns `clone`'s result (0 in the child, -1 on failure) and whether the child was
/// born in the group.
///
/// # Safety
/// Like `fork` in a multi-threaded process: the child may only make async-signal-safe calls until it
/// execs or exits.
unsafe fn fork_into(namespaces: libc::c_int, join: &CgroupJoin) -> (libc::c_long, bool) {
    if let Some(dir) = &join.birth {
        let mut args: libc::clone_args = std::mem::zeroed();
        args.flags = namespaces as u64 | CLONE_INTO_CGROUP;
        args.exit_signal = libc::SIGCHLD as u64;
        args.cgroup = dir.as_raw_fd() as u64;
        let pid = libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        );
        if pid >= 0 {
            return (pid, true);
        }
    }
    let pid = libc::syscall(
        libc::SYS_clone,
        (namespaces | libc::SIGCHLD) as libc::c_ulong,
        0usize,
        0usize,
        0usize,
        0usize,
    );
    (pid, false)
}

/// Writes `0` to each of `files`: the calling (single-threaded) process moves itself into the
/// group. Only system calls, for the child of a clone.
///
/// # Safety
/// `files` are NUL-terminated paths that outlive the call.
unsafe fn join_self(files: &[CString]) -> bool {
    files.iter().all(|file| {
        let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let written = libc::write(fd, b"0".as_ptr().cast(), 1);
        libc::close(fd);
        written == 1
    })
}

/// The kernel's start time of `pid` (clock ticks since boot), which tells a live init from a recycled
/// pid; `None` when there is no such process or it is a zombie.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is parenthesised and may contain anything.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); starttime is field 22.
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// A handle on a process that stays valid even if its pid is recycled.
pub struct PidFd(AsyncFd<OwnedFd>);

impl PidFd {
    /// Opens `pid`; fails when it no longer exists.
    pub fn open(pid: i32) -> std::io::Result<Self> {
        // SAFETY: pidfd_open returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just returned by the kernel and is ours.
        let owned = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        // SAFETY: the OwnedFd stays open and unchanged for as long as the AsyncFd owns it.
        unsafe { AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE) }
            .map(Self)
            .map_err(|e| e.into_parts().1)
    }

    /// Sends `signal` to the process (not to whatever reuses its pid later).
    pub fn signal(&self, signal: libc::c_int) -> std::io::Result<()> {
        // SAFETY: plain syscall on a descriptor we own.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.get_ref().as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ESRCH) {
                return Ok(());
            }
            return Err(err);
        }
        Ok(())
    }

    /// Waits until the process has exited (readable pidfd), at most `limit`; true if it did.
    pub async fn exited(&self, limit: Duration) -> bool {
        match tokio::time::timeout(limit, self.0.readable()).await {
            Ok(Ok(mut guard)) => {
                guard.retain_ready();
                true
            }
            _ => false,
        }
    }
}

/// Sets the hostname of the UTS namespace of process `pid` (a sandbox's init), from a thread of
/// its own that joins that namespace and ends.
pub fn set_hostname(pid: i32, name: &str) -> Result<(), crate::RuntimeError> {
    let path = format!("/proc/{pid}/ns/uts");
    let ns = std::fs::File::open(&path).map_err(crate::RuntimeError::io("open", &path))?;
    let name = name.to_string();
    std::thread::spawn(move || {
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWUTS)?;
        nix::unistd::sethostname(&name)
    })
    .join()
    .map_err(|_| crate::RuntimeError::Host("the hostname thread panicked".into()))?
    .map_err(|e| crate::RuntimeError::Host(format!("setting the hostname of pid {pid}: {e}")))
}

/// Reaps `pid` if it is a dead child of this process; harmless otherwise.
pub fn reap(pid: i32) {
    // SAFETY: waitpid with WNOHANG on a specific pid; ECHILD when not ours.
    unsafe {
        let mut status = 0;
        libc::waitpid(pid, &mut status, libc::WNOHANG);
    }
}

/// Reaps `pid` in the background once it exits, so a sandbox that dies while this process lives does not
/// linger as a zombie.
pub fn reap_when_exited(pid: i32) {
    let Ok(fd) = PidFd::open(pid) else {
        reap(pid);
        return;
    };
    tokio::spawn(async move {
        while !fd.exited(Duration::from_secs(3600)).await {}
        reap(pid);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child of [`fork_into`] that joins as [`clone_boot`]'s does, then waits to be killed; its
    /// `/proc/<pid>/cgroup`.
    fn cgroups_of_a_child(join: &CgroupJoin) -> String {
        let mut joined = [0; 2];
        // SAFETY: pipe fills the array it is given.
        assert_eq!(unsafe { libc::pipe(joined.as_mut_ptr()) }, 0);
        // SAFETY: the child makes only async-signal-safe calls (open, write, close, pause, _exit).
        let (pid, born) = unsafe { fork_into(0, join) };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: see above.
            unsafe {
                if !born && !join_self(&join.files) {
                    libc::_exit(125);
                }
                libc::write(joined[1], b"j".as_ptr().cast(), 1);
                libc::pause();
                libc::_exit(0);
            }
        }
        let pid = pid as i32;
        let mut byte = 0u8;
        // SAFETY: reads one byte into `byte`; the descriptors are ours.
        unsafe {
            libc::close(joined[1]);
            libc::read(joined[0], (&mut byte as *mut u8).cast(), 1);
            libc::close(joined[0]);
        }
        assert_eq!(byte, b'j', "the child did not join");
        let listed = std::fs::read_to_string(format!("/proc/{pid}/cgroup"));
        // SAFETY: kill and waitpid on our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        listed.expect("the child's cgroups")
    }

    /// A group made for one test under `root` (a cgroup mount), removed when dropped.
    struct TestGroup(std::path::PathBuf);
    impl TestGroup {
        fn new(root: &str) -> Option<Self> {
            let dir = Path::new(root).join(format!("sandboxd-join-{}", std::process::id()));
            std::fs::create_dir(&dir).ok().map(|()| TestGroup(dir))
        }
        fn cstring(&self, file: &str) -> CString {
            CString::new(self.0.join(file).into_os_string().into_vec()).unwrap()
        }
    }
    impl Drop for TestGroup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    /// On a v2 hierarchy the child is born in the group (a hierarchy without controllers, as the
    /// hybrid hosts have, takes `CLONE_INTO_CGROUP` too).
    #[test]
    fn a_child_is_born_in_its_v2_group() {
        let roots = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"];
        let Some(group) = roots
            .iter()
            .filter(|root| Path::new(root).join("cgroup.procs").is_file())
            .find_map(|root| TestGroup::new(root))
        else {
            eprintln!("skipped: no writable cgroup2 hierarchy");
            return;
        };
        let join = CgroupJoin {
            birth: Some(OwnedFd::from(std::fs::File::open(&group.0).unwrap())),
            files: vec![],
        };
        let listed = cgroups_of_a_child(&join);
        let name = group.0.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            listed
                .lines()
                .any(|l| l.starts_with("0::") && l.ends_with(&format!("/{name}"))),
            "{listed}"
        );
    }

    /// Without a v2 directory the child moves its own thread through v1's `tasks`.
    #[test]
    fn a_child_moves_itself_through_v1_tasks() {
        let Some(group) = TestGroup::new("/sys/fs/cgroup/pids") else {
            eprintln!("skipped: no writable v1 pids hierarchy");
            return;
        };
        let join = CgroupJoin {
            birth: None,
            files: vec![group.cstring("tasks")],
        };
        let listed = cgroups_of_a_child(&join);
        let name = group.0.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            listed
                .lines()
                .any(|l| l.contains(":pids:") && l.ends_with(&format!("/{name}"))),
            "{listed}"
        );
    }

    #[test]
    fn start_time_identifies_live_processes_only() {
        let me = std::process::id() as i32;
        let t = start_time(me).expect("own start time");
        assert_eq!(start_time(me), Some(t));
        assert_eq!(start_time(i32::MAX), None);
    }

    #[tokio::test]
    async fn pidfd_sees_exit_and_signal_does_not_hit_recycled_pids() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let fd = PidFd::open(pid).unwrap();
        assert!(!fd.exited(Duration::from_millis(50)).await);
        fd.signal(libc::SIGKILL).unwrap();
        assert!(fd.exited(Duration::from_secs(5)).await);
        let _ = child.wait();
        // Signalling a reaped process is not an error and touches nothing.
        fd.signal(libc::SIGKILL).unwrap();
    }
}
