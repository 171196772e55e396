//! A small closed-loop HTTP/1.1 load generator.
//!
//! Contract of [`drive`]: `concurrency` workers share one budget of `requests` GETs. Each worker keeps
//! one keep-alive connection (hyper's HTTP/1 client connection) and sends its next request only after
//! the previous response's body was read to the end. When the server closes the connection (an
//! HTTP/1.0 server such as `python3 -m http.server` does after every response) or a request fails, the
//! worker opens a new one; the time to connect counts towards that request's latency, as it would for
//! a real client. Every request carries the [`LoadTarget`]'s `Host` header, so the same code measures
//! a server directly and through a host-routing proxy.
//!
//! Assumes a tokio runtime. A failed request counts as an error, not as a latency sample.

use crate::stats::Summary;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Where the load goes.
#[derive(Debug, Clone)]
pub struct LoadTarget {
    /// TCP address to connect to.
    pub addr: SocketAddr,
    /// `Host` header of every request.
    pub host: String,
    /// Request path (origin form).
    pub path: String,
}

/// What one run of [`drive`] observed.
#[derive(Debug, Clone, Serialize)]
pub struct LoadResult {
    /// Requests answered 2xx.
    pub ok: usize,
    /// Requests answered with another status.
    pub non_2xx: usize,
    /// Requests that failed (connect, reset, malformed response).
    pub errors: usize,
    /// TCP connections opened.
    pub connections: usize,
    pub elapsed_secs: f64,
    /// Answered requests (any status) per second of wall time.
    pub req_per_sec: f64,
    /// Latency of answered requests.
    pub latency: Option<Summary>,
    /// The first error seen, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

#[derive(Default)]
struct WorkerTally {
    samples: Vec<Duration>,
    ok: usize,
    non_2xx: usize,
    errors: usize,
    connections: usize,
    first_error: Option<String>,
}

/// Sends `requests` GETs to `target` from `concurrency` workers. See the module docs.
pub async fn drive(target: &LoadTarget, requests: usize, concurrency: usize) -> LoadResult {
    let target = Arc::new(target.clone());
    let budget = Arc::new(AtomicUsize::new(requests));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency.max(1))
        .map(|_| tokio::spawn(worker(target.clone(), budget.clone())))
        .collect();
    let mut all = WorkerTally::default();
    for w in workers {
        let t = match w.await {
            Ok(t) => t,
            Err(e) => WorkerTally {
                errors: 1,
                first_error: Some(format!("load worker died: {e}")),
                ..WorkerTally::default()
            },
        };
        all.samples.extend(t.samples);
        all.ok += t.ok;
        all.non_2xx += t.non_2xx;
        all.errors += t.errors;
        all.connections += t.connections;
        all.first_error = all.first_error.or(t.first_error);
    }
    let elapsed = started.elapsed();
    LoadResult {
        ok: all.ok,
        non_2xx: all.non_2xx,
        errors: all.errors,
        connections: all.connections,
        elapsed_secs: elapsed.as_secs_f64(),
        req_per_sec: (all.ok + all.non_2xx) as f64 / elapsed.as_secs_f64(),
        latency: Summary::of(&all.samples),
        first_error: all.first_error,
    }
}

/// Takes one request from the shared budget; `false` when it is spent.
fn take(budget: &AtomicUsize) -> bool {
    budget
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

async fn worker(target: Arc<LoadTarget>, budget: Arc<AtomicUsize>) -> WorkerTally {
    let mut tally = WorkerTally::default();
    let mut conn: Option<SendRequest<Empty<Bytes>>> = None;
    while take(&budget) {
        let start = Instant::now();
        match request(&target, &mut conn, &mut tally.connections).await {
            Ok(status) => {
                tally.samples.push(start.elapsed());
                if status.is_success() {
                    tally.ok += 1;
                } else {
                    tally.non_2xx += 1;
                }
            }
            Err(e) => {
                conn = None;
                tally.errors += 1;
                tally.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    tally
}

/// One GET over `conn`, (re)connecting first when it is gone or closed.
async fn request(
    target: &LoadTarget,
    conn: &mut Option<SendRequest<Empty<Bytes>>>,
    connections: &mut usize,
) -> anyhow::Result<hyper::StatusCode> {
    // `ready` resolves once the previous exchange is over: Ok to reuse, Err when the server closed.
    let reusable = match conn.as_mut() {
        Some(c) if !c.is_closed() => c.ready().await.is_ok(),
        _ => false,
    };
    if !reusable {
        *conn = Some(connect(target.addr).await?);
        *connections += 1;
    }
    let sender = conn.as_mut().expect("connected above");
    let req = hyper::Request::get(target.path.as_str())
        .header(hyper::header::HOST, target.host.as_str())
        .body(Empty::<Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    resp.into_body().collect().await?;
    Ok(status)
}

async fn connect(addr: SocketAddr) -> anyhow::Result<SendRequest<Empty<Bytes>>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        // Ends when the server closes or the sender is dropped; either way the worker reconnects.
        let _ = connection.await;
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_handed_out_exactly_once() {
        let budget = AtomicUsize::new(3);
        assert_eq!((0..5).filter(|_| take(&budget)).count(), 3);
        assert_eq!(budget.load(Ordering::Relaxed), 0);
    }
}
