//! API tokens: only a SHA-256 of each token is stored.
//!
//! Contract: the plaintext token exists only in the [`CreatedToken`] returned once at creation (or in the
//! caller's config for [`WriteTx::import_api_token`]); the table holds `hex(sha256(token))`, unique.
//! [`ReadTx::verify_token`] hashes the presented token and looks the hash up by equality on that index, so
//! the lookup leaks nothing useful about other tokens' values; comparing a presented token with a single
//! known secret in constant time is the API layer's job.

use std::fmt;

use rand::Rng;
use rusqlite::{params, OptionalExtension};
use sha2::{Digest, Sha256};

use crate::error::{is_unique_violation_on, Result};
use crate::{ReadTx, UnixMillis, WriteTx};

/// Identifier of a stored API token (not the secret).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenId(pub String);

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A stored token's public facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub id: TokenId,
    pub name: String,
    pub created_at: UnixMillis,
    pub last_used_at: Option<UnixMillis>,
}

/// A freshly created token. `token` is the only copy of the secret (redacted in `Debug`).
#[derive(Clone)]
pub struct CreatedToken {
    pub id: TokenId,
    pub name: String,
    pub token: String,
}

impl fmt::Debug for CreatedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreatedToken")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// `hex(sha256(token))`, the form tokens are stored in.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Prefix of tokens minted by [`WriteTx::create_api_token`].
pub const TOKEN_PREFIX: &str = "sbx_";

impl ReadTx<'_> {
    /// The id of the token `token`, if it is a stored (unrevoked) token.
    pub fn verify_token(&self, token: &str) -> Result<Option<TokenId>> {
        Ok(self
            .conn()
            .prepare_cached("SELECT id FROM api_tokens WHERE token_hash = ?1")?
            .query_row([hash_token(token)], |r| r.get(0).map(TokenId))
            .optional()?)
    }

    /// Every stored token, oldest first.
    pub fn list_api_tokens(&self) -> Result<Vec<ApiToken>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT id, name, created_at, last_used_at FROM api_tokens ORDER BY created_at, id",
        )?;
        let rows = stmt
            .query_map([], |r| {
                Ok(ApiToken {
                    id: TokenId(r.get(0)?),
                    name: r.get(1)?,
                    created_at: r.get(2)?,
                    last_used_at: r.get(3)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

impl WriteTx<'_> {
    /// Mints a random token (`sbx_` + 64 hex digits), stores its hash, and returns the secret once.
    pub fn create_api_token(&mut self, name: &str, now: UnixMillis) -> Result<CreatedToken> {
        let secret: [u8; 32] = rand::rng().random();
        let token = format!("{TOKEN_PREFIX}{}", hex::encode(secret));
        let id = self.insert_token_hash(name, &hash_token(&token), now)?;
        Ok(CreatedToken {
            id,
            name: name.to_owned(),
            token,
        })
    }

    /// Stores a token the operator supplied (e.g. from configuration). Idempotent: importing a token that
    /// is already stored returns its existing id.
    pub fn import_api_token(
        &mut self,
        name: &str,
        token: &str,
        now: UnixMillis,
    ) -> Result<TokenId> {
        match self.insert_token_hash(name, &hash_token(token), now) {
            Err(crate::StoreError::Sqlite(e))
                if is_unique_violation_on(&e, "api_tokens.token_hash") =>
            {
                Ok(self
                    .verify_token(token)?
                    .expect("the hash just collided with a stored one"))
            }
            other => other,
        }
    }

    /// Records that `id` was used at `now`. Returns whether the token exists.
    pub fn touch_api_token(&mut self, id: &TokenId, now: UnixMillis) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached("UPDATE api_tokens SET last_used_at = ?2 WHERE id = ?1")?
            .execute(params![id.0, now])?;
        Ok(n == 1)
    }

    /// Deletes token `id`. Returns whether it existed.
    pub fn revoke_api_token(&mut self, id: &TokenId) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached("DELETE FROM api_tokens WHERE id = ?1")?
            .execute([&id.0])?;
        Ok(n == 1)
    }

    fn insert_token_hash(&mut self, name: &str, hash: &str, now: UnixMillis) -> Result<TokenId> {
        let id = uuid::Uuid::new_v4().to_string();
        self.conn()
            .prepare_cached(
                "INSERT INTO api_tokens (id, name, token_hash, created_at) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![id, name, hash, now])?;
        Ok(TokenId(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::open_temp;

    #[tokio::test]
    async fn only_the_hash_is_stored_and_verify_finds_it() {
        let (_dir, store, _t) = open_temp();
        let created = store
            .writer()
            .write(|tx| tx.create_api_token("ci", 1))
            .await
            .unwrap();
        assert!(created.token.starts_with(TOKEN_PREFIX) && created.token.len() == 4 + 64);
        assert!(!format!("{created:?}").contains(&created.token));
        let token = created.token.clone();
        let (found, wrong, stored) = store
            .reader()
            .read(move |tx| {
                let stored: Vec<String> = tx
                    .conn()
                    .prepare("SELECT token_hash FROM api_tokens")?
                    .query_map([], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                Ok((
                    tx.verify_token(&token)?,
                    tx.verify_token("sbx_nope")?,
                    stored,
                ))
            })
            .await
            .unwrap();
        assert_eq!(found, Some(created.id.clone()));
        assert_eq!(wrong, None);
        assert_eq!(stored, vec![hash_token(&created.token)]);
        assert!(!stored[0].contains(&created.token[4..]));
    }

    #[test]
    fn hash_is_hex_sha256() {
        assert_eq!(
            hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[tokio::test]
    async fn import_is_idempotent_and_revoke_removes() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        let (a, b) = w
            .write(|tx| {
                Ok((
                    tx.import_api_token("boot", "secret-1", 1)?,
                    tx.import_api_token("boot again", "secret-1", 2)?,
                ))
            })
            .await
            .unwrap();
        assert_eq!(a, b);
        let id = a.clone();
        assert!(w.write(move |tx| tx.touch_api_token(&id, 5)).await.unwrap());
        let listed = store
            .reader()
            .read(|tx| tx.list_api_tokens())
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].last_used_at, Some(5));
        let id = a.clone();
        assert!(w.write(move |tx| tx.revoke_api_token(&id)).await.unwrap());
        let found = store
            .reader()
            .read(|tx| tx.verify_token("secret-1"))
            .await
            .unwrap();
        assert_eq!(found, None);
    }
}
