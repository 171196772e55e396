//! Volumes: named storage that outlives sandboxes, and mounting them in sandboxes.
//!
//! Contract:
//! - A volume is a row (`sandboxd_store::volumes`: names unique, none deleted while mounted) and a
//!   directory the runtime keeps under the disk quota ([`sandboxd_runtime::volumes`]). Create makes
//!   the directory first and then the row, removing the directory if the row is refused; delete
//!   removes the row first (refused with 409 while any sandbox mounts it) and then the directory. A
//!   crash between the two leaves a directory without a row, which [`Service::sweep_volumes`]
//!   removes at the next start: a row never names a missing directory.
//! - A create that mounts volumes records its mounts in the transaction that inserts the sandbox,
//!   so a volume deleted meanwhile fails the create (404, nothing made) and a recorded mount always
//!   has its volume.
//! - Cluster mode: a volume lives on the node that made it. Its name is claimed in the log before
//!   anything is made (unique across the cluster) and released when it is deleted; the log's
//!   record places every create that mounts it on its node (`sandboxd_cluster::placement`).
//! - Mount paths are checked before anything is made ([`sandboxd_volumes::check_mounts`]); the
//!   subpath of a mount is made in the volume if missing (never through a link).
//! - The volume file API works on the directory from the host, through [`sandboxd_volumes::Volume`]:
//!   no link a sandbox planted is ever followed.

use crate::sandboxes::random_id;
use crate::timestamps::rfc3339;
use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use sandboxd_runtime::VolumeBind;
use sandboxd_store::{unix_millis_now, StoreError, VolumeMountRecord, VolumeRecord};
use sandboxd_volumes::files::Attrs;

/// Trees inside a sandbox that belong to the daemon (the agent, its call-home and shared
/// directories): no volume is mounted at, above or inside them.
const RESERVED: [&str; 1] = ["/.sandboxd"];
/// Bytes per chunk of a volume file read: few enough blocking reads to stream at disk speed.
const READ_CHUNK: usize = 1 << 20;
/// The largest size limit a volume may have, MiB (16 TiB).
const MAX_SIZE_MB: u64 = 16 << 20;

/// A mount asked for on create, checked ([`plan_mounts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedMount {
    /// The volume's name or id.
    pub volume: String,
    /// Where, normalised.
    pub path: String,
    /// The volume's directory to mount, normalised (`""`: the root).
    pub subpath: String,
    pub read_only: bool,
}

/// Checks the mounts of a create: paths that hide nothing and do not overlap, subpaths inside the
/// volume. Every surface's create goes through here.
pub fn plan_mounts(mounts: &[api::VolumeMount]) -> Result<Vec<PlannedMount>, ServiceError> {
    if mounts.len() > 16 {
        return Err(ServiceError::InvalidRequest(
            "at most 16 volumes per sandbox".into(),
        ));
    }
    let paths: Vec<&str> = mounts.iter().map(|m| m.path.as_str()).collect();
    let paths = sandboxd_volumes::check_mounts(&paths, &RESERVED)
        .map_err(|e| ServiceError::InvalidRequest(e.to_string()))?;
    mounts
        .iter()
        .zip(paths)
        .map(|(m, path)| {
            if m.name.is_empty() {
                return Err(ServiceError::InvalidRequest(format!(
                    "the volume mounted at {path} needs a name"
                )));
            }
            let subpath = sandboxd_volumes::RelPath::parse(m.subpath.as_deref().unwrap_or(""))
                .map_err(|e| ServiceError::InvalidRequest(format!("subpath: {e}")))?;
            Ok(PlannedMount {
                volume: m.name.clone(),
                path,
                subpath: subpath.components().join("/"),
                read_only: m.read_only,
            })
        })
        .collect()
}

