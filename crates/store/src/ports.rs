//! Exposed ports and the host-port allocator.
//!
//! Contract:
//! - One exposure per `(sandbox_id, port)` (primary key) and one exposure per bound host port
//!   (`idx_exposed_ports_host_port`, unique where `host_port > 0`); HTTP exposures have `host_port = 0`
//!   and coexist freely.
//! - [`WriteTx::try_reserve_host_port`] is one `INSERT OR IGNORE` plus the follow-up that tells the two
//!   swallowed failures apart: [`ReserveOutcome::Existing`] (this exposure is already there — a retry) vs
//!   [`ReserveOutcome::TakenByOther`] (the candidate host port belongs to someone else). Without that
//!   distinction a retried expose would walk and exhaust the whole pool.
//! - [`WriteTx::allocate_host_port`] walks the pool from a random start and reports `reused`, so a caller
//!   that must roll back (e.g. its proxy route failed) undoes only a row it inserted itself, via
//!   [`WriteTx::delete_exposed_port`], which deletes only the exact reservation it is given.
//! - Rows are removed with their sandbox (`ON DELETE CASCADE`).

use std::fmt;
use std::ops::RangeInclusive;

use rand::Rng;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};
use rusqlite::{params, OptionalExtension, Row, ToSql};
use serde::{Deserialize, Serialize};

use crate::error::{is_foreign_key_violation, Result, StoreError};
use crate::{ReadTx, UnixMillis, WriteTx};

/// How an exposure is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Through the HTTP proxy by hostname; no host port.
    Http,
    /// A TCP host port forwarded into the sandbox.
    Tcp,
    /// A UDP host port forwarded into the sandbox.
    Udp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ToSql for Protocol {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for Protocol {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value.as_str()? {
            "http" => Ok(Protocol::Http),
            "tcp" => Ok(Protocol::Tcp),
            "udp" => Ok(Protocol::Udp),
            other => Err(FromSqlError::Other(
                format!("unknown protocol {other:?}").into(),
            )),
        }
    }
}

/// Whether the route for an exposure is installed yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PortState {
    /// Reserved; the proxy route may not be installed yet (a transitional state a reconciler sweeps).
    Exposing,
    /// The route is installed.
    Active,
}

impl PortState {
    pub fn as_str(self) -> &'static str {
        match self {
            PortState::Exposing => "exposing",
            PortState::Active => "active",
        }
    }
}

impl ToSql for PortState {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for PortState {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value.as_str()? {
            "exposing" => Ok(PortState::Exposing),
            "active" => Ok(PortState::Active),
            other => Err(FromSqlError::Other(
                format!("unknown port state {other:?}").into(),
            )),
        }
    }
}

/// A stored exposure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExposedPort {
    pub sandbox_id: String,
    /// The port inside the sandbox.
    pub port: u16,
    pub protocol: Protocol,
    /// The host port bound for it; 0 for HTTP exposures.
    pub host_port: u16,
    pub public_url: String,
    pub state: PortState,
    /// Unique per inserted row: identifies the caller that inserted it (see
    /// [`WriteTx::delete_exposed_port`]).
    pub reservation: String,
    pub created_at: UnixMillis,
}

/// The candidates of a host-port allocation: a range, less the ports the caller found held by other
/// processes on the host.
#[derive(Clone, Debug)]
pub struct HostPorts<'a> {
    pub range: RangeInclusive<u16>,
    pub avoid: &'a [u16],
}

impl From<RangeInclusive<u16>> for HostPorts<'_> {
    fn from(range: RangeInclusive<u16>) -> Self {
        HostPorts { range, avoid: &[] }
    }
}

/// The outcome of one [`WriteTx::try_reserve_host_port`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReserveOutcome {
    /// This call inserted the row with the candidate host port.
    Reserved(ExposedPort),
    /// The exposure already existed (whatever its host port): use it, stop walking.
    Existing(ExposedPort),
    /// Another exposure owns the candidate host port: try the next candidate.
    TakenByOther,
}

