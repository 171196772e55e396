//! A real OCI registry and real OCI images for tests that pull images.
//!
//! - [`TestRegistry`]: Debian's `docker-registry` (distribution 2.8) serving plain HTTP on
//!   `127.0.0.1:<free port>`, its storage, configuration and log in a fresh temp dir, optionally behind
//!   htpasswd basic auth. [`TestRegistry::start`] returns only once `GET /v2/` answers; dropping the value
//!   kills and reaps the process (and prints the registry's log when the test is panicking).
//! - [`ImageBuilder`] / [`TestImage`]: an OCI image layout made with `umoci`, by default from
//!   `busybox-static` (a tiny root with a shell), one layer per [`ImageBuilder::layer`] call.
//!   [`ImageBuilder::build_index`] makes a multi-platform image (an OCI image index).
//!   [`TestRegistry::push`] copies it into the registry with `skopeo`; [`TestImage::oci_archive`] and
//!   [`TestImage::docker_archive`] make the two archive kinds an import test reads.
//!
//! What a test can rely on:
//!
//! - **Counting blob fetches.** [`TestRegistry::blob_gets`] counts, per digest, the `GET
//!   /v2/<repo>/blobs/<digest>` requests the registry *served* (status 200, or 206 for a ranged GET:
//!   each counts once). `HEAD`s are not counted (they transfer no blob), nor are refused or failed GETs
//!   (401, 404, ...). Redirects cannot occur: the filesystem storage driver serves blobs itself. Counts
//!   are keyed by digest alone, summed over repositories. Pushing does not GET blobs (skopeo `HEAD`s
//!   them), so right after [`TestRegistry::push`] the map is empty; `skopeo inspect` without `--raw`
//!   GETs the config blob, and counts ([`TestRegistry::manifest_digest`] does not: it `HEAD`s the
//!   manifest). The counts come from the registry's access log, which each request's own goroutine
//!   writes as the request ends; so every read of the log first sends a barrier request of its own and
//!   waits (with a deadline) until the log shows it, and a request answered before the read is counted.
//! - **Failures are loud.** A missing tool panics with the Debian package to install; a failing command
//!   panics with the command line, its exit status and its stderr; a registry that does not come up
//!   panics with its log. Waits poll against deadlines; there are no fixed sleeps.
//! - **Isolation.** Every registry and image has its own temp dir and port, so tests run concurrently.
//!   Tests skip (rather than fail) on a machine without the tools through [`require_tools`].
//!
//! Assumes the tools of Debian 12's `docker-registry`, `skopeo`, `umoci` and `busybox-static` packages
//! (and `htpasswd`, from `apache2-utils`, for [`TestRegistry::start_with_basic_auth`]): `.ci/run` and
//! `scripts/test` install them.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The tools a test pushing images to a [`TestRegistry`] needs (each one's Debian package in
/// [`package_of`]).
pub const REGISTRY_TOOLS: &[&str] = &["docker-registry", "skopeo", "umoci", "busybox"];

/// How long the registry may take to answer `GET /v2/` after it is started.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// How long the registry may take to log a request it has answered.
const LOG_DEADLINE: Duration = Duration::from_secs(10);
/// How often a wait checks again.
const POLL: Duration = Duration::from_millis(10);
/// Attempts at starting the registry on a free port (another process may take the port first).
const START_ATTEMPTS: usize = 10;

/// The query of the fixture's own requests to `/v2/`, which mark how far the log has got.
const BARRIER: &str = "sandboxd-log-barrier=";
/// Where busybox-static puts its binary.
const BUSYBOX: &str = "/bin/busybox";

/// The Debian package that provides `tool`.
pub fn package_of(tool: &str) -> &str {
    match tool {
        "docker-registry" => "docker-registry",
        "busybox" => "busybox-static",
        "htpasswd" => "apache2-utils",
        other => other,
    }
}

/// `tool`'s path: `/bin/busybox` for `busybox` (when it is statically linked, as busybox-static's is),
/// else the first match on `PATH`.
fn find_tool(tool: &str) -> Option<PathBuf> {
    if tool == "busybox" {
        let path = PathBuf::from(BUSYBOX);
        return is_static_elf(&path).then_some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
}

/// Whether `path` is an ELF executable without a program interpreter (statically linked).
fn is_static_elf(path: &Path) -> bool {
    let Ok(elf) = std::fs::read(path) else {
        return false;
    };
    // 64-bit little-endian ELF only: the header fields below are at their ELF64 offsets.
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return false;
    }
    let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[32..40].try_into().expect("8 bytes")) as usize;
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    const PT_INTERP: u32 = 3;
    (0..phnum).all(|i| {
        let at = phoff + i * phentsize;
        elf.get(at..at + 4)
            .is_some_and(|t| u32::from_le_bytes(t.try_into().expect("4 bytes")) != PT_INTERP)
    })
}

