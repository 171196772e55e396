//! Secrets: a name, a value sealed under the daemon's secrets key, the hosts the value may be sent
//! to, and what the surfaces show about them.
//!
//! Contract (schema in migration 17):
//! - A secret's name is unique (`secrets.name`): [`WriteTx::insert_secret`] of a taken name is
//!   [`StoreError::SecretExists`], and of racing inserts exactly one wins
//!   (`tests::racing_creates_of_one_name_yield_one_secret`).
//! - The store never sees a value in clear: `sealed` is what `sandboxd_secrets::seal` gave, and the
//!   schema refuses anything shorter than a format byte, a nonce and a tag.
//! - A secret's version starts at 1 and grows by one each time its value is replaced, in the same
//!   statement (`tests::a_new_value_is_a_new_version_and_other_fields_are_not`).

use rusqlite::{params, OptionalExtension, Row};
use std::collections::BTreeMap;

use crate::error::{is_unique_violation_on, Result, StoreError};
use crate::{ReadTx, UnixMillis, WriteTx};

/// A secret as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRecord {
    pub id: String,
    pub name: String,
    /// The value, sealed (`sandboxd_secrets::seal`, the id as associated data).
    pub sealed: Vec<u8>,
    /// The hosts the value may be sent to, in their normal form; empty: none yet.
    pub hosts: Vec<String>,
    pub description: String,
    pub metadata: BTreeMap<String, String>,
    /// 1 for the first value, one more for each later one.
    pub version: u32,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
}

/// What an update of a secret changes; `None`: unchanged.
#[derive(Debug, Clone, Default)]
pub struct SecretChange {
    /// A new sealed value (a new version).
    pub sealed: Option<Vec<u8>>,
    pub hosts: Option<Vec<String>>,
    pub description: Option<String>,
    pub metadata: Option<BTreeMap<String, String>>,
}

const COLUMNS: &str =
    "id, name, sealed, hosts, description, metadata, version, created_at, updated_at";

fn json<T: serde::de::DeserializeOwned>(r: &Row<'_>, i: usize) -> rusqlite::Result<T> {
    let text: String = r.get(i)?;
    serde_json::from_str(&text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn row(r: &Row<'_>) -> rusqlite::Result<SecretRecord> {
    Ok(SecretRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        sealed: r.get(2)?,
        hosts: json(r, 3)?,
        description: r.get(4)?,
        metadata: json(r, 5)?,
        version: r.get(6)?,
        created_at: r.get(7)?,
        updated_at: r.get(8)?,
    })
}

fn to_json<T: serde::Serialize>(what: &str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| StoreError::InvalidArgument(format!("{what}: {e}")))
}

impl ReadTx<'_> {
    /// The secret whose id or name is `key` (an id wins).
    pub fn get_secret(&self, key: &str) -> Result<Option<SecretRecord>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM secrets WHERE id = ?1 OR name = ?1 ORDER BY id = ?1 DESC LIMIT 1"
        );
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_row([key], row)
            .optional()?)
    }

    /// The secrets whose names are among `names` (by name exactly, never by id), each once.
    pub fn secrets_named(&self, names: &[String]) -> Result<Vec<SecretRecord>> {
        let sql = format!("SELECT {COLUMNS} FROM secrets WHERE name = ?1");
        let mut stmt = self.conn().prepare_cached(&sql)?;
        let mut found = Vec::with_capacity(names.len());
        for name in names {
            if let Some(s) = stmt.query_row([name], row).optional()? {
                if !found.iter().any(|f: &SecretRecord| f.id == s.id) {
                    found.push(s);
                }
            }
        }
        Ok(found)
    }

    /// Every secret, by name.
    pub fn list_secrets(&self) -> Result<Vec<SecretRecord>> {
        let sql = format!("SELECT {COLUMNS} FROM secrets ORDER BY name");
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_map([], row)?
            .collect::<rusqlite::Result<_>>()?)
    }
}