const COLUMNS: &str =
    "sandbox_id, port, protocol, host_port, public_url, state, reservation, created_at";

fn from_row(row: &Row<'_>) -> rusqlite::Result<ExposedPort> {
    Ok(ExposedPort {
        sandbox_id: row.get(0)?,
        port: row.get(1)?,
        protocol: row.get(2)?,
        host_port: row.get(3)?,
        public_url: row.get(4)?,
        state: row.get(5)?,
        reservation: row.get(6)?,
        created_at: row.get(7)?,
    })
}

fn new_reservation() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl ReadTx<'_> {
    /// The exposure of `port` in `sandbox_id`.
    pub fn get_exposed_port(&self, sandbox_id: &str, port: u16) -> Result<Option<ExposedPort>> {
        let sql =
            format!("SELECT {COLUMNS} FROM exposed_ports WHERE sandbox_id = ?1 AND port = ?2");
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_row(params![sandbox_id, port], from_row)
            .optional()?)
    }

    /// The exposure bound to `host_port` (> 0).
    pub fn exposed_port_by_host_port(&self, host_port: u16) -> Result<Option<ExposedPort>> {
        if host_port == 0 {
            return Ok(None);
        }
        let sql = format!("SELECT {COLUMNS} FROM exposed_ports WHERE host_port = ?1");
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_row([host_port], from_row)
            .optional()?)
    }

    /// Every exposure of `sandbox_id`, by port.
    pub fn exposed_ports(&self, sandbox_id: &str) -> Result<Vec<ExposedPort>> {
        let sql =
            format!("SELECT {COLUMNS} FROM exposed_ports WHERE sandbox_id = ?1 ORDER BY port");
        let mut stmt = self.conn().prepare_cached(&sql)?;
        let rows = stmt
            .query_map([sandbox_id], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Every exposure of a sandbox in one of `states` (e.g. settled ones, for a reconciler), oldest first.
    pub fn exposed_ports_of_sandboxes_in(
        &self,
        states: &[crate::SandboxState],
    ) -> Result<Vec<ExposedPort>> {
        let cols = COLUMNS
            .split(", ")
            .map(|c| format!("p.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT {cols} FROM exposed_ports p JOIN sandboxes s ON s.id = p.sandbox_id
             WHERE s.state IN (SELECT value FROM json_each(?1)) ORDER BY p.created_at"
        );
        let mut stmt = self.conn().prepare_cached(&sql)?;
        let rows = stmt
            .query_map([crate::sandboxes::states_json(states)], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Every exposure still in `state` (e.g. [`PortState::Exposing`] for a reconciler), oldest first.
    pub fn exposed_ports_in_state(&self, state: PortState) -> Result<Vec<ExposedPort>> {
        let sql =
            format!("SELECT {COLUMNS} FROM exposed_ports WHERE state = ?1 ORDER BY created_at");
        let mut stmt = self.conn().prepare_cached(&sql)?;
        let rows = stmt
            .query_map([state], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

impl WriteTx<'_> {
    /// Inserts `(sandbox_id, port)` bound to host port `candidate` unless either is taken, and reports
    /// which case happened. `candidate` must be > 0 ([`WriteTx::expose_http`] is the host-port-less case).
    pub fn try_reserve_host_port(
        &mut self,
        sandbox_id: &str,
        port: u16,
        protocol: Protocol,
        candidate: u16,
        public_url: &str,
        now: UnixMillis,
    ) -> Result<ReserveOutcome> {
        if candidate == 0 {
            return Err(StoreError::InvalidArgument(
                "host port candidate must be greater than 0".into(),
            ));
        }
        match self.insert_or_ignore(sandbox_id, port, protocol, candidate, public_url, now)? {
            Some(row) => Ok(ReserveOutcome::Reserved(row)),
            None => Ok(match self.get_exposed_port(sandbox_id, port)? {
                Some(row) => ReserveOutcome::Existing(row),
                None => ReserveOutcome::TakenByOther,
            }),
        }
    }

    /// Binds a host port from `pool` for `(sandbox_id, port)`, trying candidates from a random start and
    /// wrapping around. Returns the row and whether it already existed (`reused`). `public_url(host_port)`
    /// makes the URL stored with a new row. [`StoreError::PoolExhausted`] when every candidate is bound;
    /// [`StoreError::PortConflict`] when the port is already exposed with another protocol.
    pub fn allocate_host_port<'a>(
        &mut self,
        sandbox_id: &str,
        port: u16,
        protocol: Protocol,
        pool: impl Into<HostPorts<'a>>,
        public_url: impl Fn(u16) -> String,
        now: UnixMillis,
    ) -> Result<(ExposedPort, bool)> {
        if protocol == Protocol::Http {
            return Err(StoreError::InvalidArgument(
                "http exposures have no host port; use expose_http".into(),
            ));
        }
        let HostPorts { range, avoid } = pool.into();
        let (lo, hi) = ((*range.start()).max(1), *range.end());
        if lo > hi {
            return Err(StoreError::PoolExhausted { pool: "host port" });
        }
        let start = rand::rng().random_range(lo..=hi);
        let walk = (start..=hi)
            .chain(lo..start)
            .filter(|candidate| !avoid.contains(candidate));
        for candidate in walk {
            let url = public_url(candidate);
            match self.try_reserve_host_port(sandbox_id, port, protocol, candidate, &url, now)? {
                ReserveOutcome::Reserved(row) => return Ok((row, false)),
                ReserveOutcome::Existing(row) => {
                    return check_protocol(row, protocol).map(|r| (r, true))
                }
                ReserveOutcome::TakenByOther => continue,
            }
        }
        Err(StoreError::PoolExhausted { pool: "host port" })
    }

    /// Exposes `port` of `sandbox_id` over HTTP (no host port). Returns the row and whether it already
    /// existed.
    pub fn expose_http(
        &mut self,
        sandbox_id: &str,
        port: u16,
        public_url: &str,
        now: UnixMillis,
    ) -> Result<(ExposedPort, bool)> {
        match self.insert_or_ignore(sandbox_id, port, Protocol::Http, 0, public_url, now)? {
            Some(row) => Ok((row, false)),
            None => {
                let row = self.get_exposed_port(sandbox_id, port)?.ok_or_else(|| {
                    StoreError::NotFound {
                        kind: "exposed port",
                        key: format!("{sandbox_id}:{port}"),
                    }
                })?;
                check_protocol(row, Protocol::Http).map(|r| (r, true))
            }
        }
    }

    /// Marks an exposure's route as installed. Returns whether the reservation still exists.
    pub fn mark_port_active(&mut self, row: &ExposedPort) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE exposed_ports SET state = 'active'
                 WHERE sandbox_id = ?1 AND port = ?2 AND reservation = ?3",
            )?
            .execute(params![row.sandbox_id, row.port, row.reservation])?;
        Ok(n == 1)
    }

    /// Deletes `row` only if the stored exposure is still that exact reservation (a rollback must not
    /// remove an exposure another caller installed meanwhile). Returns whether it deleted.
    pub fn delete_exposed_port(&mut self, row: &ExposedPort) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "DELETE FROM exposed_ports WHERE sandbox_id = ?1 AND port = ?2 AND reservation = ?3",
            )?
            .execute(params![row.sandbox_id, row.port, row.reservation])?;
        Ok(n == 1)
    }

    /// Removes the exposure of `port` in `sandbox_id`, whoever created it (an explicit unexpose).
    pub fn remove_exposed_port(
        &mut self,
        sandbox_id: &str,
        port: u16,
    ) -> Result<Option<ExposedPort>> {
        let sql = format!(
            "DELETE FROM exposed_ports WHERE sandbox_id = ?1 AND port = ?2 RETURNING {COLUMNS}"
        );
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_row(params![sandbox_id, port], from_row)
            .optional()?)
    }

    /// `INSERT OR IGNORE` of a new exposure; `Some(row)` if this call inserted it.
    fn insert_or_ignore(
        &mut self,
        sandbox_id: &str,
        port: u16,
        protocol: Protocol,
        host_port: u16,
        public_url: &str,
        now: UnixMillis,
    ) -> Result<Option<ExposedPort>> {
        if port == 0 {
            return Err(StoreError::InvalidArgument(
                "container port must be greater than 0".into(),
            ));
        }
        let sql = format!(
            "INSERT OR IGNORE INTO exposed_ports
                 (sandbox_id, port, protocol, host_port, public_url, state, reservation, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 'exposing', ?6, ?7)
             RETURNING {COLUMNS}"
        );
        self.conn()
            .prepare_cached(&sql)?
            .query_row(
                params![
                    sandbox_id,
                    port,
                    protocol,
                    host_port,
                    public_url,
                    new_reservation(),
                    now
                ],
                from_row,
            )
            .optional()
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    StoreError::NotFound {
                        kind: "sandbox",
                        key: sandbox_id.to_owned(),
                    }
                } else {
                    StoreError::Sqlite(e)
                }
            })
    }
}

