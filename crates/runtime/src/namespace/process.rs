//! The sandbox's init process as seen from the host: cloning it into new namespaces, telling a live init
//! from a recycled pid, waiting for it to die, and reaping it.
//!
//! [`clone_boot`] is a fork-with-namespaces followed at once by `execve`: between the two, the child runs
//! only async-signal-safe system calls on values prepared before the clone, so it is sound in a
//! multi-threaded daemon. The child is never tied to its parent's life: it starts its own session and has
//! no parent-death signal, so sandboxes outlive the daemon that made them.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
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

/// Clones `agent boot` into fresh namespaces; returns its host pid.
pub fn clone_boot(agent: &Path, fds: ChildFds<'_>) -> std::io::Result<i32> {
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
    // SAFETY: a zeroed sigaction is SIG_DFL with no flags; the sigset is initialised by sigemptyset.
    let mut default_action: libc::sigaction = unsafe { std::mem::zeroed() };
    default_action.sa_sigaction = libc::SIG_DFL;
    let mut empty_set: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe { libc::sigemptyset(&mut empty_set) };

    // SAFETY: clone without CLONE_VM behaves like fork. The child only makes async-signal-safe calls
    // (setsid, dup2, sigaction, sigprocmask, execve, _exit) on memory prepared above.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (NAMESPACES | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
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