/// `tool`'s path, or a panic naming the package to install.
fn tool(tool: &str) -> PathBuf {
    find_tool(tool).unwrap_or_else(|| {
        panic!(
            "`{tool}` is not installed{}: install it with `apt-get install -y {}`",
            if tool == "busybox" {
                " (a statically linked /bin/busybox)"
            } else {
                ""
            },
            package_of(tool)
        )
    })
}

/// True when every one of `tools` is installed; otherwise prints which are missing (and their
/// packages) as a skip and returns false, so a machine without them is not red:
/// `if !require_tools(REGISTRY_TOOLS) { return; }`.
pub fn require_tools(tools: &[&str]) -> bool {
    let missing: Vec<String> = tools
        .iter()
        .filter(|t| find_tool(t).is_none())
        .map(|t| format!("{t} (package {})", package_of(t)))
        .collect();
    if missing.is_empty() {
        return true;
    }
    eprintln!("SKIPPED: needs {}", missing.join(", "));
    false
}

/// Runs `cmd` and returns its stdout; panics with the command line, its status and stderr when it
/// cannot be run or fails.
fn run(cmd: &mut Command) -> Vec<u8> {
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    if !output.status.success() {
        panic!(
            "{cmd:?} failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output.stdout
}

/// A `skopeo` command that needs no trust policy file (`/etc/containers/policy.json`) and shares no
/// cache with another run ([`private_blob_cache`]).
pub fn skopeo() -> Command {
    let mut cmd = Command::new(tool("skopeo"));
    cmd.arg("--insecure-policy");
    private_blob_cache(&mut cmd);
    cmd
}

/// Where skopeo run as root keeps its cache of blob digests: one database file for every run.
const BLOB_CACHE_DIR: &str = "/var/lib/containers/cache";

/// Gives `cmd`, a skopeo run as root, an empty cache of its own: a tmpfs over [`BLOB_CACHE_DIR`] in
/// a mount namespace of its own. Runs sharing that database were seen to read it torn (skopeo died
/// of a panic in it, in the Debian VM's suite), and the cache saves the tests nothing: their
/// registries are fresh. Best effort: not root, or where mounts are refused, the run shares the
/// cache as before.
fn private_blob_cache(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || std::fs::create_dir_all(BLOB_CACHE_DIR).is_err() {
        return;
    }
    let dir = std::ffi::CString::new(BLOB_CACHE_DIR).expect("no NUL in a constant path");
    // SAFETY: the child makes raw system calls only, on memory prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let none = std::ptr::null();
            let private = libc::MS_REC | libc::MS_PRIVATE;
            let tmpfs = c"tmpfs".as_ptr();
            // Each step only if the one before it took: the tmpfs stays in this namespace.
            let _ = libc::unshare(libc::CLONE_NEWNS) == 0
                && libc::mount(none, c"/".as_ptr(), none, private, std::ptr::null()) == 0
                && libc::mount(tmpfs, dir.as_ptr(), tmpfs, 0, std::ptr::null()) == 0;
            Ok(())
        });
    }
}

/// A fresh temp dir whose name starts with `prefix`.
fn temp_dir(prefix: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .unwrap_or_else(|e| panic!("creating a temp dir for {prefix}: {e}"))
}

/// A docker-registry process on `127.0.0.1:<free port>`, its storage in a temp dir, killed on drop.
pub struct TestRegistry {
    child: Child,
    addr: SocketAddr,
    credentials: Option<(String, String)>,
    log: PathBuf,
    barriers: AtomicU32,
    /// Configuration, storage, log and htpasswd file; removed after the process is reaped.
    _dir: TempDir,
}

impl TestRegistry {
    /// Starts a registry that serves anyone; returns once `GET /v2/` answers 200.
    pub fn start() -> TestRegistry {
        Self::start_inner(None)
    }

