//! API keys: minting, listing, revoking and verifying the keys every surface accepts.
//!
//! Contract: a key is verified per request against the store ([`Service::verify_api_key`], one read of
//! its hash, nothing cached), so a revoke ([`Service::revoke_api_key`]) is in force for the very next
//! request once it has answered. Names are 1–[`MAX_NAME_LEN`] characters without control characters;
//! names need not be unique (keys are told apart by id and prefix). The daemon's configured admin
//! token is listed but cannot be revoked here (a [`ServiceError::Conflict`]): it is changed where it
//! is configured. Who may call these flows (admin keys only) is the API layer's check.
//!
//! Cluster mode: a key minted on any node is kept in the replicated log
//! ([`sandboxd_cluster::Command::PutKey`], its hash only), so every node accepts it; a revoke is a
//! log entry too. A node that does not know a presented minted-looking key catches up with the
//! leader before refusing it, so a key is accepted everywhere from its creation's answer on; a
//! revoke is in force on the node that answered it at once, and on every other node once it has
//! applied the entry (one heartbeat). The configured admin token stays each node's own.

use crate::{Service, ServiceError};
use sandboxd_cluster::{Cluster, Command, KeyRecord};
use sandboxd_store::tokens::{hash_token, looks_minted, mint_token};
use sandboxd_store::{
    unix_millis_now, ApiToken, CreatedToken, KeyScope, Revoked, TokenId, VerifiedToken,
};
use std::time::Duration;

/// How long a node waits to catch up with the leader before refusing a key it does not know.
const KEY_CATCH_UP: Duration = Duration::from_secs(1);

/// Longest key name, in characters.
pub const MAX_NAME_LEN: usize = 64;

