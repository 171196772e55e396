//! The daemon `bench all` and `bench images` start, in a private network namespace.
//!
//! A daemon leases network slots from 0 and names its veth ends `sbh<id><slot>`; beside a daemon
//! already running in the host's network namespace it would only find its slots set aside, and its
//! timings would measure that. [`Daemon::start`] therefore gives its daemon a fresh network namespace (loopback only, see [`private_netns`]): its
//! sandboxes' veth pairs, addresses and listener live there and nowhere else. The `bench http` that
//! measures it runs as a child process in the same namespace ([`Daemon::command`]), so it reaches the
//! listener and the sandboxes' addresses like any client next to a daemon would; `bench images` runs
//! its part on a thread of its own inside the namespace instead ([`Daemon::run_inside`]), with the
//! registry it starts listening on the namespace's loopback.
//!
//! Guarantees: [`Daemon::stop`] kills the daemon, then destroys every sandbox left under its data
//! directory with the runtime library, from a thread inside the namespace (so no host interface is
//! touched), then removes the data directory; the namespace disappears with its last reference.
//! Dropping a `Daemon` without `stop` still kills the daemon process (`kill_on_drop`).
//! The daemon runs in its own process group: Ctrl-C reaches the bench, which cleans up in order.

use crate::runtime::{remove_state_dir, CGROUP_PARENT};
use anyhow::{bail, Context};
use sandboxd_runtime::namespace::{NamespaceConfig, NamespaceRuntime};
use sandboxd_runtime::Runtime;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long the daemon gets to print that it listens (first start builds the `base` template).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// A daemon this process started.
pub struct Daemon {
    child: tokio::process::Child,
    netns: File,
    workdir: PathBuf,
    cgroup_parent: String,
    agent: PathBuf,
    /// Its URL (inside its network namespace).
    pub api: String,
    /// Its admin token.
    pub token: String,
}

/// How [`Daemon::start_node`] starts a daemon.
pub struct Node {
    /// The network namespace it runs in.
    pub netns: File,
    /// Its `--listen` address.
    pub listen: String,
    /// Its admin token.
    pub token: String,
    /// Where its data and log go.
    pub workdir: PathBuf,
    /// Its `--cgroup-parent`.
    pub cgroup_parent: String,
    /// Flags added to `serve`.
    pub args: Vec<String>,
}

/// The daemon binary: the flag, `sandboxd` beside this executable, else `target/release/sandboxd`.
pub fn daemon_binary(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = flag {
        return Ok(p.to_path_buf());
    }
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe()?.parent() {
        candidates.push(dir.join("sandboxd"));
    }
    candidates.push(PathBuf::from("target/release/sandboxd"));
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .with_context(|| {
            format!(
                "no sandboxd binary (tried {candidates:?}): cargo build --release -p sandboxd, or --daemon"
            )
        })
}

impl Daemon {
    /// Starts `binary serve` with a temporary data dir, a free port, cgroup parent [`CGROUP_PARENT`] and
    /// the given agent, in a private network namespace; returns once it listens.
    pub async fn start(binary: &Path, agent: &Path) -> anyhow::Result<Daemon> {
        let (netns, port) = private_netns().context("creating a network namespace")?;
        let workdir =
            std::env::temp_dir().join(format!("sandboxd-bench-all-{}", std::process::id()));
        let node = Node {
            netns,
            listen: format!("127.0.0.1:{port}"),
            token: random_token()?,
            workdir,
            cgroup_parent: CGROUP_PARENT.into(),
            args: Vec::new(),
        };
        Self::start_node(binary, agent, node).await
    }

