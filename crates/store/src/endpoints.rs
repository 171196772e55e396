//! Where each sandbox's services are, as the runtime (the authority for it) reported.
//!
//! Contract: the rows are a copy of the authority's answer, never a decision. Two writers learn the
//! same fact by different paths — the create flow after its sandbox started, and read-repair when a
//! reader misses — and may race; both write with [`WriteTx::upsert_endpoint`] (`INSERT … ON CONFLICT
//! DO UPDATE`), so they converge on one row holding the latest observation, without read-modify-write.
//! A row goes with its sandbox (`ON DELETE CASCADE`); an upsert for a sandbox that no longer exists
//! writes nothing.

use rusqlite::{params, OptionalExtension};
use std::net::Ipv4Addr;
use std::path::PathBuf;

use crate::error::Result;
use crate::{ReadTx, UnixMillis, WriteTx};

/// One observed endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEndpoint {
    /// The sandbox.
    pub sandbox_id: String,
    /// Its address on its veth pair.
    pub address: Ipv4Addr,
    /// Its agent's unix socket on the host.
    pub agent_socket: PathBuf,
    /// When the authority said so.
    pub observed_at: UnixMillis,
}

impl ReadTx<'_> {
    /// The stored endpoint of sandbox `id`, if one was observed.
    pub fn get_endpoint(&self, id: &str) -> Result<Option<StoredEndpoint>> {
        let row = self
            .conn()
            .prepare_cached(
                "SELECT sandbox_id, address, agent_socket, observed_at FROM sandbox_endpoints
                 WHERE sandbox_id = ?1",
            )?
            .query_row([id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })
            .optional()?;
        // A row whose address does not parse is treated as missing: read-repair rewrites it.
        Ok(row.and_then(|(sandbox_id, address, socket, observed_at)| {
            Some(StoredEndpoint {
                sandbox_id,
                address: address.parse().ok()?,
                agent_socket: socket.into(),
                observed_at,
            })
        }))
    }
}

impl ReadTx<'_> {
    /// The running sandbox whose observed endpoint is `address`, if any (the newest observation
    /// wins; a failed sandbox's endpoint may name an address given out again).
    pub fn sandbox_at_address(&self, address: Ipv4Addr) -> Result<Option<String>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT e.sandbox_id FROM sandbox_endpoints e JOIN sandboxes s ON s.id = e.sandbox_id
                 WHERE e.address = ?1 AND s.state = 'running'
                 ORDER BY e.observed_at DESC LIMIT 1",
            )?
            .query_row([address.to_string()], |r| r.get(0))
            .optional()?)
    }
}

impl WriteTx<'_> {
    /// Records `endpoint`, replacing an older observation of the same sandbox. Returns whether a row was
    /// written (`false`: the sandbox does not exist).
    pub fn upsert_endpoint(&mut self, endpoint: &StoredEndpoint) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "INSERT INTO sandbox_endpoints (sandbox_id, address, agent_socket, observed_at)
                 SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM sandboxes WHERE id = ?1)
                 ON CONFLICT (sandbox_id) DO UPDATE SET
                     address = excluded.address,
                     agent_socket = excluded.agent_socket,
                     observed_at = excluded.observed_at",
            )?
            .execute(params![
                endpoint.sandbox_id,
                endpoint.address.to_string(),
                endpoint.agent_socket.to_string_lossy(),
                endpoint.observed_at
            ])?;
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{new_sandbox, open_temp};

    fn endpoint(id: &str, last_octet: u8, at: i64) -> StoredEndpoint {
        StoredEndpoint {
            sandbox_id: id.into(),
            address: Ipv4Addr::new(10, 201, 0, last_octet),
            agent_socket: format!("/run/{id}/agent.sock").into(),
            observed_at: at,
        }
    }

    /// Invariant: one observed endpoint per sandbox; racing writers converge on one row.
    #[tokio::test]
    async fn racing_upserts_converge_on_one_row() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        w.write(|tx| tx.insert_sandbox(new_sandbox("s", "", 1)))
            .await
            .unwrap();
        let writes: Vec<_> = (1..=100u8)
            .map(|i| {
                let w = w.clone();
                tokio::spawn(async move {
                    w.write(move |tx| tx.upsert_endpoint(&endpoint("s", i, i64::from(i))))
                        .await
                        .unwrap()
                })
            })
            .collect();
        for write in writes {
            assert!(write.await.unwrap());
        }
        let rows: i64 = store
            .reader()
            .read(|tx| {
                Ok(tx
                    .conn()
                    .query_row("SELECT count(*) FROM sandbox_endpoints", [], |r| r.get(0))?)
            })
            .await
            .unwrap();
        assert_eq!(rows, 1);
        let got = store
            .reader()
            .read(|tx| tx.get_endpoint("s"))
            .await
            .unwrap()
            .unwrap();
        // Whichever write committed last won, whole: address and time come from the same observation.
        assert_eq!(i64::from(got.address.octets()[3]), got.observed_at);
    }

    #[tokio::test]
    async fn endpoints_go_with_their_sandbox_and_need_one() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        assert!(!w
            .write(|tx| tx.upsert_endpoint(&endpoint("ghost", 2, 1)))
            .await
            .unwrap());
        w.write(|tx| {
            tx.insert_sandbox(new_sandbox("s", "", 1))?;
            tx.upsert_endpoint(&endpoint("s", 2, 1))?;
            tx.delete_sandbox("s")
        })
        .await
        .unwrap();
        let left = store
            .reader()
            .read(|tx| Ok((tx.get_endpoint("s")?, tx.get_endpoint("ghost")?)))
            .await
            .unwrap();
        assert_eq!(left, (None, None));
    }
}
