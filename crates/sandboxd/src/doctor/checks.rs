//! The checks of [`super`], each a function of the configuration `serve` would run with.

use super::Check;
use crate::config::ServeConfig;
use sandboxd_runtime::cgroup::{CgroupManager, CgroupVersion};
use sandboxd_runtime::quota::{DiskBackend, DiskConfig, DiskMode};
use sandboxd_runtime::Isolation;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The oldest kernel that idmaps the shared layers under overlayfs (sandboxes' own id ranges).
const IDMAP_OVERLAY_KERNEL: (u32, u32) = (5, 19);
/// Below this much free space on the data dir's filesystem sandboxes and pulls soon fail.
const LOW_SPACE: u64 = 10 << 30;
/// Below this much nothing sensible runs.
const NO_SPACE: u64 = 512 << 20;
/// The btrfs pool the quota probe makes, MiB (sparse; btrfs's smallest useful size).
const PROBE_POOL_MB: u64 = 256;
/// How long a tool the checks run may take.
const TOOL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the listen check waits for whoever holds the address to answer `/health`.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
/// Tasks (processes and threads) an idle sandbox holds: its init and its agent (`bench density`
/// measures it).
const TASKS_PER_IDLE_SANDBOX: u64 = 2;
/// Tasks left for the host and the daemon beside its sandboxes.
const HOST_TASKS: u64 = 2048;

/// Every check: [`host_checks`], then the probes that make (and remove) something beside the data
/// dir — the disk-quota choice and idmapped mounts.
pub fn run(config: &ServeConfig) -> Vec<Check> {
    let mut checks = host_checks(config);
    let base = existing_ancestor(&config.data_dir);
    match tempfile::Builder::new()
        .prefix(".sandboxd-doctor-")
        .tempdir_in(&base)
    {
        Ok(scratch) => {
            checks.push(disk_quota(config, scratch.path()));
            checks.push(id_ranges(scratch.path()));
        }
        Err(e) => checks.push(Check::missing(
            "data dir",
            format!("cannot make a directory in {}: {e}", base.display()),
            "give --data-dir a writable place (root's, on a local filesystem)",
        )),
    }
    checks
}

/// The checks that change nothing on the host.
pub fn host_checks(config: &ServeConfig) -> Vec<Check> {
    vec![
        root(),
        kernel(),
        cgroups(config),
        user_namespaces(),
        overlayfs(),
        nftables(),
        agent(config),
        data_space(config),
        listen(config),
        gvisor(config),
        capacity(config),
        crate::open_files::check(u64::from(config.net_slots)),
    ]
}

fn root() -> Check {
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        Check::ok("root", "running as root")
    } else {
        Check::missing(
            "root",
            format!("running as uid {uid}: sandboxes need namespaces, cgroups and mounts"),
            "run sandboxd as root (the systemd unit does)",
        )
    }
}

/// `(major, minor)` of a kernel release like `6.1.0-57-amd64`.
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn kernel() -> Check {
    let uts = nix::sys::utsname::uname();
    let release = uts
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    match kernel_version(&release) {
        Some(v) if v >= IDMAP_OVERLAY_KERNEL => Check::ok("kernel", format!("Linux {release}")),
        Some(_) => Check::degraded(
            "kernel",
            format!("Linux {release}: older than 5.19, so sandboxes share one host id range"),
            "run a 5.19 or newer kernel (Debian 12's 6.1 is)",
        ),
        None => Check::degraded(
            "kernel",
            format!("cannot read the kernel's version ({release:?})"),
            "run Linux 5.19 or newer",
        ),
    }
}

