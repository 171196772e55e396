//! Reading and writing the cgroup filesystem: one value per file, errors that name the file, and
//! the polls that wait for the kernel (a group emptied, removable).

use super::{Backoff, CgroupError, Result, REMOVE_TIMEOUT};
use std::path::Path;
use std::time::{Duration, Instant};

pub(super) fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| CgroupError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes one value the way `echo value > file` does (one `write(2)`).
pub(super) fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(|source| CgroupError::Write {
        path: path.to_path_buf(),
        value: value.to_string(),
        source,
    })
}

pub(super) fn create_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|source| CgroupError::CreateDir {
        path: path.to_path_buf(),
        source,
    })
}

/// `rmdir`, retried while the kernel still reports the group busy; a missing directory is fine.
pub(super) fn remove_dir(path: &Path) -> Result<()> {
    let started = Instant::now();
    let mut backoff = Backoff::new();
    loop {
        match std::fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e)
                if e.raw_os_error() == Some(libc::EBUSY) && started.elapsed() < REMOVE_TIMEOUT =>
            {
                backoff.sleep()
            }
            Err(source) => {
                return Err(CgroupError::RemoveDir {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
    }
}

fn parse_u64(path: &Path, text: &str) -> Result<u64> {
    text.trim().parse().map_err(|_| CgroupError::Parse {
        path: path.to_path_buf(),
        detail: format!("expected a number, got {:?}", text.trim()),
    })
}

pub(super) fn read_u64(path: &Path) -> Result<u64> {
    parse_u64(path, &read(path)?)
}

/// A number, or `None` for "max" (v2, v1 `pids.max`).
pub(super) fn read_max(path: &Path) -> Result<Option<u64>> {
    let text = read(path)?;
    if text.trim() == "max" {
        return Ok(None);
    }
    parse_u64(path, &text).map(Some)
}

/// The value of `key` in a flat-keyed file (`key value` per line, e.g. `memory.stat`).
pub(super) fn keyed(path: &Path, text: &str, key: &str) -> Result<u64> {
    text.lines()
        .find_map(|line| {
            let (k, v) = line.split_once(' ')?;
            (k == key).then_some(v)
        })
        .ok_or_else(|| CgroupError::Parse {
            path: path.to_path_buf(),
            detail: format!("no {key:?} line"),
        })
        .and_then(|v| parse_u64(path, v))
}

/// Pids listed in a `cgroup.procs` file.
pub(super) fn read_procs(path: &Path) -> Result<Vec<i32>> {
    let text = read(path)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            l.trim().parse().map_err(|_| CgroupError::Parse {
                path: path.to_path_buf(),
                detail: format!("expected a pid, got {l:?}"),
            })
        })
        .collect()
}

pub(super) fn kill(pid: i32) -> Result<()> {
    use nix::sys::signal::{kill, Signal};
    match kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(source) => Err(CgroupError::Kill { pid, source }),
    }
}

/// Polls `done` until it holds or `timeout` passes.
pub(super) fn wait_until(
    path: &Path,
    what: &'static str,
    timeout: Duration,
    mut done: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let started = Instant::now();
    let mut backoff = Backoff::new();
    while !done()? {
        if started.elapsed() > timeout {
            return Err(CgroupError::Timeout {
                path: path.to_path_buf(),
                what,
                waited: started.elapsed(),
            });
        }
        backoff.sleep();
    }
    Ok(())
}
