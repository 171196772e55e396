//! Secrets: values that never enter a sandbox, stored sealed and shown without their values.
//!
//! Contract:
//! - A value is sealed under the daemon's secrets key (`sandboxd_secrets::seal`, the secret's id as
//!   associated data) before anything is written: the store, its backups and every log line only
//!   ever hold the sealed bytes. No answer of any surface carries a value; [`api::SecretInfo`] has
//!   no field for one.
//! - A name is unique (the store's `secrets.name`); a create of a taken name is 409 and changes
//!   nothing. Hosts are kept in their normal form (`sandboxd_secrets::HostPattern`).
//! - A daemon without a secrets key ([`crate::ServiceConfig::secrets_key`]) refuses every secret
//!   call at once, saying so.
//! - A create whose environment or network rules hold placeholders is checked here
//!   ([`Service::check_secret_uses`]): a placeholder naming no secret is the caller's 400, naming
//!   it; a sandbox that uses secrets goes through the egress gateway ([`crate::egress`]), which
//!   puts their values in on the way out.
//! - Cluster mode: secrets are per node (each node's own store and key), like its sandboxes.

use crate::sandboxes::random_id;
use crate::timestamps::rfc3339;
use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use sandboxd_secrets::{SecretKey, SecretValue};
use sandboxd_store::{unix_millis_now, SecretChange, SecretRecord, StoreError};
use std::collections::BTreeMap;

/// The longest description.
const MAX_DESCRIPTION: usize = 1024;
/// The most secrets one page of a listing holds.
pub const MAX_PAGE: usize = 1000;

/// What a listing's secrets are ordered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecretOrder {
    #[default]
    Name,
    CreatedAt,
    UpdatedAt,
}

/// One page of a listing of secrets ([`Service::page_secrets`]).
#[derive(Debug, Clone, Default)]
pub struct SecretQuery {
    /// Only secrets whose name contains this.
    pub name_contains: Option<String>,
    pub order: SecretOrder,
    pub descending: bool,
    /// Where the page starts: the `next` of the page before; `None`: at the start.
    pub cursor: Option<String>,
    /// 1..=[`MAX_PAGE`].
    pub limit: usize,
}

/// A page of secrets.
#[derive(Debug, Clone)]
pub struct SecretPage {
    pub items: Vec<api::SecretInfo>,
    /// How many secrets match, on every page.
    pub total: usize,
    /// The cursor of the next page; `None` on the last.
    pub next: Option<String>,
}

fn invalid(e: impl std::fmt::Display) -> ServiceError {
    ServiceError::InvalidRequest(e.to_string())
}

fn not_found(key: &str) -> ServiceError {
    ServiceError::NotFound(format!("secret {key:?} not found"))
}

/// The API's view of a secret: everything but its value.
pub fn secret_to_api(s: &SecretRecord) -> api::SecretInfo {
    api::SecretInfo {
        id: s.id.clone(),
        name: s.name.clone(),
        placeholder: sandboxd_secrets::placeholder(&s.name),
        hosts: s.hosts.clone(),
        description: s.description.clone(),
        metadata: s.metadata.clone(),
        version: s.version,
        created_at: rfc3339(s.created_at),
        updated_at: rfc3339(s.updated_at),
    }
}

fn hosts(given: &[String]) -> Result<Vec<String>, ServiceError> {
    Ok(sandboxd_secrets::check_hosts(given)
        .map_err(invalid)?
        .iter()
        .map(ToString::to_string)
        .collect())
}

fn description(given: Option<String>) -> Result<Option<String>, ServiceError> {
    match given {
        Some(d) if d.chars().nth(MAX_DESCRIPTION).is_some() => Err(invalid(format!(
            "a secret's description is at most {MAX_DESCRIPTION} characters"
        ))),
        d => Ok(d),
    }
}

fn value(given: api::Secret) -> Result<SecretValue, ServiceError> {
    sandboxd_secrets::check_value(&given.0).map_err(invalid)?;
    Ok(SecretValue::new(given.0))
}