fn validate_name(name: &str) -> Result<(), ServiceError> {
    let len = name.chars().count();
    if len == 0 || len > MAX_NAME_LEN {
        return Err(ServiceError::InvalidRequest(format!(
            "name must be 1 to {MAX_NAME_LEN} characters"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(ServiceError::InvalidRequest(
            "name must not contain control characters".into(),
        ));
    }
    Ok(())
}

impl Service {
    /// Mints a key named `name` with `scope`; the answer holds the secret, the only time it is shown.
    pub async fn create_api_key(
        &self,
        name: String,
        scope: KeyScope,
    ) -> Result<CreatedToken, ServiceError> {
        validate_name(&name)?;
        let now = unix_millis_now();
        if let Some(cluster) = self.cluster() {
            return mint_in_log(cluster, name, scope, now).await;
        }
        Ok(self
            .writer()
            .write(move |tx| tx.create_api_token(&name, scope, now))
            .await?)
    }

    /// Every key, oldest first, without secrets.
    pub async fn list_api_keys(&self) -> Result<Vec<ApiToken>, ServiceError> {
        let mut keys = self.reader().read(|tx| tx.list_api_tokens()).await?;
        if let Some(cluster) = self.cluster() {
            keys.extend(cluster.read(|s| {
                s.keys
                    .iter()
                    .filter_map(|(id, k)| key_of_log(id, k))
                    .collect::<Vec<_>>()
            }));
            keys.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        }
        Ok(keys)
    }

    /// Revokes key `id`: refused from the next request on.
    pub async fn revoke_api_key(&self, id: &str) -> Result<(), ServiceError> {
        if let Some(cluster) = self.cluster() {
            if cluster.read(|s| s.keys.contains_key(id)) {
                cluster
                    .propose(Command::RevokeKey { id: id.to_string() })
                    .await?;
                // Applied here before the answer: the next request here is refused.
                cluster.catch_up(KEY_CATCH_UP).await?;
                return Ok(());
            }
        }
        let id = TokenId(id.to_string());
        let shown = id.clone();
        match self
            .writer()
            .write(move |tx| tx.revoke_api_token(&id))
            .await?
        {
            Revoked::Revoked => Ok(()),
            Revoked::NotFound => Err(ServiceError::NotFound(format!("API key {shown} not found"))),
            Revoked::Configured => Err(ServiceError::Conflict(format!(
                "API key {shown} is the daemon's configured admin token (SB_PAT_TOKEN or \
                 <data-dir>/admin-token); change it there and restart the daemon"
            ))),
        }
    }

    /// The key `token` is, if it is a stored (unrevoked) one.
    pub async fn verify_api_key(&self, token: &str) -> Result<Option<VerifiedToken>, ServiceError> {
        let presented = token.to_string();
        let stored = self
            .reader()
            .read(move |tx| tx.verify_token(&presented))
            .await?;
        let Some(cluster) = self.cluster().filter(|_| stored.is_none()) else {
            return Ok(stored);
        };
        let digest = hash_token(token);
        let found = |c: &Cluster| c.read(|s| verified_of_log(s.key_by_digest(&digest)));
        if let Some(verified) = found(cluster) {
            return Ok(Some(verified));
        }
        // Perhaps made through another node a moment ago: look again once caught up.
        if looks_minted(token) && cluster.catch_up(KEY_CATCH_UP).await.is_ok() {
            return Ok(found(cluster));
        }
        Ok(None)
    }
}

/// Mints a key into the log (cluster mode): every node accepts it once the entry is applied there.
async fn mint_in_log(
    cluster: &Cluster,
    name: String,
    scope: KeyScope,
    now: i64,
) -> Result<CreatedToken, ServiceError> {
    let (id, token, prefix) = mint_token();
    let key = KeyRecord {
        name: name.clone(),
        scope: scope.as_str().to_string(),
        digest: hash_token(&token),
        prefix: prefix.clone(),
        created_at_ms: now,
    };
    cluster
        .propose(Command::PutKey {
            id: id.0.clone(),
            key,
        })
        .await?;
    Ok(CreatedToken {
        id,
        name,
        scope,
        prefix,
        created_at: now,
        token,
    })
}

/// The public facts of log key `id`.
fn key_of_log(id: &str, k: &KeyRecord) -> Option<ApiToken> {
    Some(ApiToken {
        id: TokenId(id.to_string()),
        name: k.name.clone(),
        scope: KeyScope::parse(&k.scope)?,
        prefix: k.prefix.clone(),
        configured: false,
        created_at: k.created_at_ms,
        last_used_at: None,
    })
}

/// A log key found by its digest, as a verified key.
fn verified_of_log(found: Option<(&str, &KeyRecord)>) -> Option<VerifiedToken> {
    let (id, k) = found?;
    Some(VerifiedToken {
        id: TokenId(id.to_string()),
        scope: KeyScope::parse(&k.scope)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{InMemoryRuntimeForTests, TestService};
    use crate::ServiceConfig;

    fn service() -> TestService {
        TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default())
    }

    #[tokio::test]
    async fn create_list_verify_revoke() {
        let t = service();
        let svc = &t.svc;
        let created = svc
            .create_api_key("ci".into(), KeyScope::User)
            .await
            .unwrap();
        let found = svc.verify_api_key(&created.token).await.unwrap();
        assert_eq!(
            found.map(|v| (v.id, v.scope)),
            Some((created.id.clone(), KeyScope::User))
        );
        let listed = svc.list_api_keys().await.unwrap();
        assert!(listed.iter().any(|k| k.id == created.id));
        svc.revoke_api_key(&created.id.0).await.unwrap();
        assert_eq!(svc.verify_api_key(&created.token).await.unwrap(), None);
        assert!(matches!(
            svc.revoke_api_key(&created.id.0).await,
            Err(ServiceError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn bad_names_are_refused() {
        let t = service();
        let svc = &t.svc;
        for name in [String::new(), "x".repeat(MAX_NAME_LEN + 1), "a\nb".into()] {
            assert!(
                matches!(
                    svc.create_api_key(name.clone(), KeyScope::Admin).await,
                    Err(ServiceError::InvalidRequest(_))
                ),
                "{name:?}"
            );
        }
        assert!(svc
            .create_api_key("x".repeat(MAX_NAME_LEN), KeyScope::Admin)
            .await
            .is_ok());
    }

    #[tokio::test]
    async fn the_configured_token_is_not_revocable() {
        let t = service();
        let svc = &t.svc;
        let id = svc
            .writer()
            .write(|tx| tx.import_api_token("admin", "configured-secret", 1))
            .await
            .unwrap();
        assert!(matches!(
            svc.revoke_api_key(&id.0).await,
            Err(ServiceError::Conflict(_))
        ));
        assert!(svc
            .verify_api_key("configured-secret")
            .await
            .unwrap()
            .is_some());
    }
}