fn cgroups(config: &ServeConfig) -> Check {
    let manager =
        match CgroupManager::detect(&config.cgroup_parent) {
            Ok(m) => m,
            Err(e) => return Check::missing(
                "cgroups",
                sandboxd_errors::chain(&e),
                "mount cgroup v2 with the memory and pids controllers (systemd does by default)",
            ),
        };
    let version = match manager.version() {
        CgroupVersion::V1 => "v1",
        CgroupVersion::V2 => "v2",
    };
    let controllers = match manager.controllers() {
        Ok(c) => c,
        Err(e) => {
            return Check::missing(
                "cgroups",
                sandboxd_errors::chain(&e),
                "mount cgroup v2 with the memory and pids controllers",
            )
        }
    };
    let lacking: Vec<&str> = controllers
        .iter()
        .filter(|(_, has)| !has)
        .map(|(c, _)| *c)
        .collect();
    let have: Vec<&str> = controllers
        .iter()
        .filter(|(_, has)| *has)
        .map(|(c, _)| *c)
        .collect();
    if lacking.is_empty() {
        return Check::ok("cgroups", format!("cgroup {version}: {}", have.join(", ")));
    }
    let without: Vec<&str> = lacking
        .iter()
        .map(|c| match *c {
            "cpu" => "cpu limits",
            "freezer" => "pause in place",
            other => other,
        })
        .collect();
    Check::degraded(
        "cgroups",
        format!(
            "cgroup {version}: {} (no {}: sandboxes run without {})",
            have.join(", "),
            lacking.join(", "),
            without.join(", ")
        ),
        format!("enable the {} controller(s)", lacking.join(", ")),
    )
}

fn user_namespaces() -> Check {
    let path = "/proc/sys/user/max_user_namespaces";
    match std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
    {
        Some(0) => Check::missing(
            "user namespaces",
            format!("{path} is 0"),
            "sysctl -w user.max_user_namespaces=65536 (and in /etc/sysctl.d)",
        ),
        Some(n) => Check::ok("user namespaces", format!("up to {n}")),
        None => Check::missing(
            "user namespaces",
            format!("{path} cannot be read: the kernel has no user namespaces"),
            "run a kernel built with CONFIG_USER_NS (every distribution kernel is)",
        ),
    }
}

fn overlayfs() -> Check {
    let listed = std::fs::read_to_string("/proc/filesystems")
        .map(|t| {
            t.lines()
                .any(|l| l.split_whitespace().last() == Some("overlay"))
        })
        .unwrap_or(false);
    if listed {
        return Check::ok("overlayfs", "in the kernel");
    }
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let module = Path::new("/lib/modules")
        .join(&release)
        .join("kernel/fs/overlayfs");
    if module.is_dir() {
        Check::ok("overlayfs", "a module, loaded on first use")
    } else {
        Check::missing(
            "overlayfs",
            "neither in the kernel nor among its modules: sandboxes' roots are overlays",
            "run a kernel with overlayfs (CONFIG_OVERLAY_FS)",
        )
    }
}

fn nftables() -> Check {
    match run_tool("nft", &["list", "tables"]) {
        Ok(_) => Check::ok("nftables", "nft answers"),
        Err(why) => Check::degraded(
            "nftables",
            format!("{why}: sandboxes with egress rules (allowOut, denyOut) cannot be made"),
            "apt install nftables",
        ),
    }
}

fn agent(config: &ServeConfig) -> Check {
    match config.agent_binary() {
        Some(path) if is_executable(&path) => Check::ok("agent", path.display().to_string()),
        Some(path) => Check::missing(
            "agent",
            format!("{} is not an executable file", path.display()),
            "point --agent-bin at the static sandboxd-agent",
        ),
        None => Check::missing(
            "agent",
            "no sandboxd-agent beside sandboxd nor in this build",
            "build it with scripts/build-agent or pass --agent-bin",
        ),
    }
}

