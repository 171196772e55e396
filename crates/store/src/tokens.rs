//! API keys (tokens): only a SHA-256 of each key is stored.
//!
//! Contract:
//! - The plaintext key exists only in the [`CreatedToken`] returned once at creation (or in the
//!   operator's configuration for [`WriteTx::import_api_token`]); the table holds `hex(sha256(key))`,
//!   unique, beside the key's [`KeyScope`], a non-secret [`ApiToken::prefix`] and its origin.
//! - [`ReadTx::verify_token`] hashes the presented key and looks the hash up by equality on that
//!   index, so the lookup leaks nothing useful about other keys' values; comparing a presented key
//!   with a single known secret in constant time is the API layer's job.
//! - A revoked key's row is gone in the same transaction that answers the revoke, so the next
//!   [`ReadTx::verify_token`] (every request does one) no longer finds it.
//! - Exactly one configured token (the daemon's admin token) is stored: importing one removes any
//!   other configured token, so a rotated `SB_PAT_TOKEN` stops working; a configured token is never
//!   revoked through [`WriteTx::revoke_api_token`] (the daemon would still accept it).

use std::fmt;

use rand::Rng;
use rusqlite::{params, OptionalExtension};
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::{ReadTx, UnixMillis, WriteTx};

/// Identifier of a stored API key (not the secret).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenId(pub String);

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a key may do: `admin` keys manage keys and webhooks, `user` keys everything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyScope {
    /// Everything.
    Admin,
    /// Everything but managing keys and webhooks.
    User,
}

impl KeyScope {
    /// The stored (and API) spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyScope::Admin => "admin",
            KeyScope::User => "user",
        }
    }

    /// The scope spelled `s` ([`KeyScope::as_str`]), if it is one.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "admin" => Some(KeyScope::Admin),
            "user" => Some(KeyScope::User),
            _ => None,
        }
    }

    /// Column `column` of `row`, a stored scope.
    fn read(row: &rusqlite::Row<'_>, column: usize) -> rusqlite::Result<Self> {
        match row.get::<_, String>(column)?.as_str() {
            "admin" => Ok(KeyScope::Admin),
            "user" => Ok(KeyScope::User),
            other => Err(rusqlite::Error::FromSqlConversionFailure(
                column,
                rusqlite::types::Type::Text,
                format!("unknown key scope {other:?}").into(),
            )),
        }
    }
}

impl fmt::Display for KeyScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored key's public facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub id: TokenId,
    pub name: String,
    pub scope: KeyScope,
    /// The first [`PREFIX_LEN`] characters of a minted key (`e2b_` and 6 hex digits); empty for the
    /// configured token, whose characters are the operator's.
    pub prefix: String,
    /// Whether this is the daemon's configured admin token (not revocable through the API).
    pub configured: bool,
    pub created_at: UnixMillis,
    pub last_used_at: Option<UnixMillis>,
}

/// A key that [`ReadTx::verify_token`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedToken {
    pub id: TokenId,
    pub scope: KeyScope,
}

/// A freshly minted key. `token` is the only copy of the secret (redacted in `Debug`).
#[derive(Clone)]
pub struct CreatedToken {
    pub id: TokenId,
    pub name: String,
    pub scope: KeyScope,
    pub prefix: String,
    pub created_at: UnixMillis,
    pub token: String,
}

impl fmt::Debug for CreatedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreatedToken")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("scope", &self.scope)
            .field("prefix", &self.prefix)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// What [`WriteTx::revoke_api_token`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    /// The key is gone.
    Revoked,
    /// No such key.
    NotFound,
    /// The key is the configured admin token and stays.
    Configured,
}

/// `hex(sha256(token))`, the form keys are stored in.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Prefix of keys minted by [`WriteTx::create_api_token`]: E2B's form, so its SDKs take them.
pub const TOKEN_PREFIX: &str = "e2b_";
/// Random bytes in a minted key (its hex digits after [`TOKEN_PREFIX`]: twice as many).
pub const TOKEN_BYTES: usize = 20;
/// Characters of a minted key kept as its [`ApiToken::prefix`].
pub const PREFIX_LEN: usize = TOKEN_PREFIX.len() + 6;