    /// Starts a registry that asks for HTTP basic auth (its htpasswd realm, with `user` the only
    /// account); returns once `GET /v2/` answers (401, without credentials). The bcrypt htpasswd file is
    /// made with `htpasswd -Bbn` (package apache2-utils), which keeps a bcrypt crate out of every test
    /// binary linking this crate. [`push`](Self::push), [`request`](Self::request) (with
    /// [`credentials`](Self::credentials)) and the inspections use the credentials.
    pub fn start_with_basic_auth(user: &str, password: &str) -> TestRegistry {
        Self::start_inner(Some((user.to_string(), password.to_string())))
    }

    fn start_inner(credentials: Option<(String, String)>) -> TestRegistry {
        let bin = tool("docker-registry");
        let dir = temp_dir("sandboxd-test-registry-");
        let log = dir.path().join("registry.log");
        let auth = match &credentials {
            Some((user, password)) => {
                let entry = run(Command::new(tool("htpasswd")).args(["-Bbn", user, password]));
                let htpasswd = dir.path().join("htpasswd");
                std::fs::write(&htpasswd, entry).expect("write the registry's htpasswd file");
                format!(
                    "auth:\n  htpasswd:\n    realm: sandboxd-test\n    path: {}\n",
                    htpasswd.display()
                )
            }
            None => String::new(),
        };
        for attempt in 1..=START_ATTEMPTS {
            let addr = free_port();
            let config = dir.path().join("config.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n{auth}",
                    dir.path().join("storage").display()
                ),
            )
            .expect("write the registry's configuration");
            // stdout carries the access log, stderr the registry's own log: one file, appended to.
            let open_log = || {
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .expect("open the registry's log")
            };
            let mut cmd = Command::new(&bin);
            cmd.arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(open_log())
                .stderr(open_log());
            // The registry reads REGISTRY_* variables as configuration overrides.
            for (key, _) in std::env::vars_os() {
                if key.to_string_lossy().starts_with("REGISTRY_") {
                    cmd.env_remove(key);
                }
            }
            let mut child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
            match wait_ready(&mut child, addr, &log) {
                Ok(()) => {
                    return TestRegistry {
                        child,
                        addr,
                        credentials,
                        log,
                        barriers: AtomicU32::new(0),
                        _dir: dir,
                    }
                }
                Err(why) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let text = read_log(&log);
                    // Someone took the port between our probe and the registry's bind: try another.
                    if text.contains("address already in use") && attempt < START_ATTEMPTS {
                        continue;
                    }
                    panic!("docker-registry on {addr} did not come up ({why}); its log:\n{text}");
                }
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// The address the registry listens on (always on loopback).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The registry's process id (e.g. to `SIGSTOP` it and test a client against a stalled registry).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The image reference of `repo_tag` in this registry: `127.0.0.1:<port>/<repo_tag>`.
    pub fn image_ref(&self, repo_tag: &str) -> String {
        format!("{}/{repo_tag}", self.addr)
    }

    /// The account of a registry started with [`start_with_basic_auth`](Self::start_with_basic_auth).
    pub fn credentials(&self) -> Option<(&str, &str)> {
        self.credentials
            .as_ref()
            .map(|(user, password)| (user.as_str(), password.as_str()))
    }

    /// `--<flag>=user:password` when the registry asks for auth.
    fn creds_args(&self, flag: &str) -> Vec<String> {
        self.credentials()
            .map(|(user, password)| vec![format!("--{flag}={user}:{password}")])
            .unwrap_or_default()
    }

    /// Pushes `image` as `repo_tag` (e.g. `"tests/busybox:1"`) with `skopeo copy --all` (every platform
    /// of an image index); returns the pushed manifest's (or index's) digest (`sha256:...`). Blobs
    /// already in the registry are not uploaded again.
    pub fn push(&self, image: &TestImage, repo_tag: &str) -> String {
        let digest_file = image.scratch_path("push-digest");
        run(skopeo()
            .args(["copy", "--quiet", "--all", "--dest-tls-verify=false"])
            .args(self.creds_args("dest-creds"))
            .arg("--digestfile")
            .arg(&digest_file)
            .arg(image.oci_ref())
            .arg(format!("docker://{}", self.image_ref(repo_tag))));
        std::fs::read_to_string(&digest_file)
            .expect("read the digest skopeo wrote")
            .trim()
            .to_string()
    }

    /// The digest (`sha256:...`) of the manifest `repo_tag` names, from the registry's
    /// `Docker-Content-Digest` answer to a `HEAD` of it (no blob is fetched).
    pub fn manifest_digest(&self, repo_tag: &str) -> String {
        let (repo, reference) = split_repo_tag(repo_tag);
        let path = format!("/v2/{repo}/manifests/{reference}");
        let response = self.request("HEAD", &path, self.credentials());
        match (response.status, response.header("docker-content-digest")) {
            (200, Some(digest)) => digest.to_string(),
            (status, _) => panic!(
                "HEAD {path} answered {status} without a digest; the registry's log:\n{}",
                self.log_text()
            ),
        }
    }

    /// `skopeo inspect` of `repo_tag` with `args` added (e.g. `["--config"]` for the image's config,
    /// `["--raw"]` for its manifest), as text (JSON). Without `--raw`, skopeo GETs the config blob (which
    /// [`blob_gets`](Self::blob_gets) counts).
    pub fn inspect(&self, repo_tag: &str, args: &[&str]) -> String {
        let out = run(skopeo()
            .args(["inspect", "--tls-verify=false"])
            .args(self.creds_args("creds"))
            .args(args)
            .arg(format!("docker://{}", self.image_ref(repo_tag))));
        String::from_utf8(out).expect("skopeo inspect prints UTF-8")
    }

    /// One HTTP/1.1 request to the registry (`path` like `/v2/`), with basic auth when `basic_auth` is
    /// given; panics when the registry cannot be reached.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        basic_auth: Option<(&str, &str)>,
    ) -> HttpResponse {
        http_request(self.addr, method, path, basic_auth).unwrap_or_else(|e| {
            panic!(
                "{method} {}{path}: {e}; the registry's log:\n{}",
                self.url(),
                self.log_text()
            )
        })
    }

