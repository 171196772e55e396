//! The daemon's limit on open files.
//!
//! Contract: every idle sandbox holds [`FDS_PER_IDLE_SANDBOX`] descriptor in the daemon (a pidfd of
//! its init, to reap it; the user namespaces of id ranges are kept only for the few bases booted
//! last, `sandboxd_runtime`'s `KEPT_NAMESPACES`, counted in [`DAEMON_FDS`]), so the soft limit most
//! shells give (1024) stops a host at about 1000 sandboxes with "Too many open files". `serve`
//! therefore raises its soft limit to the hard one before it opens anything ([`raise`]; the
//! package's unit sets both to 1048576), and `sandboxd doctor` judges the hard limit
//! against `--net-slots` ([`judge`]). Sandboxes inherit the raised limit, as a service's children
//! inherit its unit's `LimitNOFILE`.

use crate::doctor::{per_sandbox_limit, Check};
use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Descriptors the daemon holds for each idle sandbox.
pub const FDS_PER_IDLE_SANDBOX: u64 = 1;
/// Descriptors left for the daemon's own store, listeners, connections, pulls and kept namespaces.
pub const DAEMON_FDS: u64 = 4096;

/// Raises this process's soft limit on open files to its hard limit. Returns the limit before and
/// the one in force now.
pub fn raise() -> nix::Result<(u64, u64)> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= hard {
        return Ok((soft, soft));
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    Ok((soft, hard))
}

/// The doctor's check: whether the hard limit on open files, which `serve` raises its soft limit
/// to, holds `slots` idle sandboxes.
pub fn check(slots: u64) -> Check {
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((_, hard)) => judge(slots, hard),
        Err(e) => Check::degraded(
            "open files",
            format!("cannot read the limit on open files: {e}"),
            "run sandboxd doctor where serve runs",
        ),
    }
}

/// Whether a hard limit of `hard` open files holds `slots` idle sandboxes.
fn judge(slots: u64, hard: u64) -> Check {
    let detail = format!(
        "{slots} network slots: {slots} idle sandboxes hold {} descriptors in the daemon; its hard limit on open files is {hard} (serve raises its soft limit to it)",
        slots * FDS_PER_IDLE_SANDBOX
    );
    let limit = (FDS_PER_IDLE_SANDBOX, DAEMON_FDS, hard);
    per_sandbox_limit("open files", slots, limit, detail, |fits| {
        format!(
            "raise the hard limit: LimitNOFILE=1048576 in the unit (the package's has it), or `ulimit -Hn 1048576` before serve; or lower --net-slots to {fits}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    #[test]
    fn the_hard_limit_is_judged_by_the_descriptors_idle_sandboxes_hold() {
        assert_eq!(judge(8000, 1_048_576).status, Status::Ok);
        assert_eq!(judge(8000, 12_096).status, Status::Ok);
        assert_eq!(judge(16_384, 20_480).status, Status::Ok);
        // A hard limit of 20000 holds 15904 beside the daemon's own descriptors.
        let short = judge(16_384, 20_000);
        assert_eq!(short.status, Status::Degraded, "{short:?}");
        assert!(
            short.detail.ends_with("past about 15904 sandboxes"),
            "{short:?}"
        );
        assert!(short.fix.unwrap().contains("--net-slots to 15904"));
        assert!(judge(8000, 1024).detail.ends_with("past about 0 sandboxes"));
    }

    /// A soft limit under the hard one is raised to it; one at the hard limit stays.
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let lower = hard.min(1 << 20) - 1;
        setrlimit(Resource::RLIMIT_NOFILE, lower, hard).unwrap();
        assert_eq!(raise().unwrap(), (lower, hard));
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
        assert_eq!(raise().unwrap(), (hard, hard));
    }
}
