//! Where a volume may appear inside a sandbox.
//!
//! Contract: [`check_mounts`] accepts a set of mount paths only if each is absolute and plain (no
//! `.`, `..` or empty component), is not `/`, does not hide a system directory (it is not one of
//! [`SYSTEM_DIRS`] nor above one), is not inside a tree the kernel or the daemon owns
//! ([`KERNEL_TREES`], the caller's reserved paths such as the agent's own), and no two of them are
//! the same or one inside the other. It returns them normalised (no trailing `/`).

/// Directories a mount may not replace or hide: the system a sandbox runs on.
pub const SYSTEM_DIRS: [&str; 9] = [
    "/bin", "/etc", "/lib", "/lib32", "/lib64", "/sbin", "/usr", "/var", "/boot",
];

/// Trees the kernel's filesystems (or the sandbox's own runtime state) occupy: nothing may be
/// mounted at, above or inside them.
pub const KERNEL_TREES: [&str; 4] = ["/proc", "/sys", "/dev", "/run"];

/// A mount path that is refused, naming it and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountPathError {
    /// Not an absolute, plain path.
    #[error(
        "mount path {0:?} must be an absolute path without `.`, `..`, empty or over-long components"
    )]
    NotPlain(String),
    /// The root itself.
    #[error("mount path \"/\" would hide the whole system; mount a volume below it, e.g. /data")]
    Root,
    /// A system directory, or above one.
    #[error("mount path {path:?} would hide {hidden}; choose a path such as /data or /mnt/{name}")]
    HidesSystem {
        path: String,
        hidden: String,
        name: String,
    },
    /// Inside a tree the kernel or the daemon owns.
    #[error("mount path {path:?} is inside {tree}, which the sandbox's system owns")]
    Reserved { path: String, tree: String },
    /// Two mounts at one path or one inside another.
    #[error("mount paths {0:?} and {1:?} overlap; each volume needs a path of its own")]
    Overlap(String, String),
}

/// Whether `inner` is `outer` or below it.
fn within(inner: &str, outer: &str) -> bool {
    inner == outer
        || (inner.starts_with(outer) && inner.as_bytes().get(outer.len()) == Some(&b'/'))
        || outer == "/"
}

/// Checks one path (see the module docs), returning it normalised.
fn check_one(raw: &str, reserved: &[&str]) -> Result<String, MountPathError> {
    let trimmed = raw
        .strip_suffix('/')
        .filter(|t| !t.is_empty())
        .unwrap_or(raw);
    let plain = trimmed.starts_with('/')
        && trimmed.len() <= 4096
        && !trimmed.contains('\0')
        && trimmed
            .split('/')
            .skip(1)
            .all(|c| !c.is_empty() && c != "." && c != ".." && c.len() <= crate::beneath::MAX_NAME);
    if trimmed == "/" {
        return Err(MountPathError::Root);
    }
    if !plain {
        return Err(MountPathError::NotPlain(raw.to_string()));
    }
    let path = trimmed.to_string();
    for tree in KERNEL_TREES.iter().chain(reserved) {
        if within(&path, tree) || within(tree, &path) {
            return Err(MountPathError::Reserved {
                path,
                tree: tree.to_string(),
            });
        }
    }
    for dir in SYSTEM_DIRS {
        if within(dir, &path) {
            let name = path.rsplit('/').next().unwrap_or("data").to_string();
            return Err(MountPathError::HidesSystem {
                path,
                hidden: dir.to_string(),
                name,
            });
        }
    }
    Ok(path)
}

/// Checks a sandbox's mount paths together (see the module docs); `reserved` are trees of the
/// caller's own that nothing may be mounted at, above or inside.
pub fn check_mounts(paths: &[&str], reserved: &[&str]) -> Result<Vec<String>, MountPathError> {
    let checked = paths
        .iter()
        .map(|p| check_one(p, reserved))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, a) in checked.iter().enumerate() {
        for b in &checked[i + 1..] {
            if within(a, b) || within(b, a) {
                return Err(MountPathError::Overlap(a.clone(), b.clone()));
            }
        }
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: &[&str] = &["/.sandboxd"];

    #[test]
    fn ordinary_paths_are_accepted_and_normalised() {
        assert_eq!(
            check_mounts(&["/data/", "/home/user/cache", "/mnt/x", "/tmp/y"], AGENT).unwrap(),
            ["/data", "/home/user/cache", "/mnt/x", "/tmp/y"]
        );
        // Below a system directory is fine: nothing of the system is hidden.
        assert!(check_mounts(&["/usr/local/share/models", "/var/cache/pip"], AGENT).is_ok());
    }

    #[test]
    fn paths_that_hide_the_system_or_its_trees_are_refused_by_name() {
        assert_eq!(check_mounts(&["/"], AGENT), Err(MountPathError::Root));
        for (path, why) in [("/etc", "/etc"), ("/usr", "/usr"), ("/var", "/var")] {
            let err = check_mounts(&[path], AGENT).unwrap_err();
            assert!(
                matches!(&err, MountPathError::HidesSystem { hidden, .. } if hidden == why),
                "{path}: {err}"
            );
            assert!(err.to_string().contains(path));
        }
        for path in [
            "/proc",
            "/proc/self",
            "/dev/shm",
            "/sys",
            "/run/x",
            "/.sandboxd",
            "/.sandboxd/agent",
        ] {
            assert!(
                matches!(
                    check_mounts(&[path], AGENT),
                    Err(MountPathError::Reserved { .. })
                ),
                "{path}"
            );
        }
        let long = format!("/{}", "x".repeat(256));
        for path in ["data", "/a/../etc", "/a//b", "/a/./b", "", &long] {
            assert!(
                matches!(
                    check_mounts(&[path], AGENT),
                    Err(MountPathError::NotPlain(_))
                ),
                "{path:?}"
            );
        }
    }

    #[test]
    fn overlapping_mounts_are_refused() {
        assert!(matches!(
            check_mounts(&["/data", "/data/sub"], AGENT),
            Err(MountPathError::Overlap(..))
        ));
        assert!(matches!(
            check_mounts(&["/data", "/data/"], AGENT),
            Err(MountPathError::Overlap(..))
        ));
        assert!(check_mounts(&["/data", "/database"], AGENT).is_ok());
    }
}
