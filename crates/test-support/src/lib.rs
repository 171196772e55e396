//! Fixtures shared by the workspace's tests.
//!
//! - [`agent_binary`]: the static `sandboxd-agent`, built on first use (or taken from
//!   `SANDBOXD_AGENT_BIN`), so `cargo test` works from a clean checkout without a separate build step.
//! - [`require_root`]: tests that need real namespaces and cgroups fail loudly when not run as root,
//!   rather than passing without having checked anything.
//! - [`unique_id`]: ids that do not collide between concurrently running test processes.
//! - [`listen_port`]: a port a test daemon keeps across restarts, outside the kernel's ephemeral range.
//! - [`cargo_bin`]: a binary of another workspace package (e.g. the `sbx` CLI), built on first use.
//! - [`registry`]: a real OCI registry (`docker-registry`) and OCI images built with `umoci` from
//!   busybox-static, for tests that pull images.
//! - [`xfs`]: a loop-mounted XFS with project quotas, or a printed skip where the kernel has none.
//! - [`tls`]: HTTP and HTTPS servers of a test's own, with a test CA that plays the public roots.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

pub mod registry;
pub mod tls;
pub mod xfs;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/test-support sits two levels below the workspace root")
        .to_path_buf()
}

/// The build's target directory (`CARGO_TARGET_DIR`, else `<workspace>/target`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// A `cargo` command (the one running the tests, when known) in the workspace root.
fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

/// Path of the static agent binary (`SANDBOXD_AGENT_BIN`), else built by `scripts/build-agent`, the
/// one way the project builds it.
pub fn agent_binary() -> PathBuf {
    static AGENT: OnceLock<PathBuf> = OnceLock::new();
    AGENT
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("SANDBOXD_AGENT_BIN") {
                return PathBuf::from(path);
            }
            let out = Command::new(workspace_root().join("scripts/build-agent"))
                .env("CARGO_TARGET_DIR", target_dir())
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("run scripts/build-agent");
            assert!(out.status.success(), "building the static agent failed");
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        })
        .clone()
}

/// Panics unless the test runs as root (namespaces, cgroups and veth pairs need it). Set
/// `SANDBOXD_SKIP_ROOT_TESTS=1` to turn such tests into explicit skips on a developer laptop.
pub fn require_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var_os("SANDBOXD_SKIP_ROOT_TESTS").is_some() {
        eprintln!("SKIPPED: needs root (SANDBOXD_SKIP_ROOT_TESTS is set)");
        return false;
    }
    panic!(
        "this test needs root: run the suite as root, or set SANDBOXD_SKIP_ROOT_TESTS=1 to skip it"
    );
}

/// An id unique across test processes: `<prefix>-<pid>-<n>`, lowercase, at most 63 characters.
pub fn unique_id(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

/// A network slot held for the life of this value, so concurrently running test processes never wire
/// two sandboxes to the same veth name. Backed by `flock` on a per-slot file: a crashed test releases
/// its slots with its process.
pub struct TestSlot {
    /// The slot number.
    pub slot: u32,
    _lock: std::fs::File,
}

/// First slot handed to tests (the daemon's own slots start at 0; tests stay clear of them).
const TEST_SLOT_BASE: u32 = 8000;
const TEST_SLOTS: u32 = 4000;

/// An exclusive `flock` on `<tmp>/<dir>/<name>`, or `None` when another process holds it.
fn try_lock(dir: &str, name: u32) -> Option<std::fs::File> {
    use std::os::fd::AsRawFd;
    let dir = std::env::temp_dir().join(dir);
    std::fs::create_dir_all(&dir).expect("create lock dir");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(name.to_string()))
        .expect("open lock file");
    // SAFETY: flock on a descriptor we own.
    (unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0).then_some(file)
}

/// Takes a free network slot for a test.
pub fn test_slot() -> TestSlot {
    let start = (std::process::id() * 37) % TEST_SLOTS;
    (0..TEST_SLOTS)
        .map(|i| TEST_SLOT_BASE + (start + i) % TEST_SLOTS)
        .find_map(|slot| {
            try_lock("sandboxd-test-slots", slot).map(|_lock| TestSlot { slot, _lock })
        })
        .expect("no free test network slot")
}

/// A block of network slots for one daemon under test (`--net-slot-base`, `--net-slots`), held for the
/// life of this value so concurrently running test processes never start two daemons on the same veth
/// names and addresses. Blocks of 64 slots from 1000 to 7999.
pub struct DaemonSlots {
    /// First slot of the block.
    pub base: u32,
    /// Number of slots in the block.
    pub count: u32,
    _lock: std::fs::File,
}

