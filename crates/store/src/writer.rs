//! The single writer and group commit.
//!
//! Contract:
//! - Exactly one connection in the process writes. It is moved into a dedicated OS thread at open time and
//!   never leaves it; [`StoreWriter`] handles only send closures to that thread over a bounded channel and
//!   await the answer on a `tokio::sync::oneshot`. A [`WriteTx`] exists only inside that thread (its
//!   constructor is private), so holding one means "I am the writer".
//! - Group commit: the thread blocks for the first request, drains whatever else is queued (up to
//!   `max_batch`), and runs the whole batch in ONE `BEGIN IMMEDIATE` transaction. Each request runs in its
//!   own `SAVEPOINT`: released when the closure returns `Ok`, rolled back (and released) when it returns
//!   `Err` or panics, so a failing request leaves its neighbours intact. Then one `COMMIT` (one fsync with
//!   `synchronous=FULL`).
//! - Replies are sent only after the `COMMIT` returned: an acknowledged write is durable. If the batch
//!   transaction fails (COMMIT fails, or SQLite aborts the transaction mid-batch), every request in the
//!   batch gets [`StoreError::Batch`] and nothing of the batch is kept.
//! - A panicking closure does not kill the writer: the panic is caught, that request gets
//!   [`StoreError::Panicked`] and its savepoint is rolled back.
//! - Cancellation: once a request is queued it runs even if the caller stops waiting for the reply.
//!
//! Assumes: closures are short and do not block on anything but the database (the whole batch waits on
//! each of them).

use std::any::Any;
use std::future::Future;
use std::ops::Deref;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use crate::error::{Result, StoreError};
use crate::reader::ReadTx;

/// The write side of one group-commit batch, as seen by one request. Dereferences to [`ReadTx`] so every
/// query is available too; write methods take `&mut self` and live next to their tables.
pub struct WriteTx<'c> {
    read: ReadTx<'c>,
}

impl<'c> WriteTx<'c> {
    fn new(conn: &'c Connection) -> Self {
        WriteTx {
            read: ReadTx::new(conn),
        }
    }
}

impl<'c> Deref for WriteTx<'c> {
    type Target = ReadTx<'c>;
    fn deref(&self) -> &ReadTx<'c> {
        &self.read
    }
}

/// A snapshot of the writer's counters, for metrics (`sandboxd_store_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Requests sent (or being sent) to the writer and not yet picked up by it.
    pub queue_depth: usize,
    /// Batches (transactions) the writer has run.
    pub batches_total: u64,
    /// Requests the writer has run.
    pub requests_total: u64,
    /// Batches whose transaction failed as a whole.
    pub failed_batches_total: u64,
    /// The largest batch so far.
    pub largest_batch: usize,
}

#[derive(Default)]
struct Counters {
    queue_depth: AtomicUsize,
    batches: AtomicU64,
    requests: AtomicU64,
    failed_batches: AtomicU64,
    largest_batch: AtomicUsize,
}

/// Clone-able handle that queues closures for the writer thread.
#[derive(Clone)]
pub struct StoreWriter {
    tx: mpsc::Sender<Box<dyn Job>>,
    counters: Arc<Counters>,
}

/// Owns the writer thread. The thread exits once every [`StoreWriter`] (and [`crate::Store`]) is dropped and
/// the queue is drained; [`WriterThread::join`] waits for that.
pub struct WriterThread {
    handle: std::thread::JoinHandle<()>,
}

impl WriterThread {
    /// Blocks until the writer thread has exited (call it after dropping every handle, from a blocking
    /// context). Returns `Err` if the thread panicked.
    pub fn join(self) -> std::thread::Result<()> {
        self.handle.join()
    }
}

pub(crate) fn spawn(
    conn: Connection,
    max_batch: usize,
    queue_capacity: usize,
) -> Result<(StoreWriter, WriterThread)> {
    let (tx, rx) = mpsc::channel(queue_capacity.max(1));
    let counters = Arc::new(Counters::default());
    let thread_counters = counters.clone();
    let handle = std::thread::Builder::new()
        .name("sandboxd-store-writer".into())
        .spawn(move || run(conn, rx, max_batch.max(1), &thread_counters))
        .map_err(StoreError::Spawn)?;
    Ok((StoreWriter { tx, counters }, WriterThread { handle }))
}

