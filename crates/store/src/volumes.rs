//! Volumes (named storage that outlives sandboxes) and the mounts that put them in sandboxes.
//!
//! Contract (schema in migration 16):
//! - A volume's name is unique (`volumes.name`): [`WriteTx::insert_volume`] of a taken name is
//!   [`StoreError::VolumeExists`], and of racing inserts exactly one wins
//!   (`tests::racing_creates_of_one_name_yield_one_volume`).
//! - A mount names an existing sandbox and an existing volume, at most one per path of a sandbox
//!   (primary key), and goes with its sandbox (`ON DELETE CASCADE`).
//! - **A volume cannot be deleted while any sandbox mounts it**, by foreign key, not by check:
//!   [`WriteTx::delete_volume`] is [`StoreError::InUse`] then, and a volume being deleted can never
//!   gain a mount, because the delete and the mount are both single statements of the one writer
//!   (`tests::a_mounted_volume_cannot_be_deleted_until_its_sandboxes_are_gone`).
//! - "Who uses this volume" is a query ([`ReadTx::volume_users`]).

use rusqlite::{params, OptionalExtension, Row};
use std::collections::BTreeMap;

use crate::error::{is_foreign_key_violation, is_restricted_delete, is_unique_violation_on};
use crate::error::{Result, StoreError};
use crate::{ReadTx, UnixMillis, WriteTx};

/// A volume as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRecord {
    pub id: String,
    pub name: String,
    /// Its size limit in MiB; 0: none.
    pub size_mb: u64,
    pub labels: BTreeMap<String, String>,
    /// The bearer token of its file API (a capability for this volume only).
    pub token: String,
    pub created_at: UnixMillis,
}

/// One volume mounted in one sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeMountRecord {
    pub sandbox_id: String,
    pub volume_id: String,
    /// Where it appears inside the sandbox (absolute).
    pub path: String,
    /// The directory of the volume that is mounted, relative to its root; `""`: the root.
    pub subpath: String,
    pub read_only: bool,
}

const COLUMNS: &str = "id, name, size_mb, labels, created_at, token";

fn row(r: &Row<'_>) -> rusqlite::Result<VolumeRecord> {
    let labels: String = r.get(3)?;
    Ok(VolumeRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        size_mb: r.get::<_, i64>(2)?.max(0) as u64,
        labels: serde_json::from_str(&labels).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(3, rusqlite::types::Type::Text, Box::new(e))
        })?,
        created_at: r.get(4)?,
        token: r.get(5)?,
    })
}

fn mount_row(r: &Row<'_>) -> rusqlite::Result<VolumeMountRecord> {
    Ok(VolumeMountRecord {
        sandbox_id: r.get(0)?,
        volume_id: r.get(1)?,
        path: r.get(2)?,
        subpath: r.get(3)?,
        read_only: r.get(4)?,
    })
}

impl ReadTx<'_> {
    /// The volume whose id or name is `key` (an id wins).
    pub fn get_volume(&self, key: &str) -> Result<Option<VolumeRecord>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM volumes WHERE id = ?1 OR name = ?1 ORDER BY id = ?1 DESC LIMIT 1"
        );
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_row([key], row)
            .optional()?)
    }

    /// Every volume, oldest first.
    pub fn list_volumes(&self) -> Result<Vec<VolumeRecord>> {
        let sql = format!("SELECT {COLUMNS} FROM volumes ORDER BY created_at, id");
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_map([], row)?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// The mounts of sandbox `sandbox_id`, by path.
    pub fn sandbox_mounts(&self, sandbox_id: &str) -> Result<Vec<VolumeMountRecord>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT sandbox_id, volume_id, path, subpath, read_only FROM volume_mounts
                 WHERE sandbox_id = ?1 ORDER BY path",
            )?
            .query_map([sandbox_id], mount_row)?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// The mounts of volume `volume_id`: who uses it.
    pub fn volume_users(&self, volume_id: &str) -> Result<Vec<VolumeMountRecord>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT sandbox_id, volume_id, path, subpath, read_only FROM volume_mounts
                 WHERE volume_id = ?1 ORDER BY sandbox_id, path",
            )?
            .query_map([volume_id], mount_row)?
            .collect::<rusqlite::Result<_>>()?)
    }
}

