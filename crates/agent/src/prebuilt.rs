//! `sandboxd-agent init`: PID 1 of a sandbox its runtime built whole (the gVisor tier, see
//! `sandboxd_envd::init`).
//!
//! There is nothing left to build or confine: `runsc` made the root, the namespaces and the user-space
//! kernel around it. The agent reads its [`InitConfig`] from standard input and runs as three
//! processes:
//! - the **core**, the agent's server, listening on a socket inside the sandbox ([`CORE_SOCKET`]);
//!   it calls home once it answers ([`crate::callhome`]);
//! - the **door**, which listens on the socket the configuration names (made on the host through
//!   the directory the runtime shares, runsc's `--host-uds`) and relays every connection to the
//!   core;
//! - **init** itself, which reaps, forwards termination signals to the core, and exits with the
//!   core's code.
//!
//! The split exists for checkpoints: gVisor cannot save a socket bound on the host, so before a
//! checkpoint the runtime sends init [`SUSPEND_SIGNAL`]; init kills the door (every host socket of
//! the sandbox goes with it; the core, its processes and their pipes stay) and answers by creating
//! [`SUSPENDED_MARKER`] in the shared directory. After a restore (or if the checkpoint is given up)
//! the runtime creates [`RESUME_MARKER`]; init, which polls for it every few milliseconds while
//! suspended, removes both markers and opens a new door. A marker that holds an identity (a fork's:
//! `sandboxd_envd::init::Identity`) is handed to the core first ([`IDENTITY_FILE`], SIGHUP), and
//! the door opens only once the core took it, so no call is ever served under the old token. A door that dies on its own is replaced
//! at once. Any failure before serving is printed to standard error (the runtime's boot log) and
//! ends the process with status 1.

use crate::{init, server};
use sandboxd_envd::init::InitConfig;
use std::ffi::CString;
use std::io::BufRead;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// Where the core listens, inside the sandbox (a directory only root can enter).
pub const CORE_SOCKET: &str = "/run/sandboxd-agent/core.sock";
/// Where init hands the core a new identity (a fork's) before reopening the door.
pub const IDENTITY_FILE: &str = "/run/sandboxd-agent/identity.json";
/// The signal that asks init to close the door before a checkpoint
/// (`sandboxd_envd::init::SUSPEND_SIGNAL`).
pub const SUSPEND_SIGNAL: libc::c_int = libc::SIGUSR2;
pub use sandboxd_envd::init::{RESUME_MARKER, SUSPENDED_MARKER};
/// How often a suspended init looks for the resume marker.
const RESUME_POLL_NS: libc::c_long = 2_000_000;

/// Serves as the init of a prebuilt sandbox; never returns.
pub fn run() -> ! {
    let (config, core, door) = match prepare() {
        Ok(ready) => ready,
        Err(e) => {
            eprintln!("sandboxd-agent init: {e}");
            std::process::exit(1);
        }
    };
    let shared = config
        .socket
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let agent = server::AgentConfig {
        identity_file: Some(PathBuf::from(IDENTITY_FILE)),
        ..server::AgentConfig::for_sandbox(
            config.sandbox_id,
            config.token,
            config.default_user,
            config.envs,
            config.workdir,
            config.callback_socket,
        )
    };
    let (set, old) = init::block_signals();
    let door_fd = std::os::fd::AsRawFd::as_raw_fd(&door);
    let core_pid = init::spawn(&old, move || {
        // The core holds no host socket: the door's listener is init's to hand on.
        // SAFETY: closing this process's inherited copy of the door's listener, used by nothing here.
        unsafe { libc::close(door_fd) };
        if let Err(e) = server::write_generation(0) {
            eprintln!("sandboxd-agent: cannot write the clone generation: {e}");
        }
        // Not dumpable: sandbox processes of the same uid cannot read the core's memory (its token).
        // SAFETY: plain prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        server::run_blocking(core, agent)
    });
    let doors = Doors {
        socket: config.socket,
        markers: Markers::new(&shared),
        old,
    };
    let door_pid = doors.open(door);
    supervise(core_pid, door_pid, &doors, &set)
}

