//! Network namespaces made ahead of need: a boot enters one (`setns`) instead of having `clone`
//! make it, which is a millisecond of the kernel initialising every network subsystem for it, on
//! the boot's critical path.
//!
//! Contract: a spare is a fresh network namespace, made from the daemon's own (as `clone` would
//! have made it) and held by its descriptor alone: no process, no interface but its `lo` (down,
//! as in any new namespace; the boot's wiring brings it up). It is owned by the host's user
//! namespace, like every namespace the init starts in. A boot that finds none makes its own.

use crate::spares::Spares;
use nix::sched::CloneFlags;
use std::os::fd::OwnedFd;

/// A pool of `wanted` spare network namespaces, made from the one this process is in.
pub(super) fn spares(wanted: usize) -> std::io::Result<Spares<OwnedFd>> {
    let home: OwnedFd = std::fs::File::open("/proc/self/ns/net")?.into();
    Ok(Spares::start("netns", wanted, move |_| make(&home), drop))
}

/// A fresh network namespace: the calling thread enters a new one, keeps a descriptor of it, and
/// goes back `home`.
fn make(home: &OwnedFd) -> std::io::Result<OwnedFd> {
    nix::sched::unshare(CloneFlags::CLONE_NEWNET)?;
    let made = std::fs::File::open("/proc/thread-self/ns/net").map(OwnedFd::from);
    nix::sched::setns(home, CloneFlags::CLONE_NEWNET)?;
    made
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn inode(path: &str) -> u64 {
        std::fs::metadata(path).unwrap().ino()
    }

    /// A spare is a namespace of its own, and the thread that made it went back home: the
    /// process's namespace is unchanged.
    #[test]
    fn a_spare_is_a_new_namespace_and_its_maker_goes_home() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to make network namespaces");
            return;
        }
        let home = inode("/proc/self/ns/net");
        let pool = spares(1).unwrap();
        let started = std::time::Instant::now();
        let spare = loop {
            if let Some(spare) = pool.take() {
                break spare;
            }
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        let spare = std::fs::File::from(spare).metadata().unwrap().ino();
        assert_ne!(spare, home);
        assert_eq!(inode("/proc/self/ns/net"), home);
        pool.replenish();
        let started = std::time::Instant::now();
        while pool.ready() == 0 {
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let again = std::fs::File::from(pool.take().unwrap())
            .metadata()
            .unwrap()
            .ino();
        assert_ne!(again, home, "the maker went home before making the next");
        assert_ne!(again, spare);
    }
}
