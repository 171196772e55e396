//! Starting a process without copying the agent: `clone(CLONE_VM | CLONE_VFORK)`, as `posix_spawn`
//! does, with the steps `posix_spawn` cannot take (a session and controlling terminal, another
//! user's groups, gid and uid) done in the child before `execve`.
//!
//! Why: `fork` copies the agent's page tables, and in the gVisor tier the Sentry's copy of a whole
//! address space costs tens of milliseconds; a child that borrows the parent's memory until it
//! executes costs what an `execve` costs. Measured with Python in a gVisor sandbox on this machine:
//! fork+exec of `/bin/true` 33–42 ms, `posix_spawn` 5–10 ms.
//!
//! Contract of the child (the code between `clone` and `execve`):
//! - It shares the parent's memory while the calling thread is suspended and the agent's other
//!   threads run on, so it touches only memory prepared before the clone ([`Launch`]) and makes only
//!   raw system calls: no allocation, no lock, no libc wrapper that talks to other threads (glibc's
//!   `setuid` would broadcast to the parent's threads).
//! - Signals are blocked around the clone. The child sets every signal the agent handles back to
//!   its default (so no handler of the agent ever runs in it), `SIGPIPE` too (the Rust runtime
//!   ignores it; a `yes | head` must die of it), then unblocks all, as the standard library does.
//! - In order: standard input, output and error onto the given descriptors; its own session with
//!   the terminal as controlling terminal, or else its own process group; supplementary groups,
//!   gid, uid; `chdir`; `execve` of the program, searched in the new environment's `PATH` when its
//!   name has no `/` (a file that is not an executable format runs under `/bin/sh`, as `execvp`
//!   does). Everything else the agent holds is close-on-exec.
//! - A failing step writes its `errno` to a close-on-exec pipe and exits 127; the parent reads that
//!   pipe (end of file once the child executed), reaps such a child at once and answers the error.
//!
//! [`Process::wait`] reaps the child on `SIGCHLD`; it may be called again after being cancelled.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use tokio::net::unix::pipe;
use tokio::signal::unix::{signal, SignalKind};

/// The child's stack: it runs a few system calls and loops, no more.
const STACK: usize = 64 << 10;

/// What the child does, all of it prepared (and owned) by the parent before the clone.
pub struct Launch {
    /// Candidate paths of the program, tried in order.
    candidates: Vec<CString>,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
    /// Groups, gid and uid to take, when the process runs as another user.
    ids: Option<(Vec<libc::gid_t>, libc::gid_t, libc::uid_t)>,
    /// Descriptors that become its stdin, stdout and stderr.
    stdio: [RawFd; 3],
    /// Make a session whose controlling terminal is its stdin, instead of a process group.
    terminal: bool,
}

/// The child's standard streams, as the parent sees them.
pub enum Stdio {
    /// Pipes: stdin (or `/dev/null` when `false`), stdout and stderr.
    Piped { stdin: bool },
    /// One terminal's slave for all three.
    Terminal(OwnedFd),
}

/// A process started by [`Launch::spawn`], not yet reaped.
pub struct Process {
    pid: libc::pid_t,
    pub stdin: Option<pipe::Sender>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
    status: Option<ExitStatus>,
}

/// A pipe whose two ends are close-on-exec: (read, write).
fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn c_string(s: impl Into<Vec<u8>>) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte"))
}

impl Launch {
    /// Prepares `program` with `args` in environment `env` (from scratch), in `cwd`, as
    /// `ids` (groups, gid, uid) when given.
    pub fn new(
        program: &str,
        args: &[String],
        env: &[(String, String)],
        cwd: &std::path::Path,
        ids: Option<(Vec<libc::gid_t>, libc::gid_t, libc::uid_t)>,
    ) -> io::Result<Self> {
        use std::os::unix::ffi::OsStrExt;
        let candidates = if program.contains('/') {
            vec![c_string(program)?]
        } else {
            let path = env
                .iter()
                .rev()
                .find(|(k, _)| k == "PATH")
                .map_or("", |(_, v)| v.as_str());
            path.split(':')
                .map(|dir| match dir {
                    "" => c_string(program),
                    dir => c_string(format!("{}/{program}", dir.trim_end_matches('/'))),
                })
                .collect::<io::Result<_>>()?
        };
        let mut argv = vec![c_string(program)?];
        for a in args {
            argv.push(c_string(a.as_str())?);
        }
        let envp = env
            .iter()
            .map(|(k, v)| c_string(format!("{k}={v}")))
            .collect::<io::Result<_>>()?;
        Ok(Launch {
            candidates,
            argv,
            envp,
            cwd: c_string(cwd.as_os_str().as_bytes())?,
            ids,
            stdio: [-1; 3],
            terminal: false,
        })
    }

