//! API keys: minting, listing, revoking and verifying the keys every surface accepts.
//!
//! Contract: a key is verified per request against the store ([`Service::verify_api_key`], one read of
//! its hash, nothing cached), so a revoke ([`Service::revoke_api_key`]) is in force for the very next
//! request once it has answered. Names are 1–[`MAX_NAME_LEN`] characters without control characters;
//! names need not be unique (keys are told apart by id and prefix). The daemon's configured admin
//! token is listed but cannot be revoked here (a [`ServiceError::Conflict`]): it is changed where it
//! is configured. Who may call these flows (admin keys only) is the API layer's check.

use crate::{Service, ServiceError};
use sandboxd_store::{
    unix_millis_now, ApiToken, CreatedToken, KeyScope, Revoked, TokenId, VerifiedToken,
};

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
        Ok(self
            .writer()
            .write(move |tx| tx.create_api_token(&name, scope, now))
            .await?)
    }

    /// Every key, oldest first, without secrets.
    pub async fn list_api_keys(&self) -> Result<Vec<ApiToken>, ServiceError> {
        Ok(self.reader().read(|tx| tx.list_api_tokens()).await?)
    }

    /// Revokes key `id`: refused from the next request on.
    pub async fn revoke_api_key(&self, id: &str) -> Result<(), ServiceError> {
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
        let token = token.to_string();
        Ok(self
            .reader()
            .read(move |tx| tx.verify_token(&token))
            .await?)
    }
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
