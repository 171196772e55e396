//! A gVisor sandbox's network namespace, kept on a file while the sandbox lives.
//!
//! Contract: [`create`] leaves a fresh, empty network namespace bound on `path` (as `ip netns add`
//! does), ready for the runtime to move the sandbox's veth end into and for the bundle to name;
//! [`remove`] unbinds and deletes it, and succeeds when there is nothing to remove. The namespace
//! itself lives as long as the file is bound or a process is in it.

use crate::RuntimeError;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use std::path::Path;

/// Makes a new network namespace and binds it on `path` (a file that must not exist yet).
pub fn create(path: &Path) -> Result<(), RuntimeError> {
    std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(RuntimeError::io("create", path))?;
    // A thread of its own: unsharing the network namespace is per thread, and this one ends here.
    let bound = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                unshare(CloneFlags::CLONE_NEWNET)?;
                let none: Option<&str> = None;
                mount(
                    Some("/proc/thread-self/ns/net"),
                    path,
                    none,
                    MsFlags::MS_BIND,
                    none,
                )
            })
            .join()
    });
    match bound {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            let _ = std::fs::remove_file(path);
            Err(RuntimeError::Network(format!(
                "binding a new network namespace on {}: {e}",
                path.display()
            )))
        }
        Err(_) => {
            let _ = std::fs::remove_file(path);
            Err(RuntimeError::Host(
                "the network namespace thread panicked".into(),
            ))
        }
    }
}

/// Unbinds and deletes the namespace file at `path`; nothing there is fine.
pub fn remove(path: &Path) -> Result<(), RuntimeError> {
    match umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => {}
        Err(e) => {
            return Err(RuntimeError::Network(format!(
                "unbinding the network namespace on {}: {e}",
                path.display()
            )))
        }
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RuntimeError::io("remove", path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_bound_namespace_is_new_and_goes_away_cleanly() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipped: binding a network namespace needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("netns");
        create(&path).unwrap();
        let ours = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        let bound = std::fs::metadata(&path).unwrap().ino();
        assert_ne!(bound, ours, "the bound namespace is a new one");
        // And this thread is still in the namespace it started in.
        assert_eq!(
            std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino(),
            ours
        );
        assert!(
            matches!(create(&path), Err(RuntimeError::Io { .. })),
            "no second bind"
        );
        remove(&path).unwrap();
        assert!(!path.exists());
        remove(&path).unwrap();
    }
}
