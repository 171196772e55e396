//! Per-sandbox id ranges: which host ids a sandbox's root and users are, and the user namespaces its
//! shared layers are seen through.
//!
//! Contract:
//! - Shared layers (the `base` template, image layers and tops) are stored owned by the *storage*
//!   range, [`NamespaceConfig::id_map_base`](super::NamespaceConfig::id_map_base)`..+65536`. A sandbox
//!   whose spec names an id range `r` ([`crate::SandboxSpec::id_range`]) has its root at host id
//!   `storage + 65536 · (r + 1)`; none has the storage range's.
//! - The daemon names the sandbox's network slot as its range. The slot pool gives each live sandbox
//!   of a daemon its own slot (a partial unique index, `sandboxd_store::slots`), and a slot whose
//!   addresses the host holds for anyone else (another daemon's sandbox, or one a wiped data dir
//!   forgot) is never taken ([`super::net::Network::slot_free`]), so no two live sandboxes on the
//!   host share a host id; a range is free again exactly when its slot is, after the teardown.
//! - The base is fixed when the sandbox is created ([`IdRanges::base_of`]) and persisted with it, so
//!   a restarted daemon, a host whose support changed, or a spec from before ranges existed (no range:
//!   the storage range, as every sandbox had) all boot it as it was made.
//! - A sandbox off the storage range sees each lower layer through an idmapped clone mapping
//!   `storage + k` to `base + k` ([`IdRanges::namespace_for`]); its writable layer is its own and owned
//!   by its base natively. A boot needs its base's user namespace only while it mounts (the mounts
//!   hold it after), so one is made on first use and kept for reuse among the [`KEPT_NAMESPACES`]
//!   most recently used (a descriptor each, no process); one evicted is made again, mapping the
//!   same ids, when its base boots next. An idle sandbox thus holds no descriptor for its range.
//! - When the host cannot idmap the layers (checked once at start on the template directory), every
//!   sandbox gets the storage range, as before ranges existed, and the start says so in the log.

use crate::RuntimeError;
use sandboxd_idmap::{idmapped_clone, user_namespace, IdMapping};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Ids in one range: a sandbox's user namespace maps 0..65536.
pub const RANGE_SIZE: u32 = 65536;

/// How many user namespaces are kept for reuse: those of the bases used last ([`Kept`]).
pub const KEPT_NAMESPACES: usize = 64;

/// The id ranges of one runtime.
pub struct IdRanges {
    storage: u32,
    supported: bool,
    namespaces: Mutex<Kept>,
}

/// The user namespaces of the [`KEPT_NAMESPACES`] bases used last, each with when it was used.
#[derive(Default)]
struct Kept {
    namespaces: HashMap<u32, (Arc<OwnedFd>, u64)>,
    uses: u64,
}

impl Kept {
    /// The namespace of `base`, kept or made now by `make` (and kept, evicting the one used least
    /// recently when [`KEPT_NAMESPACES`] are).
    fn get_or_make(
        &mut self,
        base: u32,
        make: impl FnOnce() -> Result<OwnedFd, RuntimeError>,
    ) -> Result<Arc<OwnedFd>, RuntimeError> {
        self.uses += 1;
        if let Some((ns, used)) = self.namespaces.get_mut(&base) {
            *used = self.uses;
            return Ok(ns.clone());
        }
        let ns = Arc::new(make()?);
        if self.namespaces.len() >= KEPT_NAMESPACES {
            let oldest = self
                .namespaces
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(base, _)| *base);
            if let Some(oldest) = oldest {
                self.namespaces.remove(&oldest);
            }
        }
        self.namespaces.insert(base, (ns.clone(), self.uses));
        Ok(ns)
    }
}

impl IdRanges {
    /// Ranges above `storage`, if the filesystem holding `layers` takes idmapped mounts.
    pub fn probe(storage: u32, layers: &Path) -> Self {
        let ranges = Self {
            storage,
            supported: true,
            namespaces: Mutex::default(),
        };
        match ranges.try_idmap(layers) {
            Ok(()) => ranges,
            Err(e) => {
                tracing::warn!(
                    error = %sandboxd_errors::chain(&e),
                    "this host cannot idmap the shared layers; every sandbox gets the same host id range"
                );
                Self {
                    supported: false,
                    ..ranges
                }
            }
        }
    }

    /// Whether the filesystem holding `dir` takes the idmapped mounts ranges need; why not if not.
    pub fn check(storage: u32, dir: &Path) -> Result<(), RuntimeError> {
        Self {
            storage,
            supported: true,
            namespaces: Mutex::default(),
        }
        .try_idmap(dir)
    }

    /// An idmapped clone of `dir` through the first range's namespace (never attached anywhere).
    fn try_idmap(&self, dir: &Path) -> Result<(), RuntimeError> {
        let ns = self.namespace(self.storage + RANGE_SIZE)?;
        idmapped_clone(dir, ns.as_fd())
            .map(drop)
            .map_err(RuntimeError::io("idmap", dir))
    }

    /// Whether sandboxes get ranges of their own on this host.
    pub fn supported(&self) -> bool {
        self.supported
    }

    /// The host id of the root of a sandbox created now with `range`: its own range's when it has one
    /// and the host supports ranges, the storage range's otherwise.
    pub fn base_of(&self, range: Option<u32>) -> Result<u32, RuntimeError> {
        match range {
            Some(r) if self.supported => range_base(self.storage, r),
            _ => Ok(self.storage),
        }
    }

