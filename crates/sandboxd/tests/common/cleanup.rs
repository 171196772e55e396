//! Last-resort cleanup for [`super::Daemon`]: what is left when the daemon cannot be asked to delete
//! its sandboxes (it is dead, or hung): kill the sandbox inits recorded in the runtime's state files
//! (after checking their start time, so a recycled pid is never hit) and remove their cgroups.

use super::*;

/// One HTTP/1.0 request over a plain socket with the header line `auth`, for cleanup in `Drop` (no
/// async runtime needed). Returns the status and body, or `None` when the daemon does not answer.
pub(super) fn raw_http(port: u16, method: &str, path: &str, auth: &str) -> Option<(u16, Vec<u8>)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n\r\n"
    )
    .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let split = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&response[..split]);
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, response[split + 4..].to_vec()))
}

/// Thaws and kills every sandbox init recorded under `sandboxes_dir` that is still the very process
/// recorded, then removes the sandboxes' cgroup directories under `cgroup_parent`.
pub fn kill_leftover_sandboxes(sandboxes_dir: &Path, cgroup_parent: &str) {
    let Ok(entries) = std::fs::read_dir(sandboxes_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let id = entry.file_name().to_string_lossy().into_owned();
        // A frozen (paused) sandbox dies of SIGKILL only once thawed.
        for dir in cgroup_dirs_under(cgroup_parent, &id) {
            let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
            let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
        }
        if let Some((pid, Some(start))) = recorded_init(&entry.path()) {
            if process_start_time(pid) == Some(start) {
                eprintln!("e2e cleanup: killing leftover sandbox {id} (init {pid})");
                // SAFETY: kill of a pid whose start time matches the sandbox init we recorded.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                let deadline = Instant::now() + Duration::from_secs(5);
                while process_start_time(pid) == Some(start) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        remove_cgroups(cgroup_parent, &id);
    }
}

/// The init the runtime recorded for the sandbox whose directory is `dir`, with its start time.
pub fn recorded_init(dir: &Path) -> Option<(i32, Option<u64>)> {
    let paths = sandboxd_runtime::namespace::state::SandboxPaths {
        dir: dir.to_path_buf(),
    };
    let record = paths.load().ok()??;
    Some((record.pid?, record.start_time))
}

/// Field 22 of `/proc/<pid>/stat` (start time in clock ticks since boot) of a live, non-zombie process.
fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    if matches!(fields.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Removes `<hierarchy>/<cgroup_parent>/<id>` on cgroup v1 and `<cgroup_parent>/<id>` on v2, if present.
fn remove_cgroups(cgroup_parent: &str, id: &str) {
    for dir in cgroup_dirs_under(cgroup_parent, id) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while std::fs::remove_dir(&dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Every cgroup directory of sandbox `id` that still exists (under [`CGROUP_PARENT`]).
pub fn cgroup_dirs_of(id: &str) -> Vec<PathBuf> {
    cgroup_dirs_under(CGROUP_PARENT, id)
}

/// Every cgroup directory of sandbox `id` under `cgroup_parent` that still exists (v2, and each v1
/// hierarchy).
pub fn cgroup_dirs_under(cgroup_parent: &str, id: &str) -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut dirs = vec![root.join(cgroup_parent).join(id)];
    if let Ok(hierarchies) = std::fs::read_dir(root) {
        dirs.extend(
            hierarchies
                .flatten()
                .map(|h| h.path().join(cgroup_parent).join(id)),
        );
    }
    dirs.into_iter().filter(|d| d.is_dir()).collect()
}