impl StoreWriter {
    /// Queues `f` for the writer and waits until its batch is committed (or failed).
    pub async fn write<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&mut WriteTx<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.queue(f).await?.await
    }

    /// Queues `f` for the writer and returns as soon as it is queued, with the wait for its commit.
    ///
    /// The queue is first in, first out, and a batch runs its requests in that order: a write queued
    /// before the caller sets something else going is applied before any write that something
    /// queues afterwards, so the caller may let the two overlap instead of waiting for the commit
    /// first. Dropping the returned future does not take the write back.
    pub async fn queue<T, F>(&self, f: F) -> Result<impl Future<Output = Result<T>> + use<T, F>>
    where
        F: FnOnce(&mut WriteTx<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(TypedJob {
            f: Some(f),
            out: None,
            reply,
        });
        let depth = DepthGuard::enter(&self.counters.queue_depth);
        self.tx
            .send(job)
            .await
            .map_err(|_| StoreError::WriterGone)?;
        // From here the writer accounts for the request.
        depth.disarm();
        Ok(async move { answer.await.map_err(|_| StoreError::WriterGone)? })
    }

    /// Number of requests waiting for the writer (queued or blocked on a full queue).
    pub fn queue_depth(&self) -> usize {
        self.counters.queue_depth.load(Ordering::Relaxed)
    }

    /// The writer's counters.
    pub fn stats(&self) -> WriterStats {
        let c = &self.counters;
        WriterStats {
            queue_depth: c.queue_depth.load(Ordering::Relaxed),
            batches_total: c.batches.load(Ordering::Relaxed),
            requests_total: c.requests.load(Ordering::Relaxed),
            failed_batches_total: c.failed_batches.load(Ordering::Relaxed),
            largest_batch: c.largest_batch.load(Ordering::Relaxed),
        }
    }
}

/// Counts a request as waiting until the writer takes it over (or the send is abandoned).
struct DepthGuard<'a> {
    depth: Option<&'a AtomicUsize>,
}

impl<'a> DepthGuard<'a> {
    fn enter(depth: &'a AtomicUsize) -> Self {
        depth.fetch_add(1, Ordering::Relaxed);
        DepthGuard { depth: Some(depth) }
    }
    fn disarm(mut self) {
        self.depth = None;
    }
}