    /// Starts it on `stdio`.
    pub fn spawn(mut self, stdio: Stdio) -> io::Result<Process> {
        // The parent's ends, and the child's (closed here once it has executed).
        let (mut stdin, mut stdout, mut stderr) = (None, None, None);
        let mut child_ends: Vec<OwnedFd> = Vec::new();
        match stdio {
            Stdio::Terminal(slave) => {
                self.stdio = [slave.as_raw_fd(); 3];
                self.terminal = true;
                child_ends.push(slave);
            }
            Stdio::Piped { stdin: piped } => {
                let input = if piped {
                    let (read, write) = cloexec_pipe()?;
                    stdin = Some(pipe::Sender::from_owned_fd(write)?);
                    read
                } else {
                    std::fs::File::open("/dev/null")?.into()
                };
                let (out_read, out_write) = cloexec_pipe()?;
                let (err_read, err_write) = cloexec_pipe()?;
                stdout = Some(pipe::Receiver::from_owned_fd(out_read)?);
                stderr = Some(pipe::Receiver::from_owned_fd(err_read)?);
                self.stdio = [
                    input.as_raw_fd(),
                    out_write.as_raw_fd(),
                    err_write.as_raw_fd(),
                ];
                child_ends.extend([input, out_write, err_write]);
            }
        }
        let pid = self.clone_child()?;
        drop(child_ends);
        Ok(Process {
            pid,
            stdin,
            stdout,
            stderr,
            status: None,
        })
    }

    /// Clones the child, waits for it to execute or fail, and answers its pid or its error.
    fn clone_child(&self) -> io::Result<libc::pid_t> {
        let (err_read, err_write) = cloexec_pipe()?;
        let ptrs = |v: &[CString]| {
            let mut p: Vec<*const libc::c_char> = v.iter().map(|s| s.as_ptr()).collect();
            p.push(std::ptr::null());
            p
        };
        let argv = ptrs(&self.argv);
        let envp = ptrs(&self.envp);
        // `/bin/sh <file> args…` for a candidate that is no executable format; [1] set in the child.
        let mut sh_argv: Vec<*const libc::c_char> = vec![c"sh".as_ptr(), std::ptr::null()];
        sh_argv.extend(&argv[1..]);
        let groups = self.ids.as_ref().map_or(&[][..], |(g, _, _)| g.as_slice());
        let mut child = ChildArgs {
            launch: self,
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            sh_argv: sh_argv.as_mut_ptr(),
            groups: groups.as_ptr(),
            groups_len: groups.len(),
            err: err_write.as_raw_fd(),
        };
        // SAFETY: an anonymous private mapping of STACK bytes, unmapped below.
        let stack = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                STACK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if stack == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: sigset operations on local sets; the mask is restored right after the clone.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        // SAFETY: the child runs `child_main` on its own stack with `child`, which lives (with
        // everything it points to) until the clone returns: CLONE_VFORK suspends this thread until
        // the child has executed or exited. The child keeps to raw system calls (module doc).
        let pid = unsafe {
            libc::clone(
                child_main,
                (stack as *mut u8).add(STACK).cast(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                (&mut child as *mut ChildArgs).cast(),
            )
        };
        let cloned = io::Error::last_os_error();
        // SAFETY: restores the mask saved above; unmaps the stack the child no longer uses.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            libc::munmap(stack, STACK);
        }
        drop(err_write);
        if pid < 0 {
            return Err(cloned);
        }
        let mut errno = [0u8; 4];
        let mut file = std::fs::File::from(err_read);
        match io::Read::read(&mut file, &mut errno) {
            Ok(0) => Ok(pid),
            Ok(_) => {
                reap_now(pid);
                Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)))
            }
            Err(e) => {
                reap_now(pid);
                Err(e)
            }
        }
    }
}

/// Waits for `pid`, which has exited or is about to (a child that failed before executing).
fn reap_now(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waitpid on our own child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
}

/// What the child reads: raw pointers into memory the parent keeps alive through the clone.
struct ChildArgs<'a> {
    launch: &'a Launch,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    sh_argv: *mut *const libc::c_char,
    groups: *const libc::gid_t,
    groups_len: usize,
    err: RawFd,
}

