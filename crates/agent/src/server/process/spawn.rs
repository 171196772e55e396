//! Spawning one process as a user, on pipes or on a terminal.
//!
//! Guarantees for the child, all set up between its clone and exec ([`super::launch`]): its own process group (with a PTY: its
//! own session, whose controlling terminal is the PTY); the user's supplementary groups, gid and uid
//! (in that order, so no privilege is kept); then `chdir` to the working directory as that user. It
//! keeps the `oom_score_adj` the sandbox was started with, as the agent does (inside a sandbox,
//! opening `/proc/self/oom_score_adj` for writing is refused, so the agent could not change it). The environment
//! is built from scratch: `PATH`, `HOME`, `USER`, `LOGNAME`, `SHELL` (and `TERM=xterm-256color` with a
//! PTY), then the sandbox-wide variables, then the request's, each later source overriding earlier ones.
//! With a PTY the terminal is the child's stdin, stdout and stderr, and belongs to the user.

use super::super::error::ServerError;
use super::super::fs::resolve_path;
use super::super::users::User;
use super::launch::{Launch, Process, Stdio};
use super::pty::{self, PtyMaster};
use sandboxd_envd::process::{PtySize, StartRequest};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

/// `PATH` when neither the sandbox nor the request sets one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// `TERM` of a PTY process when neither the sandbox nor the request sets one.
pub const DEFAULT_TERM: &str = "xterm-256color";

/// A validated request to run something.
pub struct SpawnSpec {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub user: User,
    pub stdin: bool,
    /// Run on a terminal of this size instead of pipes.
    pub pty: Option<PtySize>,
}

/// A started process: on pipes (`child.stdout`, `child.stderr`, maybe `child.stdin`) or on a terminal.
pub struct Spawned {
    pub child: Process,
    pub pty: Option<PtyMaster>,
}

impl SpawnSpec {
    pub fn new(
        req: &StartRequest,
        user: &User,
        sandbox_envs: &HashMap<String, String>,
    ) -> Result<Self, ServerError> {
        let p = &req.process;
        if p.cmd.is_empty() {
            return Err(ServerError::InvalidArgument("process.cmd is empty".into()));
        }
        if p.cmd.contains('\0') || p.args.iter().any(|a| a.contains('\0')) {
            return Err(ServerError::InvalidArgument(
                "command contains a NUL byte".into(),
            ));
        }
        let cwd = resolve_path(p.cwd.as_deref().unwrap_or(""), user)?;
        if !cwd.is_dir() {
            return Err(ServerError::InvalidArgument(format!(
                "cwd '{}' does not exist",
                cwd.display()
            )));
        }
        let shell = if user.shell.is_empty() {
            "/bin/sh"
        } else {
            user.shell.as_str()
        };
        let pty = req.pty.as_ref().map(|p| p.size.unwrap_or_default());
        let mut env: Vec<(String, String)> = vec![
            // The user's own bin directory first, where `pip install` and `npm install -g` put
            // programs when the system's directories are read-only (the `base` template).
            (
                "PATH".into(),
                format!("{}/.local/bin:{DEFAULT_PATH}", user.home.display()),
            ),
            ("HOME".into(), user.home.to_string_lossy().into_owned()),
            ("USER".into(), user.name.clone()),
            ("LOGNAME".into(), user.name.clone()),
            ("SHELL".into(), shell.into()),
        ];
        if pty.is_some() {
            env.push(("TERM".into(), DEFAULT_TERM.into()));
        }
        let mut sandbox: Vec<_> = sandbox_envs.iter().collect();
        sandbox.sort();
        let mut request: Vec<_> = p.envs.iter().collect();
        request.sort();
        for (k, v) in sandbox.into_iter().chain(request) {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(ServerError::InvalidArgument(format!(
                    "invalid environment variable '{k}'"
                )));
            }
            env.retain(|(ek, _)| ek != k);
            env.push((k.clone(), v.clone()));
        }
        Ok(SpawnSpec {
            program: p.cmd.clone(),
            args: p.args.clone(),
            env,
            cwd,
            user: user.clone(),
            // envd keeps a stdin pipe unless the caller says `stdin: false`.
            stdin: req.stdin.unwrap_or(true),
            pty,
        })
    }
}

/// Starts the process on a new terminal, or with piped stdout/stderr (and stdin when asked, else
/// `/dev/null`).
pub fn spawn(spec: SpawnSpec) -> Result<Spawned, ServerError> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let switch_user = euid != spec.user.uid;
    if switch_user && euid != 0 {
        return Err(ServerError::PermissionDenied(format!(
            "the agent runs as uid {euid} and cannot start processes as user '{}'",
            spec.user.name
        )));
    }
    let (uid, gid) = (spec.user.uid, spec.user.gid);
    let mut groups: Vec<libc::gid_t> = vec![gid];
    groups.extend(spec.user.groups.iter().copied());

    let terminal = match spec.pty {
        Some(size) => Some(open_terminal(size, switch_user.then_some(uid))?),
        None => None,
    };
    let ids = switch_user.then_some((groups, gid, uid));
    let launch = Launch::new(&spec.program, &spec.args, &spec.env, &spec.cwd, ids)
        .map_err(|_| ServerError::InvalidArgument("command contains a NUL byte".into()))?;
    let (stdio, master) = match terminal {
        Some((master, slave)) => (Stdio::Terminal(slave), Some(master)),
        None => (Stdio::Piped { stdin: spec.stdin }, None),
    };
    // The terminal's slave is the child's only: once it has executed, the master reads end of
    // file when the child (and whatever inherited the terminal) is gone.
    let child = launch.spawn(stdio).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound
        | std::io::ErrorKind::PermissionDenied
        | std::io::ErrorKind::InvalidInput => ServerError::InvalidArgument(format!(
            "error starting process '{}': {source}",
            spec.program
        )),
        _ => ServerError::Io {
            op: "start process",
            path: spec.program.clone(),
            source,
        },
    })?;
    Ok(Spawned { child, pty: master })
}

