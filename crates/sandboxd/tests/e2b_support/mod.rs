//! Fixture of the E2B tests: [`Daemon`] runs the real `sandboxd serve` on a fresh data dir, a free port,
//! its own block of network slots ([`sandboxd_test_support::daemon_slots`], held for the daemon's life so
//! that parallel test binaries never wire two sandboxes to one veth name) and the `sandboxd-e2b` cgroup
//! parent, and tears everything down in `Drop`, also when the test panics: every sandbox is deleted
//! through the API, the daemon is killed, then whatever is left (a sandbox init recorded in the data dir
//! that is still that very process) is thawed, killed, and its cgroups removed.

#![allow(dead_code)] // each test file uses a different part

use sandboxd_test_support::{agent_binary, daemon_slots, require_root, DaemonSlots};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Cgroup parent of these daemons' sandboxes.
pub const CGROUP_PARENT: &str = "sandboxd-e2b";
/// The API key the daemon accepts.
pub const API_KEY: &str = "e2b-test-key-5b1c9e";
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs one E2B test: serially with the other tests of its binary (two shared cores, and timing
/// assertions that must not measure another test's load), on its own two-thread runtime. Skipped only
/// when root tests are explicitly skipped; without root it panics.
pub fn e2b_test(test: impl std::future::Future<Output = ()>) {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !require_root() {
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(test);
}

/// A running `sandboxd serve`.
pub struct Daemon {
    root: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    _slots: DaemonSlots,
    http: reqwest::Client,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

impl Daemon {
    /// Starts a daemon and waits until `/health` answers.
    pub async fn start() -> Self {
        let root = tempfile::Builder::new()
            .prefix("sandboxd-e2b-")
            .tempdir()
            .expect("tempdir");
        let slots = daemon_slots();
        let port = free_port();
        let log = |name: &str| std::fs::File::create(root.path().join(name)).expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandboxd"));
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(root.path().join("data"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--cgroup-parent")
            .arg(CGROUP_PARENT)
            .arg("--net-slot-base")
            .arg(slots.base.to_string())
            .arg("--net-slots")
            .arg(slots.count.to_string())
            .arg("--agent-bin")
            .arg(agent_binary())
            .stdin(Stdio::null())
            .stdout(log("daemon.out"))
            .stderr(log("daemon.err"));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SB_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("SB_LOG", "info").env("SB_PAT_TOKEN", API_KEY);
        let child = cmd.spawn().expect("spawn sandboxd");
        let mut daemon = Daemon {
            root,
            port,
            child: Some(child),
            _slots: slots,
            http: client(Some(API_KEY)),
        };
        daemon.wait_ready().await;
        daemon
    }

    async fn wait_ready(&mut self) {
        let started = Instant::now();
        let plain = client(None);
        loop {
            if let Ok(resp) = plain.get(self.endpoint("/health")).send().await {
                if resp.status() == 200 {
                    return;
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("sandboxd exited with {status}:\n{}", self.log_tail(60));
            }
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "sandboxd not ready within {READY_TIMEOUT:?}:\n{}",
                self.log_tail(60)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `http://127.0.0.1:PORT`: both `E2B_API_URL` and `E2B_SANDBOX_URL`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The listen port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of `path`.
    pub fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.url())
    }

    /// A client sending the API key as `X-API-KEY`, as the E2B SDK does.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The writable layer of sandbox `id` on the host.
    pub fn upper_dir(&self, id: &str) -> PathBuf {
        self.root
            .path()
            .join("data/runtime/sandboxes")
            .join(id)
            .join("upper")
    }

    /// The last `lines` lines of the daemon's stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.root.path().join("daemon.err")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Every sandbox the daemon has, in any state (native `/v1` listing).
    pub async fn all_sandboxes(&self) -> Vec<Value> {
        let resp = self
            .http
            .get(self.endpoint("/v1/sandboxes?limit=1000"))
            .send()
            .await
            .expect("list request");
        assert_eq!(resp.status(), 200, "native list");
        let page: Value = resp.json().await.expect("a SandboxList");
        page["sandboxes"].as_array().cloned().unwrap_or_default()
    }

    /// Runs `cmd` through the native exec; returns (HTTP status, body).
    pub async fn exec(&self, id: &str, cmd: &[&str]) -> (u16, Value) {
        let resp = self
            .http
            .post(self.endpoint(&format!("/v1/sandboxes/{id}/exec")))
            .json(&serde_json::json!({ "cmd": cmd, "timeoutMs": 10_000 }))
            .send()
            .await
            .expect("exec request");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or_default())
    }

    fn teardown(&mut self) {
        let alive = self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
        if alive {
            for id in self.ids_blocking() {
                match raw_http(self.port, "DELETE", &format!("/v1/sandboxes/{id}")) {
                    Some((204 | 404, _)) => {}
                    other => eprintln!("e2b cleanup: DELETE {id}: {other:?}"),
                }
            }
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        kill_leftovers(&self.root.path().join("data/runtime/sandboxes"));
    }

    fn ids_blocking(&self) -> Vec<String> {
        let Some((200, body)) = raw_http(self.port, "GET", "/v1/sandboxes?limit=1000") else {
            return Vec::new();
        };
        serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["sandboxes"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|s| s["id"].as_str().map(str::to_string))
            .collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- sandboxd stderr (last lines) ---\n{}\n---",
                self.log_tail(80)
            );
        }
        self.teardown();
    }
}

/// A client with a 60 s timeout, sending `X-API-KEY: key` when given.
pub fn client(key: Option<&str>) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = key {
        headers.insert("x-api-key", key.parse().expect("header value"));
    }
    reqwest::Client::builder()
        .default_headers(headers)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("http client")
}

/// One HTTP/1.0 request with the API key over a plain socket, for `Drop` (no async runtime there).
fn raw_http(port: u16, method: &str, path: &str) -> Option<(u16, Vec<u8>)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nX-API-KEY: {API_KEY}\r\n\r\n"
    )
    .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let split = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&response[..split]);
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, response[split + 4..].to_vec()))
}

