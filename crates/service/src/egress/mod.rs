//! The egress gateway's side of the flows: which sandboxes go through it, each one's policy at the
//! moment a connection arrives, how its upstream connections are opened, and its audit log.
//!
//! Contract:
//! - A create goes through the gateway when its environment names secrets or its network has
//!   rules ([`Service::gateway_for`]), in either tier; then it needs a daemon that runs one
//!   ([`crate::ServiceConfig::egress_gateway`]), else it is the caller's 400 before anything is
//!   made. Its processes get [`trust_env`]: their TLS clients trust the gateway's
//!   CA on top of the public roots. Every other sandbox keeps the direct path.
//! - A connection's policy is read when it arrives ([`Service::egress_route`]): the sandbox whose
//!   address it comes from (running, behind the gateway), its rules as stored, and the secrets its
//!   environment and rules name, opened with the secrets key. A secret updated since the create is
//!   used with its new value and hosts; one deleted is left out (its placeholder goes out as text).
//!   A sandbox left with no rules and no secrets keeps the gateway in its path, which then passes
//!   its connections through untouched.
//! - Upstream connections are opened from the sandbox's own network, or for the gVisor tier on the
//!   host marked as the sandbox's ([`sandboxd_runtime::Runtime::connect_from`]), so its egress
//!   lists apply to them as to anything it sends.
//! - The audit log keeps the last [`AUDIT_KEEP`] rewritten requests of each sandbox in memory
//!   (names only, never a value) until the sandbox is deleted ([`Service::egress_log`]).

pub mod rules;

use crate::{Service, ServiceError};
use sandboxd_egress::gateway::BoxFuture;
use sandboxd_egress::{AuditEntry, Connect, Policy, Route, Routes, SecretUse};
use sandboxd_store::SandboxState;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

/// Rewritten requests kept per sandbox.
pub const AUDIT_KEEP: usize = 256;

/// Where the gateway is, and where a sandbox finds its CA.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    /// The gateway's port on the host end of every sandbox's pair.
    pub port: u16,
    /// The public roots and the gateway's CA, one PEM file, as a sandbox sees it.
    pub bundle_in_sandbox: String,
    /// The gateway's CA alone, as a sandbox sees it.
    pub ca_in_sandbox: String,
}

/// The environment that makes a sandbox's TLS clients (OpenSSL and curl, Python's `requests`,
/// Node, git) trust the gateway's CA as well as the public roots.
pub fn trust_env(g: &GatewaySettings) -> Vec<(String, String)> {
    let bundle = g.bundle_in_sandbox.clone();
    vec![
        ("SSL_CERT_FILE".into(), bundle.clone()),
        ("CURL_CA_BUNDLE".into(), bundle.clone()),
        ("REQUESTS_CA_BUNDLE".into(), bundle.clone()),
        ("GIT_SSL_CAINFO".into(), bundle),
        ("NODE_EXTRA_CA_CERTS".into(), g.ca_in_sandbox.clone()),
    ]
}

/// The audit logs, per sandbox.
#[derive(Default)]
pub(crate) struct AuditLog(Mutex<HashMap<String, VecDeque<AuditEntry>>>);

impl AuditLog {
    fn record(&self, sandbox: &str, entry: AuditEntry) {
        let mut logs = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let log = logs.entry(sandbox.to_string()).or_default();
        if log.len() == AUDIT_KEEP {
            log.pop_front();
        }
        log.push_back(entry);
    }

    pub(crate) fn forget(&self, sandbox: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(sandbox);
    }

