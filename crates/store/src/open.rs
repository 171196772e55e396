//! Opening the store: pragmas, migrations, the writer thread and the reader pool.
//!
//! Contract: [`Store::open`] returns only after the database is in WAL mode with `foreign_keys=ON`, the
//! configured `synchronous` level and `busy_timeout`, and the schema is migrated to the newest version this
//! build knows (or it fails: [`StoreError::SchemaTooNew`], [`StoreError::Migration`]). The write connection
//! is then moved into the writer thread; nothing else in the process opens a writable connection.
//!
//! Connection lifecycle: every open and close of a store connection happens under one process-wide lock
//! ([`lifecycle_lock`]). SQLite 3.51.1 (bundled by rusqlite 0.38) has an ABBA lock-order inversion in its
//! unix VFS between the global VFS mutex and a per-inode mutex, hit when two connections to one file are
//! opened/closed concurrently (rusqlite issue #1860, fixed in SQLite 3.51.2): our writer thread closing
//! its connection while the last reader handle drops on another thread deadlocked. Serialising opens and
//! closes removes the overlap; steady-state reads and writes are not affected.
//!
//! Assumes: `path` is a file on a local filesystem (WAL needs shared memory); the parent directory exists.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::error::{Result, StoreError};
use crate::migrations::{migrate, MIGRATIONS};
use crate::reader::StoreReader;
use crate::writer::{spawn, StoreWriter, WriterThread};

/// SQLite's `synchronous` pragma. `Full` (the default) fsyncs the WAL on every commit: an acknowledged
/// write survives power loss. Group commit makes that one fsync per batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    Off,
    Normal,
    #[default]
    Full,
    Extra,
}

impl Synchronous {
    fn pragma_value(self) -> &'static str {
        match self {
            Synchronous::Off => "OFF",
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
            Synchronous::Extra => "EXTRA",
        }
    }
}

/// Store tuning. Every field has a documented default ([`StoreConfig::default`]).
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Durability of a commit. Default: [`Synchronous::Full`].
    pub synchronous: Synchronous,
    /// How long a connection waits on a lock held by another process before failing. Default: 5 s.
    pub busy_timeout: Duration,
    /// Number of read-only connections in the reader pool. Default: 4.
    pub readers: usize,
    /// Most requests run in one group-commit transaction. Default: 256.
    pub max_batch: usize,
    /// Requests that may wait in the writer's queue before `write` callers wait to enqueue. Default: 4096.
    pub queue_capacity: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            readers: 4,
            max_batch: 256,
            queue_capacity: 4096,
        }
    }
}

/// The opened store: a writer handle and a reader handle. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    writer: StoreWriter,
    reader: StoreReader,
}

impl Store {
    /// Opens (creating if needed) and migrates the database at `path`, starts the writer thread and the
    /// reader pool. The returned [`WriterThread`] lets a shutdown wait for the last batch to commit.
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<(Store, WriterThread)> {
        let path = path.as_ref();
        // Declared first so it is released last: connections dropped by an early return close under it.
        let lifecycle = lifecycle_lock();
        let conn = open_writer_connection(path, &config)?;
        let version = migrate(&conn, MIGRATIONS, crate::unix_millis_now())?;
        let readers =
            crate::reader::open_read_only_connections(path, config.readers, config.busy_timeout)?;
        drop(lifecycle);
        tracing::debug!(path = %path.display(), version, "store opened");
        let reader = StoreReader::from_connections(readers);
        let (writer, thread) = spawn(conn, config.max_batch, config.queue_capacity)?;
        Ok((Store { writer, reader }, thread))
    }

    /// The write handle (clone it freely).
    pub fn writer(&self) -> &StoreWriter {
        &self.writer
    }

    /// The read handle (clone it freely).
    pub fn reader(&self) -> &StoreReader {
        &self.reader
    }
}