/// Reads the configuration and opens both listeners.
fn prepare() -> Result<(InitConfig, UnixListener, UnixListener), String> {
    let mut line = Vec::new();
    std::io::stdin()
        .lock()
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("reading the configuration: {e}"))?;
    let config =
        InitConfig::from_line(&line).map_err(|e| format!("decoding the configuration: {e}"))?;
    // The pipe has served its purpose: standard input becomes /dev/null, so nothing the sandbox
    // runs inherits the pipe and no later descriptor lands on 0.
    let null = std::fs::File::open("/dev/null").map_err(|e| format!("opening /dev/null: {e}"))?;
    // SAFETY: dup2 onto descriptor 0, which this process owns; `null` stays open across the call.
    if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 0) } < 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("replacing standard input: {e}"));
    }
    let core_dir = Path::new(CORE_SOCKET).parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(core_dir)
        .and_then(|()| {
            std::fs::set_permissions(
                core_dir,
                std::os::unix::fs::PermissionsExt::from_mode(0o700),
            )
        })
        .map_err(|e| format!("making {}: {e}", core_dir.display()))?;
    let core = listen(Path::new(CORE_SOCKET))?;
    let door = listen(&config.socket)?;
    Ok((config, core, door))
}

fn listen(path: &Path) -> Result<UnixListener, String> {
    let _ = std::fs::remove_file(path);
    UnixListener::bind(path).map_err(|e| format!("listening on {}: {e}", path.display()))
}

/// The marker files in the shared directory, as C strings ready for init's loop.
struct Markers {
    suspended: CString,
    resume: CString,
}

impl Markers {
    fn resume_path(&self) -> &Path {
        Path::new(std::ffi::OsStr::from_bytes(self.resume.as_bytes()))
    }
}

impl Markers {
    fn new(shared: &Path) -> Markers {
        let c =
            |name: &str| CString::new(shared.join(name).as_os_str().as_bytes()).unwrap_or_default();
        Markers {
            suspended: c(SUSPENDED_MARKER),
            resume: c(RESUME_MARKER),
        }
    }
}

/// What init needs to open a door.
struct Doors {
    socket: PathBuf,
    markers: Markers,
    old: libc::sigset_t,
}

impl Doors {
    /// Forks a door serving `listener`; returns its pid.
    fn open(&self, listener: UnixListener) -> libc::pid_t {
        init::spawn(&self.old, move || door(listener))
    }

    /// Listens on the door's socket again and forks a door on it; `None` (logged) when the socket
    /// cannot be made.
    fn reopen(&self) -> Option<libc::pid_t> {
        match listen(&self.socket) {
            Ok(listener) => {
                let pid = self.open(listener);
                Some(pid)
            }
            Err(e) => {
                eprintln!("sandboxd-agent init: cannot reopen the door: {e}");
                None
            }
        }
    }
}

/// Where the door is in its life.
#[derive(Clone, Copy, PartialEq, Eq)]
enum DoorState {
    /// Serving, as pid.
    Open(libc::pid_t),
    /// Killed for a checkpoint, not yet reaped.
    Closing(libc::pid_t),
    /// Closed; the runtime may checkpoint.
    Closed,
    /// Waiting for the core to take a new identity before reopening.
    Relearning,
}

