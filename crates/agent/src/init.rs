//! The PID 1 loop of a sandbox.
//!
//! [`run_as_init`] forks: the child runs the server and exits with its code; the parent stays PID 1
//! for the sandbox's life. The parent waits for signals synchronously (`sigwaitinfo` on a blocked set,
//! no handlers run, no threads, no allocation in the loop), so it is safe in the single-threaded process
//! it is called in. It reaps every child that reaches it (orphans are re-parented to PID 1) and forwards
//! SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the server; when the server exits, PID 1
//! exits with the same code (128 + signal when the server was killed by a signal).

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
    supervise(child, &set)
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
        // SAFETY: `set` is a valid, initialized signal set; `info` is written by the kernel.
        let sig = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::sigwaitinfo(set, &mut info)
        };
        if sig < 0 {
            // EINTR (e.g. from a stopped/continued state): wait again.
            continue;
        }
        if sig != libc::SIGCHLD {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(child, sig) };
            continue;
        }
        if let Some(code) = reap_all(child) {
            // SAFETY: _exit never returns and skips atexit handlers the child already ran.
            unsafe { libc::_exit(code) }
        }
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
}