fn data_space(config: &ServeConfig) -> Check {
    let at = existing_ancestor(&config.data_dir);
    let stat = match nix::sys::statvfs::statvfs(&at) {
        Ok(s) => s,
        Err(e) => {
            return Check::missing(
                "data dir",
                format!("cannot read the filesystem of {}: {e}", at.display()),
                "give --data-dir a place on a local filesystem",
            )
        }
    };
    let free = stat.blocks_available() as u64 * stat.fragment_size() as u64;
    let detail = format!(
        "{} ({} free on its filesystem{})",
        config.data_dir.display(),
        human(free),
        if at != config.data_dir {
            format!(", made at start under {}", at.display())
        } else {
            String::new()
        }
    );
    if free < NO_SPACE {
        Check::missing(
            "data dir",
            detail,
            "free space on the data dir's filesystem",
        )
    } else if free < LOW_SPACE {
        Check::degraded(
            "data dir",
            detail,
            "give the data dir 10 GiB or more (images, layers and sandboxes' writes live there)",
        )
    } else {
        Check::ok("data dir", detail)
    }
}

fn capacity(config: &ServeConfig) -> Check {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    match (
        read("/proc/sys/kernel/pid_max"),
        read("/proc/sys/kernel/threads-max"),
    ) {
        (Some(pid_max), Some(threads_max)) => {
            capacity_of(u64::from(config.net_slots), pid_max, threads_max)
        }
        _ => Check::degraded(
            "capacity",
            "cannot read kernel.pid_max or kernel.threads-max",
            "mount /proc",
        ),
    }
}

/// Whether the host's task limits hold `slots` idle sandboxes (the most the daemon runs at once).
fn capacity_of(slots: u64, pid_max: u64, threads_max: u64) -> Check {
    let detail = format!(
        "{slots} network slots: {slots} idle sandboxes hold {} tasks; kernel.pid_max {pid_max}, kernel.threads-max {threads_max}",
        slots * TASKS_PER_IDLE_SANDBOX
    );
    let limit = pid_max.min(threads_max);
    per_sandbox_limit(
        "capacity",
        slots,
        (TASKS_PER_IDLE_SANDBOX, HOST_TASKS, limit),
        detail,
        |fits| {
            format!(
            "raise the limit: sysctl -w kernel.pid_max=4194304 (kept in /etc/sysctl.d/), or lower --net-slots to {fits}"
        )
        },
    )
}

/// Check `name` of a limit of which each of `slots` idle sandboxes holds `per`, beside `reserve`
/// for the rest: ok when `limit` holds them all, else degraded, saying how many it holds, with
/// `fix` for that count.
pub(crate) fn per_sandbox_limit(
    name: &'static str,
    slots: u64,
    (per, reserve, limit): (u64, u64, u64),
    detail: String,
    fix: impl FnOnce(u64) -> String,
) -> Check {
    if limit >= slots * per + reserve {
        return Check::ok(name, detail);
    }
    let fits = limit.saturating_sub(reserve) / per;
    Check::degraded(
        name,
        format!("{detail}: creates fail past about {fits} sandboxes"),
        fix(fits),
    )
}

fn listen(config: &ServeConfig) -> Check {
    listen_on(config.listen)
}

/// Whether `serve` could listen on `addr`: free, or held by a sandboxd already serving there (the
/// host's service, when doctor runs beside it), or held by something else.
fn listen_on(addr: std::net::SocketAddr) -> Check {
    match std::net::TcpListener::bind(addr) {
        Ok(_) => Check::ok("listen", format!("{addr} is free")),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            if answers_as_sandboxd(addr) {
                Check::ok(
                    "listen",
                    format!("{addr} is served by a running sandboxd (its /health answers)"),
                )
            } else {
                Check::degraded(
                    "listen",
                    format!("{addr} is in use by something that is not a serving sandboxd"),
                    "stop what listens there, or choose another --listen",
                )
            }
        }
        Err(e) => Check::missing(
            "listen",
            format!("cannot listen on {addr}: {e}"),
            "choose an address of this host for --listen",
        ),
    }
}