impl WriteTx<'_> {
    /// Records a new secret; [`StoreError::SecretExists`] when its name is taken.
    pub fn insert_secret(&mut self, secret: &SecretRecord) -> Result<()> {
        let hosts = to_json("hosts", &secret.hosts)?;
        let metadata = to_json("metadata", &secret.metadata)?;
        self.conn()
            .prepare_cached(
                "INSERT INTO secrets (id, name, sealed, hosts, description, metadata, version,
                                      created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(params![
                secret.id,
                secret.name,
                secret.sealed,
                hosts,
                secret.description,
                metadata,
                secret.version,
                secret.created_at,
                secret.updated_at
            ])
            .map_err(|e| {
                if is_unique_violation_on(&e, "secrets.name") {
                    StoreError::SecretExists {
                        name: secret.name.clone(),
                    }
                } else {
                    StoreError::Sqlite(e)
                }
            })?;
        Ok(())
    }

    /// Applies `change` to secret `id` at `now`; the secret as it is then, or `None` if there is
    /// none. A new value raises the version by one.
    pub fn update_secret(
        &mut self,
        id: &str,
        change: &SecretChange,
        now: UnixMillis,
    ) -> Result<Option<SecretRecord>> {
        let hosts = change
            .hosts
            .as_ref()
            .map(|h| to_json("hosts", h))
            .transpose()?;
        let metadata = change
            .metadata
            .as_ref()
            .map(|m| to_json("metadata", m))
            .transpose()?;
        let changed = self
            .conn()
            .prepare_cached(
                "UPDATE secrets SET
                     sealed = coalesce(?2, sealed),
                     version = version + (?2 IS NOT NULL),
                     hosts = coalesce(?3, hosts),
                     description = coalesce(?4, description),
                     metadata = coalesce(?5, metadata),
                     updated_at = ?6
                 WHERE id = ?1",
            )?
            .execute(params![
                id,
                change.sealed,
                hosts,
                change.description,
                metadata,
                now
            ])?;
        if changed == 0 {
            return Ok(None);
        }
        self.get_secret(id)
    }

    /// Deletes secret `id`; `false` if there was none.
    pub fn delete_secret(&mut self, id: &str) -> Result<bool> {
        Ok(self
            .conn()
            .prepare_cached("DELETE FROM secrets WHERE id = ?1")?
            .execute([id])?
            == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::open_temp;

    fn secret(id: &str, name: &str) -> SecretRecord {
        SecretRecord {
            id: id.into(),
            name: name.into(),
            sealed: vec![1; 40],
            hosts: vec!["api.example.com".into()],
            description: "d".into(),
            metadata: BTreeMap::from([("team".into(), "a".into())]),
            version: 1,
            created_at: 1,
            updated_at: 1,
        }
    }

    #[tokio::test]
    async fn racing_creates_of_one_name_yield_one_secret() {
        let (_dir, store, _thread) = open_temp();
        let attempts = (0..200).map(|n| {
            let w = store.writer().clone();
            tokio::spawn(async move {
                w.write(move |tx| tx.insert_secret(&secret(&format!("sec{n}"), "shared")))
                    .await
            })
        });
        let mut won = 0;
        for attempt in attempts {
            match attempt.await.unwrap() {
                Ok(()) => won += 1,
                Err(StoreError::SecretExists { name }) => assert_eq!(name, "shared"),
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert_eq!(won, 1);
        let all = store.reader().read(|tx| tx.list_secrets()).await.unwrap();
        assert_eq!(all.len(), 1);
        let by_name = store.reader().read(|tx| tx.get_secret("shared")).await;
        assert_eq!(by_name.unwrap().as_ref(), Some(&all[0]));
        let named = vec![
            "shared".to_string(),
            "shared".into(),
            all[0].id.clone(),
            "x".into(),
        ];
        let found = store
            .reader()
            .read(move |tx| tx.secrets_named(&named))
            .await;
        assert_eq!(found.unwrap(), all, "by name only, each once");
    }

    #[tokio::test]
    async fn a_new_value_is_a_new_version_and_other_fields_are_not() {
        let (_dir, store, _thread) = open_temp();
        let w = store.writer();
        w.write(|tx| tx.insert_secret(&secret("s1", "k")))
            .await
            .unwrap();
        let hosts_only = SecretChange {
            hosts: Some(vec!["*.example.com".into()]),
            ..Default::default()
        };
        let after = w
            .write(move |tx| tx.update_secret("s1", &hosts_only, 5))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((after.version, after.updated_at), (1, 5));
        assert_eq!(after.hosts, vec!["*.example.com".to_string()]);
        assert_eq!(after.description, "d");
        let value = SecretChange {
            sealed: Some(vec![2; 40]),
            ..Default::default()
        };
        let after = w
            .write(move |tx| tx.update_secret("s1", &value, 6))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((after.version, after.sealed[0]), (2, 2));
        assert!(w
            .write(|tx| tx.update_secret("nope", &SecretChange::default(), 7))
            .await
            .unwrap()
            .is_none());
    }

    #[tokio::test]
    async fn the_schema_refuses_what_cannot_be_a_sealed_value() {
        let (_dir, store, _thread) = open_temp();
        let short = SecretRecord {
            sealed: b"hunter2".to_vec(),
            ..secret("s1", "k")
        };
        let refused = store
            .writer()
            .write(move |tx| tx.insert_secret(&short))
            .await;
        assert!(matches!(refused, Err(StoreError::Sqlite(_))));
        let deleted = store.writer().write(|tx| tx.delete_secret("s1")).await;
        assert!(
            !deleted.unwrap(),
            "nothing was inserted, so nothing is deleted"
        );
    }
}