/// Init's loop: reap, forward, close and reopen the door, exit with the core.
fn supervise(core: libc::pid_t, door: libc::pid_t, doors: &Doors, set: &libc::sigset_t) -> ! {
    let mut state = DoorState::Open(door);
    loop {
        let wait = libc::timespec {
            tv_sec: 0,
            tv_nsec: RESUME_POLL_NS,
        };
        // SAFETY: `set` is a valid, initialized signal set; `info` is written by the kernel.
        let sig = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            if matches!(state, DoorState::Closed | DoorState::Relearning) {
                libc::sigtimedwait(set, &mut info, &wait)
            } else {
                libc::sigwaitinfo(set, &mut info)
            }
        };
        match sig {
            libc::SIGCHLD => {
                let (core_code, door_gone) = reap(core, state);
                if let Some(code) = core_code {
                    // SAFETY: _exit never returns.
                    unsafe { libc::_exit(code) }
                }
                if door_gone {
                    state = match state {
                        DoorState::Closing(_) => {
                            touch(&doors.markers.suspended);
                            DoorState::Closed
                        }
                        // A door that died on its own is replaced.
                        _ => doors.reopen().map_or(DoorState::Closed, DoorState::Open),
                    };
                }
            }
            SUSPEND_SIGNAL => {
                if let DoorState::Open(pid) = state {
                    // SAFETY: kill(2) has no memory-safety preconditions.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    state = DoorState::Closing(pid);
                } else if state == DoorState::Closed {
                    touch(&doors.markers.suspended);
                }
            }
            sig if sig > 0 => {
                // SAFETY: kill(2) has no memory-safety preconditions.
                unsafe { libc::kill(core, sig) };
            }
            _ => state = poll(state, core, doors),
        }
    }
}

/// A timeout (or EINTR) while the door is closed: reopen it on the runtime's word, handing the core
/// the identity the word carries first.
fn poll(state: DoorState, core: libc::pid_t, doors: &Doors) -> DoorState {
    match state {
        DoorState::Closed => {
            let Ok(word) = std::fs::read(doors.markers.resume_path()) else {
                return state;
            };
            // SAFETY: unlink on NUL-terminated paths.
            unsafe {
                libc::unlink(doors.markers.resume.as_ptr());
                libc::unlink(doors.markers.suspended.as_ptr());
            }
            if word.is_empty() {
                return doors.reopen().map_or(DoorState::Closed, DoorState::Open);
            }
            if let Err(e) = std::fs::write(IDENTITY_FILE, &word) {
                eprintln!("sandboxd-agent init: cannot hand the core its identity: {e}");
                return DoorState::Closed;
            }
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(core, libc::SIGHUP) };
            DoorState::Relearning
        }
        DoorState::Relearning if !Path::new(IDENTITY_FILE).exists() => {
            doors.reopen().map_or(DoorState::Closed, DoorState::Open)
        }
        other => other,
    }
}

/// Reaps every zombie child: the core's exit code if it was among them, and whether the door was.
fn reap(core: libc::pid_t, state: DoorState) -> (Option<i32>, bool) {
    let door = match state {
        DoorState::Open(pid) | DoorState::Closing(pid) => pid,
        DoorState::Closed | DoorState::Relearning => -1,
    };
    let (mut core_code, mut door_gone) = (None, false);
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return (core_code, door_gone);
        }
        if pid == core {
            core_code = Some(init::exit_code(status));
        } else if pid == door {
            door_gone = true;
        }
    }
}

/// Creates the (empty) file at `path`.
fn touch(path: &CString) {
    // SAFETY: open/close on a NUL-terminated path.
    unsafe {
        let fd = libc::open(
            path.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o600,
        );
        if fd >= 0 {
            libc::close(fd);
        }
    }
}

/// The door: relays every connection to the core until killed.
fn door(listener: UnixListener) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandboxd-agent door: cannot build its runtime: {e}");
            return 1;
        }
    };
    runtime.block_on(async move {
        if let Err(e) = listener.set_nonblocking(true) {
            eprintln!("sandboxd-agent door: {e}");
            return 1;
        }
        let listener = match tokio::net::UnixListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("sandboxd-agent door: {e}");
                return 1;
            }
        };
        loop {
            let Ok((mut outside, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                if let Ok(mut core) = tokio::net::UnixStream::connect(CORE_SOCKET).await {
                    let _ = tokio::io::copy_bidirectional(&mut outside, &mut core).await;
                }
            });
        }
    })
}