/// A new random key, its id and its non-secret prefix: what [`WriteTx::create_api_token`] stores
/// (and a cluster's log, which holds keys cluster-wide, stores the same way).
pub fn mint_token() -> (TokenId, String, String) {
    let secret: [u8; TOKEN_BYTES] = rand::rng().random();
    let token = format!("{TOKEN_PREFIX}{}", hex::encode(secret));
    let prefix = token[..PREFIX_LEN].to_string();
    (TokenId(uuid::Uuid::new_v4().to_string()), token, prefix)
}

/// Whether `token` has the shape of a minted key (it may still be no key at all).
pub fn looks_minted(token: &str) -> bool {
    token.len() == TOKEN_PREFIX.len() + 2 * TOKEN_BYTES
        && token
            .strip_prefix(TOKEN_PREFIX)
            .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

const COLUMNS: &str = "id, name, scope, prefix, origin = 'configured', created_at, last_used_at";

fn api_token(r: &rusqlite::Row<'_>) -> rusqlite::Result<ApiToken> {
    Ok(ApiToken {
        id: TokenId(r.get(0)?),
        name: r.get(1)?,
        scope: KeyScope::read(r, 2)?,
        prefix: r.get(3)?,
        configured: r.get(4)?,
        created_at: r.get(5)?,
        last_used_at: r.get(6)?,
    })
}

impl ReadTx<'_> {
    /// The key `token` is, if it is stored (and so not revoked).
    pub fn verify_token(&self, token: &str) -> Result<Option<VerifiedToken>> {
        Ok(self
            .conn()
            .prepare_cached("SELECT id, scope FROM api_tokens WHERE token_hash = ?1")?
            .query_row([hash_token(token)], |r| {
                Ok(VerifiedToken {
                    id: TokenId(r.get(0)?),
                    scope: KeyScope::read(r, 1)?,
                })
            })
            .optional()?)
    }

    /// Every stored key, oldest first.
    pub fn list_api_tokens(&self) -> Result<Vec<ApiToken>> {
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT {COLUMNS} FROM api_tokens ORDER BY created_at, id"
        ))?;
        let rows = stmt
            .query_map([], api_token)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Key `id`.
    pub fn get_api_token(&self, id: &TokenId) -> Result<Option<ApiToken>> {
        Ok(self
            .conn()
            .prepare_cached(&format!("SELECT {COLUMNS} FROM api_tokens WHERE id = ?1"))?
            .query_row([&id.0], api_token)
            .optional()?)
    }
}

