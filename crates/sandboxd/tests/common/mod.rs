//! Fixture for end-to-end tests of the real `sandboxd` binary: [`Daemon`] starts `sandboxd serve` on a
//! fresh data dir and a free port, and tears everything down again even when the test panics.
//!
//! Isolation. A daemon names its host interfaces after its own id (`sbh<id><n>`) and skips slots the
//! host holds for others, but slots of one block are still the cheapest way to keep tests apart. Each
//! [`Daemon`] holds a block of slots from [`daemon_slots`] (an `flock`ed range no other test process
//! uses) and passes it as `--net-slot-base`/`--net-slots` (unless [`Setup::slots`] names others); its sandboxes get cgroups under
//! [`CGROUP_PARENT`] (or the [`Setup::cgroup_parent`] it was started with). Tests still run one at a
//! time ([`e2e`] and [`run_serially`] hold a process-wide lock): two cores, and a start-up time budget
//! that must not measure contention.
//!
//! Cleanup ([`Daemon`]'s `Drop`): `DELETE` every sandbox the daemon lists, kill the daemon, then — for
//! whatever is left, e.g. when the daemon was down — thaw and kill each sandbox init recorded in
//! `<data-dir>/runtime/sandboxes/*/` (its `init` record, read as the runtime reads it, after checking
//! its start time, so a recycled pid is never hit) and remove its cgroup directories. The veth pair of a killed sandbox goes with its namespace.

#![allow(dead_code)] // each test uses a different part

mod checks;
mod cleanup;
mod crash;
mod seed;
mod setup;
mod store;
mod volumes;

pub use checks::*;
use cleanup::raw_http;
#[allow(unused_imports)] // each test binary uses a different part
pub use cleanup::{cgroup_dirs_of, cgroup_dirs_under, kill_leftover_sandboxes, recorded_init};
#[allow(unused_imports)] // each test binary uses a different part
pub use crash::*;
#[allow(unused_imports)] // each test binary uses a different part
pub use seed::code_interpreter_seed;
pub use setup::{Auth, Setup};
#[allow(unused_imports)] // each test binary uses a different part
pub use store::*;
#[allow(unused_imports)] // each test binary uses a different part
pub use volumes::*;

use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sandboxd_test_support::{
    agent_binary, cargo_bin, daemon_slots, listen_port, require_root, DaemonSlots, ListenPort,
};
use serde_json::Value;
use std::collections::BTreeSet;

/// Cgroup parent of the e2e daemons' sandboxes (apart from the runtime tests' and a real daemon's).
pub const CGROUP_PARENT: &str = "sandboxd-e2e";
/// The token [`Daemon::start`] gives the daemon.
pub const TOKEN: &str = "e2e-token-4f7d0c";
/// Longest a whole e2e test may run before it is failed (and cleaned up). Generous: in the emulated
/// Debian 12 VM, beside the host's suite, the backup test has taken 102 s.
const TEST_TIMEOUT: Duration = Duration::from_secs(150);
/// Longest a daemon may take to answer `/health` outside the start-up-time test. Generous: in the
/// emulated Debian 12 VM a daemon's start has taken 18 s on a quiet host.
const READY_TIMEOUT: Duration = Duration::from_secs(45);

/// Runs one e2e test, serially with the others, on a current-thread runtime, failed (and cleaned up)
/// after [`TEST_TIMEOUT`].
pub fn e2e<F, Fut>(test: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    run_serially(
        &mut tokio::runtime::Builder::new_current_thread(),
        Some(TEST_TIMEOUT),
        test,
    );
}

/// Runs one test serially with the other tests of its binary (those run by [`e2e`] too), on a runtime
/// from `runtime`, failed (and cleaned up) after `timeout` if one is given. Skipped only when root tests
/// are explicitly skipped; without root it panics.
pub fn run_serially<F, Fut>(
    runtime: &mut tokio::runtime::Builder,
    timeout: Option<Duration>,
    test: F,
) where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    static SERIAL: Mutex<()> = Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !require_root() {
        return;
    }
    let runtime = runtime.enable_all().build().expect("tokio runtime");
    runtime.block_on(async {
        match timeout {
            Some(limit) => tokio::time::timeout(limit, test())
                .await
                .unwrap_or_else(|_| panic!("e2e test ran longer than {limit:?}")),
            None => test().await,
        }
    });
}