fn check_protocol(row: ExposedPort, wanted: Protocol) -> Result<ExposedPort> {
    if row.protocol == wanted {
        Ok(row)
    } else {
        Err(StoreError::PortConflict {
            sandbox_id: row.sandbox_id,
            port: row.port,
            existing: row.protocol,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::test_util::{open_temp, seed_sandboxes};

    fn url(p: u16) -> String {
        format!("tcp://host:{p}")
    }

    #[tokio::test]
    async fn try_reserve_distinguishes_reserved_existing_and_taken() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a", "b"]).await;
        let (first, retry, other, other_new) = store
            .writer()
            .write(|tx| {
                Ok((
                    tx.try_reserve_host_port("a", 80, Protocol::Tcp, 30000, "u1", 1)?,
                    // A retry with a different candidate still finds the existing exposure.
                    tx.try_reserve_host_port("a", 80, Protocol::Tcp, 30001, "u2", 2)?,
                    tx.try_reserve_host_port("b", 80, Protocol::Tcp, 30000, "u3", 3)?,
                    tx.try_reserve_host_port("b", 80, Protocol::Tcp, 30001, "u4", 4)?,
                ))
            })
            .await
            .unwrap();
        let ReserveOutcome::Reserved(row) = first else {
            panic!("{first:?}")
        };
        assert_eq!(
            (row.host_port, row.public_url.as_str(), row.state),
            (30000, "u1", PortState::Exposing)
        );
        assert_eq!(retry, ReserveOutcome::Existing(row));
        assert_eq!(other, ReserveOutcome::TakenByOther);
        assert!(matches!(other_new, ReserveOutcome::Reserved(ref r) if r.host_port == 30001));
    }

    /// A retried allocate for one (sandbox, port) never takes a second host port: 200 concurrent callers
    /// see one row, one host port, and exactly one of them inserted it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_allocations_for_one_exposure_share_one_host_port() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a"]).await;
        let tasks: Vec<_> = (0..200)
            .map(|_| {
                let w = store.writer().clone();
                tokio::spawn(async move {
                    w.write(|tx| {
                        tx.allocate_host_port("a", 8080, Protocol::Tcp, 40000..=40099, url, 1)
                    })
                    .await
                })
            })
            .collect();
        let mut host_ports = HashSet::new();
        let mut fresh = 0;
        for t in tasks {
            let (row, reused) = t.await.unwrap().unwrap();
            host_ports.insert(row.host_port);
            assert_eq!(row.public_url, url(row.host_port));
            if !reused {
                fresh += 1;
            }
        }
        assert_eq!(host_ports.len(), 1, "{host_ports:?}");
        assert_eq!(fresh, 1);
        let rows = store
            .reader()
            .read(|tx| tx.exposed_ports("a"))
            .await
            .unwrap();
        assert_eq!(rows.len(), 1);
    }

    /// Invariant: a bound host port belongs to at most one exposure (`idx_exposed_ports_host_port`). Two
    /// sandboxes racing over a 10-port pool get 10 distinct ports; the 11th exposure finds the pool
    /// exhausted, while a retry of an existing exposure still succeeds (reused) on the full pool.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn racing_sandboxes_get_distinct_host_ports() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a", "b"]).await;
        let pool = 50000..=50009;
        let tasks: Vec<_> = (0..10u16)
            .map(|i| {
                let w = store.writer().clone();
                let sandbox = if i % 2 == 0 { "a" } else { "b" };
                let pool = pool.clone();
                tokio::spawn(async move {
                    w.write(move |tx| {
                        tx.allocate_host_port(sandbox, 1000 + i, Protocol::Tcp, pool, url, 1)
                    })
                    .await
                })
            })
            .collect();
        let mut host_ports = HashSet::new();
        for t in tasks {
            let (row, reused) = t.await.unwrap().unwrap();
            assert!(!reused);
            assert!(pool.contains(&row.host_port));
            assert!(
                host_ports.insert(row.host_port),
                "host port {} handed out twice",
                row.host_port
            );
        }
        assert_eq!(host_ports.len(), 10);

        let w = store.writer();
        let p = pool.clone();
        let err = w
            .write(move |tx| tx.allocate_host_port("a", 2000, Protocol::Tcp, p, url, 2))
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::PoolExhausted { pool: "host port" }),
            "{err:?}"
        );

        let p = pool.clone();
        let (row, reused) = w
            .write(move |tx| tx.allocate_host_port("b", 1001, Protocol::Tcp, p, url, 3))
            .await
            .unwrap();
        assert!(
            reused,
            "a retry on a full pool finds its row instead of exhausting"
        );
        assert!(host_ports.contains(&row.host_port));
    }

    /// More requests than ports: exactly pool-size succeed with distinct ports; the rest are exhausted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn oversubscribed_pool_hands_out_each_port_once() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a", "b"]).await;
        let tasks: Vec<_> = (0..20u16)
            .map(|i| {
                let w = store.writer().clone();
                let sandbox = if i < 10 { "a" } else { "b" };
                tokio::spawn(async move {
                    w.write(move |tx| {
                        tx.allocate_host_port(
                            sandbox,
                            3000 + i % 10,
                            Protocol::Tcp,
                            51000..=51009,
                            url,
                            1,
                        )
                    })
                    .await
                })
            })
            .collect();
        let mut host_ports = HashSet::new();
        let mut exhausted = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok((row, false)) => assert!(host_ports.insert(row.host_port)),
                Ok((_, true)) => panic!("no exposure was requested twice"),
                Err(StoreError::PoolExhausted { .. }) => exhausted += 1,
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        assert_eq!((host_ports.len(), exhausted), (10, 10));
    }

    #[tokio::test]
    async fn http_exposures_share_host_port_zero_and_are_idempotent() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a", "b"]).await;
        let (a1, a1_again, b1) = store
            .writer()
            .write(|tx| {
                Ok((
                    tx.expose_http("a", 3000, "https://3000-a.example", 1)?,
                    tx.expose_http("a", 3000, "https://ignored", 2)?,
                    tx.expose_http("b", 3000, "https://3000-b.example", 3)?,
                ))
            })
            .await
            .unwrap();
        assert!(!a1.1 && a1_again.1 && !b1.1);
        assert_eq!(a1.0, a1_again.0);
        assert_eq!((a1.0.host_port, b1.0.host_port), (0, 0));
    }

    /// Ports the caller found held by another process are never handed out; when they are all that is
    /// left, the pool is exhausted.
    #[tokio::test]
    async fn avoided_host_ports_are_skipped() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a"]).await;
        let w = store.writer();
        for i in 0..20 {
            let (row, _) = w
                .write(move |tx| {
                    let out = tx.allocate_host_port(
                        "a",
                        4000 + i,
                        Protocol::Tcp,
                        HostPorts {
                            range: 55000..=55002,
                            avoid: &[55000, 55002],
                        },
                        url,
                        1,
                    )?;
                    tx.delete_exposed_port(&out.0)?;
                    Ok(out)
                })
                .await
                .unwrap();
            assert_eq!(row.host_port, 55001);
        }
        let err = w
            .write(|tx| {
                tx.allocate_host_port(
                    "a",
                    1,
                    Protocol::Tcp,
                    HostPorts {
                        range: 55000..=55001,
                        avoid: &[55000, 55001],
                    },
                    url,
                    1,
                )
            })
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::PoolExhausted { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn protocol_mismatch_is_a_port_conflict() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a"]).await;
        let err = store
            .writer()
            .write(|tx| {
                tx.expose_http("a", 22, "u", 1)?;
                tx.allocate_host_port("a", 22, Protocol::Tcp, 52000..=52009, url, 1)
            })
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::PortConflict {
                    port: 22,
                    existing: Protocol::Http,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    /// A rollback deletes only the reservation it made: after the row was replaced by another caller's,
    /// the stale delete is a no-op.
    #[tokio::test]
    async fn delete_exposed_port_only_removes_the_callers_row() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a"]).await;
        let w = store.writer();
        let (mine, _) = w
            .write(|tx| tx.allocate_host_port("a", 9000, Protocol::Tcp, 53000..=53009, url, 1))
            .await
            .unwrap();
        let mine2 = mine.clone();
        let (theirs, deleted_stale) = w
            .write(move |tx| {
                assert!(tx.remove_exposed_port("a", 9000)?.is_some());
                let (theirs, reused) =
                    tx.allocate_host_port("a", 9000, Protocol::Tcp, 53000..=53009, url, 2)?;
                assert!(!reused);
                let deleted = tx.delete_exposed_port(&mine2)?;
                Ok((theirs, deleted))
            })
            .await
            .unwrap();
        assert!(!deleted_stale);
        assert_ne!(mine.reservation, theirs.reservation);
        let (still, deleted_own) = w
            .write(move |tx| {
                let still = tx.get_exposed_port("a", 9000)?;
                Ok((still, tx.delete_exposed_port(&theirs)?))
            })
            .await
            .unwrap();
        assert!(still.is_some());
        assert!(deleted_own);
    }

    #[tokio::test]
    async fn ports_cascade_with_their_sandbox_and_unknown_sandbox_is_not_found() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a"]).await;
        let w = store.writer();
        let (row, _) = w
            .write(|tx| tx.allocate_host_port("a", 1, Protocol::Udp, 54000..=54000, url, 1))
            .await
            .unwrap();
        assert!(w.write(move |tx| tx.mark_port_active(&row)).await.unwrap());
        let active = store
            .reader()
            .read(|tx| tx.exposed_ports_in_state(PortState::Active))
            .await
            .unwrap();
        assert_eq!(active.len(), 1);
        w.write(|tx| tx.delete_sandbox("a")).await.unwrap();
        let by_host = store
            .reader()
            .read(|tx| tx.exposed_port_by_host_port(54000))
            .await
            .unwrap();
        assert!(by_host.is_none());
        let err = w
            .write(|tx| tx.allocate_host_port("ghost", 1, Protocol::Tcp, 54000..=54000, url, 1))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::NotFound {
                    kind: "sandbox",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
