//! Fixture for tests against real namespace sandboxes: a runtime on a private state directory and cgroup
//! parent, sandboxes on slots no other test process holds, and cleanup that holds even when a test panics.

#![allow(dead_code)]

pub mod dns_double;
pub mod gvisor;
pub mod listed;
pub mod outside;

use sandboxd_envd::{EnvdClient, ExecOptions, ExecOutput};
use sandboxd_runtime::namespace::{NamespaceConfig, NamespaceRuntime};
use sandboxd_runtime::{ResourceLimits, Runtime, SandboxInfo, SandboxSpec};
use sandboxd_test_support::{agent_binary, test_slot, unique_id, TestSlot};

/// Cgroup parent of every test sandbox, apart from a running daemon's.
pub const CGROUP_PARENT: &str = "sandboxd-test";

pub struct Fixture {
    pub rt: NamespaceRuntime,
    pub dir: tempfile::TempDir,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        unmount_pool(&self.dir.path().join("runtime"));
    }
}

/// Detaches the btrfs pool a runtime on `state_dir` may have loop-mounted on its `layers/` (the
/// runtime never unmounts it: running sandboxes outlive it), so a test's temporary directory takes
/// no mount and no loop device with it.
pub fn unmount_pool(state_dir: &std::path::Path) {
    if let Err(e) = sandboxd_runtime::quota::release_pool(state_dir) {
        eprintln!("leaving the pool of {}: {e}", state_dir.display());
    }
}

/// Unmounts the pool of a state directory when dropped (for tests without a [`Fixture`]).
pub struct PoolMount(pub std::path::PathBuf);

impl Drop for PoolMount {
    fn drop(&mut self) {
        unmount_pool(&self.0);
    }
}

pub struct Sandbox {
    pub info: SandboxInfo,
    pub client: EnvdClient,
    _slot: TestSlot,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Whatever happened in the test, no sandbox outlives it.
        if let Some(pid) = self.info.pid {
            // SAFETY: kill with a pid we started; harmless if it is gone.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        // The pair dies with the namespace, but not at once: delete it now, before the slot's lock is
        // released to the next test (a test that failed never reached its destroy).
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &format!("sbh{}", self.info.net.slot)])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

pub fn config(dir: &std::path::Path) -> NamespaceConfig {
    let mut config = NamespaceConfig::new(dir.join("runtime"), agent_binary());
    config.cgroup_parent = CGROUP_PARENT.into();
    config
}

pub async fn fixture() -> Fixture {
    fixture_with(|_| {}).await
}

/// A fixture whose runtime configuration `edit` adjusts first.
pub async fn fixture_with(edit: impl FnOnce(&mut NamespaceConfig)) -> Fixture {
    let dir = tempfile::Builder::new()
        .prefix("sandboxd-rt-")
        .tempdir()
        .expect("tempdir");
    let mut config = config(dir.path());
    edit(&mut config);
    let rt = NamespaceRuntime::new(config)
        .await
        .expect("namespace runtime");
    Fixture { rt, dir }
}

/// A `base` sandbox on `slot`, with the id range of the same number (slots are this test process's
/// alone, so the range is too).
pub fn spec(slot: u32, limits: ResourceLimits) -> SandboxSpec {
    SandboxSpec {
        limits,
        net_slot: slot,
        id_range: Some(slot),
        ..SandboxSpec::base(unique_id("t"), unique_id("token"))
    }
}

impl Fixture {
    pub async fn sandbox(&self) -> Sandbox {
        self.sandbox_with(ResourceLimits::default()).await
    }

    pub async fn sandbox_with(&self, limits: ResourceLimits) -> Sandbox {
        let slot = test_slot();
        let spec = spec(slot.slot, limits);
        self.rt.create(&spec).await.expect("create");
        let info = self.rt.start(&spec.id).await.expect("start");
        let client = EnvdClient::new(&info.agent.socket, &info.agent.token);
        Sandbox {
            info,
            client,
            _slot: slot,
        }
    }

    pub async fn destroy(&self, sb: &Sandbox) {
        self.rt.destroy(sb.info.id()).await.expect("destroy");
    }
}

impl Sandbox {
    /// The sandbox `info` describes, reached through `client`, holding `slot` until it is dropped.
    pub fn new(info: SandboxInfo, client: EnvdClient, slot: TestSlot) -> Sandbox {
        Sandbox {
            info,
            client,
            _slot: slot,
        }
    }

    /// Talks to the agent of `info`, the sandbox started again.
    pub fn restarted(&mut self, info: SandboxInfo) {
        self.client = EnvdClient::new(&info.agent.socket, &info.agent.token);
        self.info = info;
    }

    /// Runs `script` with `/bin/sh -c` as the default user.
    pub async fn sh(&self, script: &str) -> ExecOutput {
        self.sh_as(None, script).await
    }

    /// Runs `script` with `/bin/sh -c` as `user` (or the default user).
    pub async fn sh_as(&self, user: Option<&str>, script: &str) -> ExecOutput {
        let client = match user {
            Some(u) => self.client.as_user(u),
            None => self.client.clone(),
        };
        let cmd = ["/bin/sh".to_string(), "-c".to_string(), script.to_string()];
        client
            .exec(&cmd, ExecOptions::default())
            .await
            .unwrap_or_else(|e| panic!("exec {script:?}: {}", sandboxd_errors::chain(&e)))
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Polls `check` every 20 ms until it returns `Some`; panics naming `what` after `within`. For
/// conditions that take a moment (a server starting to listen, a limit being reached): waiting for
/// the condition holds on a slow or loaded machine, where a fixed sleep does not.
pub async fn wait_for<T, F, Fut>(what: &str, within: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Connects to `addr`, retrying until something listens there; panics with the last error after
/// `within` (callers give 120 s: a server in a gVisor sandbox took over 30 s to listen in the
/// emulated Debian 12 VM).
pub async fn connect_within(
    addr: std::net::SocketAddr,
    within: std::time::Duration,
) -> std::net::TcpStream {
    let deadline = std::time::Instant::now() + within;
    loop {
        let err =
            match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)) {
                Ok(stream) => return stream,
                Err(e) => e,
            };
        assert!(
            std::time::Instant::now() < deadline,
            "nothing listens on {addr} within {within:?}: {err}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The next connection to `listener` (non-blocking), waiting for one up to `within` (poll(2) on the
/// listener, so it takes a connection the moment it arrives); `None` when none came.
pub fn accept_within(
    listener: &std::net::TcpListener,
    within: std::time::Duration,
) -> Option<(std::net::TcpStream, std::net::SocketAddr)> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Ok(accepted) = listener.accept() {
            return Some(accepted);
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        let ms =
            PollTimeout::try_from(left.as_millis().min(60_000) as i32).unwrap_or(PollTimeout::MAX);
        let _ = poll(&mut fds, ms);
    }
}