    /// How many times the registry served each blob by digest: successful (200, or 206 for a range)
    /// `GET /v2/<repo>/blobs/<digest>` requests, summed over repositories; HEADs and refused or failed
    /// GETs are not counted. Every request answered before this call is counted (see the module doc).
    pub fn blob_gets(&self) -> HashMap<String, usize> {
        let mut gets = HashMap::new();
        for request in self.requests() {
            if request.method != "GET" || !matches!(request.status, 200 | 206) {
                continue;
            }
            if let Some(digest) = blob_digest(&request.uri) {
                *gets.entry(digest.to_string()).or_insert(0) += 1;
            }
        }
        gets
    }

    /// Every request the registry has answered, in the order it logged them (the fixture's own
    /// barrier requests left out).
    pub fn requests(&self) -> Vec<LoggedRequest> {
        let n = self.barriers.fetch_add(1, Ordering::Relaxed);
        let barrier = format!("{BARRIER}{}-{n}", std::process::id());
        self.request("GET", &format!("/v2/?{barrier}"), self.credentials());
        let deadline = Instant::now() + LOG_DEADLINE;
        loop {
            let text = self.log_text();
            if text.contains(&barrier) {
                return text
                    .lines()
                    .filter_map(LoggedRequest::parse)
                    .filter(|r| !r.uri.contains(BARRIER))
                    .collect();
            }
            if Instant::now() > deadline {
                panic!("the registry did not log GET /v2/?{barrier} within {LOG_DEADLINE:?}; its log:\n{text}");
            }
            std::thread::sleep(POLL);
        }
    }

    /// The registry's log so far (its access log and its own messages).
    pub fn log_text(&self) -> String {
        read_log(&self.log)
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- log of the docker-registry on {} ---\n{}--- end of the registry's log ---",
                self.addr,
                self.log_text()
            );
        }
    }
}

/// Polls `GET /v2/` until the registry `child` answers it (200, or 401 behind auth) and its log at
/// `log` shows the request, so an answer from another process that took the port does not count;
/// `Err` says why it never will.
fn wait_ready(child: &mut Child, addr: SocketAddr, log: &Path) -> Result<(), String> {
    let probe = format!("/v2/?{BARRIER}ready-{}", std::process::id());
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        if let Some(status) = child.try_wait().expect("poll the registry process") {
            return Err(format!("it exited: {status}"));
        }
        if let Ok(response) = http_request(addr, "GET", &probe, None) {
            if matches!(response.status, 200 | 401) && read_log(log).contains(&probe) {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!("GET /v2/ did not answer within {START_DEADLINE:?}"));
        }
        std::thread::sleep(POLL);
    }
}

/// The text of the registry's log at `path` (a note in its place when it cannot be read).
fn read_log(path: &Path) -> String {
    std::fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()))
}