/// The `sbx` CLI, built on first use.
pub fn sbx_binary() -> PathBuf {
    cargo_bin("sandboxd-sbx", "sbx")
}

/// A running `sandboxd serve`.
pub struct Daemon {
    /// Holds `data/` and the daemon's logs.
    root: tempfile::TempDir,
    /// The listen port, held until the daemon is dropped so every restart finds it free.
    listen: ListenPort,
    /// Token, auth, cgroup parent, flags and environment of every (re)start.
    setup: Setup,
    token: String,
    child: Option<Child>,
    /// How many times the daemon was started (names the log files).
    starts: u32,
    http: reqwest::Client,
    /// This daemon's network slots, held until it is dropped (declared last: released after cleanup).
    slots: DaemonSlots,
}

impl Daemon {
    /// Starts a daemon on a fresh data dir with the token [`TOKEN`] and waits until it is ready.
    pub async fn start() -> Self {
        Self::start_setup(Setup::default()).await
    }

    /// Like [`Daemon::start`], with extra `serve` flags and environment (e.g. `FAILPOINTS`), which also
    /// apply to every [`Daemon::restart`].
    pub async fn start_with(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut setup = Setup {
            args: args.iter().map(|a| a.to_string()).collect(),
            ..Setup::default()
        };
        for (key, value) in env {
            set_env_in(&mut setup.env, key, value);
        }
        Self::start_setup(setup).await
    }

    /// Starts a daemon on a fresh data dir as `setup` says and waits until it is ready (when `setup`
    /// gives no token, until it has saved the one it generated, which [`Daemon::token`] then is).
    pub async fn start_setup(setup: Setup) -> Self {
        Self::start_prepared(setup, |_, _| {}).await
    }

    /// Like [`Daemon::start_setup`], calling `prepare` with the data dir (not yet created) and the
    /// setup (which it may still change) before the daemon first starts, e.g. to mount a filesystem
    /// where the daemon will keep its layers and to add the flags that depend on it.
    pub async fn start_prepared(setup: Setup, prepare: impl FnOnce(&Path, &mut Setup)) -> Self {
        let mut daemon = Self::unstarted(setup);
        prepare(&daemon.data_dir(), &mut daemon.setup);
        daemon.spawn();
        daemon.wait_ready(daemon.setup.ready_timeout).await;
        if daemon.setup.token.is_none() {
            daemon.token = daemon.saved_token();
            daemon.http = daemon.client_as(Some(&daemon.token));
        }
        daemon
    }

    /// Sets an environment variable for the daemon's next (re)start, replacing an earlier value.
    pub fn set_env(&mut self, key: &str, value: &str) {
        set_env_in(&mut self.setup.env, key, value);
    }

    /// Starts a daemon on a fresh data dir without `SB_PAT_TOKEN`, so it makes up its own token.
    pub async fn start_with_generated_token() -> Self {
        Self::start_setup(Setup {
            token: None,
            ..Setup::default()
        })
        .await
    }

    /// Spawns a daemon on a fresh data dir *without* waiting for it (see [`Daemon::wait_ready`]).
    pub fn spawn_fresh(given_token: Option<String>) -> Self {
        let mut daemon = Self::unstarted(Setup {
            token: given_token,
            ..Setup::default()
        });
        daemon.spawn();
        daemon
    }

