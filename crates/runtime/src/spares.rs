//! Kernel objects made ahead of need by a thread of their own, so a boot takes one instead of
//! making it on its critical path (a sandbox's cgroup, [`crate::cgroup`]; its network namespace,
//! [`crate::namespace`]).
//!
//! Contract:
//! - The pool's thread makes spares up to [`Spares::wanted`] when the pool starts and when
//!   [`Spares::replenish`] asks, and sleeps otherwise: nothing polls, and a wakeup nobody asked
//!   for makes nothing. Not at once after a take: making one holds kernel locks the boot that took
//!   it may need; callers ask once the boot is done.
//! - [`Spares::take`] hands out a ready spare or none; it never waits.
//! - A spare that cannot be made stops the thread (logged): takes then find none, and callers make
//!   their own, as without a pool.
//! - Dropping the pool stops its thread and discards every ready spare; one the thread is making
//!   meanwhile is discarded by the thread.

use std::sync::{Arc, Condvar, Mutex};

type Make<T> = Box<dyn Fn(u64) -> std::io::Result<T> + Send + Sync>;
type Discard<T> = Box<dyn Fn(T) + Send + Sync>;

/// A pool of spares of type `T` and the thread that makes them.
pub(crate) struct Spares<T: Send + 'static> {
    inner: Arc<Inner<T>>,
}

struct Inner<T> {
    what: &'static str,
    wanted: usize,
    /// Makes spare number `n` (numbers start at 1 and are never reused in one pool).
    make: Make<T>,
    discard: Discard<T>,
    state: Mutex<State<T>>,
    wake: Condvar,
}

struct State<T> {
    ready: Vec<T>,
    made: u64,
    /// Set by a start and by [`Spares::replenish`], cleared once `wanted` are ready.
    asked: bool,
    stop: bool,
}

impl<T: Send + 'static> Spares<T> {
    /// Starts a pool of `wanted` spares of `what` (for logs), made by `make` and thrown away by
    /// `discard`.
    pub(crate) fn start(
        what: &'static str,
        wanted: usize,
        make: impl Fn(u64) -> std::io::Result<T> + Send + Sync + 'static,
        discard: impl Fn(T) + Send + Sync + 'static,
    ) -> Spares<T> {
        let inner = Arc::new(Inner {
            what,
            wanted,
            make: Box::new(make),
            discard: Box::new(discard),
            state: Mutex::new(State {
                ready: Vec::new(),
                made: 0,
                asked: true,
                stop: false,
            }),
            wake: Condvar::new(),
        });
        let worker = inner.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("spare-{what}"))
            .spawn(move || worker.refill());
        if let Err(e) = spawned {
            tracing::warn!(error = %e, what, "no thread to make spares; each boot makes its own");
        }
        Spares { inner }
    }

    /// How many spares the pool keeps ready.
    pub(crate) fn wanted(&self) -> usize {
        self.inner.wanted
    }

    /// How many spares are ready now.
    pub(crate) fn ready(&self) -> usize {
        self.inner.lock().ready.len()
    }

    /// A ready spare, if there is one.
    pub(crate) fn take(&self) -> Option<T> {
        self.inner.lock().ready.pop()
    }

    /// Wakes the thread to make the spares taken since it last ran.
    pub(crate) fn replenish(&self) {
        self.inner.lock().asked = true;
        self.inner.wake.notify_one();
    }
}

impl<T: Send + 'static> Drop for Spares<T> {
    fn drop(&mut self) {
        let ready = {
            let mut state = self.inner.lock();
            state.stop = true;
            std::mem::take(&mut state.ready)
        };
        self.inner.wake.notify_all();
        for spare in ready {
            (self.inner.discard)(spare);
        }
    }
}

impl<T> Inner<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn refill(&self) {
        let mut state = self.lock();
        loop {
            while !state.stop && (!state.asked || state.ready.len() >= self.wanted) {
                state.asked = false;
                state = self.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if state.stop {
                return;
            }
            state.made += 1;
            let n = state.made;
            drop(state);
            let spare = match (self.make)(n) {
                Ok(spare) => spare,
                Err(e) => {
                    tracing::warn!(error = %e, what = self.what, "cannot make a spare; each boot makes its own");
                    return;
                }
            };
            state = self.lock();
            if state.stop {
                drop(state);
                (self.discard)(spare);
                return;
            }
            state.ready.push(spare);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    fn until(what: &str, cond: impl Fn() -> bool) {
        let started = Instant::now();
        while !cond() {
            assert!(started.elapsed() < Duration::from_secs(5), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Spares are made up to the wanted number at start, again only when asked after a take, and
    /// every spare made is either taken or discarded once the pool goes.
    #[test]
    fn spares_are_made_when_asked_and_discarded_with_the_pool() {
        let discarded = Arc::new(AtomicUsize::new(0));
        let counted = discarded.clone();
        let pool = Spares::start("test", 2, Ok, move |_: u64| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        until("two ready", || pool.ready() == 2);
        assert_eq!(pool.take(), Some(2));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(pool.ready(), 1, "no spare is made before one is asked for");
        pool.replenish();
        until("refilled", || pool.ready() == 2);
        assert_eq!(pool.take(), Some(3), "numbers are never reused");
        drop(pool);
        assert_eq!(discarded.load(Ordering::SeqCst), 1);
    }

    /// A spare that cannot be made stops the thread: takes find none, and nothing hangs.
    #[test]
    fn a_spare_that_cannot_be_made_leaves_the_pool_empty() {
        let pool: Spares<u64> =
            Spares::start("test", 2, |_| Err(std::io::Error::other("no")), |_| {});
        std::thread::sleep(Duration::from_millis(20));
        pool.replenish();
        assert_eq!(pool.take(), None);
    }
}