/// A terminal for a new process, its slave handed to `owner` when the process runs as another user.
fn open_terminal(
    size: PtySize,
    owner: Option<libc::uid_t>,
) -> Result<(PtyMaster, OwnedFd), ServerError> {
    let (master, slave) =
        pty::open(size).map_err(ServerError::io("open a terminal", "/dev/ptmx"))?;
    if let Some(uid) = owner {
        // SAFETY: fchown on an fd we own; gid -1 leaves the group (tty) as devpts set it.
        if unsafe { libc::fchown(slave.as_raw_fd(), uid, libc::gid_t::MAX) } != 0 {
            return Err(ServerError::io("hand the terminal to uid", uid)(
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok((master, slave))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_envd::process::ProcessConfig;

    fn root() -> User {
        User {
            name: "root".into(),
            uid: 0,
            gid: 0,
            home: "/".into(),
            shell: "/bin/bash".into(),
            groups: vec![],
        }
    }

    #[test]
    fn env_layers_override_in_order() {
        let req = StartRequest {
            process: ProcessConfig {
                cmd: "env".into(),
                envs: HashMap::from([("A".into(), "req".into()), ("PATH".into(), "/req".into())]),
                ..Default::default()
            },
            ..Default::default()
        };
        let sandbox = HashMap::from([
            ("A".into(), "sandbox".into()),
            ("B".into(), "sandbox".into()),
        ]);
        let spec = SpawnSpec::new(&req, &root(), &sandbox).unwrap();
        let get = |k: &str| {
            spec.env
                .iter()
                .find(|(ek, _)| ek == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("A"), Some("req"));
        assert_eq!(get("B"), Some("sandbox"));
        assert_eq!(get("PATH"), Some("/req"));
        assert_eq!(get("HOME"), Some("/"));
        assert_eq!(get("USER"), Some("root"));
        assert_eq!(get("SHELL"), Some("/bin/bash"));
        assert_eq!(spec.env.iter().filter(|(k, _)| k == "A").count(), 1);
        assert!(spec.stdin);
        assert_eq!(get("TERM"), None);
        assert_eq!(spec.pty, None);
    }

    #[test]
    fn the_users_own_bin_directory_leads_the_default_path() {
        let req = StartRequest {
            process: ProcessConfig {
                cmd: "env".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        let spec = SpawnSpec::new(&req, &root(), &HashMap::new()).unwrap();
        let path = spec.env.iter().find(|(k, _)| k == "PATH").unwrap();
        assert_eq!(path.1, format!("//.local/bin:{DEFAULT_PATH}"));
    }

    #[test]
    fn pty_requests_get_a_term_and_a_size() {
        use sandboxd_envd::process::Pty;
        let mut req = StartRequest {
            process: ProcessConfig {
                cmd: "bash".into(),
                ..Default::default()
            },
            pty: Some(Pty {
                size: Some(PtySize { cols: 90, rows: 20 }),
            }),
            ..Default::default()
        };
        let spec = SpawnSpec::new(&req, &root(), &HashMap::new()).unwrap();
        assert_eq!(spec.pty, Some(PtySize { cols: 90, rows: 20 }));
        let term = |s: &SpawnSpec| {
            s.env
                .iter()
                .find(|(k, _)| k == "TERM")
                .map(|(_, v)| v.clone())
        };
        assert_eq!(term(&spec).as_deref(), Some(DEFAULT_TERM));
        req.process.envs.insert("TERM".into(), "dumb".into());
        let spec = SpawnSpec::new(&req, &root(), &HashMap::new()).unwrap();
        assert_eq!(term(&spec).as_deref(), Some("dumb"));
    }

    #[test]
    fn rejects_bad_requests() {
        let mk = |cmd: &str, cwd: Option<&str>, env: Option<(&str, &str)>| StartRequest {
            process: ProcessConfig {
                cmd: cmd.into(),
                cwd: cwd.map(Into::into),
                envs: env.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
                ..Default::default()
            },
            ..Default::default()
        };
        let none = HashMap::new();
        assert!(SpawnSpec::new(&mk("", None, None), &root(), &none).is_err());
        assert!(SpawnSpec::new(&mk("a\0b", None, None), &root(), &none).is_err());
        assert!(SpawnSpec::new(
            &mk("ls", Some("/definitely/not/here"), None),
            &root(),
            &none
        )
        .is_err());
        assert!(SpawnSpec::new(&mk("ls", None, Some(("A=B", "x"))), &root(), &none).is_err());
        assert!(SpawnSpec::new(&mk("ls", Some("/tmp"), None), &root(), &none).is_ok());
    }
}