    fn unstarted(setup: Setup) -> Self {
        let root = tempfile::Builder::new()
            .prefix(&format!("{}-", setup.cgroup_parent))
            .tempdir()
            .expect("tempdir");
        let token = setup.token.clone().unwrap_or_default();
        Daemon {
            root,
            listen: listen_port(setup.listen_ip),
            http: setup.auth.client(Some(&token), setup.http_timeout),
            setup,
            token,
            child: None,
            starts: 0,
            slots: daemon_slots(),
        }
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "the daemon is already running");
        self.starts += 1;
        let log = |ext: &str| {
            std::fs::File::create(self.log_path(self.starts, ext)).expect("create daemon log")
        };
        let binary = self.setup.binary.clone();
        let mut cmd = Command::new(
            binary
                .clone()
                .unwrap_or_else(|| env!("CARGO_BIN_EXE_sandboxd").into()),
        );
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--listen")
            .arg(format!("{}:{}", self.setup.listen_ip, self.listen.port))
            .arg("--cgroup-parent")
            .arg(self.setup.cgroup_parent)
            .arg("--net-slot-base")
            .arg(
                self.setup
                    .slots
                    .map_or(self.slots.base, |s| s.0)
                    .to_string(),
            )
            .arg("--net-slots")
            .arg(
                self.setup
                    .slots
                    .map_or(self.slots.count, |s| s.1)
                    .to_string(),
            )
            .stdin(Stdio::null())
            .stdout(log("out"))
            .stderr(log("err"));
        // Only the flags above configure it, whatever the environment of the test run holds.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SB_") {
                cmd.env_remove(key);
            }
        }
        if binary.is_none() {
            cmd.arg("--agent-bin").arg(agent_binary());
        }
        cmd.env("SB_LOG", "info");
        if let Some(token) = &self.setup.token {
            cmd.env("SB_PAT_TOKEN", token);
        }
        cmd.args(&self.setup.args)
            .envs(self.setup.env.iter().cloned());
        self.child = Some(cmd.spawn().expect("spawn sandboxd"));
    }

    /// Polls `GET /health` until it answers 200; returns how long that took. Panics after `within`, or
    /// when the daemon exits first.
    pub async fn wait_ready(&mut self, within: Duration) -> Duration {
        let started = Instant::now();
        let plain = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .expect("http client");
        loop {
            if let Ok(resp) = plain.get(self.endpoint("/health")).send().await {
                if resp.status() == 200 {
                    return started.elapsed();
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "sandboxd exited with {status} before it was ready:\n{}",
                    self.log_tail(60)
                );
            }
            assert!(
                started.elapsed() < within,
                "sandboxd not ready within {within:?}:\n{}",
                self.log_tail(60)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// `http://ADDR:PORT` of `--listen`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// The URL of `path` (which starts with `/`).
    pub fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.url())
    }

    /// The listen port.
    pub fn port(&self) -> u16 {
        self.listen.port
    }

    /// The listen address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((self.setup.listen_ip, self.listen.port))
    }

    /// The admin token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The WebSocket request of a terminal of sandbox `id` with `query` (`cmd=sleep&cmd=9`),
    /// sending the admin token.
    pub fn terminal_request(
        &self,
        id: &str,
        query: &str,
    ) -> tokio_tungstenite::tungstenite::handshake::client::Request {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let url = format!("ws://{}/v1/sandboxes/{id}/terminal?{query}", self.addr());
        let mut req = url.into_client_request().expect("a terminal's URL");
        let bearer = format!("Bearer {}", self.token)
            .parse()
            .expect("a header value");
        req.headers_mut().insert("authorization", bearer);
        req
    }

    /// A client sending the admin token (as [`Setup::auth`] says).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// A client without credentials, with [`Daemon::http`]'s timeout.
    pub fn http_plain(&self) -> reqwest::Client {
        self.client_as(None)
    }

    /// A client sending `token` (if any) the way [`Daemon::http`] sends the admin token.
    pub fn client_as(&self, token: Option<&str>) -> reqwest::Client {
        self.setup.auth.client(token, self.setup.http_timeout)
    }

    /// The data dir.
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// The runtime directory of sandbox `id`.
    pub fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.data_dir().join("runtime/sandboxes").join(id)
    }

    /// The writable layer of sandbox `id` on the host.
    pub fn upper_dir(&self, id: &str) -> PathBuf {
        self.sandbox_dir(id).join("upper")
    }

    /// Every cgroup directory of sandbox `id` that still exists (under this daemon's cgroup parent).
    pub fn cgroup_dirs(&self, id: &str) -> Vec<PathBuf> {
        cgroup_dirs_under(self.setup.cgroup_parent, id)
    }

    /// What of deleted sandbox `id` is still on the host: its runtime directory, writable layer and
    /// cgroups.
    pub fn remains(&self, id: &str) -> Vec<PathBuf> {
        let layer = self.data_dir().join("runtime/layers").join(id);
        [self.sandbox_dir(id), layer]
            .into_iter()
            .filter(|p| p.exists())
            .chain(self.cgroup_dirs(id))
            .collect()
    }

    /// Waits for a deleted sandbox's teardown, which finishes behind the delete's answer: panics when
    /// anything of it is still on the host after 10 s.
    pub async fn wait_torn_down(&self, id: &str) {
        wait_gone(id, Duration::from_secs(10), || self.remains(id)).await;
    }

    /// The host end of slot `slot`'s veth pair: `sbh<daemon id><slot>`.
    pub fn host_ifname(&self, slot: u32) -> String {
        let id = std::fs::read_to_string(self.data_dir().join("daemon-id")).unwrap_or_default();
        format!("sbh{}{slot}", id.trim())
    }

    /// Whether the kernel reports sandbox `id`'s cgroup frozen (v1 `freezer.state`, v2 `cgroup.events`);
    /// `None` when it has no cgroup that says.
    pub fn cgroup_frozen(&self, id: &str) -> Option<bool> {
        for dir in self.cgroup_dirs(id) {
            if let Ok(state) = std::fs::read_to_string(dir.join("freezer.state")) {
                return Some(state.trim() == "FROZEN");
            }
            if let Ok(events) = std::fs::read_to_string(dir.join("cgroup.events")) {
                return Some(events.lines().any(|l| l.trim() == "frozen 1"));
            }
        }
        None
    }

    /// The network slots this daemon may use: `base..base + count`.
    pub fn slot_range(&self) -> std::ops::Range<u32> {
        self.slots.base..self.slots.base + self.slots.count
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("daemon running").id()
    }

    pub fn log_path(&self, start: u32, ext: &str) -> PathBuf {
        self.root.path().join(format!("daemon-{start}.{ext}"))
    }

    /// What the daemon's `start`-th run (1-based) printed on stdout.
    pub fn stdout_of_start(&self, start: u32) -> String {
        std::fs::read_to_string(self.log_path(start, "out")).unwrap_or_default()
    }

    /// The last `lines` lines of the current run's stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.log_path(self.starts, "err")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The token the daemon saved in `<data-dir>/admin-token`.
    pub fn saved_token(&self) -> String {
        std::fs::read_to_string(self.data_dir().join("admin-token"))
            .expect("read admin-token")
            .trim()
            .to_string()
    }

    /// Kills the daemon with SIGKILL (its sandboxes keep running) and reaps it.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("daemon running");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stops the daemon with SIGTERM, as a service manager does, and reaps it; its exit status.
    /// Panics when it has not exited within 30 s.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("daemon running");
        // SAFETY: kill(2) on the pid of a child this test has not reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().expect("wait for the daemon") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("the daemon did not exit within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the daemon again on the same data dir and port, and waits until it is ready; returns how
    /// long that took.
    pub async fn restart(&mut self) -> Duration {
        if self.child.is_some() {
            self.kill9();
        }
        self.spawn();
        self.wait_ready(self.setup.ready_timeout).await
    }

    /// Runs `sbx ARGS` against this daemon and waits for it.
    pub fn sbx(&self, args: &[&str]) -> Output {
        self.sbx_command(args).output().expect("run sbx")
    }

    /// An `sbx ARGS` command aimed at this daemon (to spawn it yourself).
    pub fn sbx_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(sbx_binary());
        cmd.args(args)
            .env("SB_API_URL", self.url())
            .env("SB_PAT_TOKEN", &self.token)
            .stdin(Stdio::null());
        cmd
    }

    /// Mints an API key of `scope` (`admin` or `user`) with the admin token; returns its secret and
    /// its id.
    pub async fn mint_key(&self, name: &str, scope: &str) -> (String, String) {
        let created: Value = self
            .http
            .post(self.endpoint("/v1/api-keys"))
            .json(&serde_json::json!({"name": name, "scope": scope}))
            .send()
            .await
            .expect("create a key")
            .json()
            .await
            .expect("CreatedApiKey");
        let key = created["key"].as_str().expect("key").to_string();
        (key, created["id"].as_str().expect("id").to_string())
    }

    /// `GET path` with the token; panics unless the answer is JSON. Returns the body.
    pub async fn get_json(&self, path: &str) -> Value {
        self.http
            .get(self.endpoint(path))
            .send()
            .await
            .expect("GET request")
            .json()
            .await
            .expect("a JSON answer")
    }

    /// `GET path` with the token; its body as text, whatever its status.
    pub async fn get_text(&self, path: &str) -> String {
        let resp = self.http.get(self.endpoint(path)).send().await;
        resp.expect("GET request")
            .text()
            .await
            .expect("a text body")
    }

    /// `POST path` with the token and a JSON `body`; the answer, whatever its status.
    pub async fn post_json(&self, path: &str, body: &Value) -> reqwest::Response {
        self.http
            .post(self.endpoint(path))
            .json(body)
            .send()
            .await
            .expect("POST request")
    }

    /// `PUT path` with the token and a JSON `body`; the answer, whatever its status.
    pub async fn put_json(&self, path: &str, body: &Value) -> reqwest::Response {
        self.http
            .put(self.endpoint(path))
            .json(body)
            .send()
            .await
            .expect("PUT request")
    }

    /// `DELETE path` with the token; the answer, whatever its status.
    pub async fn delete(&self, path: &str) -> reqwest::Response {
        self.http
            .delete(self.endpoint(path))
            .send()
            .await
            .expect("DELETE request")
    }

    /// `POST /v1/sandboxes` with `body`; panics unless it answers 201. Returns the sandbox.
    pub async fn create(&self, body: Value) -> Value {
        let resp = self.post_json("/v1/sandboxes", &body).await;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        assert_eq!(status, 201, "create {body}: {text}");
        serde_json::from_str(&text).expect("create answers a Sandbox")
    }

    /// Creates a sandbox with default settings; returns its id.
    pub async fn create_id(&self) -> String {
        id_of(&self.create(serde_json::json!({})).await)
    }

    /// Runs `cmd` to completion through `POST /exec`; panics unless the call itself succeeds.
    pub async fn exec(&self, id: &str, cmd: &[&str]) -> ExecResult {
        let (status, text) = self.exec_raw(id, &serde_json::json!({ "cmd": cmd })).await;
        assert_eq!(status, 200, "exec {cmd:?} in {id}: {text}");
        let v: Value = serde_json::from_str(&text).expect("exec answers an ExecResult");
        ExecResult {
            exit_code: v["exitCode"].as_i64().expect("exitCode") as i32,
            stdout: v["stdout"].as_str().unwrap_or_default().to_string(),
            stderr: v["stderr"].as_str().unwrap_or_default().to_string(),
        }
    }

    /// `POST /v1/sandboxes/{id}/exec` with `body`, whatever it answers: (status, body text).
    pub async fn exec_raw(&self, id: &str, body: &Value) -> (u16, String) {
        let resp = self
            .http
            .post(self.endpoint(&format!("/v1/sandboxes/{id}/exec")))
            .json(body)
            .send()
            .await
            .expect("exec request");
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap_or_default())
    }

    /// Writes `data` to `path` in sandbox `id` (`PUT /files`); panics unless it answers 204.
    pub async fn put_file(&self, id: &str, path: &str, data: Vec<u8>) {
        let resp = self
            .http
            .put(self.endpoint(&format!("/v1/sandboxes/{id}/files")))
            .query(&[("path", path)])
            .body(data)
            .send()
            .await
            .expect("upload request");
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        assert_eq!(status, 204, "upload {path} to {id}: {text}");
    }

    /// Reads `path` from sandbox `id` (`GET /files`); panics unless it answers 200.
    pub async fn get_file(&self, id: &str, path: &str) -> Vec<u8> {
        let resp = self
            .http
            .get(self.endpoint(&format!("/v1/sandboxes/{id}/files")))
            .query(&[("path", path)])
            .send()
            .await
            .expect("download request");
        let status = resp.status();
        let body = resp.bytes().await.expect("download body").to_vec();
        assert_eq!(
            status,
            200,
            "download {path} from {id}: {}",
            String::from_utf8_lossy(&body)
        );
        body
    }

    /// Every sandbox the daemon lists (all pages).
    pub async fn list_all(&self) -> Vec<Value> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut req = self
                .http
                .get(self.endpoint("/v1/sandboxes"))
                .query(&[("limit", "1000")]);
            if let Some(c) = &cursor {
                req = req.query(&[("cursor", c)]);
            }
            let resp = req.send().await.expect("list request");
            assert_eq!(resp.status(), 200, "list sandboxes");
            let page: Value = resp.json().await.expect("list answers a SandboxList");
            out.extend(page["sandboxes"].as_array().expect("sandboxes").clone());
            match page["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => return out,
            }
        }
    }

    /// Best effort, blocking: destroys every sandbox through the API, then kills the daemon, then
    /// whatever sandbox processes and cgroups are left.
    fn teardown(&mut self) {
        let alive = self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
        if alive {
            for id in self.listed_ids_blocking() {
                let path = format!("/v1/sandboxes/{id}");
                match self.raw_http("DELETE", &path) {
                    Some((204 | 404, _)) | None => {}
                    Some((status, body)) => eprintln!(
                        "e2e cleanup: DELETE {id} answered {status}: {}",
                        String::from_utf8_lossy(&body)
                    ),
                }
            }
            // Teardowns finish behind the deletes' answers.
            let sandboxes = self.data_dir().join("runtime/sandboxes");
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::fs::read_dir(&sandboxes).is_ok_and(|mut d| d.next().is_some())
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        kill_leftover_sandboxes(
            &self.data_dir().join("runtime/sandboxes"),
            self.setup.cgroup_parent,
        );
        // The runtime leaves its disk pool mounted (sandboxes outlive a daemon); a test's data dir
        // is thrown away, so its pool goes with it.
        let _ = sandboxd_runtime::quota::release_pool(&self.data_dir().join("runtime"));
    }

    /// [`raw_http`] with the admin token, sent as [`Setup::auth`] says.
    fn raw_http(&self, method: &str, path: &str) -> Option<(u16, Vec<u8>)> {
        let (name, value) = self.setup.auth.header(&self.token);
        raw_http(self.listen.port, method, path, &format!("{name}: {value}"))
    }

    fn listed_ids_blocking(&self) -> Vec<String> {
        let Some((200, body)) = self.raw_http("GET", "/v1/sandboxes?limit=1000") else {
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
                "--- sandboxd stderr (run {}, last lines) ---\n{}\n---",
                self.starts,
                self.log_tail(80)
            );
        }
        self.teardown();
    }
}