impl Service {
    fn secrets_key(&self) -> Result<&SecretKey, ServiceError> {
        self.config().secrets_key.as_ref().ok_or_else(|| {
            invalid("this daemon keeps no secrets: it was started without a secrets key")
        })
    }

    fn sealed(&self, id: &str, value: &SecretValue) -> Result<Vec<u8>, ServiceError> {
        Ok(sandboxd_secrets::seal(self.secrets_key()?, id, value)?)
    }

    /// Creates secret `req.name` (409 when the name is taken).
    pub async fn create_secret(
        &self,
        req: api::CreateSecret,
    ) -> Result<api::SecretInfo, ServiceError> {
        self.secrets_key()?;
        sandboxd_secrets::check_name(&req.name).map_err(invalid)?;
        let value = value(req.value)?;
        let hosts = hosts(req.hosts.as_deref().unwrap_or_default())?;
        let description = description(req.description)?.unwrap_or_default();
        let metadata = req.metadata.unwrap_or_default();
        crate::validate::metadata(&metadata)?;
        let id = random_id("sec", 17);
        let now = unix_millis_now();
        let record = SecretRecord {
            sealed: self.sealed(&id, &value)?,
            id,
            name: req.name,
            hosts,
            description,
            metadata,
            version: 1,
            created_at: now,
            updated_at: now,
        };
        let row = record.clone();
        match self.writer().write(move |tx| tx.insert_secret(&row)).await {
            Ok(()) => Ok(secret_to_api(&record)),
            Err(StoreError::SecretExists { name }) => Err(ServiceError::Conflict(format!(
                "secret {name:?} already exists"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// Changes secret `key` (its name or id): each field given replaces the stored one, a new value
    /// being a new version; 404 when there is none.
    pub async fn update_secret(
        &self,
        key: &str,
        req: api::UpdateSecret,
    ) -> Result<api::SecretInfo, ServiceError> {
        self.secrets_key()?;
        let value = req.value.map(value).transpose()?;
        let hosts = req.hosts.as_deref().map(hosts).transpose()?;
        let description = description(req.description)?;
        if let Some(metadata) = &req.metadata {
            crate::validate::metadata(metadata)?;
        }
        let current = self.secret_record(key).await?;
        let change = SecretChange {
            sealed: value.map(|v| self.sealed(&current.id, &v)).transpose()?,
            hosts,
            description,
            metadata: req.metadata,
        };
        let id = current.id.clone();
        self.writer()
            .write(move |tx| tx.update_secret(&id, &change, unix_millis_now()))
            .await?
            .map(|s| secret_to_api(&s))
            .ok_or_else(|| not_found(key))
    }

    async fn secret_record(&self, key: &str) -> Result<SecretRecord, ServiceError> {
        self.secrets_key()?;
        let k = key.to_string();
        self.reader()
            .read_by_key(move |tx| tx.get_secret(&k))
            .await?
            .ok_or_else(|| not_found(key))
    }

    /// Secret `key` (its name or id); 404 when there is none.
    pub async fn get_secret(&self, key: &str) -> Result<api::SecretInfo, ServiceError> {
        Ok(secret_to_api(&self.secret_record(key).await?))
    }

    /// Every secret, by name.
    pub async fn list_secrets(&self) -> Result<Vec<api::SecretInfo>, ServiceError> {
        self.secrets_key()?;
        let all = self.reader().read(|tx| tx.list_secrets()).await?;
        Ok(all.iter().map(secret_to_api).collect())
    }

    /// One page of the secrets `query` asks for. The cursor is the position of the page's first
    /// secret in the ordered listing, so a secret created or deleted between two pages can move
    /// another across their boundary.
    pub async fn page_secrets(&self, query: SecretQuery) -> Result<SecretPage, ServiceError> {
        if !(1..=MAX_PAGE).contains(&query.limit) {
            return Err(invalid(format!("limit must be between 1 and {MAX_PAGE}")));
        }
        let start = match &query.cursor {
            None => 0,
            Some(c) => c
                .parse::<usize>()
                .map_err(|_| ServiceError::InvalidCursor(c.clone()))?,
        };
        self.secrets_key()?;
        let mut all = self.reader().read(|tx| tx.list_secrets()).await?;
        if let Some(part) = &query.name_contains {
            all.retain(|s| s.name.contains(part.as_str()));
        }
        all.sort_by(|a, b| {
            let by = match query.order {
                SecretOrder::Name => a.name.cmp(&b.name),
                SecretOrder::CreatedAt => a.created_at.cmp(&b.created_at),
                SecretOrder::UpdatedAt => a.updated_at.cmp(&b.updated_at),
            }
            .then_with(|| a.name.cmp(&b.name));
            if query.descending {
                by.reverse()
            } else {
                by
            }
        });
        let total = all.len();
        let end = start.saturating_add(query.limit).min(total);
        let items = all
            .get(start.min(total)..end)
            .unwrap_or_default()
            .iter()
            .map(secret_to_api)
            .collect();
        Ok(SecretPage {
            items,
            total,
            next: (end < total).then(|| end.to_string()),
        })
    }

    /// Deletes secret `key` (its name or id); 404 when there is none.
    pub async fn delete_secret(&self, key: &str) -> Result<(), ServiceError> {
        let current = self.secret_record(key).await?;
        let id = current.id;
        if self.writer().write(move |tx| tx.delete_secret(&id)).await? {
            Ok(())
        } else {
            Err(not_found(key))
        }
    }

    /// The secrets a create's environment and rules name by placeholder, each once; naming one
    /// that does not exist is the caller's 400, naming it.
    pub(crate) async fn check_secret_uses(
        &self,
        env: &BTreeMap<String, String>,
        rules: &[crate::egress::rules::HostRules],
    ) -> Result<Vec<String>, ServiceError> {
        let named = crate::egress::secrets_used(env, rules);
        if named.is_empty() {
            return Ok(named);
        }
        let names = named.clone();
        let known = match self.config().secrets_key {
            Some(_) => {
                self.reader()
                    .read(move |tx| tx.secrets_named(&names))
                    .await?
            }
            None => Vec::new(),
        };
        let unknown: Vec<&str> = named
            .iter()
            .filter(|n| !known.iter().any(|s| &s.name == *n))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            return Err(invalid(format!(
                "the sandbox names unknown secrets: {}",
                unknown.join(", ")
            )));
        }
        Ok(named)
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::{InMemoryRuntimeForTests, TestService};
    use crate::ServiceError;
    use sandboxd_api_types as api;

    fn service_with_secrets() -> TestService {
        let config = crate::ServiceConfig {
            secrets_key: Some(sandboxd_secrets::SecretKey::random().unwrap()),
            ..Default::default()
        };
        TestService::new(config, InMemoryRuntimeForTests::default())
    }

    fn create(name: &str, value: &str, hosts: &[&str]) -> api::CreateSecret {
        api::CreateSecret {
            name: name.into(),
            value: api::Secret(value.into()),
            hosts: Some(hosts.iter().map(|h| h.to_string()).collect()),
            description: None,
            metadata: None,
        }
    }

    #[tokio::test]
    async fn a_value_is_stored_sealed_and_no_answer_carries_it() {
        let t = service_with_secrets();
        let svc = &t.svc;
        let made = svc
            .create_secret(create("openai", "sk-test-value-0123", &["API.openai.com"]))
            .await
            .unwrap();
        assert_eq!(made.placeholder, "${sandboxd.secrets.openai}");
        assert_eq!(made.hosts, vec!["api.openai.com".to_string()]);
        assert_eq!(made.version, 1);
        let shown = serde_json::to_string(&svc.list_secrets().await.unwrap()).unwrap();
        assert!(!shown.contains("sk-test-value"));
        let updated = svc
            .update_secret(
                "openai",
                api::UpdateSecret {
                    value: Some(api::Secret("sk-test-second-4567".into())),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!((updated.version, updated.hosts.len()), (2, 1));
        // No file of the store (the database, its write-ahead log) holds either value.
        for entry in walk(t.dir()) {
            let bytes = std::fs::read(&entry).unwrap();
            for needle in [&b"sk-test-value-0123"[..], b"sk-test-second-4567"] {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle),
                    "{} holds a value in clear",
                    entry.display()
                );
            }
        }
    }

    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
        out
    }

    #[tokio::test]
    async fn bad_names_hosts_and_values_are_refused_and_a_taken_name_is_a_conflict() {
        let t = service_with_secrets();
        let svc = &t.svc;
        for bad in [
            create("a b", "v", &[]),
            create("k", "", &[]),
            create("k", "v", &["https://x.com"]),
            create("k", "v", &["*.com"]),
        ] {
            assert!(matches!(
                svc.create_secret(bad).await,
                Err(ServiceError::InvalidRequest(_))
            ));
        }
        svc.create_secret(create("k", "v", &[])).await.unwrap();
        assert!(matches!(
            svc.create_secret(create("k", "w", &[])).await,
            Err(ServiceError::Conflict(_))
        ));
        assert!(matches!(
            svc.get_secret("nope").await,
            Err(ServiceError::NotFound(_))
        ));
        svc.delete_secret("k").await.unwrap();
        assert!(matches!(
            svc.delete_secret("k").await,
            Err(ServiceError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn a_daemon_without_a_key_refuses_every_secret_call() {
        let t = TestService::new(Default::default(), InMemoryRuntimeForTests::default());
        let refused = |r: Result<(), ServiceError>| {
            assert!(matches!(r, Err(ServiceError::InvalidRequest(m)) if m.contains("secrets key")));
        };
        refused(t.svc.create_secret(create("k", "v", &[])).await.map(drop));
        refused(t.svc.list_secrets().await.map(drop));
        refused(t.svc.get_secret("k").await.map(drop));
        refused(t.svc.delete_secret("k").await);
    }

    #[tokio::test]
    async fn pages_cover_every_secret_once_in_order() {
        let t = service_with_secrets();
        let svc = &t.svc;
        for name in ["c", "a", "e", "b", "d"] {
            svc.create_secret(create(name, "v", &[])).await.unwrap();
        }
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let page = svc
                .page_secrets(crate::secrets::SecretQuery {
                    cursor,
                    limit: 2,
                    descending: true,
                    ..Default::default()
                })
                .await
                .unwrap();
            assert_eq!(page.total, 5);
            seen.extend(page.items.into_iter().map(|s| s.name));
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, ["e", "d", "c", "b", "a"]);
        let bad = svc
            .page_secrets(crate::secrets::SecretQuery {
                cursor: Some("x".into()),
                limit: 2,
                ..Default::default()
            })
            .await;
        assert!(matches!(bad, Err(ServiceError::InvalidCursor(_))));
    }

    #[tokio::test]
    async fn a_create_naming_unknown_secrets_is_refused_naming_them() {
        let t = service_with_secrets();
        let svc = &t.svc;
        svc.create_secret(create("known", "v", &[])).await.unwrap();
        let env = std::collections::BTreeMap::from([
            ("A".to_string(), "${e2b.secrets.ghost}".to_string()),
            (
                "B".to_string(),
                "Bearer ${sandboxd.secrets.known}".to_string(),
            ),
        ]);
        let Err(ServiceError::InvalidRequest(why)) = svc.check_secret_uses(&env, &[]).await else {
            panic!("an unknown secret was accepted");
        };
        assert!(why.ends_with("unknown secrets: ghost"), "{why}");
        let known = std::collections::BTreeMap::from([(
            "B".to_string(),
            "${e2b.secrets.known}".to_string(),
        )]);
        assert_eq!(
            svc.check_secret_uses(&known, &[]).await.unwrap(),
            vec!["known".to_string()]
        );
        let plain = std::collections::BTreeMap::from([("A".to_string(), "${HOME}".to_string())]);
        assert!(svc.check_secret_uses(&plain, &[]).await.unwrap().is_empty());
    }
}
