//! Read handles: a small pool of read-only connections.
//!
//! Contract: [`StoreReader::read`] runs its closure on a blocking thread with a connection opened
//! `SQLITE_OPEN_READ_ONLY` (and `query_only`), inside one deferred transaction, so every query in the
//! closure sees the same committed snapshot (WAL lets this run beside the writer, never waiting on
//! it). [`StoreReader::read_by_key`] is the same on the caller's thread, for reads of a few rows by
//! key, while a connection is idle. The closure receives a
//! [`ReadTx`], which exposes query methods only: there is no way to reach the raw connection or a write
//! method from it. That is a compile-time property:
//!
//! ```no_run
//! # async fn f(reader: sandboxd_store::StoreReader) {
//! // Queries compile on a read handle…
//! let sandbox = reader.read(|tx| tx.get_sandbox("sbx-1")).await;
//! # }
//! ```
//!
//! ```compile_fail
//! # async fn f(reader: sandboxd_store::StoreReader) {
//! // …writes do not: ReadTx has no write methods.
//! reader.read(|tx| Ok(tx.delete_sandbox("sbx-1")?)).await;
//! # }
//! ```
//!
//! ```compile_fail
//! # async fn f(reader: sandboxd_store::StoreReader) {
//! // A read closure cannot ask for a write transaction either.
//! reader.read(|tx: &mut sandboxd_store::WriteTx<'_>| Ok(tx.delete_sandbox("sbx-1")?)).await;
//! # }
//! ```
//!
//! Assumes: the database file exists and is in WAL mode (the writer opened and migrated it first).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::Semaphore;

use crate::error::{Result, StoreError};
use crate::writer::panic_message;

/// A read-only view of the database for the duration of one closure. Query methods are defined next to
/// the tables they read (`sandboxes.rs`, `ports.rs`, …); a [`crate::WriteTx`] dereferences to a `ReadTx`
/// so the same queries work inside a write.
pub struct ReadTx<'c> {
    conn: &'c Connection,
}

impl<'c> ReadTx<'c> {
    pub(crate) fn new(conn: &'c Connection) -> Self {
        ReadTx { conn }
    }

    /// The underlying connection, for the crate's own query code only.
    pub(crate) fn conn(&self) -> &'c Connection {
        self.conn
    }
}

/// Clone-able handle to the reader pool.
#[derive(Clone)]
pub struct StoreReader {
    pool: Arc<ReaderPool>,
}

struct ReaderPool {
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
}

/// Opens the pool's connections (at least one). The caller holds the lifecycle lock.
pub(crate) fn open_read_only_connections(
    path: &Path,
    readers: usize,
    busy_timeout: Duration,
) -> Result<Vec<Connection>> {
    (0..readers.max(1))
        .map(|_| open_read_only(path, busy_timeout))
        .collect()
}

impl StoreReader {
    pub(crate) fn from_connections(conns: Vec<Connection>) -> Self {
        let permits = Arc::new(Semaphore::new(conns.len()));
        StoreReader {
            pool: Arc::new(ReaderPool {
                idle: Mutex::new(conns),
                permits,
            }),
        }
    }

    /// Runs `f` against a consistent snapshot on a pooled read-only connection.
    pub async fn read<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&ReadTx<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let permit = self
            .pool
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::ReaderGone)?;
        let pool = self.pool.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let lease = pool.checkout();
            run_read(lease.conn(), f)
        })
        .await
        .map_err(|_| StoreError::ReaderGone)?
    }

    /// Runs `f` as [`StoreReader::read`] does, but on the calling thread while a connection is
    /// idle (else as `read`): for a read of a few rows by key, which takes microseconds from the
    /// page cache, less than the hop to a blocking thread and back. A read that may scan, sort or
    /// return many rows goes through `read`.
    pub async fn read_by_key<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&ReadTx<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        match self.pool.permits.clone().try_acquire_owned() {
            Ok(_permit) => run_read(self.pool.checkout().conn(), f),
            Err(_) => self.read(f).await,
        }
    }

    #[cfg(test)]
    pub(crate) fn with_raw_connection<T>(&self, f: impl FnOnce(&Connection) -> T) -> T {
        let lease = self.pool.checkout();
        f(lease.conn())
    }
}

fn open_read_only(path: &Path, busy_timeout: Duration) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(busy_timeout)?;
    conn.pragma_update(None, "query_only", true)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

