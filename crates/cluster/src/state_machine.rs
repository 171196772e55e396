//! openraft's state machine over [`ClusterState`], and its snapshots.
//!
//! Contract:
//! - The state lives in memory and is rebuilt on start from the last snapshot plus the log after it
//!   (openraft replays committed entries the state machine has not applied). Each applied entry
//!   answers exactly one [`Outcome`], in order; blank and membership entries answer
//!   [`Outcome::Unchanged`].
//! - A snapshot is the JSON of the applied state (state, last applied id, membership). Building or
//!   installing one also writes it to `<dir>/snapshot.json` (a temporary file, fsynced, then renamed),
//!   so a restart never needs entries the log already purged.
//! - Readers ([`SharedState`]) see the state as of the last applied entry; they may lag the leader.

use crate::state::{ClusterState, Member, NodeId, Outcome};
use crate::{Entry, TypeConfig};
use openraft::storage::RaftStateMachine;
use openraft::{
    EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError, StorageIOError,
    StoredMembership,
};
use serde::{Deserialize, Serialize};
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

type Result<T> = std::result::Result<T, StorageError<NodeId>>;

/// What the state machine has applied.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Applied {
    /// The last entry applied.
    pub last_applied: Option<LogId<NodeId>>,
    /// The last membership applied.
    pub membership: StoredMembership<NodeId, Member>,
    /// The state.
    pub state: ClusterState,
}

/// A read handle on the applied state.
#[derive(Clone, Default)]
pub struct SharedState(Arc<RwLock<Applied>>);

impl SharedState {
    /// Runs `f` on the state as last applied.
    pub fn read<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> R {
        f(&self.0.read().unwrap_or_else(|p| p.into_inner()).state)
    }

    fn get(&self) -> std::sync::RwLockReadGuard<'_, Applied> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    fn get_mut(&self) -> std::sync::RwLockWriteGuard<'_, Applied> {
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, Member>,
    data: Vec<u8>,
}

/// The state machine of one node. Cloning shares it.
#[derive(Clone)]
pub struct StateMachineStore {
    applied: SharedState,
    current: Arc<Mutex<Option<Arc<StoredSnapshot>>>>,
    snapshots_built: Arc<AtomicU64>,
    dir: PathBuf,
}

fn read_error(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::read_state_machine(&e).into()
}

fn write_error(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write_state_machine(&e).into()
}

impl StateMachineStore {
    /// Opens the state machine whose snapshots live in `dir`, restoring the last one.
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(write_error)?;
        let store = Self {
            applied: SharedState::default(),
            current: Default::default(),
            snapshots_built: Default::default(),
            dir: dir.to_path_buf(),
        };
        match std::fs::read(store.snapshot_path()) {
            Ok(bytes) => {
                let snapshot: StoredSnapshot =
                    serde_json::from_slice(&bytes).map_err(read_error)?;
                *store.applied.get_mut() =
                    serde_json::from_slice(&snapshot.data).map_err(read_error)?;
                *store.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(snapshot));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(read_error(e)),
        }
        Ok(store)
    }

    /// The read handle.
    pub fn shared(&self) -> SharedState {
        self.applied.clone()
    }

    fn snapshot_path(&self) -> PathBuf {
        self.dir.join("snapshot.json")
    }

    /// Keeps `snapshot` as the current one, on disk first.
    fn keep(&self, snapshot: StoredSnapshot) -> Result<()> {
        let tmp = self.dir.join("snapshot.json.tmp");
        let bytes = serde_json::to_vec(&snapshot).map_err(write_error)?;
        let mut file = std::fs::File::create(&tmp).map_err(write_error)?;
        file.write_all(&bytes).map_err(write_error)?;
        file.sync_all().map_err(write_error)?;
        std::fs::rename(&tmp, self.snapshot_path()).map_err(write_error)?;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(snapshot));
        Ok(())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>> {
        let (data, last_log_id, last_membership) = {
            let applied = self.applied.get();
            let data = serde_json::to_vec(&*applied).map_err(read_error)?;
            (data, applied.last_applied, applied.membership.clone())
        };
        let n = self.snapshots_built.fetch_add(1, Ordering::Relaxed) + 1;
        let snapshot_id = match last_log_id {
            Some(id) => format!("{}-{}-{n}", id.leader_id, id.index),
            None => format!("none-{n}"),
        };
        let meta = SnapshotMeta {
            last_log_id,
            last_membership,
            snapshot_id,
        };
        self.keep(StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        })?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, Member>)> {
        let applied = self.applied.get();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut applied = self.applied.get_mut();
        let mut outcomes = Vec::new();
        for entry in entries {
            applied.last_applied = Some(entry.log_id);
            let outcome = match entry.payload {
                EntryPayload::Blank => Outcome::Unchanged,
                EntryPayload::Normal(command) => applied.state.apply(&command),
                EntryPayload::Membership(membership) => {
                    applied.membership = StoredMembership::new(Some(entry.log_id), membership);
                    Outcome::Unchanged
                }
            };
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Member>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<()> {
        let data = snapshot.into_inner();
        let mut restored: Applied = serde_json::from_slice(&data).map_err(read_error)?;
        restored.last_applied = meta.last_log_id;
        restored.membership = meta.last_membership.clone();
        self.keep(StoredSnapshot {
            meta: meta.clone(),
            data,
        })?;
        *self.applied.get_mut() = restored;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>> {
        let current = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Ok(current.map(|s| Snapshot {
            meta: s.meta.clone(),
            snapshot: Box::new(Cursor::new(s.data.clone())),
        }))
    }
}