    /// The user namespace a sandbox rooted at `base` sees the shared layers through; `None` for the
    /// storage range, which sees them as they are.
    pub fn namespace_for(&self, base: u32) -> Result<Option<Arc<OwnedFd>>, RuntimeError> {
        if base == self.storage {
            return Ok(None);
        }
        self.namespace(base).map(Some)
    }

    fn namespace(&self, base: u32) -> Result<Arc<OwnedFd>, RuntimeError> {
        let mut kept = self.namespaces.lock().unwrap_or_else(|e| e.into_inner());
        kept.get_or_make(base, || {
            user_namespace(IdMapping {
                inside: self.storage,
                outside: base,
                count: RANGE_SIZE,
            })
            .map_err(|source| RuntimeError::IdMapNamespace { base, source })
        })
    }
}

/// The first host id of range `r` above `storage`.
fn range_base(storage: u32, r: u32) -> Result<u32, RuntimeError> {
    r.checked_add(1)
        .and_then(|n| n.checked_mul(RANGE_SIZE))
        .and_then(|offset| offset.checked_add(storage))
        // The last id of the range must stay below u32::MAX, which is no id at all.
        .filter(|base| base.checked_add(RANGE_SIZE).is_some())
        .ok_or(RuntimeError::IdRangeOutOfRange(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_sit_above_the_storage_range_and_never_overlap() {
        assert_eq!(range_base(100_000, 0).unwrap(), 165_536);
        assert_eq!(range_base(100_000, 1).unwrap(), 231_072);
        for r in [0, 1, 7, 16_383] {
            let (this, next) = (
                range_base(100_000, r).unwrap(),
                range_base(100_000, r + 1).unwrap(),
            );
            assert_eq!(next - this, RANGE_SIZE);
            assert!(this >= 100_000 + RANGE_SIZE);
        }
    }

    #[test]
    fn a_range_past_the_host_ids_is_refused() {
        assert!(matches!(
            range_base(100_000, 65_534),
            Err(RuntimeError::IdRangeOutOfRange(65_534))
        ));
        assert!(range_base(100_000, u32::MAX).is_err());
        // The highest range that fits ends below u32::MAX.
        let last = (u32::MAX - 100_000) / RANGE_SIZE - 2;
        let base = range_base(100_000, last).unwrap();
        assert!(base.checked_add(RANGE_SIZE).is_some());
    }

    #[test]
    fn without_support_every_sandbox_has_the_storage_range() {
        let ranges = IdRanges {
            storage: 100_000,
            supported: false,
            namespaces: Mutex::default(),
        };
        assert_eq!(ranges.base_of(Some(3)).unwrap(), 100_000);
        assert_eq!(ranges.base_of(None).unwrap(), 100_000);
        assert!(ranges.namespace_for(100_000).unwrap().is_none());
    }

    /// Invariant: the daemon holds at most [`KEPT_NAMESPACES`] range namespaces however many bases
    /// booted, the ones used last; a base used again is served its kept namespace, not a new one.
    #[test]
    fn only_the_namespaces_used_last_are_kept() {
        let mut kept = Kept::default();
        let made = std::cell::Cell::new(0);
        let get = |kept: &mut Kept, base: u32| {
            kept.get_or_make(base, || {
                made.set(made.get() + 1);
                Ok(std::fs::File::open("/dev/null").unwrap().into())
            })
            .unwrap()
        };
        let first = get(&mut kept, 0);
        for base in 1..KEPT_NAMESPACES as u32 {
            get(&mut kept, base);
        }
        assert_eq!(made.get(), KEPT_NAMESPACES);
        // Base 0 used again is the same descriptor, and now the most recent: base 1 goes next.
        assert!(Arc::ptr_eq(&first, &get(&mut kept, 0)));
        assert_eq!(made.get(), KEPT_NAMESPACES);
        for base in 1000..1000 + 3 * KEPT_NAMESPACES as u32 {
            get(&mut kept, base);
            assert!(kept.namespaces.len() <= KEPT_NAMESPACES);
        }
        assert_eq!(kept.namespaces.len(), KEPT_NAMESPACES);
        assert!(!kept.namespaces.contains_key(&0));
        let last = 1000 + 3 * KEPT_NAMESPACES as u32 - 1;
        assert!(kept.namespaces.contains_key(&last));
        // One evicted is made again when its base boots next.
        let before = made.get();
        get(&mut kept, 1);
        assert_eq!(made.get(), before + 1);
    }

    #[test]
    fn a_namespace_used_again_stays_while_others_go() {
        let mut kept = Kept::default();
        let make = || Ok(std::fs::File::open("/dev/null").unwrap().into());
        let hot = kept.get_or_make(7, make).unwrap();
        for base in 100..100 + 4 * KEPT_NAMESPACES as u32 {
            kept.get_or_make(base, make).unwrap();
            assert!(Arc::ptr_eq(&hot, &kept.get_or_make(7, make).unwrap()));
        }
    }

    #[test]
    fn with_support_a_range_is_the_sandboxes_own_and_no_range_the_storage_one() {
        let ranges = IdRanges {
            storage: 100_000,
            supported: true,
            namespaces: Mutex::default(),
        };
        assert_eq!(ranges.base_of(Some(0)).unwrap(), 165_536);
        assert_eq!(ranges.base_of(None).unwrap(), 100_000);
    }
}