impl Drop for DepthGuard<'_> {
    fn drop(&mut self) {
        if let Some(d) = self.depth {
            d.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// One queued request, type-erased so requests with different result types share a queue.
trait Job: Send {
    /// Runs the closure (inside the caller's savepoint) and keeps its result; returns whether it succeeded.
    fn run(&mut self, tx: &mut WriteTx<'_>) -> bool;
    /// Sends the reply: the kept result if the batch committed, the batch error otherwise.
    fn finish(self: Box<Self>, batch: std::result::Result<(), Arc<rusqlite::Error>>);
}

struct TypedJob<T, F> {
    f: Option<F>,
    out: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Job for TypedJob<T, F>
where
    F: FnOnce(&mut WriteTx<'_>) -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    fn run(&mut self, tx: &mut WriteTx<'_>) -> bool {
        let f = self.f.take().expect("a job runs once");
        let out = catch_unwind(AssertUnwindSafe(|| f(tx)))
            .unwrap_or_else(|p| Err(StoreError::Panicked(panic_message(p.as_ref()))));
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn finish(self: Box<Self>, batch: std::result::Result<(), Arc<rusqlite::Error>>) {
        let reply = match (batch, self.out) {
            (Ok(()), Some(out)) => out,
            (Err(e), _) => Err(StoreError::Batch(e)),
            (Ok(()), None) => unreachable!("a committed batch ran every job"),
        };
        // The caller may have stopped waiting; the write stands either way.
        let _ = self.reply.send(reply);
    }
}

pub(crate) fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

fn run(
    conn: Connection,
    mut rx: mpsc::Receiver<Box<dyn Job>>,
    max_batch: usize,
    counters: &Counters,
) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(max_batch);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        counters
            .queue_depth
            .fetch_sub(batch.len(), Ordering::Relaxed);

        let outcome = run_batch(&conn, &mut batch);

        counters.batches.fetch_add(1, Ordering::Relaxed);
        counters
            .requests
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        counters
            .largest_batch
            .fetch_max(batch.len(), Ordering::Relaxed);
        if let Err(e) = &outcome {
            counters.failed_batches.fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %e, requests = batch.len(), "store batch transaction failed");
        }
        for job in batch.drain(..) {
            job.finish(outcome.clone());
        }
    }
    tracing::debug!("store writer exiting: every handle dropped");
    let _lifecycle = crate::open::lifecycle_lock();
    drop(conn);
}

/// Runs every job of `batch` in one transaction, each in its own savepoint, and commits once.
fn run_batch(
    conn: &Connection,
    batch: &mut [Box<dyn Job>],
) -> std::result::Result<(), Arc<rusqlite::Error>> {
    let result = (|| {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        for job in batch.iter_mut() {
            conn.execute_batch("SAVEPOINT request")?;
            let ok = job.run(&mut WriteTx::new(conn));
            if conn.is_autocommit() {
                // SQLite rolled the whole transaction back (e.g. disk full): the batch is lost.
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                    Some("the batch transaction was rolled back by SQLite".into()),
                ));
            }
            if ok {
                conn.execute_batch("RELEASE request")?;
            } else {
                conn.execute_batch("ROLLBACK TO request; RELEASE request")?;
            }
        }
        conn.execute_batch("COMMIT")
    })();
    result.map_err(|e| {
        if !conn.is_autocommit() {
            if let Err(rb) = conn.execute_batch("ROLLBACK") {
                tracing::error!(error = %rb, "rolling back a failed store batch failed");
            }
        }
        Arc::new(e)
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use super::*;
    use crate::test_util::{hold_writer, open_temp, wait_for_depth};

    /// Holds the writer inside a request until `n` more requests are queued, so they form one batch.
    async fn queue_behind_gate<T: Send + 'static>(
        writer: &StoreWriter,
        n: usize,
        make: impl Fn(usize) -> tokio::task::JoinHandle<T>,
    ) -> Vec<T> {
        let gate = hold_writer(writer).await;
        let handles: Vec<_> = (0..n).map(make).collect();
        wait_for_depth(writer, n).await;
        gate.release().await;
        let mut out = Vec::with_capacity(n);
        for h in handles {
            out.push(h.await.unwrap());
        }
        out
    }

    /// Invariant: one request's failure rolls back only that request; its batch neighbours commit.
    #[tokio::test]
    async fn failing_request_rolls_back_only_itself() {
        let (_dir, store, _thread) = open_temp();
        let w = store.writer().clone();
        let before = w.stats();
        let results = queue_behind_gate(&w, 40, |i| {
            let w = w.clone();
            tokio::spawn(async move {
                w.write(move |tx| {
                    tx.record_delivery(&format!("d-{i}"), "test", None, 1)?;
                    if i % 4 == 0 {
                        return Err(StoreError::InvalidArgument(format!("request {i} fails")));
                    }
                    Ok(i)
                })
                .await
            })
        })
        .await;
        let after = w.stats();
        assert_eq!(
            after.batches_total - before.batches_total,
            2,
            "gate + one batch of 40"
        );
        assert!(after.largest_batch >= 40);
        for (i, r) in results.iter().enumerate() {
            match r {
                Ok(v) => assert!(i % 4 != 0 && *v == i),
                Err(StoreError::InvalidArgument(_)) => assert_eq!(i % 4, 0),
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        let seen = store
            .reader()
            .read(|tx| {
                (0..40)
                    .map(|i| tx.delivery_seen(&format!("d-{i}")))
                    .collect::<Result<Vec<_>>>()
            })
            .await
            .unwrap();
        for (i, s) in seen.into_iter().enumerate() {
            assert_eq!(s, i % 4 != 0, "delivery d-{i}");
        }
    }

    /// Group commit forms batches under concurrency: fewer transactions than requests.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_writes_share_batches() {
        let (_dir, store, _thread) = open_temp();
        let w = store.writer().clone();
        let before = w.stats();
        let tasks: Vec<_> = (0..500)
            .map(|i| {
                let w = w.clone();
                tokio::spawn(async move {
                    w.write(move |tx| tx.record_delivery(&format!("c-{i}"), "test", None, 1))
                        .await
                })
            })
            .collect();
        for t in tasks {
            assert!(t.await.unwrap().unwrap());
        }
        let after = w.stats();
        let batches = after.batches_total - before.batches_total;
        assert_eq!(after.requests_total - before.requests_total, 500);
        assert!(
            batches < 500,
            "expected batching, got {batches} batches for 500 requests"
        );
        assert_eq!(after.queue_depth, 0);
    }

    /// Invariant: a write queued before another is applied before it, whether the two share a batch
    /// or not, and whether or not its caller waits for its commit. The create flow relies on it to
    /// let its `starting` write overlap the boot whose call-home writes next.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queued_write_is_applied_before_every_later_one() {
        let (_dir, store, _thread) = open_temp();
        let w = store.writer().clone();
        for i in 0..200 {
            let first = w
                .queue(move |tx| tx.record_delivery(&format!("q-{i}"), "test", None, 1))
                .await
                .unwrap();
            let later = w.write(move |tx| tx.delivery_seen(&format!("q-{i}")));
            let seen = if i % 2 == 0 {
                let (first, seen) = tokio::join!(first, later);
                assert!(first.unwrap());
                seen
            } else {
                drop(first);
                later.await
            };
            assert!(seen.unwrap(), "write {i} ran after one queued behind it");
        }
    }

    /// A panicking closure becomes an error for that request; the writer keeps serving.
    #[tokio::test]
    async fn panicking_request_does_not_kill_the_writer() {
        let (_dir, store, _thread) = open_temp();
        let w = store.writer().clone();
        let results = queue_behind_gate(&w, 3, |i| {
            let w = w.clone();
            tokio::spawn(async move {
                w.write(move |tx| {
                    tx.record_delivery(&format!("p-{i}"), "test", None, 1)?;
                    if i == 1 {
                        panic!("request {i} panics");
                    }
                    Ok(())
                })
                .await
            })
        })
        .await;
        assert!(results[0].is_ok() && results[2].is_ok());
        assert!(
            matches!(&results[1], Err(StoreError::Panicked(m)) if m == "request 1 panics"),
            "{:?}",
            results[1]
        );
        let (p0, p1, p2) = store
            .reader()
            .read(|tx| {
                Ok((
                    tx.delivery_seen("p-0")?,
                    tx.delivery_seen("p-1")?,
                    tx.delivery_seen("p-2")?,
                ))
            })
            .await
            .unwrap();
        assert!(p0 && !p1 && p2);
        // Still alive.
        w.write(|tx| tx.record_delivery("after", "test", None, 1))
            .await
            .unwrap();
    }

    /// If COMMIT fails, every request of the batch gets the error and nothing of the batch is kept.
    /// (A deferred foreign key is checked only at COMMIT, which lets the test make COMMIT fail.)
    #[tokio::test]
    async fn commit_failure_fails_every_request_in_the_batch() {
        let (_dir, store, _thread) = open_temp();
        let w = store.writer().clone();
        w.write(|tx| {
            tx.conn().execute_batch(
                "CREATE TABLE t_parent (id INTEGER PRIMARY KEY);
                 CREATE TABLE t_child (p INTEGER REFERENCES t_parent(id) DEFERRABLE INITIALLY DEFERRED);",
            )?;
            Ok(())
        })
        .await
        .unwrap();
        let results = queue_behind_gate(&w, 5, |i| {
            let w = w.clone();
            tokio::spawn(async move {
                w.write(move |tx| {
                    tx.record_delivery(&format!("f-{i}"), "test", None, 1)?;
                    if i == 2 {
                        tx.conn()
                            .execute("INSERT INTO t_child (p) VALUES (42)", [])?;
                    }
                    Ok(())
                })
                .await
            })
        })
        .await;
        for r in &results {
            assert!(matches!(r, Err(StoreError::Batch(_))), "{r:?}");
        }
        let any = store
            .reader()
            .read(|tx| {
                let mut any = false;
                for i in 0..5 {
                    any |= tx.delivery_seen(&format!("f-{i}"))?;
                }
                Ok(any)
            })
            .await
            .unwrap();
        assert!(!any, "a failed batch keeps nothing");
        assert_eq!(w.stats().failed_batches_total, 1);
        // The writer recovers for the next batch.
        assert!(w
            .write(|tx| tx.record_delivery("next", "test", None, 1))
            .await
            .unwrap());
    }

    /// A reply is only sent after COMMIT: once `write` returns Ok, a fresh connection sees the row.
    #[tokio::test]
    async fn acknowledged_write_is_visible_to_a_new_connection() {
        let (dir, store, _thread) = open_temp();
        store
            .writer()
            .write(|tx| tx.record_delivery("durable", "test", None, 1))
            .await
            .unwrap();
        let c = Connection::open(dir.path().join("store.db")).unwrap();
        let n: i64 = c
            .query_row(
                "SELECT COUNT(*) FROM deliveries WHERE delivery_id = 'durable'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1);
    }

    #[tokio::test]
    async fn writer_thread_exits_when_handles_drop() {
        let (_dir, store, thread) = open_temp();
        let done = Arc::new(AtomicBool::new(false));
        drop(store);
        let d = done.clone();
        tokio::task::spawn_blocking(move || {
            thread.join().unwrap();
            d.store(true, Ordering::SeqCst);
        })
        .await
        .unwrap();
        assert!(done.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn queue_depth_counts_waiting_requests() {
        let (_dir, store, _thread) = open_temp();
        let w = store.writer().clone();
        let gate = hold_writer(&w).await;
        let waiting: Vec<_> = (0..3)
            .map(|_| {
                let w = w.clone();
                tokio::spawn(async move { w.write(|_| Ok(())).await })
            })
            .collect();
        wait_for_depth(&w, 3).await;
        assert_eq!(w.queue_depth(), 3);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(w.queue_depth(), 3, "nothing runs while the writer is busy");
        gate.release().await;
        for t in waiting {
            t.await.unwrap().unwrap();
        }
        assert_eq!(w.queue_depth(), 0);
    }
}