/// Result of `POST /exec`.
#[derive(Debug)]
pub struct ExecResult {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// A client sending `token` as the bearer token.
pub fn authed_client(token: &str) -> reqwest::Client {
    Auth::Bearer.client(Some(token), Setup::default().http_timeout)
}

/// Sets `key` in `env`, replacing an earlier value.
fn set_env_in(env: &mut Vec<(String, String)>, key: &str, value: &str) {
    env.retain(|(k, _)| k != key);
    env.push((key.to_string(), value.to_string()));
}

/// Polls `found` until it finds something, and returns that; panics with `what` (and the daemon's
/// log tail, when it says so) once `within` has passed.
pub async fn eventually<T, F, Fut>(what: impl Fn() -> String, within: Duration, mut found: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = found().await {
            return found;
        }
        assert!(Instant::now() < deadline, "{}", what());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `left` (what of `what` is still on the host) until it is empty; panics saying what was
/// left once `within` has passed.
pub async fn wait_gone<T: std::fmt::Debug>(
    what: &str,
    within: Duration,
    left: impl Fn() -> Vec<T>,
) {
    let last = std::cell::RefCell::new(String::new());
    let said = || format!("{what} outlived its delete: {}", last.borrow());
    eventually(said, within, || {
        let now = left();
        *last.borrow_mut() = format!("{now:?}");
        std::future::ready(now.is_empty().then_some(()))
    })
    .await
}
