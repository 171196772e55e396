//! No core file of the daemon.
//!
//! Contract: the daemon holds secrets' values in its memory (opened for the egress gateway's
//! rewrites), so a crash must not write them to disk. `serve` sets its soft limit on core files to
//! 0 before it opens anything ([`forbid`]): the kernel then writes no core file, and
//! `systemd-coredump` keeps none ("resource limits disable core dumping"). The hard limit stays,
//! so a sandbox's processes, which inherit the soft limit of 0 (the kernel's and systemd's default
//! anyway), may raise theirs again.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Sets this process's soft limit on core files to 0, keeping its hard limit.
pub fn forbid() -> nix::Result<()> {
    let (_, hard) = getrlimit(Resource::RLIMIT_CORE)?;
    setrlimit(Resource::RLIMIT_CORE, 0, hard)
}
