//! Custom domains: a hostname routed to a port of a sandbox, through the proxy (and the TLS listener).
//!
//! Contract:
//! - A hostname belongs to at most one sandbox. The store's primary key on `custom_domains.hostname`
//!   decides (Hazard 2): [`Service::bind_domain`] never checks before it writes; it observes the store's
//!   outcome. Another sandbox's hostname is [`ServiceError::HostnameConflict`]; the same sandbox binding
//!   again is idempotent (`created == false`), on another port it moves the binding.
//! - Hostnames are RFC 1123 names ([`validate_hostname`]): labels of 1–63 `[a-z0-9-]` not starting or
//!   ending with `-`, at least two labels, at most 253 characters, lowercased, one trailing dot
//!   dropped. Refused: IP literals (and an all-digit last label), names equal to or under the daemon's
//!   own `--domain` (they would shadow `{port}-{id}.{domain}` URLs), and `*.` wildcards unless
//!   [`crate::ServiceConfig::allow_wildcard_domains`] is set.
//! - Bindings go with their sandbox (the store's `ON DELETE CASCADE`).
//! - The proxy (through [`DomainResolver`]) asks [`Service::target_for_host`] on every request its own patterns do not claim. No
//!   cache: a host that cannot be a bound hostname (an IP, a single label, a name under `--domain`) is
//!   answered without touching the store; any other costs one indexed read, so an unbind or a delete is
//!   visible to the very next request.

use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use sandboxd_proxy::{Resolver, RouteError, Target, Upstream};
use sandboxd_store::{unix_millis_now, BindOutcome, DomainBinding};

/// Scope of `POST /v1/sandboxes/{id}/domains` Idempotency-Key claims.
pub const V1_DOMAINS_SCOPE: &str = "v1.domains";

/// Checks `raw` against the hostname rules of the module contract; returns its canonical form.
pub fn validate_hostname(raw: &str, domain: &str, allow_wildcard: bool) -> Result<String, String> {
    let host = raw.strip_suffix('.').unwrap_or(raw).to_ascii_lowercase();
    if host.is_empty() {
        return Err("hostname must not be empty".into());
    }
    if host.len() > 253 {
        return Err(format!(
            "hostname is {} characters long; at most 253 are allowed",
            host.len()
        ));
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<std::net::IpAddr>().is_ok() {
        return Err(format!("{raw:?} is an IP address; bind a hostname instead"));
    }
    let (wildcard, name) = match host.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, host.as_str()),
    };
    if wildcard && !allow_wildcard {
        return Err(format!(
            "{raw:?} is a wildcard; the daemon allows them only with --allow-wildcard-domains"
        ));
    }
    let labels: Vec<&str> = name.split('.').collect();
    for label in &labels {
        if label.is_empty() || label.len() > 63 {
            return Err(format!(
                "{raw:?} has a label of {} characters; each label must have 1 to 63",
                label.len()
            ));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(format!(
                "{raw:?} has a label with characters other than a-z, 0-9 and '-'"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("{raw:?} has a label starting or ending with '-'"));
        }
    }
    if labels.len() < 2 {
        return Err(format!(
            "{raw:?} needs at least two labels (like app.example.com)"
        ));
    }
    if labels
        .last()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(format!(
            "{raw:?} looks like an IP address (its last label is numeric)"
        ));
    }
    let domain = domain.trim_matches('.').to_ascii_lowercase();
    if name == domain || name.ends_with(&format!(".{domain}")) {
        return Err(format!(
            "{raw:?} is under the daemon's domain {domain:?}, which is reserved for {{port}}-{{id}}.{domain} URLs"
        ));
    }
    Ok(host)
}

impl Service {
    fn validate_hostname(&self, raw: &str) -> Result<String, ServiceError> {
        let cfg = self.config();
        validate_hostname(raw, &cfg.domain, cfg.allow_wildcard_domains)
            .map_err(ServiceError::InvalidRequest)
    }

    /// The URL a bound hostname is reached at through the daemon's listener.
    pub fn domain_url(&self, hostname: &str) -> String {
        format!("http://{hostname}:{}", self.config().public_port)
    }

    fn domain_to_api(&self, b: &DomainBinding) -> api::Domain {
        api::Domain {
            hostname: b.hostname.clone(),
            port: b.port,
            url: self.domain_url(&b.hostname),
        }
    }

    /// Binds `req.hostname` to `req.port` of sandbox `key`. Returns the binding and whether this call
    /// created it (`false`: it existed, possibly on another port, which it now points at).
    pub async fn bind_domain(
        &self,
        key: &str,
        req: api::BindDomain,
    ) -> Result<(api::Domain, bool), ServiceError> {
        if req.port == 0 {
            return Err(ServiceError::InvalidRequest(
                "port must be between 1 and 65535".into(),
            ));
        }
        let hostname = self.validate_hostname(&req.hostname)?;
        let sandbox = self.get(key).await?;
        let id = sandbox.id.clone();
        // Cluster mode: the log decides first (`crate::cluster`); a local refusal gives it back.
        let made_in_log = self.bind_hostname_in_log(&hostname, &id).await?;
        let (host, rid) = (hostname.clone(), id.clone());
        let written = if crate::failpoints::fails("domain.bind-write") {
            Err(sandboxd_store::StoreError::WriterGone)
        } else {
            self.writer()
                .write(move |tx| tx.bind_domain(&host, &rid, req.port, unix_millis_now()))
                .await
        };
        let outcome = match written {
            Ok(outcome) => outcome,
            Err(e) => {
                // Only a binding this call made: one that was already there is not ours to undo.
                if made_in_log {
                    self.unbind_hostname_in_log(&hostname, &id).await;
                }
                return Err(e.into());
            }
        };
        if let BindOutcome::Rebound { previous_port, .. } = &outcome {
            tracing::info!(sandbox_id = %sandbox.id, hostname = %outcome.binding().hostname, previous_port, port = req.port, "domain moved to another port");
        }
        let created = matches!(outcome, BindOutcome::Bound(_));
        Ok((self.domain_to_api(outcome.binding()), created))
    }