/// Every cgroup directory of sandbox `id` (v2, and each v1 hierarchy).
pub fn cgroup_dirs(id: &str) -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut dirs = vec![root.join(CGROUP_PARENT).join(id)];
    if let Ok(hierarchies) = std::fs::read_dir(root) {
        dirs.extend(
            hierarchies
                .flatten()
                .map(|h| h.path().join(CGROUP_PARENT).join(id)),
        );
    }
    dirs.into_iter().filter(|d| d.is_dir()).collect()
}

/// Whether the kernel reports sandbox `id`'s cgroup frozen (v1 `freezer.state`, v2 `cgroup.events`).
pub fn cgroup_frozen(id: &str) -> Option<bool> {
    for dir in cgroup_dirs(id) {
        if let Ok(state) = std::fs::read_to_string(dir.join("freezer.state")) {
            return Some(state.trim() == "FROZEN");
        }
        if let Ok(events) = std::fs::read_to_string(dir.join("cgroup.events")) {
            return Some(events.lines().any(|l| l.trim() == "frozen 1"));
        }
    }
    None
}

/// Thaws, kills and un-cgroups every sandbox init recorded under `sandboxes_dir` that is still the very
/// process recorded.
fn kill_leftovers(sandboxes_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(sandboxes_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let id = entry.file_name().to_string_lossy().into_owned();
        for dir in cgroup_dirs(&id) {
            let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
            let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
        }
        let state = std::fs::read(entry.path().join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
        if let Some(state) = state {
            let pid = state["pid"].as_i64().map(|p| p as i32);
            let start = state["start_time"].as_u64();
            if let (Some(pid), Some(start)) = (pid, start) {
                if start_time(pid) == Some(start) {
                    eprintln!("e2b cleanup: killing leftover sandbox {id} (init {pid})");
                    // SAFETY: kill of a pid whose start time matches the sandbox init we recorded.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    let deadline = Instant::now() + Duration::from_secs(5);
                    while start_time(pid) == Some(start) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
        for dir in cgroup_dirs(&id) {
            let deadline = Instant::now() + Duration::from_secs(2);
            while std::fs::remove_dir(&dir).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Start time (field 22 of `/proc/<pid>/stat`) of a live, non-zombie process.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    if matches!(fields.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    fields.get(19)?.parse().ok()
}