/// A loopback address with a port nobody listened on a moment ago (bound, then released).
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind 127.0.0.1:0 to find a free port")
}

/// `repo:tag` (or `repo@digest`) split into the repository and the reference; `latest` by default.
fn split_repo_tag(repo_tag: &str) -> (&str, &str) {
    if let Some((repo, digest)) = repo_tag.split_once('@') {
        return (repo, digest);
    }
    match repo_tag.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, tag),
        _ => (repo_tag, "latest"),
    }
}

/// The digest in a blob URI `/v2/<repo>/blobs/<digest>[?query]` (not an upload's URI).
fn blob_digest(uri: &str) -> Option<&str> {
    let path = uri.split('?').next()?;
    let (repo, digest) = path.strip_prefix("/v2/")?.rsplit_once("/blobs/")?;
    (!repo.is_empty() && !digest.contains('/') && digest.contains(':')).then_some(digest)
}

/// One line of the registry's access log (Apache combined format).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedRequest {
    /// `GET`, `HEAD`, `PUT`, ...
    pub method: String,
    /// The request URI, query included.
    pub uri: String,
    /// The status the registry answered.
    pub status: u16,
}

impl LoggedRequest {
    /// Parses `127.0.0.1 - - [date] "GET /v2/ HTTP/1.1" 200 2 "" "agent"`; `None` for other lines
    /// (the registry's own messages).
    fn parse(line: &str) -> Option<LoggedRequest> {
        let (_, rest) = line.split_once(" - ")?;
        let (_, rest) = rest.split_once("] \"")?;
        let (request, rest) = rest.split_once("\" ")?;
        let mut parts = request.split(' ');
        let (method, uri, proto) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || !proto.starts_with("HTTP/") {
            return None;
        }
        let status = rest.split(' ').next()?.parse().ok()?;
        Some(LoggedRequest {
            method: method.to_string(),
            uri: uri.to_string(),
            status,
        })
    }
}

mod http;
mod image;

pub use http::HttpResponse;
use http::*;
pub use image::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_log_lines_parse_and_other_lines_do_not() {
        let line = r#"127.0.0.1 - - [01/Dec/2026:09:33:52 +0000] "GET /v2/t/bb/blobs/sha256:f661 HTTP/1.1" 200 417 "" "skopeo/1.9.3""#;
        assert_eq!(
            LoggedRequest::parse(line),
            Some(LoggedRequest {
                method: "GET".into(),
                uri: "/v2/t/bb/blobs/sha256:f661".into(),
                status: 200
            })
        );
        let authed =
            r#"127.0.0.1 - alice [01/Dec/2026:09:33:52 +0000] "HEAD /v2/ HTTP/1.1" 401 87 "" "x""#;
        assert_eq!(LoggedRequest::parse(authed).map(|r| r.status), Some(401));
        let own = r#"time="2026-12-01T09:33:52.838134052Z" level=info msg="response completed" http.request.method=GET"#;
        assert_eq!(LoggedRequest::parse(own), None);
    }

    #[test]
    fn blob_digests_come_from_blob_uris_only() {
        assert_eq!(blob_digest("/v2/a/b/blobs/sha256:abc"), Some("sha256:abc"));
        assert_eq!(
            blob_digest("/v2/a/blobs/sha256:abc?x=1"),
            Some("sha256:abc")
        );
        assert_eq!(blob_digest("/v2/a/blobs/uploads/"), None);
        assert_eq!(
            blob_digest("/v2/a/blobs/uploads/0e3f?digest=sha256%3Aab"),
            None
        );
        assert_eq!(blob_digest("/v2/a/manifests/latest"), None);
    }

    #[test]
    fn repo_tags_split_at_the_last_colon_after_the_last_slash() {
        assert_eq!(split_repo_tag("a/b:1"), ("a/b", "1"));
        assert_eq!(split_repo_tag("a/b"), ("a/b", "latest"));
        assert_eq!(split_repo_tag("a/b@sha256:ff"), ("a/b", "sha256:ff"));
    }

    #[test]
    #[should_panic(expected = "`sandboxd-no-such-tool` is not installed: install it with `apt-get")]
    fn a_missing_tool_panics_naming_its_package() {
        tool("sandboxd-no-such-tool");
    }

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
    }

    #[test]
    fn chunked_bodies_decode() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n").as_deref(),
            Some(&b"abcde"[..])
        );
        assert_eq!(dechunk(b"5\r\nab"), None);
    }
}
