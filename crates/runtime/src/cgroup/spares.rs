//! Groups made ahead of need, on cgroup v1: a create renames one instead of making its own.
//!
//! Making a memory cgroup costs the kernel per-group state for every memory-aware shrinker the host
//! ever registered (one per superblock: each sandbox mounts several), so on a host that once held
//! thousands of sandboxes a `mkdir` in the memory hierarchy takes milliseconds; a `rename` takes
//! microseconds. cgroup v2 cannot rename a group, so there every create makes its own.
//!
//! Contract:
//! - A spare is an empty group `<parent>/.spare-<pid>-<pool>-<n>`, in every hierarchy the manager
//!   uses, made by a [`crate::spares`] pool (so only when the pool starts and when
//!   [`Spares::replenish`] asks: making a group holds the kernel's cgroup lock for milliseconds,
//!   which the boot that took the spare needs to rename it and to move its init in).
//! - [`Spares::take_as`] renames one ready spare to `<parent>/<id>` in every hierarchy, or does
//!   nothing and says so: when none is ready, or when a rename fails (those done are undone and
//!   the spare is removed), the caller makes the group itself.
//! - A spare holds no task and no limit; the caller applies the limits after the rename, as after
//!   a `mkdir`.
//! - Dropping the pool removes its ready spares. A pool that starts removes the spares of
//!   processes no longer running (a daemon killed with its spares in place).
//! - Spares are never sandboxes: [`is_spare`] names them, and listings leave them out.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The name every spare starts with (a sandbox id never does).
const PREFIX: &str = ".spare-";