/// Checks a volume name: 1 to 63 letters, digits, `-`, `_` or `.`, starting with a letter or digit.
pub fn validate_name(name: &str) -> Result<(), ServiceError> {
    let ok = (1..=63).contains(&name.len())
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ServiceError::InvalidRequest(format!(
            "invalid volume name {name:?}: use 1 to 63 letters, digits, '-', '_' or '.', starting \
             with a letter or digit"
        )))
    }
}

fn not_found(key: &str) -> ServiceError {
    ServiceError::NotFound(format!("volume {key:?} not found"))
}

/// The API's view of a volume.
pub fn volume_to_api(v: &VolumeRecord) -> api::Volume {
    api::Volume {
        id: v.id.clone(),
        name: v.name.clone(),
        size_mb: v.size_mb,
        labels: v.labels.clone(),
        created_at: rfc3339(v.created_at),
        used_bytes: None,
        mounts: None,
    }
}

/// The API's view of a volume entry.
pub fn entry_to_api(e: &sandboxd_volumes::Entry) -> api::VolumeEntry {
    use sandboxd_volumes::EntryKind;
    api::VolumeEntry {
        name: e.name.clone(),
        path: e.path.clone(),
        kind: match e.kind {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "other",
        }
        .into(),
        size: e.size,
        mode: e.mode,
        uid: e.uid,
        gid: e.gid,
        modified_at: rfc3339(e.mtime_ms),
        target: e.target.clone(),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ServiceError> + Send + 'static,
) -> Result<T, ServiceError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ServiceError::InvalidRequest(format!("volume operation panicked: {e}")))?
}

impl Service {
    /// Creates volume `req.name` (409 when the name is taken).
    pub async fn create_volume(
        &self,
        req: api::CreateVolume,
    ) -> Result<VolumeRecord, ServiceError> {
        validate_name(&req.name)?;
        let labels = req.labels.unwrap_or_default();
        crate::validate::metadata(&labels)?;
        let store = self.runtime().volumes()?;
        let size_mb = req.size_mb.unwrap_or(0);
        if let Some(size) = req.size_mb {
            if !(1..=MAX_SIZE_MB).contains(&size) {
                return Err(ServiceError::InvalidRequest(format!(
                    "sizeMB must be between 1 and {MAX_SIZE_MB}"
                )));
            }
            if !store.can_limit() {
                return Err(ServiceError::InvalidRequest(
                    "sizeMB cannot be enforced on this host (no disk quota backend: `sandboxd doctor` says why; docs/disk.md)"
                        .into(),
                ));
            }
        }
        let name = req.name.clone();
        if self
            .reader()
            .read_by_key(move |tx| tx.get_volume(&name))
            .await?
            .is_some_and(|v| v.name == req.name)
        {
            return Err(ServiceError::Conflict(format!(
                "volume {:?} already exists",
                req.name
            )));
        }
        let record = VolumeRecord {
            id: random_id("vol", 17),
            name: req.name,
            size_mb,
            labels,
            token: random_id("", 40),
            created_at: unix_millis_now(),
        };
        // Cluster mode: the name is the log's to give first (`crate::cluster`).
        self.claim_volume_name(&record.name, &record.id).await?;
        let (id, dir_store) = (record.id.clone(), store.clone());
        let made = blocking(move || {
            let limit = (size_mb > 0).then(|| size_mb.saturating_mul(1024 * 1024));
            dir_store.create(&id, limit).map(|_| ()).map_err(Into::into)
        })
        .await;
        if let Err(e) = made {
            self.release_volume_name(&record.name, &record.id).await;
            return Err(e);
        }
        let row = record.clone();
        if let Err(e) = self.writer().write(move |tx| tx.insert_volume(&row)).await {
            let id = record.id.clone();
            let _ = blocking(move || store.remove(&id).map_err(Into::into)).await;
            self.release_volume_name(&record.name, &record.id).await;
            return Err(match e {
                StoreError::VolumeExists { name } => {
                    ServiceError::Conflict(format!("volume {name:?} already exists"))
                }
                e => e.into(),
            });
        }
        Ok(record)
    }

