//! Custom domains: hostnames routed to a port of a sandbox.
//!
//! Contract:
//! - A hostname is bound to at most one sandbox: it is the primary key of `custom_domains`
//!   (`COLLATE NOCASE`; the store also stores it lowercased without a trailing dot).
//! - [`WriteTx::bind_domain`] inserts with `ON CONFLICT(hostname) DO NOTHING` and observes the outcome:
//!   a hostname held by another sandbox is [`StoreError::HostnameConflict`]; the same sandbox binding the
//!   same port again is an idempotent no-op ([`BindOutcome::Unchanged`]); the same sandbox with another
//!   port moves the binding ([`BindOutcome::Rebound`]).
//! - Bindings are removed with their sandbox (`ON DELETE CASCADE`).

use rusqlite::{params, OptionalExtension, Row};

use crate::error::{is_foreign_key_violation, Result, StoreError};
use crate::{ReadTx, UnixMillis, WriteTx};

/// A stored hostname binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainBinding {
    pub hostname: String,
    pub sandbox_id: String,
    pub port: u16,
    pub created_at: UnixMillis,
}

/// The outcome of [`WriteTx::bind_domain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindOutcome {
    /// This call created the binding.
    Bound(DomainBinding),
    /// The sandbox already had exactly this binding.
    Unchanged(DomainBinding),
    /// The sandbox had the hostname on another port; it now points at the requested one.
    Rebound {
        binding: DomainBinding,
        previous_port: u16,
    },
}

impl BindOutcome {
    /// The binding as it now stands.
    pub fn binding(&self) -> &DomainBinding {
        match self {
            BindOutcome::Bound(b) | BindOutcome::Unchanged(b) => b,
            BindOutcome::Rebound { binding, .. } => binding,
        }
    }
}

/// The canonical form the store keys hostnames by.
pub fn normalize_hostname(hostname: &str) -> String {
    hostname.trim().trim_end_matches('.').to_ascii_lowercase()
}

const COLUMNS: &str = "hostname, sandbox_id, port, created_at";

fn from_row(row: &Row<'_>) -> rusqlite::Result<DomainBinding> {
    Ok(DomainBinding {
        hostname: row.get(0)?,
        sandbox_id: row.get(1)?,
        port: row.get(2)?,
        created_at: row.get(3)?,
    })
}

