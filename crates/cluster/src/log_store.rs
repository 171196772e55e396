//! The durable Raft log: entries, the vote and the committed id, in a SQLite file of the node's own.
//!
//! Contract (openraft's `RaftLogStorage`, checked by its own storage suite in `tests/storage_suite.rs`):
//! - **Durable before acknowledged.** Every write is one SQLite transaction in WAL mode with
//!   `synchronous = FULL`, so it is on disk (fsynced) when the call returns; an append reports
//!   `log_io_completed` only after its transaction committed. A vote or an entry a node acknowledged
//!   survives kill -9 and power loss.
//! - Entries are stored as JSON under their index; a truncate removes an index and everything after
//!   it, a purge everything up to it and remembers the purged id.
//!
//! The connection belongs to this module alone (the log is not the daemon's store); each call runs on
//! a blocking thread, so an fsync never stalls the async workers.

use crate::state::NodeId;
use crate::{Entry, TypeConfig};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogId, LogState, RaftLogReader, StorageError, StorageIOError, Vote};
use rusqlite::{params, Connection, OptionalExtension};
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS log (idx INTEGER PRIMARY KEY, entry TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
";

/// The log of one node. Cloning shares it (openraft reads through clones while it appends).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Mutex<Connection>>,
}

type Result<T> = std::result::Result<T, StorageError<NodeId>>;

fn io_error(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write_logs(&e).into()
}

impl LogStore {
    /// Opens (or creates) the log at `path`.
    pub fn open(path: &Path) -> std::result::Result<Self, rusqlite::Error> {
        let db = Connection::open(path)?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "FULL")?;
        db.execute_batch(SCHEMA)?;
        Ok(Self {
            db: Arc::new(Mutex::new(db)),
        })
    }

    /// Runs `f` on the connection on a blocking thread.
    async fn with_db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || {
            let mut db = db.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&mut db)
        })
        .await
        .map_err(io_error)?
        .map_err(io_error)
    }

    async fn get_meta<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        key: &'static str,
    ) -> Result<Option<T>> {
        let value: Option<String> = self
            .with_db(move |db| {
                db.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
                    .optional()
            })
            .await?;
        value
            .map(|v| serde_json::from_str(&v).map_err(io_error))
            .transpose()
    }

    async fn set_meta(&self, key: &'static str, value: &impl serde::Serialize) -> Result<()> {
        let value = serde_json::to_string(value).map_err(io_error)?;
        self.with_db(move |db| {
            db.execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )
            .map(drop)
        })
        .await
    }
}

fn bounds(range: &impl RangeBounds<u64>) -> (i64, i64) {
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let start = match range.start_bound() {
        Bound::Included(&v) => clamp(v),
        Bound::Excluded(&v) => clamp(v).saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&v) => clamp(v),
        Bound::Excluded(&v) => clamp(v).saturating_sub(1),
        Bound::Unbounded => i64::MAX,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>> {
        let (start, end) = bounds(&range);
        let rows: Vec<String> = self
            .with_db(move |db| {
                let mut stmt = db.prepare_cached(
                    "SELECT entry FROM log WHERE idx >= ?1 AND idx <= ?2 ORDER BY idx",
                )?;
                let rows = stmt.query_map([start, end], |r| r.get(0))?;
                rows.collect()
            })
            .await?;
        rows.iter()
            .map(|e| serde_json::from_str(e).map_err(io_error))
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>> {
        let last_purged: Option<LogId<NodeId>> = self.get_meta("last_purged").await?;
        let last: Option<String> = self
            .with_db(|db| {
                db.query_row("SELECT entry FROM log ORDER BY idx DESC LIMIT 1", [], |r| {
                    r.get(0)
                })
                .optional()
            })
            .await?;
        let last_log_id = match last {
            Some(e) => Some(serde_json::from_str::<Entry>(&e).map_err(io_error)?.log_id),
            None => last_purged,
        };
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<()> {
        self.set_meta("vote", vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>> {
        self.get_meta("vote").await
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<()> {
        self.set_meta("committed", &committed).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>> {
        Ok(self
            .get_meta::<Option<LogId<NodeId>>>("committed")
            .await?
            .flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<()>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let rows = entries
            .into_iter()
            .map(|e| {
                Ok((
                    e.log_id.index as i64,
                    serde_json::to_string(&e).map_err(io_error)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let written = self
            .with_db(move |db| {
                let tx = db.transaction()?;
                {
                    let mut stmt = tx.prepare_cached(
                        "INSERT OR REPLACE INTO log (idx, entry) VALUES (?1, ?2)",
                    )?;
                    for (idx, entry) in &rows {
                        stmt.execute(params![idx, entry])?;
                    }
                }
                tx.commit()
            })
            .await;
        // Committed means fsynced (`synchronous = FULL`): only now is the append acknowledged.
        match &written {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        written
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<()> {
        let from = log_id.index as i64;
        self.with_db(move |db| {
            db.execute("DELETE FROM log WHERE idx >= ?1", [from])
                .map(drop)
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<()> {
        self.set_meta("last_purged", &log_id).await?;
        let upto = log_id.index as i64;
        self.with_db(move |db| {
            db.execute("DELETE FROM log WHERE idx <= ?1", [upto])
                .map(drop)
        })
        .await
    }
}