impl WriteTx<'_> {
    /// Records a new volume; [`StoreError::VolumeExists`] when its name is taken.
    pub fn insert_volume(&mut self, volume: &VolumeRecord) -> Result<()> {
        let labels = serde_json::to_string(&volume.labels)
            .map_err(|e| StoreError::InvalidArgument(format!("labels: {e}")))?;
        self.conn()
            .prepare_cached(
                "INSERT INTO volumes (id, name, size_mb, labels, created_at, token)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                volume.id,
                volume.name,
                i64::try_from(volume.size_mb).unwrap_or(i64::MAX),
                labels,
                volume.created_at,
                volume.token
            ])
            .map_err(|e| {
                if is_unique_violation_on(&e, "volumes.name") {
                    StoreError::VolumeExists {
                        name: volume.name.clone(),
                    }
                } else {
                    StoreError::Sqlite(e)
                }
            })?;
        Ok(())
    }

    /// Deletes volume `id`; `false` if there was none; [`StoreError::InUse`] while a sandbox mounts
    /// it.
    pub fn delete_volume(&mut self, id: &str) -> Result<bool> {
        let deleted = self
            .conn()
            .prepare_cached("DELETE FROM volumes WHERE id = ?1")?
            .execute([id]);
        match deleted {
            Ok(n) => Ok(n == 1),
            Err(e) if is_restricted_delete(&e) => Err(StoreError::InUse {
                kind: "volume",
                key: id.to_string(),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// Records `mount`; [`StoreError::NotFound`] when its sandbox or its volume is gone (a volume
    /// deleted meanwhile among them), [`StoreError::InvalidArgument`] for a second mount at a path.
    pub fn insert_mount(&mut self, mount: &VolumeMountRecord) -> Result<()> {
        self.conn()
            .prepare_cached(
                "INSERT INTO volume_mounts (sandbox_id, volume_id, path, subpath, read_only)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                mount.sandbox_id,
                mount.volume_id,
                mount.path,
                mount.subpath,
                mount.read_only
            ])
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    StoreError::NotFound {
                        kind: "sandbox or volume",
                        key: format!("{} / {}", mount.sandbox_id, mount.volume_id),
                    }
                } else if is_unique_violation_on(&e, "volume_mounts.sandbox_id, volume_mounts.path")
                {
                    StoreError::InvalidArgument(format!(
                        "two mounts at {} in sandbox {}",
                        mount.path, mount.sandbox_id
                    ))
                } else {
                    StoreError::Sqlite(e)
                }
            })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{new_sandbox, open_temp};

    fn volume(id: &str, name: &str) -> VolumeRecord {
        VolumeRecord {
            id: id.into(),
            name: name.into(),
            size_mb: 64,
            labels: BTreeMap::from([("team".into(), "a".into())]),
            token: format!("token-of-{id}-0123456789abcdef0123456789"),
            created_at: 1,
        }
    }

    fn mount(sandbox: &str, volume: &str, path: &str) -> VolumeMountRecord {
        VolumeMountRecord {
            sandbox_id: sandbox.into(),
            volume_id: volume.into(),
            path: path.into(),
            subpath: String::new(),
            read_only: false,
        }
    }

    #[tokio::test]
    async fn racing_creates_of_one_name_yield_one_volume() {
        let (_dir, store, _thread) = open_temp();
        let attempts = (0..200).map(|n| {
            let w = store.writer().clone();
            tokio::spawn(async move {
                w.write(move |tx| tx.insert_volume(&volume(&format!("vol{n}"), "shared")))
                    .await
            })
        });
        let mut won = 0;
        for attempt in attempts {
            match attempt.await.unwrap() {
                Ok(()) => won += 1,
                Err(StoreError::VolumeExists { name }) => assert_eq!(name, "shared"),
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert_eq!(won, 1);
        let all = store.reader().read(|tx| tx.list_volumes()).await.unwrap();
        assert_eq!(all.len(), 1);
        let found = store
            .reader()
            .read(|tx| tx.get_volume("shared"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found, all[0]);
        assert_eq!(found.labels["team"], "a");
    }

    #[tokio::test]
    async fn a_mounted_volume_cannot_be_deleted_until_its_sandboxes_are_gone() {
        let (_dir, store, _thread) = open_temp();
        let w = store.writer();
        w.write(|tx| {
            tx.insert_sandbox(new_sandbox("sb1", "", 1))?;
            tx.insert_sandbox(new_sandbox("sb2", "", 1))?;
            tx.insert_volume(&volume("v1", "data"))?;
            tx.insert_mount(&mount("sb1", "v1", "/data"))?;
            tx.insert_mount(&mount("sb2", "v1", "/mnt/data"))
        })
        .await
        .unwrap();
        let users = store
            .reader()
            .read(|tx| tx.volume_users("v1"))
            .await
            .unwrap();
        assert_eq!(users.len(), 2);
        let refused = w.write(|tx| tx.delete_volume("v1")).await;
        assert!(matches!(
            refused,
            Err(StoreError::InUse { kind: "volume", .. })
        ));
        // One path holds one mount.
        let twice = w
            .write(|tx| tx.insert_mount(&mount("sb1", "v1", "/data")))
            .await;
        assert!(matches!(twice, Err(StoreError::InvalidArgument(_))));
        w.write(|tx| tx.delete_sandbox("sb1")).await.unwrap();
        assert!(matches!(
            w.write(|tx| tx.delete_volume("v1")).await,
            Err(StoreError::InUse { .. })
        ));
        w.write(|tx| tx.delete_sandbox("sb2")).await.unwrap();
        assert!(w.write(|tx| tx.delete_volume("v1")).await.unwrap());
        // A mount of a volume that is gone is refused, and so leaves nothing.
        let orphan = w
            .write(|tx| {
                tx.insert_sandbox(new_sandbox("sb3", "", 1))?;
                tx.insert_mount(&mount("sb3", "v1", "/data"))
            })
            .await;
        assert!(matches!(orphan, Err(StoreError::NotFound { .. })));
        assert!(store
            .reader()
            .read(|tx| tx.sandbox_mounts("sb3"))
            .await
            .unwrap()
            .is_empty());
    }
}