/// Whether whoever listens on `addr` answers `GET /health` as sandboxd does (200,
/// `{"status":"ok"}`) within [`HEALTH_TIMEOUT`]. An unspecified address is asked on loopback.
fn answers_as_sandboxd(addr: std::net::SocketAddr) -> bool {
    use std::io::{Read, Write};
    let mut target = addr;
    if target.ip().is_unspecified() {
        target.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&target, HEALTH_TIMEOUT) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(HEALTH_TIMEOUT));
    let _ = stream.set_write_timeout(Some(HEALTH_TIMEOUT));
    if stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.take(4096).read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    let Some((head, body)) = answer.split_once("\r\n\r\n") else {
        return false;
    };
    head.split(' ').nth(1) == Some("200")
        && serde_json::from_str::<serde_json::Value>(body)
            .is_ok_and(|v| v.get("status").and_then(|s| s.as_str()) == Some("ok"))
}

fn gvisor(config: &ServeConfig) -> Check {
    let gvisor = sandboxd_runtime::gvisor::GvisorConfig {
        runsc: config.runsc.clone(),
        ..Default::default()
    };
    match sandboxd_runtime::gvisor::probe(&gvisor) {
        Ok(runsc) => Check::ok(
            "gvisor tier",
            format!("isolation \"gvisor\" on {}", runsc.binary.display()),
        ),
        Err(why) if config.default_isolation == Isolation::Gvisor => Check::missing(
            "gvisor tier",
            format!("{why}; --default-isolation is gvisor, so the daemon would not start"),
            "install runsc from bookworm-backports (scripts/gvisor), or --default-isolation namespace",
        ),
        Err(why) => Check::degraded(
            "gvisor tier",
            format!("not offered ({why}); sandboxes get the namespace tier"),
            "install runsc from bookworm-backports (scripts/gvisor)",
        ),
    }
}

/// The quota backend a data dir on `scratch`'s filesystem gets, chosen by the runtime's own code.
fn disk_quota(config: &ServeConfig, scratch: &Path) -> Check {
    let disk = DiskConfig {
        mode: config.disk_backend,
        pool_file_mb: PROBE_POOL_MB,
    };
    let why = |passed: &[String]| {
        if passed.is_empty() {
            String::new()
        } else {
            format!(" (passed over: {})", passed.join("; "))
        }
    };
    match sandboxd_runtime::quota::probe(scratch, &disk) {
        Ok((DiskBackend::ProjectQuota, _)) => {
            Check::ok("disk quota", "XFS project quotas on the data dir's filesystem")
        }
        Ok((DiskBackend::Btrfs, passed)) => Check::ok(
            "disk quota",
            format!("btrfs qgroups{}", why(&passed)),
        ),
        Ok((DiskBackend::Off, _)) if config.disk_backend == DiskMode::Off => {
            Check::ok("disk quota", "off (--disk-backend off): no disk limits asked for")
        }
        Ok((DiskBackend::Off, passed)) => Check::degraded(
            "disk quota",
            format!("none: sandboxes' and volumes' disk is not limited{}", why(&passed)),
            "put the data dir on XFS mounted with prjquota, or apt install btrfs-progs for a pool file",
        ),
        Err(e) => Check::missing(
            "disk quota",
            format!(
                "--disk-backend {}: {}",
                config.disk_backend,
                sandboxd_errors::chain(&e)
            ),
            "--disk-backend auto, or give the data dir the filesystem that backend needs",
        ),
    }
}

/// Whether the data dir's filesystem takes the idmapped mounts sandboxes' own id ranges need.
fn id_ranges(scratch: &Path) -> Check {
    let storage = sandboxd_runtime::namespace::NamespaceConfig::new(PathBuf::new(), PathBuf::new())
        .id_map_base;
    match sandboxd_runtime::namespace::ids::IdRanges::check(storage, scratch) {
        Ok(()) => Check::ok(
            "id ranges",
            "idmapped mounts on the data dir's filesystem: each sandbox has host ids of its own",
        ),
        Err(e) => Check::degraded(
            "id ranges",
            format!(
                "no idmapped mounts ({}): every sandbox runs on the same host ids",
                sandboxd_errors::chain(&e)
            ),
            "Linux 5.19+ with the data dir on ext4, XFS or btrfs",
        ),
    }
}