/// Whether `name` (an entry of a parent group) is a spare.
pub(super) fn is_spare(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// Tells the pools of one process apart.
static POOLS: AtomicU64 = AtomicU64::new(0);

/// A pool of spare groups under one parent.
pub(super) struct Spares {
    /// `<hierarchy>/<parent>` for every hierarchy the groups live in.
    parents: Arc<Vec<PathBuf>>,
    pool: crate::spares::Spares<String>,
}

impl Spares {
    /// Starts a pool keeping `wanted` spares in each of `parents`, after removing the spares that
    /// processes no longer running left there.
    pub(super) fn start(parents: Vec<PathBuf>, wanted: usize) -> Spares {
        for parent in &parents {
            remove_abandoned(parent);
        }
        let stem = format!(
            "{PREFIX}{}-{}-",
            std::process::id(),
            POOLS.fetch_add(1, Ordering::Relaxed)
        );
        let parents = Arc::new(parents);
        let (made_in, removed_from) = (parents.clone(), parents.clone());
        let pool = crate::spares::Spares::start(
            "cgroup",
            wanted,
            move |n| {
                let name = format!("{stem}{n}");
                let made = made_in
                    .iter()
                    .try_for_each(|parent| std::fs::create_dir_all(parent.join(&name)));
                match made {
                    Ok(()) => Ok(name),
                    Err(e) => {
                        remove(&made_in, &name);
                        Err(e)
                    }
                }
            },
            move |name: String| remove(&removed_from, &name),
        );
        Spares { parents, pool }
    }

    /// How many spares the pool keeps ready.
    pub(super) fn wanted(&self) -> usize {
        self.pool.wanted()
    }

    /// How many spares are ready now.
    pub(super) fn ready(&self) -> usize {
        self.pool.ready()
    }

    /// Renames a ready spare to `id` in every hierarchy; false when there was none or a rename
    /// failed (then nothing of the spare is left, and no group `id` was made).
    pub(super) fn take_as(&self, id: &str) -> bool {
        let Some(name) = self.pool.take() else {
            return false;
        };
        for (done, parent) in self.parents.iter().enumerate() {
            if let Err(e) = std::fs::rename(parent.join(&name), parent.join(id)) {
                tracing::debug!(sandbox_id = id, spare = %name, error = %e, "a spare cgroup could not be renamed; making the group instead");
                for parent in &self.parents[..done] {
                    let _ = std::fs::rename(parent.join(id), parent.join(&name));
                }
                remove(&self.parents, &name);
                return false;
            }
        }
        true
    }

    /// Wakes the pool to make the spares taken since it last ran.
    pub(super) fn replenish(&self) {
        self.pool.replenish();
    }
}

/// Removes spare `name` from every parent (an empty group; one already gone is fine).
fn remove(parents: &[PathBuf], name: &str) {
    for parent in parents {
        let _ = std::fs::remove_dir(parent.join(name));
    }
}

/// Removes the spares under `parent` whose process no longer runs.
fn remove_abandoned(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn parents(root: &Path) -> Vec<PathBuf> {
        ["memory", "pids"]
            .iter()
            .map(|h| root.join(h).join("sandboxd"))
            .collect()
    }

    fn until(what: &str, cond: impl Fn() -> bool) {
        let started = Instant::now();
        while !cond() {
            assert!(started.elapsed() < Duration::from_secs(5), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn spares_in(parent: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(parent)
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| is_spare(n))
            .collect();
        names.sort();
        names
    }

    /// The pool keeps its spares in every hierarchy; a take renames one to the id everywhere, and
    /// the pool makes another when asked, not before; dropping the pool leaves no spare behind.
    #[test]
    fn a_take_renames_a_spare_everywhere_and_the_pool_refills() {
        let root = tempfile::tempdir().unwrap();
        let parents = parents(root.path());
        let spares = Spares::start(parents.clone(), 2);
        until("two spares ready", || spares.ready() == spares.wanted());
        for parent in &parents {
            assert_eq!(spares_in(parent).len(), 2);
        }
        assert!(spares.take_as("sb1"));
        for parent in &parents {
            assert!(parent.join("sb1").is_dir());
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(spares.ready(), 1, "no spare is made before the boot asks");
        spares.replenish();
        until("the pool refilled", || spares.ready() == 2);
        for parent in &parents {
            assert_eq!(spares_in(parent).len(), 2, "{}", parent.display());
        }
        drop(spares);
        for parent in &parents {
            assert!(spares_in(parent).is_empty());
            assert!(
                parent.join("sb1").is_dir(),
                "a taken spare is the sandbox's"
            );
        }
    }

    /// A rename that fails in one hierarchy undoes the others and removes the spare: the caller
    /// makes the group, and finds nothing of the spare under the id.
    #[test]
    fn a_failed_rename_undoes_the_others_and_drops_the_spare() {
        let root = tempfile::tempdir().unwrap();
        let parents = parents(root.path());
        let spares = Spares::start(parents.clone(), 1);
        until("a spare ready", || spares.ready() == 1);
        // The second hierarchy has a non-empty `sb1` already: the rename there fails.
        std::fs::create_dir_all(parents[1].join("sb1/held")).unwrap();
        assert!(!spares.take_as("sb1"));
        assert!(
            !parents[0].join("sb1").exists(),
            "the first rename was undone"
        );
        assert!(
            parents[1].join("sb1/held").is_dir(),
            "what was there is kept"
        );
        spares.replenish();
        until("the pool refilled", || spares.ready() == 1);
        for parent in &parents {
            assert_eq!(spares_in(parent).len(), 1, "the failed spare is gone");
        }
    }

    /// With none ready a take says so and makes nothing.
    #[test]
    fn a_take_from_an_empty_pool_makes_nothing() {
        let root = tempfile::tempdir().unwrap();
        let parents = parents(root.path());
        let spares = Spares::start(parents.clone(), 0);
        assert!(!spares.take_as("sb1"));
        assert!(!parents[0].join("sb1").exists());
    }

    /// A starting pool removes the spares of processes that no longer run, and no other entry.
    #[test]
    fn a_starting_pool_removes_abandoned_spares_only() {
        let root = tempfile::tempdir().unwrap();
        let parents = parents(root.path());
        let gone = format!("{PREFIX}{}-0-1", i32::MAX);
        let ours = format!("{PREFIX}{}-999-1", std::process::id());
        for parent in &parents {
            for name in [gone.as_str(), ours.as_str(), "sb1"] {
                std::fs::create_dir_all(parent.join(name)).unwrap();
            }
        }
        let _spares = Spares::start(parents.clone(), 0);
        for parent in &parents {
            assert!(!parent.join(&gone).exists());
            assert!(parent.join(&ours).is_dir());
            assert!(parent.join("sb1").is_dir());
        }
    }
}
