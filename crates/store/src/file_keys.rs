//! The keys that sign a sandbox's file URLs (Daytona's `download_url` / `upload_url`): one per
//! sandbox at most (`file_keys` primary key), removed with its sandbox (`ON DELETE CASCADE`), and
//! replaced whole by a rotation, which ends every URL signed with the old one.

use rusqlite::{params, OptionalExtension};

use crate::error::{unknown_sandbox, Result};
use crate::{ReadTx, WriteTx};

impl ReadTx<'_> {
    /// Sandbox `id`'s file-URL key, if it has one.
    pub fn file_key(&self, id: &str) -> Result<Option<String>> {
        Ok(self
            .conn()
            .prepare_cached("SELECT key FROM file_keys WHERE sandbox_id = ?1")?
            .query_row([id], |r| r.get(0))
            .optional()?)
    }
}

impl WriteTx<'_> {
    /// Sandbox `id`'s file-URL key: the one it has, else `fresh` (stored); with `replace`, `fresh`
    /// always (a rotation). [`crate::StoreError::NotFound`] for an unknown sandbox.
    pub fn file_key(&mut self, id: &str, fresh: &str, replace: bool) -> Result<String> {
        let sql = if replace {
            "INSERT INTO file_keys (sandbox_id, key) VALUES (?1, ?2)
             ON CONFLICT (sandbox_id) DO UPDATE SET key = excluded.key"
        } else {
            "INSERT INTO file_keys (sandbox_id, key) VALUES (?1, ?2) ON CONFLICT DO NOTHING"
        };
        self.conn()
            .prepare_cached(sql)?
            .execute(params![id, fresh])
            .map_err(unknown_sandbox(id))?;
        Ok(self
            .conn()
            .prepare_cached("SELECT key FROM file_keys WHERE sandbox_id = ?1")?
            .query_row([id], |r| r.get(0))?)
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::{open_temp, seed_sandboxes};
    use crate::StoreError;

    /// Invariant: one file-URL key per sandbox (`file_keys` primary key): the first one stays until
    /// a rotation replaces it, and it goes with its sandbox.
    #[tokio::test]
    async fn a_sandbox_keeps_one_key_until_it_is_rotated() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a"]).await;
        let w = store.writer();
        assert_eq!(
            w.write(|tx| tx.file_key("a", "k1", false)).await.unwrap(),
            "k1"
        );
        assert_eq!(
            w.write(|tx| tx.file_key("a", "k2", false)).await.unwrap(),
            "k1",
            "kept"
        );
        assert_eq!(
            w.write(|tx| tx.file_key("a", "k3", true)).await.unwrap(),
            "k3",
            "rotated"
        );
        let r = store.reader();
        assert_eq!(
            r.read(|tx| tx.file_key("a")).await.unwrap().as_deref(),
            Some("k3")
        );
        let unknown = w.write(|tx| tx.file_key("nope", "k", false)).await;
        assert!(
            matches!(unknown, Err(StoreError::NotFound { .. })),
            "{unknown:?}"
        );
        w.write(|tx| tx.delete_sandbox("a")).await.unwrap();
        assert_eq!(r.read(|tx| tx.file_key("a")).await.unwrap(), None);
    }
}