fn run_read<T>(conn: &Connection, f: impl FnOnce(&ReadTx<'_>) -> Result<T>) -> Result<T> {
    conn.execute_batch("BEGIN DEFERRED")?;
    let tx = ReadTx::new(conn);
    let out = catch_unwind(AssertUnwindSafe(|| f(&tx)))
        .unwrap_or_else(|p| Err(StoreError::Panicked(panic_message(p.as_ref()))));
    // A read transaction has nothing to keep; ROLLBACK just ends the snapshot.
    conn.execute_batch("ROLLBACK")?;
    out
}

impl Drop for ReaderPool {
    fn drop(&mut self) {
        let _lifecycle = crate::open::lifecycle_lock();
        self.idle
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

impl ReaderPool {
    fn checkout(&self) -> Lease<'_> {
        let conn = self
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .expect("a reader permit guarantees an idle connection");
        Lease {
            pool: self,
            conn: Some(conn),
        }
    }
}

/// A connection borrowed from the pool; returned (with any open transaction ended) on drop.
struct Lease<'p> {
    pool: &'p ReaderPool,
    conn: Option<Connection>,
}

impl Lease<'_> {
    fn conn(&self) -> &Connection {
        self.conn
            .as_ref()
            .expect("leased connection present until drop")
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            self.pool
                .idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::open_temp;

    /// Invariant: a read handle cannot write. The type-level half is the `compile_fail` doc tests in this
    /// module; this is the runtime half: the reader's connection itself refuses a write.
    #[tokio::test]
    async fn read_connection_is_read_only() {
        let (_dir, store, _thread) = open_temp();
        let err = store.reader().with_raw_connection(|c| {
            assert!(
                c.is_readonly("main").unwrap(),
                "opened SQLITE_OPEN_READ_ONLY"
            );
            c.execute(
                "INSERT INTO deliveries (delivery_id, kind, received_at) VALUES ('d', 'k', 0)",
                [],
            )
            .unwrap_err()
        });
        let code = crate::error::extended_code(&err).map(|c| c & 0xff);
        assert_eq!(code, Some(rusqlite::ffi::SQLITE_READONLY), "{err:?}");
    }

    /// A store in which delivery `d-1` is recorded.
    async fn with_delivery() -> (tempfile::TempDir, crate::Store, crate::WriterThread) {
        let (dir, store, thread) = open_temp();
        store
            .writer()
            .write(|tx| tx.record_delivery("d-1", "ready", None, 5))
            .await
            .unwrap();
        (dir, store, thread)
    }

    #[tokio::test]
    async fn reads_see_committed_writes() {
        let (_dir, store, _thread) = with_delivery().await;
        let seen = store
            .reader()
            .read(|tx| tx.delivery_seen("d-1"))
            .await
            .unwrap();
        assert!(seen);
    }

    /// A read by key runs on the caller's thread while a connection is idle, and waits its turn
    /// on a blocking thread when every connection is busy; both see committed writes, and a
    /// panic in either leaves the pool whole.
    #[tokio::test]
    async fn a_read_by_key_runs_here_while_a_connection_is_idle() {
        let (_dir, store, _thread) = with_delivery().await;
        let reader = store.reader();
        let here = std::thread::current().id();
        let (seen, on) = reader
            .read_by_key(|tx| Ok((tx.delivery_seen("d-1")?, std::thread::current().id())))
            .await
            .unwrap();
        assert!(seen);
        assert_eq!(on, here, "ran on the caller's thread");

        let held = reader
            .pool
            .permits
            .clone()
            .acquire_many_owned(reader.pool.permits.available_permits() as u32);
        let held = held.await.unwrap();
        let waiting = tokio::spawn({
            let reader = reader.clone();
            async move {
                reader
                    .read_by_key(|tx| Ok((tx.delivery_seen("d-1")?, std::thread::current().id())))
                    .await
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "it waits for a connection");
        drop(held);
        let (seen, on) = waiting.await.unwrap().unwrap();
        assert!(seen);
        assert_ne!(on, here, "ran on a blocking thread");

        let err = reader
            .read_by_key(|_tx| -> crate::Result<()> { panic!("boom") })
            .await
            .unwrap_err();
        assert!(matches!(err, crate::StoreError::Panicked(_)), "{err:?}");
        assert!(reader
            .read_by_key(|tx| tx.delivery_seen("d-1"))
            .await
            .unwrap());
    }

    #[tokio::test]
    async fn panicking_read_returns_error_and_pool_survives() {
        let (_dir, store, _thread) = open_temp();
        for _ in 0..8 {
            let err = store
                .reader()
                .read(|_tx| -> crate::Result<()> { panic!("boom") })
                .await
                .unwrap_err();
            assert!(
                matches!(err, crate::StoreError::Panicked(ref m) if m == "boom"),
                "{err:?}"
            );
        }
        // Every connection went back to the pool.
        let seen = store
            .reader()
            .read(|tx| tx.delivery_seen("nope"))
            .await
            .unwrap();
        assert!(!seen);
    }
}