    /// The hostnames bound to sandbox `key`.
    pub async fn domains(&self, key: &str) -> Result<Vec<api::Domain>, ServiceError> {
        let sandbox = self.get(key).await?;
        let rows = self
            .reader()
            .read(move |tx| tx.domains_of(&sandbox.id))
            .await?;
        Ok(rows.iter().map(|b| self.domain_to_api(b)).collect())
    }

    /// Unbinds `hostname` from sandbox `key`; a hostname it does not hold is [`ServiceError::NotFound`].
    pub async fn unbind_domain(&self, key: &str, hostname: &str) -> Result<(), ServiceError> {
        let sandbox = self.get(key).await?;
        let id = sandbox.id.clone();
        let host = hostname.to_string();
        let removed = self
            .writer()
            .write(move |tx| tx.unbind_domain(&host, &id))
            .await?;
        if removed {
            self.unbind_hostname_in_log(hostname, &sandbox.id).await;
            Ok(())
        } else {
            Err(ServiceError::NotFound(format!(
                "hostname {hostname:?} is not bound to sandbox {}",
                sandbox.id
            )))
        }
    }

    /// The sandbox port `host` (lowercase, no port) is bound to: the exact hostname, else (with
    /// `--allow-wildcard-domains`) the `*.` wildcard of its parent.
    pub async fn target_for_host(&self, host: &str) -> Option<Target> {
        let cfg = self.config();
        // Hosts that cannot be bound never reach the store (every API request passes here).
        let host = validate_hostname(host, &cfg.domain, false).ok()?;
        let wildcard = cfg
            .allow_wildcard_domains
            .then(|| {
                host.split_once('.')
                    .map(|(_, parent)| format!("*.{parent}"))
            })
            .flatten()
            .filter(|w| w.matches('.').count() >= 2);
        let found = self
            .reader()
            .read(move |tx| {
                if let Some(b) = tx.resolve_domain(&host)? {
                    return Ok(Some(b));
                }
                match wildcard {
                    Some(w) => tx.resolve_domain(&w),
                    None => Ok(None),
                }
            })
            .await;
        match found {
            Ok(b) => b.map(|b| Target {
                sandbox_id: b.sandbox_id,
                port: b.port,
            }),
            Err(e) => {
                tracing::warn!(error = %e, "custom domain lookup failed");
                None
            }
        }
    }
}

/// The proxy's [`Resolver`] with custom domains: the service's own resolution of `{port}-{id}` targets,
/// plus [`Service::target_for_host`] for hosts the proxy's patterns do not claim.
#[derive(Clone)]
pub struct DomainResolver(pub Service);

#[async_trait::async_trait]
impl Resolver for DomainResolver {
    async fn upstream(&self, target: &Target) -> Result<Upstream, RouteError> {
        self.0.upstream(target).await
    }

    async fn target_for_host(&self, host: &str) -> Option<Target> {
        self.0.target_for_host(host).await
    }

    async fn target_for_access_token(&self, token: &str) -> Option<Target> {
        self.0.target_for_access_token(token).await
    }

    async fn admit(&self, target: Target, headers: &http::HeaderMap) -> Result<Target, RouteError> {
        self.0.admit(target, headers).await
    }

    fn closing(&self, target: &Target) -> Option<sandboxd_proxy::Closing> {
        Resolver::closing(&self.0, target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(h: &str) -> Result<String, String> {
        validate_hostname(h, "localhost", false)
    }

    #[test]
    fn valid_hostnames_are_lowercased_without_trailing_dot() {
        assert_eq!(check("App.Example.TEST.").unwrap(), "app.example.test");
        assert_eq!(check("a-b.c9.test").unwrap(), "a-b.c9.test");
        let label = "a".repeat(63);
        assert!(check(&format!("{label}.test")).is_ok());
        assert_eq!(
            validate_hostname("*.x.test", "localhost", true).unwrap(),
            "*.x.test"
        );
    }

    #[test]
    fn invalid_hostnames_are_refused_with_a_reason() {
        let long = format!("{}.test", vec!["a".repeat(60); 5].join("."));
        assert!(long.len() > 253);
        for bad in [
            "",
            "a..b",
            "-a.test",
            "a-.test",
            "test",
            "a_b.test",
            "1.2.3.4",
            "::1",
            "[::1]",
            "x.123",
            "*.x.test",
            "a.*.test",
            "8000-sbxyz.localhost",
            "localhost",
            "a.b.localhost",
            &"a".repeat(64),
            &format!("{}.test", "a".repeat(64)),
            &long,
        ] {
            assert!(check(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(validate_hostname("8000-a.sb.example.com", "sb.example.com", true).is_err());
        assert!(validate_hostname("*.localhost", "localhost", true).is_err());
        assert!(validate_hostname("*.test", "localhost", true).is_err());
    }
}
