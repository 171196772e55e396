//! Where volumes live on the host, and their disk quota.
//!
//! Contract: volume `id` (validated like a sandbox id) is the directory `data/` of the accounting
//! unit `vol.<id>` of the runtime's disk quota ([`crate::quota`]), so a volume is limited by the
//! same backend as sandboxes' writable layers (an XFS project, a btrfs subvolume with a qgroup);
//! with no backend it is a plain directory there and cannot be limited. A sandbox id never contains
//! `.`, so no volume's unit is ever a sandbox's. `data/` is owned by the sandbox `user` of the
//! storage range (host id `storage + 1000`, mode 0755): every sandbox sees it as its own `user`'s,
//! through the idmapped mount its runtime gives it. A failed [`VolumeStore::create`] leaves nothing.
//! A volume whose record outlived its directory (a data dir restored from a backup) gets it back
//! with [`VolumeStore::reinstate`], filled from what the restore staged in [`RESTORED_DIR`].

use crate::quota::{DiskBackend, DiskQuota, DiskUsage};
use crate::RuntimeError;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::Arc;

/// The prefix of a volume's accounting unit in the quota's directory.
const UNIT_PREFIX: &str = "vol.";
/// Where, in the runtime's state directory, a restore stages each volume's files (`<id>/`) until
/// the volume is reinstated in its quota unit.
pub const RESTORED_DIR: &str = "restored-volumes";
/// The sandbox id of the user that owns a new volume's root.
const VOLUME_OWNER: u32 = 1000;

/// The volumes of one runtime.
pub struct VolumeStore {
    quota: Arc<DiskQuota>,
    storage: u32,
    /// [`RESTORED_DIR`] of the runtime's state directory.
    restored: PathBuf,
}

impl VolumeStore {
    pub(crate) fn new(quota: Arc<DiskQuota>, storage: u32, restored: PathBuf) -> Self {
        Self {
            quota,
            storage,
            restored,
        }
    }

    fn unit(id: &str) -> String {
        format!("{UNIT_PREFIX}{id}")
    }

    /// The host id a sandbox's id 0 is stored as in every volume.
    pub fn storage_base(&self) -> u32 {
        self.storage
    }

    /// Whether volumes can have a size limit on this host.
    pub fn can_limit(&self) -> bool {
        self.quota.backend() != DiskBackend::Off
    }

    /// The root of volume `id`'s tree (what sandboxes mount).
    pub fn root(&self, id: &str) -> PathBuf {
        self.quota.layer(&Self::unit(id)).join("data")
    }

    /// Makes volume `id` with a limit of `limit_bytes` (none when `None`); returns its root.
    pub fn create(&self, id: &str, limit_bytes: Option<u64>) -> Result<PathBuf, RuntimeError> {
        crate::validate_id(id)?;
        let unit = Self::unit(id);
        if limit_bytes.is_some() && !self.can_limit() {
            return Err(RuntimeError::Unsupported(
                "a volume size limit: this host has no disk quota backend".into(),
            ));
        }
        let layer = match self.quota.create(&unit, limit_bytes)? {
            Some(layer) => layer,
            None => {
                let layer = self.quota.layer(&unit);
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&layer)
                    .map_err(RuntimeError::io("create", &layer))?;
                layer
            }
        };
        let root = layer.join("data");
        let made = std::fs::DirBuilder::new()
            .mode(0o755)
            .create(&root)
            .map_err(RuntimeError::io("create", &root))
            .and_then(|()| {
                let owner = self.storage + VOLUME_OWNER;
                std::os::unix::fs::lchown(&root, Some(owner), Some(owner))
                    .map_err(RuntimeError::io("chown", &root))
            });
        if let Err(e) = made {
            let _ = self.remove(id);
            return Err(e);
        }
        Ok(root)
    }

    /// Gives volume `id`, whose record exists, its directory when it has none (limited to
    /// `limit_bytes` where the host can limit), and moves in what a restore staged for it; returns
    /// whether there was anything to do. A copy cut short keeps the staged files, and the next call
    /// copies them again.
    pub fn reinstate(&self, id: &str, limit_bytes: Option<u64>) -> Result<bool, RuntimeError> {
        crate::validate_id(id)?;
        let staged = self.restored.join(id);
        let root = self.root(id);
        let has_root = root.is_dir();
        if has_root && !staged.exists() {
            return Ok(false);
        }
        if !has_root {
            self.create(id, limit_bytes.filter(|_| self.can_limit()))?;
        }
        if staged.is_dir() {
            let copied = std::process::Command::new("cp")
                .arg("-a")
                .arg("--reflink=auto")
                .arg("--")
                .arg(staged.join("."))
                .arg(&root)
                .stdin(std::process::Stdio::null())
                .output()
                .map_err(RuntimeError::Spawn)?;
            if !copied.status.success() {
                return Err(RuntimeError::Host(format!(
                    "copying the restored files of volume {id} failed: {}",
                    String::from_utf8_lossy(&copied.stderr).trim()
                )));
            }
            std::fs::remove_dir_all(&staged).map_err(RuntimeError::io("remove", &staged))?;
        }
        Ok(true)
    }

    /// Removes volume `id` with everything in it (links inside are removed, never followed).
    /// Idempotent.
    pub fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        crate::validate_id(id)?;
        let unit = Self::unit(id);
        self.quota.remove(&unit)?;
        let layer = self.quota.layer(&unit);
        match std::fs::remove_dir_all(&layer) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(RuntimeError::io("remove", &layer)(e))
            }
            _ => Ok(()),
        }
    }

    /// Usage and limit of volume `id`; `None` when the host cannot measure it (no backend).
    pub fn usage(&self, id: &str) -> Result<Option<DiskUsage>, RuntimeError> {
        crate::validate_id(id)?;
        if !self.can_limit() {
            return Ok(None);
        }
        Ok(self.quota.usage(&Self::unit(id))?)
    }

    /// The ids of every volume on the host.
    pub fn ids(&self) -> Result<Vec<String>, RuntimeError> {
        let dir = self.quota.layer("");
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(RuntimeError::io("list", &dir)(e)),
        };
        Ok(entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix(UNIT_PREFIX))
                    .map(str::to_string)
            })
            .collect())
    }
}
