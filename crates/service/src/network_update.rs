//! Changing a running sandbox's egress (E2B's `updateNetwork`, Daytona's
//! `update_network_settings`): one flow for both surfaces.
//!
//! Contract:
//! - The update replaces the egress default and both lists whole; what it does not name is
//!   cleared, as E2B documents. The lists are checked as a create's are ([`crate::network`]).
//! - The egress gateway's `rules` change with the update on a sandbox the gateway is in the path of,
//!   and its next connections meet them (the gateway reads a sandbox's rules as each connection
//!   arrives; with none, and no secrets, it passes them through untouched). The gateway is in a
//!   sandbox's path, on ports 80, 443 and those its create's rules named, from its create on when
//!   the create names secrets or rules, and only then: an update changes which rules apply, never
//!   whether the gateway is there nor on which ports. So rules for a sandbox created without
//!   secrets or rules, and a rule on a port that does not pass the gateway, are refused and change
//!   nothing; the secrets the new rules name must exist, as at a create. Whether its ports are
//!   public changes only when the update says (`public`).
//! - Only a running sandbox is changed (409 otherwise); in a tier that cannot change a running
//!   sandbox's egress it is a 400 naming the tier. The runtime puts the new rules in place in one
//!   transaction first; the record follows, so a failure leaves the sandbox as it was.
//! - Its connections already open are not cut; what it starts from then on meets the new lists.

use crate::egress::{self, rules::HostRules};
use crate::{network, Service, ServiceError};
use sandboxd_api_types as api;
use sandboxd_egress::Policy;
use sandboxd_runtime::EgressLists;
use sandboxd_store::{unix_millis_now, Sandbox, SandboxState};

/// What an update sets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EgressUpdate {
    /// Whether destinations in neither list are reachable; `None` keeps the sandbox's default.
    pub egress: Option<bool>,
    pub allow_out: Vec<String>,
    pub deny_out: Vec<String>,
    /// The egress gateway's rules, replacing the sandbox's (see the module docs).
    pub rules: std::collections::BTreeMap<String, Vec<api::NetworkRule>>,
    /// Whether anyone may reach its ports through the proxy; `None` keeps what it has.
    pub public: Option<bool>,
}

impl Service {
    /// Replaces running sandbox `key`'s egress default and lists (see the module docs).
    pub async fn update_egress(
        &self,
        key: &str,
        update: EgressUpdate,
    ) -> Result<Sandbox, ServiceError> {
        let id = self.get(key).await?.id;
        let _serial = self.inner.sandbox_locks.lock(&id).await;
        let sandbox = self.get(&id).await?;
        if sandbox.state != SandboxState::Running {
            return Err(ServiceError::Conflict(format!(
                "sandbox {id} is {}: only a running sandbox's network can change",
                sandbox.state
            )));
        }
        let current: api::NetworkPolicy =
            serde_json::from_value(sandbox.network.clone()).unwrap_or_default();
        let asked = api::NetworkPolicy {
            egress: update.egress.unwrap_or(current.egress),
            allow_out: update.allow_out,
            deny_out: update.deny_out,
            allow_public_traffic: update.public.or(current.allow_public_traffic),
            rules: update.rules,
        };
        let policy = network::policy(Some(&asked))?;
        self.check_rules_change(&sandbox, &policy.rules).await?;
        let stored = policy.to_json();
        let lists = EgressLists {
            egress: policy.egress,
            allow: policy.allow,
            deny: policy.deny,
            allow_names: policy.allow_names,
            deny_names: policy.deny_names,
        };
        self.runtime().set_egress_lists(&id, lists).await?;
        let rid = id.clone();
        self.writer()
            .write(move |tx| tx.set_network(&rid, &stored, unix_millis_now()))
            .await?;
        // The proxy's cached view of it carries whether it is public.
        self.evict_endpoint(&id);
        tracing::info!(sandbox_id = %id, "sandbox egress updated");
        self.get(&id).await
    }