/// The kernel's `struct sigaction` for `rt_sigaction`, as x86-64 lays it out (the agent's one
/// target, `scripts/build-agent`).
#[cfg(not(target_arch = "x86_64"))]
compile_error!("launch.rs passes x86-64's kernel `struct sigaction` to rt_sigaction");
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// Answers `errno` to the parent and exits; never returns.
unsafe fn fail(err: RawFd) -> libc::c_int {
    let errno = *libc::__errno_location();
    let bytes = errno.to_ne_bytes();
    libc::syscall(libc::SYS_write, err, bytes.as_ptr(), bytes.len());
    libc::syscall(libc::SYS_exit, 127);
    127
}

/// The child, between clone and exec (module doc: raw system calls only).
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Child` the parent keeps alive while this thread runs (CLONE_VFORK);
    // every call below is a raw system call on memory prepared before the clone.
    unsafe {
        let c = &*(arg as *const ChildArgs);
        let l = c.launch;
        // Default dispositions for what the agent handles, and SIGPIPE; then unblock everything.
        for sig in 1..=64 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old = std::mem::zeroed::<KernelSigaction>();
            if libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                std::ptr::null::<KernelSigaction>(),
                &mut old,
                8,
            ) != 0
            {
                continue;
            }
            let handled = old.handler != libc::SIG_DFL && old.handler != libc::SIG_IGN;
            if handled || sig == libc::SIGPIPE {
                let default = std::mem::zeroed::<KernelSigaction>();
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &default,
                    std::ptr::null_mut::<KernelSigaction>(),
                    8,
                );
            }
        }
        let empty = 0u64;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty,
            std::ptr::null_mut::<u64>(),
            8,
        );
        for (target, &fd) in l.stdio.iter().enumerate() {
            if libc::syscall(libc::SYS_dup2, fd, target) < 0 {
                return fail(c.err);
            }
        }
        if l.terminal {
            if libc::syscall(libc::SYS_setsid) < 0
                || libc::syscall(libc::SYS_ioctl, 0, libc::TIOCSCTTY, 0) != 0
            {
                return fail(c.err);
            }
        } else if libc::syscall(libc::SYS_setpgid, 0, 0) != 0 {
            return fail(c.err);
        }
        if let Some((_, gid, uid)) = &l.ids {
            if libc::syscall(libc::SYS_setgroups, c.groups_len, c.groups) != 0
                || libc::syscall(libc::SYS_setgid, *gid) != 0
                || libc::syscall(libc::SYS_setuid, *uid) != 0
            {
                return fail(c.err);
            }
        }
        if libc::syscall(libc::SYS_chdir, l.cwd.as_ptr()) != 0 {
            return fail(c.err);
        }
        // As execvp: the first candidate that executes wins; a permission error is remembered
        // over a later "not found".
        let mut denied = false;
        for path in &l.candidates {
            libc::syscall(libc::SYS_execve, path.as_ptr(), c.argv, c.envp);
            match *libc::__errno_location() {
                libc::ENOEXEC => {
                    *c.sh_argv.add(1) = path.as_ptr();
                    libc::syscall(libc::SYS_execve, c"/bin/sh".as_ptr(), c.sh_argv, c.envp);
                    return fail(c.err);
                }
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => return fail(c.err),
            }
        }
        if denied {
            *libc::__errno_location() = libc::EACCES;
        }
        fail(c.err)
    }
}

impl Process {
    /// Its pid.
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// Waits for it to end and reaps it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        // Listening before looking, so an exit between the two still wakes us.
        let mut exits = signal(SignalKind::child())?;
        loop {
            let mut status = 0;
            // SAFETY: waitpid on our own child, not blocking.
            let got = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if got == self.pid {
                let status = ExitStatus::from_raw(status);
                self.status = Some(status);
                return Ok(status);
            }
            if got < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
                continue;
            }
            exits.recv().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn env() -> Vec<(String, String)> {
        vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("X".into(), "y".into()),
        ]
    }

    async fn output(mut p: Process) -> (String, String, i32) {
        let (mut out, mut err) = (String::new(), String::new());
        p.stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        p.stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .await
            .unwrap();
        let code = p.wait().await.unwrap().code().unwrap_or(-1);
        (out, err, code)
    }

    #[tokio::test]
    async fn runs_found_in_path_with_its_environment_directory_and_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let launch = Launch::new(
            "sh",
            &[
                "-c".into(),
                "read l; echo \"$l $X $(pwd)\"; echo e >&2; exit 3".into(),
            ],
            &env(),
            dir.path(),
            None,
        )
        .unwrap();
        let mut p = launch.spawn(Stdio::Piped { stdin: true }).unwrap();
        let mut stdin = p.stdin.take().unwrap();
        stdin.write_all(b"hi\n").await.unwrap();
        drop(stdin);
        let (out, err, code) = output(p).await;
        let cwd = dir.path().canonicalize().unwrap();
        assert_eq!(out, format!("hi y {}\n", cwd.display()));
        assert_eq!((err.as_str(), code), ("e\n", 3));
    }

    #[tokio::test]
    async fn a_missing_program_or_directory_is_an_error() {
        let none = Launch::new("no-such-program-here", &[], &env(), "/".as_ref(), None).unwrap();
        let e = none.spawn(Stdio::Piped { stdin: false }).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        let dir = Launch::new("true", &[], &env(), "/no/such/dir".as_ref(), None).unwrap();
        let e = dir.spawn(Stdio::Piped { stdin: false }).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    }

    #[tokio::test]
    async fn signals_are_default_and_unblocked_and_the_group_is_its_own() {
        // The test runtime ignores SIGPIPE, as the agent does: the child must die of it.
        let launch = Launch::new(
            "sh",
            &[
                "-c".into(),
                "grep -E '^Sig(Blk|Ign)' /proc/self/status; \
                 read -r pid comm state ppid pgrp rest < /proc/$$/stat; echo $pid; echo $pgrp"
                    .into(),
            ],
            &env(),
            "/".as_ref(),
            None,
        )
        .unwrap();
        let (out, _, code) = output(launch.spawn(Stdio::Piped { stdin: false }).unwrap()).await;
        assert_eq!(code, 0, "{out}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "SigBlk:\t0000000000000000", "{out}");
        // SIGPIPE (13) is not ignored.
        let ignored = u64::from_str_radix(lines[1].trim_start_matches("SigIgn:\t"), 16).unwrap();
        assert_eq!(ignored & (1 << 12), 0, "{out}");
        assert_eq!(
            lines[2].trim(),
            lines[3].trim(),
            "its own process group: {out}"
        );
    }

    #[tokio::test]
    async fn a_script_without_an_interpreter_line_runs_under_sh() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("plain");
        std::fs::write(&script, "echo from-sh \"$1\"\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let launch = Launch::new(
            script.to_str().unwrap(),
            &["arg".into()],
            &env(),
            "/".as_ref(),
            None,
        )
        .unwrap();
        let (out, _, code) = output(launch.spawn(Stdio::Piped { stdin: false }).unwrap()).await;
        assert_eq!((out.as_str(), code), ("from-sh arg\n", 0));
    }

    #[tokio::test]
    async fn on_a_terminal_it_leads_a_session_whose_controlling_terminal_it_is() {
        use super::super::pty::{self, PtyReader};
        let (master, slave) =
            pty::open(sandboxd_envd::process::PtySize { cols: 80, rows: 24 }).unwrap();
        let launch = Launch::new(
            "sh",
            &[
                "-c".into(),
                "read -r pid comm state ppid pgrp sid rest < /proc/$$/stat; \
                 echo \"[$pid $sid $(tty)]\"; exit 4"
                    .into(),
            ],
            &env(),
            "/".as_ref(),
            None,
        )
        .unwrap();
        let mut p = launch.spawn(Stdio::Terminal(slave)).unwrap();
        assert!(p.stdout.is_none() && p.stderr.is_none() && p.stdin.is_none());
        let code = p.wait().await.unwrap().code();
        let mut out = String::new();
        let mut reader = PtyReader(std::sync::Arc::new(master));
        let mut buf = [0u8; 4096];
        while !out.contains(']') {
            let n = tokio::time::timeout(std::time::Duration::from_secs(5), reader.read(&mut buf))
                .await
                .expect("the terminal's output")
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        let inner = out.trim().trim_start_matches('[').trim_end_matches(']');
        let fields: Vec<&str> = inner.split(' ').collect();
        assert_eq!(fields.len(), 3, "{out:?}");
        assert_eq!(fields[0], fields[1], "a session leader: {out:?}");
        assert!(fields[2].starts_with("/dev/pts/"), "{out:?}");
        assert_eq!(code, Some(4));
    }
}