    /// Creates volume `name` without a limit or labels (what the vendors' SDKs ask for).
    pub async fn create_named_volume(&self, name: String) -> Result<VolumeRecord, ServiceError> {
        self.create_volume(api::CreateVolume {
            name,
            size_mb: None,
            labels: None,
        })
        .await
    }

    /// Every volume, oldest first.
    pub async fn list_volumes(&self) -> Result<Vec<VolumeRecord>, ServiceError> {
        Ok(self.reader().read(|tx| tx.list_volumes()).await?)
    }

    /// Volume `key` (its name or id); 404 when there is none.
    pub async fn get_volume(&self, key: &str) -> Result<VolumeRecord, ServiceError> {
        let k = key.to_string();
        self.reader()
            .read_by_key(move |tx| tx.get_volume(&k))
            .await?
            .ok_or_else(|| not_found(key))
    }

    /// Volume `key` as the API shows one volume: with its usage and the sandboxes that mount it.
    pub async fn volume_detail(&self, key: &str) -> Result<api::Volume, ServiceError> {
        let record = self.get_volume(key).await?;
        let id = record.id.clone();
        let users = self.reader().read(move |tx| tx.volume_users(&id)).await?;
        let mut view = volume_to_api(&record);
        view.used_bytes = self.volume_used(&record.id).await;
        view.mounts = Some(
            users
                .into_iter()
                .map(|m| api::VolumeUser {
                    sandbox_id: m.sandbox_id,
                    path: m.path,
                    read_only: m.read_only,
                })
                .collect(),
        );
        Ok(view)
    }

    /// Bytes volume `id` holds, when the host measures it.
    pub async fn volume_used(&self, id: &str) -> Option<u64> {
        self.volume_usage(id).await.map(|u| u.used_bytes)
    }

    /// Usage and limit of volume `id`, when the host measures them.
    pub async fn volume_usage(&self, id: &str) -> Option<sandboxd_runtime::DiskUsage> {
        let store = self.runtime().volumes().ok()?;
        let id = id.to_string();
        blocking(move || Ok(store.usage(&id)?)).await.ok().flatten()
    }

    /// Deletes volume `key` with its files; 409 naming the sandboxes while any mounts it (a deleted
    /// sandbox's teardown is waited for first, as a template removal does).
    pub async fn delete_volume(&self, key: &str) -> Result<(), ServiceError> {
        let record = self.get_volume(key).await?;
        // Deleted sandboxes that mounted it hold it until their teardown removes their rows.
        let id = record.id.clone();
        let users: std::collections::HashSet<String> = self
            .reader()
            .read(move |tx| tx.volume_users(&id))
            .await?
            .into_iter()
            .map(|m| m.sandbox_id)
            .collect();
        self.await_teardowns(&format!("volume {:?}", record.name), move |s| {
            users.contains(&s.id)
        })
        .await?;
        let id = record.id.clone();
        let deleted = self.writer().write(move |tx| tx.delete_volume(&id)).await;
        match deleted {
            Ok(_) => {}
            Err(StoreError::InUse { .. }) => {
                let id = record.id.clone();
                let users = self.reader().read(move |tx| tx.volume_users(&id)).await?;
                let mut names: Vec<String> = users.into_iter().map(|m| m.sandbox_id).collect();
                names.dedup();
                return Err(ServiceError::Conflict(format!(
                    "volume {:?} is mounted by sandbox {}; delete those first",
                    record.name,
                    names.join(", ")
                )));
            }
            Err(e) => return Err(e.into()),
        }
        self.release_volume_name(&record.name, &record.id).await;
        let store = self.runtime().volumes()?;
        let id = record.id.clone();
        blocking(move || Ok(store.remove(&id)?)).await
    }