/// `path`, or its nearest ancestor that exists.
fn existing_ancestor(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    absolute
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"))
        .to_path_buf()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `tool args` to its end within [`TOOL_TIMEOUT`]; its first line of error when it fails.
fn run_tool(tool: &str, args: &[&str]) -> Result<String, String> {
    let mut child = std::process::Command::new(tool)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{tool} cannot run ({e})"))?;
    let deadline = std::time::Instant::now() + TOOL_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{tool} did not answer within {TOOL_TIMEOUT:?}"));
            }
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{tool}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "{tool} {} failed: {}",
            args.join(" "),
            err.lines().next().unwrap_or_default()
        ))
    }
}

fn human(bytes: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / GIB)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test double of whatever listens on an address: answers one connection with `answer`.
    fn listener_answering(answer: &'static str) -> std::net::SocketAddr {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut conn, _)) = listener.accept() {
                let mut request = [0u8; 1024];
                let _ = conn.read(&mut request);
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        addr
    }

    #[test]
    fn an_address_a_sandboxd_serves_is_ok_and_anything_else_there_is_degraded() {
        let sandboxd = listener_answering(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"status\":\"ok\"}",
        );
        let check = listen_on(sandboxd);
        assert_eq!(check.status, super::super::Status::Ok, "{check:?}");
        assert!(
            check.detail.contains("served by a running sandboxd"),
            "{check:?}"
        );

        let other = listener_answering("HTTP/1.1 404 Not Found\r\n\r\nno");
        let check = listen_on(other);
        assert_eq!(check.status, super::super::Status::Degraded, "{check:?}");

        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = free.local_addr().unwrap();
        drop(free);
        assert_eq!(listen_on(addr).status, super::super::Status::Ok);
    }

    #[test]
    fn kernel_releases_read_as_major_and_minor() {
        assert_eq!(kernel_version("6.1.0-57-amd64"), Some((6, 1)));
        assert_eq!(kernel_version("5.19.17"), Some((5, 19)));
        assert_eq!(kernel_version("4.19.0-27-cloud-amd64"), Some((4, 19)));
        assert_eq!(kernel_version("garbage"), None);
        assert!(Some((6, 1)) >= Some(IDMAP_OVERLAY_KERNEL));
        assert!(Some((5, 10)) < Some(IDMAP_OVERLAY_KERNEL));
    }

    #[test]
    fn capacity_is_judged_by_the_tasks_idle_sandboxes_hold() {
        let ok = capacity_of(8000, 4_194_304, 192_724);
        assert_eq!(ok.status, super::super::Status::Ok, "{ok:?}");
        // Debian's default on a small host: 32768 tasks hold 15360 sandboxes besides the host's.
        let short = capacity_of(16384, 32768, 192_724);
        assert_eq!(short.status, super::super::Status::Degraded, "{short:?}");
        assert!(
            short.detail.ends_with("past about 15360 sandboxes"),
            "{short:?}"
        );
        assert!(short.fix.unwrap().contains("--net-slots to 15360"));
        assert_eq!(
            capacity_of(8000, 32768, 192_724).status,
            super::super::Status::Ok
        );
    }

    #[test]
    fn a_missing_data_dir_is_judged_by_the_place_it_will_be_made() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        assert_eq!(existing_ancestor(&deep), dir.path());
    }

    #[test]
    fn a_tool_that_fails_says_its_first_error_line_and_one_that_is_absent_says_so() {
        let err = run_tool("sh", &["-c", "echo bad >&2; echo more >&2; exit 1"]).unwrap_err();
        assert!(err.ends_with("failed: bad"), "{err}");
        let err = run_tool("/nonexistent/nft", &[]).unwrap_err();
        assert!(err.contains("cannot run"), "{err}");
    }
}
