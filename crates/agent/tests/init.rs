//! `run_as_init`: exit code propagation, signal forwarding and orphan reaping, each in a forked
//! process made a child subreaper so orphans come to it as they would to a sandbox's PID 1.

use sandboxd_agent::init::run_as_init;
use std::time::{Duration, Instant};

/// Forks; the child becomes a subreaper and runs `run_as_init(server)`. Returns the child's pid.
fn spawn_init(server: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child only makes libc calls and runs `server` before exiting via run_as_init.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
            run_as_init(server);
        }
        pid
    }
}

/// Waits for `pid` (up to 20 s) and returns its exit code.
fn wait_exit(pid: libc::pid_t) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut status = 0;
        // SAFETY: valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            assert!(
                libc::WIFEXITED(status),
                "init did not exit normally: {status:#x}"
            );
            return libc::WEXITSTATUS(status);
        }
        if Instant::now() > deadline {
            // SAFETY: killing our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("init did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn pipe() -> (libc::c_int, libc::c_int) {
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

fn read_i32(fd: libc::c_int) -> i32 {
    let mut buf = [0u8; 4];
    // SAFETY: reading into a 4-byte buffer.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 4) };
    assert_eq!(n, 4, "short read from test pipe");
    i32::from_ne_bytes(buf)
}

fn write_i32(fd: libc::c_int, v: i32) {
    // SAFETY: writing a 4-byte buffer.
    unsafe { libc::write(fd, v.to_ne_bytes().as_ptr().cast(), 4) };
}

#[test]
fn init_behaviour() {
    // Forking tests run sequentially in one test so the harness has no other threads busy meanwhile.
    init_exits_with_the_servers_code();
    init_forwards_sigterm_to_the_server();
    init_reaps_orphans();
}

fn init_exits_with_the_servers_code() {
    let pid = spawn_init(|| 7);
    assert_eq!(wait_exit(pid), 7);
}

fn init_forwards_sigterm_to_the_server() {
    let (r, w) = pipe();
    let pid = spawn_init(move || {
        // SAFETY: plain libc signal calls in the forked server process.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            write_i32(w, libc::getpid());
            let mut sig = 0;
            libc::sigwait(&set, &mut sig);
            if sig == libc::SIGTERM {
                42
            } else {
                1
            }
        }
    });
    let server = read_i32(r);
    assert!(server > 0 && server != pid);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(wait_exit(pid), 42);
}

fn init_reaps_orphans() {
    let (r, w) = pipe();
    let pid = spawn_init(move || {
        // SAFETY: fork/_exit/waitpid in the forked server process.
        unsafe {
            let middle = libc::fork();
            if middle == 0 {
                let orphan = libc::fork();
                if orphan == 0 {
                    libc::_exit(0);
                }
                write_i32(w, orphan);
                libc::_exit(0);
            }
            let mut st = 0;
            libc::waitpid(middle, &mut st, 0);
            // Wait until the orphan has been re-parented, exited and been reaped by init.
            let orphan = {
                let mut buf = [0u8; 4];
                libc::read(r, buf.as_mut_ptr().cast(), 4);
                i32::from_ne_bytes(buf)
            };
            let path = std::ffi::CString::new(format!("/proc/{orphan}")).unwrap_or_default();
            for _ in 0..200 {
                if libc::access(path.as_ptr(), libc::F_OK) != 0 {
                    return 0;
                }
                libc::usleep(10_000);
            }
            3
        }
    });
    assert_eq!(wait_exit(pid), 0, "the orphan stayed a zombie");
}
