//! The PID 1 loop of a sandbox.
//!
//! [`run_as_init`] forks: the child runs the server and exits with its code; the parent stays PID 1
//! for the sandbox's life. The parent waits for signals synchronously (`sigwaitinfo` on a blocked set,
//! no handlers run, no threads, no allocation in the loop), so it is safe in the single-threaded process
//! it is called in. It reaps every child that reaches it (orphans are re-parented to PID 1) and forwards
//! SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the server; when the server exits, PID 1
//! exits with the same code (128 + signal when the server was killed by a signal).
//!
//! PID 1 then restarts small: [`RESTART_AFTER`] after the fork, once the server's start (which a
//! create waits for) has had the cores, it re-executes its own binary as `sandboxd-agent supervise
//! PID NAME` ([`resume`]) through `/.sandboxd/NAME` (through `/proc/self/exe` when that is not its
//! own binary), keeping its pid, its name in `/proc/1/comm`, its blocked signals and
//! whatever is pending (execve keeps both, and a blocked signal is never dropped, even by a PID 1
//! without a handler). What the boot left in its memory (its heap, stack and data) would otherwise
//! stay the sandbox's for its whole life: PID 1 goes from about 160 KiB of anonymous memory to 64,
//! and an idle sandbox's two processes from about 380 KiB to 336 (the server no longer shares the
//! boot's pages, so it holds them whole). If the exec fails, it supervises as it is.

use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

/// The subcommand PID 1 re-executes itself with ([`resume`]).
pub const SUPERVISE: &CStr = c"supervise";

/// The directory every sandbox binds the agent into, with a link to it carrying each tier's name for
/// the agent (`agent`, `sandboxd-agent`).
const AGENT_DIR: &CStr = c"/.sandboxd/";

/// How long after the fork PID 1 restarts small.
const RESTART_AFTER: Duration = Duration::from_millis(200);

/// Signals PID 1 forwards to the server.
const FORWARDED: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

extern "C" fn ignore_signal(_: libc::c_int) {}

/// Runs `server` in a child process and becomes its init. Never returns.
pub fn run_as_init(server: impl FnOnce() -> i32) -> ! {
    let (set, old) = block_signals();
    let child = spawn(&old, server);
    let until = Instant::now() + RESTART_AFTER;
    while let Some(left) = until
        .checked_duration_since(Instant::now())
        .filter(|left| !left.is_zero())
    {
        if let Some(sig) = wait_signal(&set, Some(left)) {
            handle(sig, child);
        }
    }
    restart_small(child);
    supervise(child, &set)
}

/// Replaces this process's image by a fresh one of the same binary that only supervises `server`
/// ([`resume`]). Returns only if the exec failed.
fn restart_small(server: libc::pid_t) {
    let mut name = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, its NUL included, into the 17-byte buffer.
    unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    let name = CStr::from_bytes_until_nul(&name).unwrap_or(c"sandboxd-agent");
    // Digits only: no NUL inside.
    let pid = CString::new(server.to_string()).unwrap_or_default();
    let argv = [
        c"sandboxd-agent".as_ptr(),
        SUPERVISE.as_ptr(),
        pid.as_ptr(),
        name.as_ptr(),
        std::ptr::null(),
    ];
    // The kernel names an image after the last part of the path it was executed through, and
    // `resume` restores the name only once it runs: through `/proc/self/exe` the sandbox would see
    // its PID 1 named `exe` meanwhile. The link by name is taken only while it is this very binary;
    // a sandbox's root that swapped it for another after the check would run that as PID 1, under
    // the confinement every process of the sandbox has (`crate::confine`): nothing it lacked.
    let by_name = CString::new([AGENT_DIR.to_bytes(), name.to_bytes()].concat())
        .ok()
        .filter(|path| same_file(path, c"/proc/self/exe"));
    for program in by_name.as_deref().into_iter().chain([c"/proc/self/exe"]) {
        // SAFETY: `program` and every pointer in `argv` are NUL-terminated strings alive across
        // the call, and the array ends with a null pointer; execv returns only on failure.
        unsafe { libc::execv(program.as_ptr(), argv.as_ptr()) };
    }
    tracing::warn!(error = %std::io::Error::last_os_error(), "init: cannot restart small; supervising as it is");
}

/// Whether paths `a` and `b` lead to one file (device and inode), following links.
fn same_file(a: &CStr, b: &CStr) -> bool {
    let id = |path: &CStr| {
        // SAFETY: a zeroed `stat` is a valid buffer, and `path` is NUL-terminated.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        (unsafe { libc::stat(path.as_ptr(), &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    };
    matches!((id(a), id(b)), (Some(x), Some(y)) if x == y)
}

/// PID 1 after [`restart_small`]: `server` is the server's pid and `name` this process's name
/// before the exec. Never returns; exits 1 on arguments no PID 1 of ours gives.
pub fn resume(server: Option<&OsStr>, name: Option<&OsStr>) -> ! {
    let server = server
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse::<libc::pid_t>().ok())
        .filter(|pid| *pid > 0);
    let Some(server) = server else {
        let sub = SUPERVISE.to_string_lossy();
        eprintln!("sandboxd-agent {sub}: usage: {sub} SERVER-PID NAME");
        std::process::exit(1);
    };
    if let Some(name) = name.and_then(|n| CString::new(n.as_bytes()).ok()) {
        // SAFETY: `name` is NUL-terminated; the kernel copies at most 16 bytes of it.
        unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
    }
    // The mask came through the exec; the handlers that keep a PID 1's signals queued did not.
    let (set, _) = block_signals();
    supervise(server, &set)
}