    /// Whether running `sandbox` may have the gateway's `rules` instead of its own (see the module
    /// docs); the same rules always may. Whether the gateway is in its path, and on which ports, is
    /// what the runtime made it with.
    async fn check_rules_change(
        &self,
        sandbox: &Sandbox,
        rules: &[HostRules],
    ) -> Result<(), ServiceError> {
        let had = egress::rules::from_stored(&sandbox.network);
        if egress::rules::to_json(rules) == egress::rules::to_json(&had) {
            return Ok(());
        }
        let id = &sandbox.id;
        let spec = self
            .runtime()
            .inspect(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("sandbox {id} not found")))?
            .spec;
        if spec.egress_gateway.is_none() {
            return Err(ServiceError::InvalidRequest(format!(
                "sandbox {id}'s connections do not pass the egress gateway (it was created without \
                 secrets or network rules), so its rules cannot change; create a sandbox with its \
                 rules, and it can change them later"
            )));
        }
        let unsent: Vec<String> = Policy::ports(rules)
            .into_iter()
            .filter(|p| !spec.egress_gateway_ports.contains(p))
            .map(|p| p.to_string())
            .collect();
        if !unsent.is_empty() {
            let sent: String = spec
                .egress_gateway_ports
                .iter()
                .map(|p| format!(", {p}"))
                .collect();
            return Err(ServiceError::InvalidRequest(format!(
                "sandbox {id}'s connections pass the egress gateway on ports 80, 443{sent} only \
                 (fixed at its create); a rule may not name port {} while it runs",
                unsent.join(", ")
            )));
        }
        self.check_secret_uses(&sandbox.env, rules).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::GatewaySettings;
    use crate::test_support::{InMemoryRuntimeForTests, TestService};
    use crate::ServiceConfig;
    use serde_json::{json, Value};

    fn network(rules: Value) -> api::NetworkPolicy {
        serde_json::from_value(json!({ "egress": true, "rules": rules })).unwrap()
    }

    fn rules_of(rules: Value) -> Vec<HostRules> {
        network::policy(Some(&network(rules))).unwrap().rules
    }

    fn header(value: &str) -> Value {
        json!([{ "transform": { "headers": { "X-Key": value } } }])
    }

    async fn refused(t: &TestService, sandbox: &Sandbox, rules: &[HostRules], says: &str) {
        match t.svc.check_rules_change(sandbox, rules).await {
            Err(ServiceError::InvalidRequest(why)) => assert!(why.contains(says), "{why}"),
            other => panic!("{rules:?} on {}: {other:?}", sandbox.id),
        }
    }

    /// Invariant: an update changes which rules the gateway applies to a sandbox, never whether
    /// the gateway is in its path, nor which ports pass it; the secrets it names exist.
    #[tokio::test]
    async fn rules_change_where_the_gateway_is_and_it_stays_there() {
        let gateway = GatewaySettings {
            port: 9,
            bundle_in_sandbox: "/bundle.pem".into(),
            ca_in_sandbox: "/ca.pem".into(),
        };
        let config = ServiceConfig {
            egress_gateway: Some(gateway),
            ..Default::default()
        };
        let t = TestService::new(config, InMemoryRuntimeForTests::default());
        let created = json!({ "api.test": header("1"), "api.test:8443": header("2") });
        let ruled = t
            .svc
            .create(api::CreateSandbox {
                network: Some(network(created.clone())),
                ..Default::default()
            })
            .await
            .unwrap();
        let plain = t.svc.create(api::CreateSandbox::default()).await.unwrap();

        let moved = rules_of(json!({ "other.test": header("3"), "other.test:8443": header("4") }));
        t.svc
            .check_rules_change(&ruled, &rules_of(created))
            .await
            .unwrap();
        t.svc.check_rules_change(&ruled, &moved).await.unwrap();
        t.svc.check_rules_change(&plain, &[]).await.unwrap();
        // All of them may go: the gateway, still in its path, then passes it through.
        t.svc.check_rules_change(&ruled, &[]).await.unwrap();

        refused(&t, &plain, &moved, "do not pass the egress gateway").await;
        let port = rules_of(json!({ "api.test:9443": header("5") }));
        refused(&t, &ruled, &port, "may not name port 9443").await;
        let secret = header(&sandboxd_secrets::placeholder("nosuch"));
        let secret = rules_of(json!({ "api.test": secret }));
        refused(&t, &ruled, &secret, "unknown secrets: nosuch").await;
    }
}