    /// Starts `binary serve` as `node` says (its namespace, address, token, data and extra flags);
    /// returns once it listens.
    pub async fn start_node(binary: &Path, agent: &Path, node: Node) -> anyhow::Result<Daemon> {
        let Node {
            netns,
            listen,
            token,
            workdir,
            cgroup_parent,
            args,
        } = node;
        std::fs::create_dir_all(&workdir)
            .with_context(|| format!("creating {}", workdir.display()))?;
        let log = File::create(workdir.join("daemon.log")).context("daemon log")?;
        let mut cmd = tokio::process::Command::new(binary);
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(workdir.join("data"))
            .args(["--listen", &listen, "--cgroup-parent", &cgroup_parent])
            .arg("--agent-bin")
            .arg(agent)
            .args(&args)
            .env("SB_PAT_TOKEN", &token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        enter_on_exec(&mut cmd, netns.as_raw_fd());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stdout = child.stdout.take().context("daemon stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(READY_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                if line.contains("listening on") {
                    return Ok(true);
                }
            }
            Ok::<_, std::io::Error>(false)
        })
        .await;
        let mut daemon = Daemon {
            child,
            netns,
            workdir,
            cgroup_parent,
            agent: agent.to_path_buf(),
            api: format!("http://{listen}"),
            token,
        };
        match ready {
            Ok(Ok(true)) => {
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                Ok(daemon)
            }
            outcome => {
                let log = daemon.workdir.join("daemon.log");
                let _ = daemon.child.kill().await;
                let why = match outcome {
                    Err(_) => "did not listen in time".to_string(),
                    Ok(Err(e)) => format!("stdout failed: {e}"),
                    Ok(Ok(_)) => "exited before listening".to_string(),
                };
                bail!(
                    "the daemon {why}; its log is {}:\n{}",
                    log.display(),
                    tail(&log)
                )
            }
        }
    }

    /// The daemon's process id (`None` once it was reaped).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Where its runtime keeps each sandbox's record (`sandboxes/ID/state.json`).
    pub fn runtime_dir(&self) -> PathBuf {
        self.workdir.join("data/runtime")
    }

    /// `program` set up to run inside the daemon's network namespace, with `SB_API_URL` and
    /// `SB_PAT_TOKEN` naming the daemon.
    pub fn command(&self, program: &Path) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(program);
        cmd.env("SB_API_URL", &self.api)
            .env("SB_PAT_TOKEN", &self.token)
            .kill_on_drop(true);
        enter_on_exec(&mut cmd, self.netns.as_raw_fd());
        cmd
    }

    /// Runs `work` inside the daemon's network namespace (see [`in_netns`]: its own thread and
    /// async runtime, so its connections reach the daemon's listener and loopback, and processes it
    /// spawns, e.g. a registry, listen there too); resolves with its outcome.
    pub async fn run_inside<T, F, Fut>(&self, work: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = anyhow::Result<T>>,
    {
        let netns = self.netns.try_clone()?;
        tokio::task::spawn_blocking(move || in_netns(netns, work))
            .await
            .context("the netns thread failed")?
    }

    /// Kills the daemon, destroys what it left, removes its data (and its log unless `keep_log`).
    /// Returns how many sandboxes were left to destroy.
    pub async fn stop(mut self, keep_log: bool) -> anyhow::Result<usize> {
        self.child.kill().await.context("killing the daemon")?;
        let netns = self.netns.try_clone()?;
        let runtime_dir = self.workdir.join("data/runtime");
        let agent = self.agent.clone();
        let parent = self.cgroup_parent.clone();
        let swept = tokio::task::spawn_blocking(move || sweep(netns, runtime_dir, agent, parent))
            .await
            .context("the sweep thread failed")??;
        // The daemon's runtime may have loop-mounted its btrfs pool; it never detaches it itself.
        sandboxd_runtime::quota::release_pool(&self.workdir.join("data/runtime"))
            .context("detaching the daemon's disk pool")?;
        remove_state_dir(&self.workdir.join("data"))?;
        if keep_log {
            eprintln!(
                "bench: the daemon's log is {}",
                self.workdir.join("daemon.log").display()
            );
        } else {
            std::fs::remove_dir_all(&self.workdir)
                .with_context(|| format!("removing {}", self.workdir.display()))?;
        }
        Ok(swept)
    }
}

/// Destroys every sandbox under `runtime_dir` with a runtime whose netlink socket lives in `netns`.
fn sweep(
    netns: File,
    runtime_dir: PathBuf,
    agent: PathBuf,
    cgroup_parent: String,
) -> anyhow::Result<usize> {
    in_netns(netns, || async move {
        let mut config = NamespaceConfig::new(runtime_dir, agent);
        config.cgroup_parent = cgroup_parent;
        let runtime = NamespaceRuntime::new(config).await?;
        let left = runtime.list().await?;
        let mut failed = Vec::new();
        for s in &left {
            if let Err(e) = runtime.destroy(s.id()).await {
                failed.push(format!("{}: {e}", s.id()));
            }
        }
        if !failed.is_empty() {
            bail!("destroying the daemon's sandboxes: {}", failed.join("; "));
        }
        Ok(left.len())
    })
}

/// Runs the future `work` makes to its end on a current-thread async runtime in a fresh thread that entered the
/// network namespace `netns`; blocks until then. Everything `work` connects to, and every process
/// or thread it starts, is in that namespace (a thread and a child inherit their creator's).
fn in_netns<T, F, Fut>(netns: File, work: F) -> anyhow::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    std::thread::spawn(move || {
        // SAFETY: setns(2) on a namespace fd we own, for this thread (and what it starts) only.
        if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error()).context("entering the daemon's netns");
        }
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(work())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("a thread in the daemon's netns panicked"))?
}

/// Makes `cmd`'s child enter the network namespace `fd` before it execs.
fn enter_on_exec(cmd: &mut tokio::process::Command, fd: RawFd) {
    // SAFETY: between fork and exec the closure only calls setns(2), which is async-signal-safe;
    // `fd` stays open in the parent until spawn returns (the caller holds the namespace file).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// A new network namespace with its loopback up, and a port free on it.
///
/// A fresh thread unshares it (a network namespace is per thread), keeps a handle and ends; the
/// namespace lives as long as the returned file or a process inside it.
pub fn private_netns() -> anyhow::Result<(File, u16)> {
    std::thread::spawn(|| {
        // SAFETY: unshare(2) of the network namespace affects only this thread, which ends below.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error()).context("unshare(CLONE_NEWNET)");
        }
        loopback_up()?;
        let ns = File::open("/proc/thread-self/ns/net")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        Ok((ns, port))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the netns thread panicked"))?
}

/// Sets `lo` up in the calling thread's network namespace.
fn loopback_up() -> anyhow::Result<()> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0")?;
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOC[GS]IFFLAGS read and write the flags member of the ifreq we pass, which outlives
    // both calls.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) != 0 {
            return Err(std::io::Error::last_os_error()).context("SIOCGIFFLAGS lo");
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) != 0 {
            return Err(std::io::Error::last_os_error()).context("SIOCSIFFLAGS lo");
        }
    }
    Ok(())
}

/// 32 hex characters from the kernel's random source.
pub fn random_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The last lines of a log file, for an error message.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