/// Blocks the signals init waits for (the forwarded ones and SIGCHLD), giving the forwarded ones a
/// handler so a PID 1 does not drop them; returns the blocked set and the mask from before. Call
/// while the process is single-threaded.
pub(crate) fn block_signals() -> (libc::sigset_t, libc::sigset_t) {
    // SAFETY: plain libc calls on stack-allocated sigset/sigaction values, made while the process is
    // single-threaded (the contract of this function).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED.iter().chain(&[libc::SIGCHLD]) {
            libc::sigaddset(&mut set, *sig);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old);
        // A PID 1 drops signals whose disposition is the default; give the forwarded ones a (never
        // run, they stay blocked) handler so they are queued for sigwaitinfo.
        for sig in FORWARDED {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = ignore_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
        (set, old)
    }
}

/// Forks a child that restores the signal state from before [`block_signals`] (`old`) and exits
/// with what `job` returns; returns its pid. Init exits 1 when it cannot fork.
pub(crate) fn spawn(old: &libc::sigset_t, job: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: fork in a single-threaded process; the child only resets signal state before running
    // `job`.
    unsafe {
        let child = libc::fork();
        if child < 0 {
            tracing::error!(error = %std::io::Error::last_os_error(), "init: fork failed");
            libc::_exit(1);
        }
        if child == 0 {
            for sig in FORWARDED {
                libc::signal(sig, libc::SIG_DFL);
            }
            libc::sigprocmask(libc::SIG_SETMASK, old, std::ptr::null_mut());
            let code = job();
            std::process::exit(code);
        }
        child
    }
}

/// The parent's loop: forward signals to `child`, reap everything, exit with `child`'s code.
fn supervise(child: libc::pid_t, set: &libc::sigset_t) -> ! {
    loop {
        if let Some(sig) = wait_signal(set, None) {
            handle(sig, child);
        }
    }
}

/// The next signal of `set`, waiting at most `limit` (forever with `None`); `None` when the time
/// ran out or the wait was interrupted.
fn wait_signal(set: &libc::sigset_t, limit: Option<Duration>) -> Option<libc::c_int> {
    // SAFETY: `set` is a valid, initialized signal set; `info` and `timeout` are valid for the
    // calls, which write only `info`.
    let sig = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        match limit {
            None => libc::sigwaitinfo(set, &mut info),
            Some(limit) => {
                let timeout = libc::timespec {
                    tv_sec: limit.as_secs() as libc::time_t,
                    tv_nsec: limit.subsec_nanos() as libc::c_long,
                };
                libc::sigtimedwait(set, &mut info, &timeout)
            }
        }
    };
    // EAGAIN (the time ran out) or EINTR (e.g. from a stopped/continued state).
    (sig >= 0).then_some(sig)
}

/// Forwards `sig` to `child`, or (SIGCHLD) reaps every zombie and exits with `child`'s code when
/// it was among them.
fn handle(sig: libc::c_int, child: libc::pid_t) {
    if sig != libc::SIGCHLD {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(child, sig) };
        return;
    }
    if let Some(code) = reap_all(child) {
        // SAFETY: _exit never returns and skips atexit handlers the child already ran.
        unsafe { libc::_exit(code) }
    }
}

/// Reaps every zombie child; returns the exit code for init when `server` was among them.
fn reap_all(server: libc::pid_t) -> Option<i32> {
    let mut server_code = None;
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return server_code;
        }
        if pid == server {
            server_code = Some(exit_code(status));
        }
    }
}

/// The shell convention: the exit status, or 128 + the signal that killed the process.
pub(crate) fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_shell_convention() {
        assert_eq!(exit_code(3 << 8), 3);
        assert_eq!(exit_code(0), 0);
        assert_eq!(exit_code(libc::SIGKILL), 128 + 9);
        assert_eq!(exit_code(libc::SIGTERM), 128 + 15);
    }

    /// A link is its target's file, another file is not, and a path that leads nowhere is no one's.
    #[test]
    fn same_file_follows_links_and_tells_files_apart() {
        use std::os::unix::ffi::OsStringExt;
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| CString::new(dir.path().join(name).into_os_string().into_vec());
        std::fs::write(dir.path().join("agent"), b"a").unwrap();
        std::fs::write(dir.path().join("other"), b"a").unwrap();
        std::os::unix::fs::symlink("agent", dir.path().join("sandboxd-agent")).unwrap();
        let [agent, other, link, none] =
            ["agent", "other", "sandboxd-agent", "none"].map(|n| path(n).unwrap());
        assert!(same_file(&link, &agent));
        assert!(!same_file(&other, &agent));
        assert!(!same_file(&none, &none));
    }
}