/// Takes a free block of slots for a daemon under test.
pub fn daemon_slots() -> DaemonSlots {
    daemon_slot_blocks(1).remove(0)
}

/// `n` consecutive blocks of [`daemon_slots`], for a daemon that holds more sandboxes than one block
/// does: pass the first's base and `n` times its count.
pub fn daemon_slot_blocks(n: u32) -> Vec<DaemonSlots> {
    const BASE: u32 = 1000;
    const COUNT: u32 = 64;
    const BLOCKS: u32 = (TEST_SLOT_BASE - BASE) / COUNT;
    (0..=BLOCKS.saturating_sub(n))
        .find_map(|first| {
            let held: Vec<DaemonSlots> = (first..first + n)
                .map_while(|block| {
                    try_lock("sandboxd-test-slot-blocks", block).map(|_lock| DaemonSlots {
                        base: BASE + block * COUNT,
                        count: COUNT,
                        _lock,
                    })
                })
                .collect();
            (held.len() == n as usize).then_some(held)
        })
        .expect("no free run of network slot blocks for a test daemon")
}

/// A TCP port for a test daemon to listen on, held for the life of this value so a restart finds it
/// still free.
///
/// Taken below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`): a port the kernel gave
/// out with `bind(0)` is in that range, so once the daemon is killed any outgoing connection of a
/// concurrent test may take it as its local port, and the restart on the same port then fails with
/// `Address already in use` (CI saw that once). Ports from 24000, clear of the daemon's default host
/// port pool (22000–23000); `flock` keeps concurrently running test processes apart.
pub struct ListenPort {
    /// The port number.
    pub port: u16,
    _lock: std::fs::File,
}

/// Takes a port free on `ip` now, below the ephemeral range, that no other test process holds.
pub fn listen_port(ip: std::net::Ipv4Addr) -> ListenPort {
    const FIRST: u32 = 24000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let count = ephemeral.saturating_sub(FIRST).max(1);
    let start = (std::process::id() * 131) % count;
    (0..count)
        .map(|i| FIRST + (start + i) % count)
        .find_map(|port| {
            let _lock = try_lock("sandboxd-test-ports", port)?;
            let port = u16::try_from(port).ok()?;
            std::net::TcpListener::bind((ip, port)).ok()?;
            Some(ListenPort { port, _lock })
        })
        .expect("no free listen port below the ephemeral range")
}

/// Path of binary `bin` of workspace package `package` (debug profile), built with
/// `cargo build -p <package> --bin <bin>` the first time it is asked for in this process.
///
/// For binaries of *other* packages: a test's own package's binaries are `env!("CARGO_BIN_EXE_<bin>")`.
/// Honours `CARGO_TARGET_DIR`; cargo's own lock serialises concurrent builds from several test processes.
/// With `SANDBOXD_TEST_BIN_DIR` set, `<that dir>/<bin>` is used as it is, without cargo (for test
/// binaries run where there is no toolchain, e.g. the Debian VM of `scripts/test-debian-vm`).
pub fn cargo_bin(package: &str, bin: &str) -> PathBuf {
    use std::collections::HashMap;
    use std::sync::Mutex;
    if let Some(dir) = std::env::var_os("SANDBOXD_TEST_BIN_DIR") {
        let path = PathBuf::from(dir).join(bin);
        assert!(
            path.is_file(),
            "SANDBOXD_TEST_BIN_DIR is set but {} (of {package}) is missing",
            path.display()
        );
        return path;
    }
    static BUILT: OnceLock<Mutex<HashMap<(String, String), PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    // Held across the build: two threads asking for the same binary build it once.
    let mut built = built.lock().unwrap_or_else(|p| p.into_inner());
    let key = (package.to_string(), bin.to_string());
    if let Some(path) = built.get(&key) {
        return path.clone();
    }
    let status = cargo()
        .args(["build", "-p", package, "--bin", bin])
        .status()
        .unwrap_or_else(|e| panic!("run cargo to build {package}/{bin}: {e}"));
    assert!(status.success(), "building {package}/{bin} failed");
    let path = target_dir().join("debug").join(bin);
    assert!(
        path.is_file(),
        "cargo built {package}/{bin} but {} is missing",
        path.display()
    );
    built.insert(key, path.clone());
    path
}