/// Held while a store connection is opened or closed (see the module docs).
pub(crate) fn lifecycle_lock() -> MutexGuard<'static, ()> {
    static LIFECYCLE: Mutex<()> = Mutex::new(());
    LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn open_writer_connection(path: &Path, config: &StoreConfig) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(config.busy_timeout)?;
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::NotWal(mode));
    }
    conn.pragma_update(None, "synchronous", config.synchronous.pragma_value())?;
    conn.pragma_update(None, "foreign_keys", true)?;
    conn.set_prepared_statement_cache_capacity(128);
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrations::latest_version;

    fn pragma_i64(c: &Connection, name: &str) -> i64 {
        c.pragma_query_value(None, name, |r| r.get(0)).unwrap()
    }

    #[tokio::test]
    async fn open_sets_wal_foreign_keys_and_synchronous() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let (store, _t) = Store::open(&path, StoreConfig::default()).unwrap();
        let (fk, sync) = store
            .writer()
            .write(|tx| {
                let c = tx.conn();
                Ok((pragma_i64(c, "foreign_keys"), pragma_i64(c, "synchronous")))
            })
            .await
            .unwrap();
        assert_eq!(fk, 1);
        assert_eq!(sync, 2, "FULL");
        let mode: String = Connection::open(&path)
            .unwrap()
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[tokio::test]
    async fn synchronous_is_configurable() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = StoreConfig {
            synchronous: Synchronous::Normal,
            ..StoreConfig::default()
        };
        let (store, _t) = Store::open(dir.path().join("s.db"), cfg).unwrap();
        let sync = store
            .writer()
            .write(|tx| Ok(pragma_i64(tx.conn(), "synchronous")))
            .await
            .unwrap();
        assert_eq!(sync, 1, "NORMAL");
    }

    /// Migration idempotence: opening the same file twice applies nothing the second time and keeps data.
    #[tokio::test]
    async fn reopening_is_idempotent_and_keeps_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        {
            let (store, thread) = Store::open(&path, StoreConfig::default()).unwrap();
            store
                .writer()
                .write(|tx| tx.record_delivery("kept", "k", None, 1))
                .await
                .unwrap();
            drop(store);
            tokio::task::spawn_blocking(move || thread.join().unwrap())
                .await
                .unwrap();
        }
        let (store, _t) = Store::open(&path, StoreConfig::default()).unwrap();
        let (rows, max, seen) = store
            .writer()
            .write(|tx| {
                let c = tx.conn();
                let rows: i64 =
                    c.query_row("SELECT COUNT(*) FROM schema_version", [], |r| r.get(0))?;
                let max: u32 =
                    c.query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))?;
                Ok((rows, max, tx.delivery_seen("kept")?))
            })
            .await
            .unwrap();
        assert_eq!(rows as usize, MIGRATIONS.len());
        assert_eq!(max, latest_version());
        assert!(seen);
    }

    /// Regression: closing the writer connection (writer thread) while the reader pool closes its
    /// connections (last handle dropped elsewhere) deadlocked inside SQLite 3.51.1's unix VFS. Churn
    /// through many open/use/drop cycles on several threads and require that they all finish.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn open_close_churn_does_not_deadlock() {
        let churn = |worker: usize| async move {
            for i in 0..40 {
                let dir = tempfile::tempdir().unwrap();
                let (store, _thread) =
                    Store::open(dir.path().join("s.db"), StoreConfig::default()).unwrap();
                let id = format!("{worker}-{i}");
                store
                    .writer()
                    .write(move |tx| tx.record_delivery(&id, "k", None, 1))
                    .await
                    .unwrap();
                store
                    .reader()
                    .read(|tx| tx.delivery_seen("x"))
                    .await
                    .unwrap();
                // Drop the handles without joining: the writer closes on its thread while the reader
                // pool closes here.
                drop(store);
            }
        };
        let all = futures_join((0..4).map(|w| tokio::spawn(churn(w))).collect());
        tokio::time::timeout(Duration::from_secs(120), all)
            .await
            .expect("store open/close churn deadlocked");
    }

    async fn futures_join(handles: Vec<tokio::task::JoinHandle<()>>) {
        for h in handles {
            h.await.unwrap();
        }
    }

    #[test]
    fn opening_a_newer_schema_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        {
            let c = Connection::open(&path).unwrap();
            migrate(&c, MIGRATIONS, 0).unwrap();
            c.execute(
                "INSERT INTO schema_version (version, name, applied_at) VALUES (?1, 'from the future', 0)",
                [latest_version() + 7],
            )
            .unwrap();
        }
        let err = Store::open(&path, StoreConfig::default()).err().unwrap();
        assert!(matches!(err, StoreError::SchemaTooNew { .. }), "{err:?}");
    }
}