impl ReadTx<'_> {
    /// The binding of `hostname`, if any.
    pub fn resolve_domain(&self, hostname: &str) -> Result<Option<DomainBinding>> {
        let sql = format!("SELECT {COLUMNS} FROM custom_domains WHERE hostname = ?1");
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_row([normalize_hostname(hostname)], from_row)
            .optional()?)
    }

    /// Every hostname bound to `sandbox_id`.
    pub fn domains_of(&self, sandbox_id: &str) -> Result<Vec<DomainBinding>> {
        let sql =
            format!("SELECT {COLUMNS} FROM custom_domains WHERE sandbox_id = ?1 ORDER BY hostname");
        let mut stmt = self.conn().prepare_cached(&sql)?;
        let rows = stmt
            .query_map([sandbox_id], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

impl WriteTx<'_> {
    /// Binds `hostname` to `port` of `sandbox_id` (see the module contract for the outcomes).
    pub fn bind_domain(
        &mut self,
        hostname: &str,
        sandbox_id: &str,
        port: u16,
        now: UnixMillis,
    ) -> Result<BindOutcome> {
        let hostname = normalize_hostname(hostname);
        if hostname.is_empty() || port == 0 {
            return Err(StoreError::InvalidArgument(
                "a domain binding needs a hostname and a port greater than 0".into(),
            ));
        }
        let sql = format!(
            "INSERT INTO custom_domains (hostname, sandbox_id, port, created_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (hostname) DO NOTHING
             RETURNING {COLUMNS}"
        );
        let inserted = self
            .conn()
            .prepare_cached(&sql)?
            .query_row(params![hostname, sandbox_id, port, now], from_row)
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
            })?;
        if let Some(b) = inserted {
            return Ok(BindOutcome::Bound(b));
        }
        let existing = self
            .resolve_domain(&hostname)?
            .ok_or_else(|| StoreError::NotFound {
                kind: "custom domain",
                key: hostname.clone(),
            })?;
        if existing.sandbox_id != sandbox_id {
            return Err(StoreError::HostnameConflict {
                hostname,
                owner: existing.sandbox_id,
            });
        }
        if existing.port == port {
            return Ok(BindOutcome::Unchanged(existing));
        }
        self.conn()
            .prepare_cached(
                "UPDATE custom_domains SET port = ?3 WHERE hostname = ?1 AND sandbox_id = ?2",
            )?
            .execute(params![hostname, sandbox_id, port])?;
        Ok(BindOutcome::Rebound {
            previous_port: existing.port,
            binding: DomainBinding { port, ..existing },
        })
    }

    /// Removes `hostname` if `sandbox_id` owns it. Returns whether it did.
    pub fn unbind_domain(&mut self, hostname: &str, sandbox_id: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached("DELETE FROM custom_domains WHERE hostname = ?1 AND sandbox_id = ?2")?
            .execute(params![normalize_hostname(hostname), sandbox_id])?;
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{open_temp, seed_sandboxes};

    /// Invariant: a hostname maps to at most one sandbox (primary key of `custom_domains`, case-folded).
    #[tokio::test]
    async fn hostname_owned_by_another_sandbox_conflicts() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a", "b"]).await;
        let w = store.writer();
        let first = w
            .write(|tx| tx.bind_domain("App.Example.com.", "a", 8080, 1))
            .await
            .unwrap();
        assert!(matches!(first, BindOutcome::Bound(ref b) if b.hostname == "app.example.com"));
        let err = w
            .write(|tx| tx.bind_domain("app.example.COM", "b", 8080, 2))
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::HostnameConflict { ref hostname, ref owner } if hostname == "app.example.com" && owner == "a"),
            "{err:?}"
        );
        // The schema itself rejects a case variant, whatever the code path.
        let raw = w
            .write(|tx| {
                Ok(tx
                    .conn()
                    .execute(
                        "INSERT INTO custom_domains (hostname, sandbox_id, port, created_at) VALUES ('APP.example.com', 'b', 1, 0)",
                        [],
                    )
                    .is_err())
            })
            .await
            .unwrap();
        assert!(raw);
    }

    #[tokio::test]
    async fn rebinding_is_idempotent_for_the_same_port_and_moves_for_another() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a"]).await;
        let w = store.writer();
        let (first, again, moved) = w
            .write(|tx| {
                Ok((
                    tx.bind_domain("x.test", "a", 80, 1)?,
                    tx.bind_domain("x.test", "a", 80, 2)?,
                    tx.bind_domain("x.test", "a", 81, 3)?,
                ))
            })
            .await
            .unwrap();
        assert!(matches!(first, BindOutcome::Bound(_)));
        assert_eq!(again, BindOutcome::Unchanged(first.binding().clone()));
        assert!(
            matches!(moved, BindOutcome::Rebound { previous_port: 80, ref binding } if binding.port == 81)
        );
        let now = store
            .reader()
            .read(|tx| tx.resolve_domain("X.TEST"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((now.port, now.created_at), (81, 1));
    }

    #[tokio::test]
    async fn unbind_requires_ownership_and_bindings_cascade() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a", "b"]).await;
        let w = store.writer();
        w.write(|tx| {
            tx.bind_domain("one.test", "a", 80, 1)?;
            tx.bind_domain("two.test", "a", 80, 1)
        })
        .await
        .unwrap();
        assert!(!w
            .write(|tx| tx.unbind_domain("one.test", "b"))
            .await
            .unwrap());
        assert!(w
            .write(|tx| tx.unbind_domain("ONE.test", "a"))
            .await
            .unwrap());
        w.write(|tx| tx.delete_sandbox("a")).await.unwrap();
        let left = store.reader().read(|tx| tx.domains_of("a")).await.unwrap();
        assert!(left.is_empty());
        // Freed hostnames can be bound by someone else.
        w.write(|tx| tx.bind_domain("two.test", "b", 80, 2))
            .await
            .unwrap();
        let err = w
            .write(|tx| tx.bind_domain("z.test", "ghost", 80, 2))
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