    /// Removes the directories of volumes that have no row (a create or delete a crash cut short),
    /// and gives the volumes whose row outlived their directory (a data dir restored from a backup)
    /// their directory again, with the files the restore staged. Run at start, before anything is
    /// served; returns how many directories went.
    pub async fn sweep_volumes(&self) -> Result<usize, ServiceError> {
        let Ok(store) = self.runtime().volumes() else {
            return Ok(0);
        };
        let records: std::collections::HashMap<String, u64> = self
            .list_volumes()
            .await?
            .into_iter()
            .map(|v| (v.id, v.size_mb))
            .collect();
        blocking(move || {
            let mut removed = 0;
            for id in store.ids()? {
                if !records.contains_key(&id) {
                    tracing::info!(volume = %id, "removing the files of a volume without a record");
                    store.remove(&id)?;
                    removed += 1;
                }
            }
            for (id, size_mb) in &records {
                let limit = (*size_mb > 0).then(|| size_mb.saturating_mul(1024 * 1024));
                if store.reinstate(id, limit)? {
                    tracing::info!(volume = %id, "gave a volume with a record its directory back");
                }
            }
            Ok(removed)
        })
        .await
    }

    /// Volume `id`'s files for a caller holding `token`, its file API's token (E2B's volume content
    /// API authenticates so); 404 for an unknown volume, 401 for a wrong token.
    pub async fn volume_files_with_token(
        &self,
        id: &str,
        token: &str,
    ) -> Result<VolumeFiles, ServiceError> {
        use subtle::ConstantTimeEq;
        let files = self.volume_files(id).await?;
        if files.record.id != id {
            return Err(not_found(id));
        }
        if !bool::from(files.record.token.as_bytes().ct_eq(token.as_bytes())) {
            return Err(ServiceError::Unauthorized(format!(
                "the token is not volume {id}'s"
            )));
        }
        Ok(files)
    }

    /// Volume `key`'s files, for the volume file API.
    pub async fn volume_files(&self, key: &str) -> Result<VolumeFiles, ServiceError> {
        let record = self.get_volume(key).await?;
        let store = self.runtime().volumes()?;
        Ok(VolumeFiles {
            volume: sandboxd_volumes::Volume::new(store.root(&record.id), store.storage_base()),
            record,
        })
    }

    /// Resolves a create's planned mounts for sandbox `sandbox_id`: the rows to record and what
    /// the runtime mounts; 404 for an unknown volume. Subpaths are made if missing.
    pub(crate) async fn resolve_mounts(
        &self,
        sandbox_id: &str,
        planned: &[PlannedMount],
    ) -> Result<(Vec<VolumeMountRecord>, Vec<VolumeBind>), ServiceError> {
        let mut rows = Vec::new();
        let mut binds = Vec::new();
        for m in planned {
            let volume = self.get_volume(&m.volume).await?;
            if !m.subpath.is_empty() {
                let files = self.volume_files(&volume.id).await?;
                let subpath = m.subpath.clone();
                blocking(move || {
                    files
                        .volume
                        .mkdir(&subpath, true, Attrs::default())
                        .map(|_| ())
                        .map_err(ServiceError::from)
                })
                .await?;
            }
            rows.push(VolumeMountRecord {
                sandbox_id: sandbox_id.to_string(),
                volume_id: volume.id.clone(),
                path: m.path.clone(),
                subpath: m.subpath.clone(),
                read_only: m.read_only,
            });
            binds.push(VolumeBind {
                volume_id: volume.id,
                target: m.path.clone().into(),
                subpath: m.subpath.clone(),
                read_only: m.read_only,
            });
        }
        Ok((rows, binds))
    }