    fn of(&self, sandbox: &str) -> Vec<AuditEntry> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sandbox)
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The secrets a sandbox uses: those its environment's values and its rules' headers name by
/// placeholder, each once.
pub(crate) fn secrets_used(
    env: &BTreeMap<String, String>,
    rules: &[rules::HostRules],
) -> Vec<String> {
    let values = env.values().chain(
        rules
            .iter()
            .flat_map(|(_, headers)| headers.iter().map(|h| &h.value)),
    );
    let mut names: Vec<String> = Vec::new();
    for value in values {
        for name in sandboxd_secrets::placeholders_in(value) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

impl Service {
    /// The gateway port a create that uses `secrets` and `rules` goes through (in either tier);
    /// `None` when it uses neither. The caller's 400 when this daemon runs no gateway.
    pub(crate) fn gateway_for(
        &self,
        secrets: &[String],
        rules: &[rules::HostRules],
    ) -> Result<Option<u16>, ServiceError> {
        if secrets.is_empty() && rules.is_empty() {
            return Ok(None);
        }
        let Some(gateway) = &self.config().egress_gateway else {
            return Err(ServiceError::InvalidRequest(
                "secrets and network rules need the egress gateway, which this daemon does not run"
                    .into(),
            ));
        };
        Ok(Some(gateway.port))
    }

    /// The route of a connection from `peer`: the running sandbox at that address that goes through
    /// the gateway, with its policy as of now.
    pub async fn egress_route(&self, peer: IpAddr) -> Option<Route> {
        let IpAddr::V4(address) = peer else {
            return None;
        };
        let found = self
            .reader()
            .read(move |tx| {
                let Some(id) = tx.sandbox_at_address(address)? else {
                    return Ok(None);
                };
                tx.get_sandbox_by_id(&id)
            })
            .await
            .ok()
            .flatten()?;
        if found.state != SandboxState::Running {
            return None;
        }
        // Only a sandbox made behind the gateway reaches it (its redirect, from its create). With
        // no rules and no secrets left (all removed or detached since), its policy is empty: the
        // gateway passes its connections through untouched rather than cut its egress.
        let host_rules = rules::from_stored(&found.network);
        let names = secrets_used(&found.env, &host_rules);
        let secrets = self.secret_uses(names).await;
        Some(Route {
            sandbox: found.id.clone(),
            policy: Policy {
                rules: host_rules,
                secrets,
            },
            connector: std::sync::Arc::new(FromSandbox {
                service: self.clone(),
                id: found.id,
            }),
        })
    }

    /// The secrets named `names` that exist, opened; a secret that cannot be opened is left out
    /// (and logged, by name).
    async fn secret_uses(&self, names: Vec<String>) -> Vec<SecretUse> {
        let Some(key) = self.config().secrets_key.clone() else {
            return Vec::new();
        };
        let records = self
            .reader()
            .read(move |tx| tx.secrets_named(&names))
            .await
            .unwrap_or_default();
        records
            .into_iter()
            .filter_map(|s| match sandboxd_secrets::open(&key, &s.id, &s.sealed) {
                Ok(value) => Some(SecretUse {
                    hosts: sandboxd_secrets::check_hosts(&s.hosts).unwrap_or_default(),
                    name: s.name,
                    value,
                }),
                Err(e) => {
                    tracing::error!(secret = %s.name, error = %e, "a secret does not open");
                    None
                }
            })
            .collect()
    }

    /// Sandbox `key`'s rewritten requests, oldest first.
    pub async fn egress_log(&self, key: &str) -> Result<Vec<AuditEntry>, ServiceError> {
        let sandbox = self.get(key).await?;
        Ok(self.inner.egress_audit.of(&sandbox.id))
    }
}

/// The daemon as the gateway's [`Routes`].
pub struct GatewayRoutes(pub Service);

impl Routes for GatewayRoutes {
    fn route(&self, peer: IpAddr) -> BoxFuture<'_, Option<Route>> {
        Box::pin(self.0.egress_route(peer))
    }

    fn audit(&self, sandbox: &str, entry: AuditEntry) {
        self.0.inner.egress_audit.record(sandbox, entry);
    }
}

/// Opens a sandbox's upstream connections from its own network.
struct FromSandbox {
    service: Service,
    id: String,
}

impl Connect for FromSandbox {
    fn connect(&self, dst: SocketAddr) -> BoxFuture<'_, std::io::Result<tokio::net::TcpStream>> {
        Box::pin(async move {
            self.service
                .runtime()
                .connect_from(&self.id, dst)
                .await
                .map_err(std::io::Error::other)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{InMemoryRuntimeForTests, TestService};

    fn with_gateway(gateway: Option<u16>) -> TestService {
        let config = crate::ServiceConfig {
            egress_gateway: gateway.map(|port| GatewaySettings {
                port,
                bundle_in_sandbox: "/b".into(),
                ca_in_sandbox: "/c".into(),
            }),
            ..Default::default()
        };
        TestService::new(config, InMemoryRuntimeForTests::default())
    }

    #[tokio::test]
    async fn only_a_create_using_secrets_or_rules_goes_through_the_gateway_and_only_where_one_runs()
    {
        let secrets = ["k".to_string()];
        let t = with_gateway(Some(21280));
        assert_eq!(t.svc.gateway_for(&[], &[]).unwrap(), None);
        let port = t.svc.gateway_for(&secrets, &[]).unwrap();
        assert_eq!(port, Some(21280));
        let none = with_gateway(None);
        assert!(matches!(
            none.svc.gateway_for(&secrets, &[]),
            Err(ServiceError::InvalidRequest(m)) if m.contains("does not run")
        ));
    }

    #[test]
    fn the_secrets_used_are_those_of_the_env_and_the_rules_each_once() {
        let env = BTreeMap::from([
            (
                "A".to_string(),
                "${e2b.secrets.k} ${sandboxd.secrets.j}".to_string(),
            ),
            ("B".to_string(), "${HOME} ${sandboxd.secrets.k}".to_string()),
        ]);
        let rule = sandboxd_egress::HeaderRule {
            name: http::header::AUTHORIZATION,
            value: "Bearer ${sandboxd.secrets.r} ${sandboxd.secrets.j}".into(),
        };
        let host = sandboxd_egress::RuleHost::parse("a.com").unwrap();
        let used = secrets_used(&env, &[(host, vec![rule])]);
        assert_eq!(used, ["k", "j", "r"]);
    }
}