impl WriteTx<'_> {
    /// Mints a random key (`e2b_` + 40 hex digits) with `scope`, stores its hash, and returns the
    /// secret once.
    pub fn create_api_token(
        &mut self,
        name: &str,
        scope: KeyScope,
        now: UnixMillis,
    ) -> Result<CreatedToken> {
        let (id, token, prefix) = mint_token();
        self.conn()
            .prepare_cached(
                "INSERT INTO api_tokens (id, name, token_hash, created_at, scope, prefix, origin)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'minted')",
            )?
            .execute(params![
                id.0,
                name,
                hash_token(&token),
                now,
                scope.as_str(),
                prefix
            ])?;
        Ok(CreatedToken {
            id,
            name: name.to_owned(),
            scope,
            prefix,
            created_at: now,
            token,
        })
    }

    /// Makes `token` (from the operator's configuration) the configured admin token and returns its
    /// id: idempotent for the same token; any other configured token is deleted; a minted key with
    /// the same secret becomes the configured one.
    pub fn import_api_token(
        &mut self,
        name: &str,
        token: &str,
        now: UnixMillis,
    ) -> Result<TokenId> {
        let hash = hash_token(token);
        self.conn()
            .prepare_cached(
                "DELETE FROM api_tokens WHERE origin = 'configured' AND token_hash <> ?1",
            )?
            .execute([&hash])?;
        let id: String = self
            .conn()
            .prepare_cached(
                "INSERT INTO api_tokens (id, name, token_hash, created_at, scope, origin)
                 VALUES (?1, ?2, ?3, ?4, 'admin', 'configured')
                 ON CONFLICT (token_hash) DO UPDATE SET scope = 'admin', origin = 'configured', prefix = ''
                 RETURNING id",
            )?
            .query_row(
                params![uuid::Uuid::new_v4().to_string(), name, hash, now],
                |r| r.get(0),
            )?;
        Ok(TokenId(id))
    }

    /// Records that `id` was used at `now`. Returns whether the key exists.
    pub fn touch_api_token(&mut self, id: &TokenId, now: UnixMillis) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached("UPDATE api_tokens SET last_used_at = ?2 WHERE id = ?1")?
            .execute(params![id.0, now])?;
        Ok(n == 1)
    }

    /// Deletes minted key `id`; the configured token is kept ([`Revoked::Configured`]).
    pub fn revoke_api_token(&mut self, id: &TokenId) -> Result<Revoked> {
        let n = self
            .conn()
            .prepare_cached("DELETE FROM api_tokens WHERE id = ?1 AND origin = 'minted'")?
            .execute([&id.0])?;
        if n == 1 {
            return Ok(Revoked::Revoked);
        }
        Ok(match self.get_api_token(id)? {
            Some(_) => Revoked::Configured,
            None => Revoked::NotFound,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::open_temp;

    fn stored_hashes(tx: &ReadTx<'_>) -> Result<Vec<String>> {
        Ok(tx
            .conn()
            .prepare("SELECT token_hash FROM api_tokens ORDER BY created_at, id")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Invariant: a key's secret is never stored, only its SHA-256; the secret is handed out once.
    #[tokio::test]
    async fn only_the_hash_is_stored_and_verify_finds_it_with_its_scope() {
        let (_dir, store, _t) = open_temp();
        let created = store
            .writer()
            .write(|tx| tx.create_api_token("ci", KeyScope::User, 1))
            .await
            .unwrap();
        assert!(created.token.starts_with(TOKEN_PREFIX), "{}", created.token);
        assert_eq!(created.token.len(), TOKEN_PREFIX.len() + 2 * TOKEN_BYTES);
        assert!(created.token[4..].chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(created.prefix, created.token[..PREFIX_LEN]);
        assert!(!format!("{created:?}").contains(&created.token));
        let token = created.token.clone();
        let (found, wrong, stored, listed) = store
            .reader()
            .read(move |tx| {
                Ok((
                    tx.verify_token(&token)?,
                    tx.verify_token("e2b_nope")?,
                    stored_hashes(tx)?,
                    tx.list_api_tokens()?,
                ))
            })
            .await
            .unwrap();
        assert_eq!(
            found,
            Some(VerifiedToken {
                id: created.id.clone(),
                scope: KeyScope::User
            })
        );
        assert_eq!(wrong, None);
        assert_eq!(stored, vec![hash_token(&created.token)]);
        assert!(!stored[0].contains(&created.token[4..]));
        assert_eq!(listed.len(), 1);
        let key = &listed[0];
        assert_eq!(
            (key.id.clone(), key.name.as_str(), key.scope, key.configured),
            (created.id.clone(), "ci", KeyScope::User, false)
        );
        assert_eq!(key.prefix, created.prefix);
        assert!(!format!("{listed:?}").contains(&created.token[PREFIX_LEN..]));
    }

    #[test]
    fn hash_is_hex_sha256() {
        assert_eq!(
            hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn minted_keys_have_the_minted_shape() {
        let (id, token, prefix) = mint_token();
        assert!(looks_minted(&token), "{prefix}");
        assert!(token.starts_with(&prefix));
        assert_ne!(mint_token().1, token);
        assert!(!id.0.is_empty());
        for not in ["", "e2b_", "e2b_xyz", &token[1..], &format!("{token}0")] {
            assert!(!looks_minted(not), "{not:?}");
        }
        assert_eq!(KeyScope::parse("admin"), Some(KeyScope::Admin));
        assert_eq!(KeyScope::parse("user"), Some(KeyScope::User));
        assert_eq!(KeyScope::parse("root"), None);
    }

    #[tokio::test]
    async fn minted_keys_are_distinct_and_scoped() {
        let (_dir, store, _t) = open_temp();
        let (a, u) = store
            .writer()
            .write(|tx| {
                Ok((
                    tx.create_api_token("a", KeyScope::Admin, 1)?,
                    tx.create_api_token("a", KeyScope::User, 2)?,
                ))
            })
            .await
            .unwrap();
        assert_ne!(a.token, u.token);
        assert_ne!(a.id, u.id);
        let (ta, tu) = (a.token.clone(), u.token.clone());
        let (fa, fu) = store
            .reader()
            .read(move |tx| Ok((tx.verify_token(&ta)?, tx.verify_token(&tu)?)))
            .await
            .unwrap();
        assert_eq!(fa.map(|v| v.scope), Some(KeyScope::Admin));
        assert_eq!(fu.map(|v| v.scope), Some(KeyScope::User));
    }

    /// Invariant: a revoked key is refused by the very next verification.
    #[tokio::test]
    async fn revoke_removes_at_once_and_twice_is_not_found() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        let created = w
            .write(|tx| tx.create_api_token("ci", KeyScope::Admin, 1))
            .await
            .unwrap();
        let id = created.id.clone();
        assert_eq!(
            w.write(move |tx| tx.revoke_api_token(&id)).await.unwrap(),
            Revoked::Revoked
        );
        let token = created.token.clone();
        let found = store
            .reader()
            .read(move |tx| tx.verify_token(&token))
            .await
            .unwrap();
        assert_eq!(found, None);
        let id = created.id.clone();
        assert_eq!(
            w.write(move |tx| tx.revoke_api_token(&id)).await.unwrap(),
            Revoked::NotFound
        );
        let unknown = TokenId("nope".into());
        assert_eq!(
            w.write(move |tx| tx.revoke_api_token(&unknown))
                .await
                .unwrap(),
            Revoked::NotFound
        );
    }

    /// Invariant: one configured admin token at a time; rotating it drops the old one, and it is not
    /// revocable while configured.
    #[tokio::test]
    async fn import_is_idempotent_rotates_and_is_not_revocable() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        let (a, b) = w
            .write(|tx| {
                Ok((
                    tx.import_api_token("admin", "secret-1", 1)?,
                    tx.import_api_token("admin", "secret-1", 2)?,
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
        assert!(listed[0].configured);
        assert_eq!(listed[0].scope, KeyScope::Admin);
        assert_eq!(listed[0].prefix, "", "no characters of an operator's token");
        let id = a.clone();
        assert_eq!(
            w.write(move |tx| tx.revoke_api_token(&id)).await.unwrap(),
            Revoked::Configured
        );
        let minted = w
            .write(|tx| tx.create_api_token("ci", KeyScope::User, 3))
            .await
            .unwrap();
        let rotated = w
            .write(|tx| tx.import_api_token("admin", "secret-2", 4))
            .await
            .unwrap();
        assert_ne!(rotated, a);
        let token = minted.token.clone();
        let (old, new, kept) = store
            .reader()
            .read(move |tx| {
                Ok((
                    tx.verify_token("secret-1")?,
                    tx.verify_token("secret-2")?,
                    tx.verify_token(&token)?,
                ))
            })
            .await
            .unwrap();
        assert_eq!(old, None, "a rotated configured token stops working");
        assert_eq!(new.map(|v| v.id), Some(rotated));
        assert_eq!(kept.map(|v| v.id), Some(minted.id.clone()));
        // Configuring a minted key's secret makes that row the configured admin token.
        let token = minted.token.clone();
        let id = w
            .write(move |tx| tx.import_api_token("admin", &token, 5))
            .await
            .unwrap();
        assert_eq!(id, minted.id);
        let key = store
            .reader()
            .read(move |tx| tx.get_api_token(&id))
            .await
            .unwrap()
            .unwrap();
        assert!(key.configured);
        assert_eq!((key.scope, key.prefix.as_str()), (KeyScope::Admin, ""));
    }

    #[tokio::test]
    async fn the_schema_refuses_unknown_scopes_and_configured_user_keys() {
        let (_dir, store, _t) = open_temp();
        let results = store
            .writer()
            .write(|tx| {
                let insert = |scope: &str, origin: &str, hash: &str| {
                    tx.conn()
                        .execute(
                            "INSERT INTO api_tokens (id, name, token_hash, created_at, scope, origin)
                             VALUES (?1, '', ?2, 0, ?3, ?4)",
                            params![hash, hash, scope, origin],
                        )
                        .is_ok()
                };
                Ok([
                    insert("root", "minted", &"a".repeat(64)),
                    insert("user", "configured", &"b".repeat(64)),
                    insert("user", "minted", &"c".repeat(64)),
                ])
            })
            .await
            .unwrap();
        assert_eq!(results, [false, false, true]);
    }
}