    /// The volumes sandbox `id` mounts, by name, as the API shows them.
    pub async fn sandbox_volumes(&self, id: &str) -> Result<Vec<api::VolumeMount>, ServiceError> {
        let id = id.to_string();
        let mounts = self
            .reader()
            .read(move |tx| {
                tx.sandbox_mounts(&id)?
                    .into_iter()
                    .map(|m| {
                        let name = tx.get_volume(&m.volume_id)?.map(|v| v.name);
                        Ok((m, name))
                    })
                    .collect::<Result<Vec<_>, StoreError>>()
            })
            .await?;
        Ok(mounts
            .into_iter()
            .map(|(m, name)| api::VolumeMount {
                name: name.unwrap_or(m.volume_id),
                path: m.path,
                read_only: m.read_only,
                subpath: (!m.subpath.is_empty()).then_some(m.subpath),
            })
            .collect())
    }
}

/// A volume's files, for the file API: every call blocks, so run them with [`VolumeFiles::run`].
#[derive(Debug, Clone)]
pub struct VolumeFiles {
    pub record: VolumeRecord,
    volume: sandboxd_volumes::Volume,
}

impl VolumeFiles {
    /// Runs `op` on the volume's files on a blocking thread ([`ServiceError::Volume`] when it
    /// fails).
    pub async fn run<T: Send + 'static>(
        &self,
        op: impl FnOnce(&sandboxd_volumes::Volume) -> Result<T, sandboxd_volumes::VolumeError>
            + Send
            + 'static,
    ) -> Result<T, ServiceError> {
        let volume = self.volume.clone();
        blocking(move || op(&volume).map_err(ServiceError::from)).await
    }

    /// Writes the bytes of `body` to file `path` (see [`sandboxd_volumes::Volume::write`]); a body
    /// that fails midway leaves no partial file.
    pub async fn write<S>(
        &self,
        path: String,
        body: S,
        opts: sandboxd_volumes::WriteOpts,
    ) -> Result<sandboxd_volumes::Entry, ServiceError>
    where
        S: futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static,
    {
        // Read on the blocking thread, each chunk awaited on this runtime.
        let mut reader =
            tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(Box::pin(body)));
        self.run(move |v| v.write(&path, &mut reader, opts)).await
    }

    /// File `path`'s bytes as a stream of large chunks (each read is a blocking call of its own),
    /// with its size.
    pub async fn read(
        &self,
        path: String,
    ) -> Result<
        (
            impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static,
            u64,
        ),
        ServiceError,
    > {
        let file = self.run(move |v| v.read(&path)).await?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let file = tokio::fs::File::from_std(file);
        Ok((
            tokio_util::io::ReaderStream::with_capacity(file, READ_CHUNK),
            size,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(name: &str, path: &str) -> api::VolumeMount {
        api::VolumeMount {
            name: name.into(),
            path: path.into(),
            ..Default::default()
        }
    }

    #[test]
    fn mounts_are_checked_together_before_anything_is_made() {
        let planned = plan_mounts(&[
            mount("data", "/data/"),
            api::VolumeMount {
                subpath: Some("/a//b/".into()),
                read_only: true,
                ..mount("cache", "/home/user/.cache")
            },
        ])
        .unwrap();
        assert_eq!(planned[0].path, "/data");
        assert_eq!(planned[1].subpath, "a/b");
        assert!(planned[1].read_only);
        for bad in [
            vec![mount("d", "/")],
            vec![mount("d", "/etc")],
            vec![mount("d", "/proc/x")],
            vec![mount("d", "/.sandboxd")],
            vec![mount("d", "/data"), mount("e", "/data/x")],
            vec![mount("", "/data")],
            vec![api::VolumeMount {
                subpath: Some("../x".into()),
                ..mount("d", "/data")
            }],
        ] {
            let err = plan_mounts(&bad).unwrap_err();
            assert!(
                matches!(err, ServiceError::InvalidRequest(_)),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn volume_names_are_plain() {
        for ok in ["data", "my-vol_1.2", "A"] {
            validate_name(ok).unwrap();
        }
        for bad in ["", "-x", ".x", "a/b", "a b", &"x".repeat(64)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }
}
