//! Changing a running sandbox's egress (E2B's `updateNetwork`, Daytona's
//! `update_network_settings`): one flow for both surfaces.
//!
//! Contract:
//! - The update replaces the egress default and both lists whole; what it does not name is
//!   cleared, as E2B documents. The lists are checked as a create's are ([`crate::network`]).
//! - The egress gateway's `rules` cannot change on a running sandbox: an update must carry the
//!   rules the sandbox has (none for one without), else it is refused and changes nothing.
//!   Whether its ports are public changes only when the update says (`public`).
//! - Only a running sandbox is changed (409 otherwise); in a tier that cannot change a running
//!   sandbox's egress it is a 400 naming the tier. The runtime puts the new rules in place in one
//!   transaction first; the record follows, so a failure leaves the sandbox as it was.
//! - Its connections already open are not cut; what it starts from then on meets the new lists.

use crate::{network, Service, ServiceError};
use sandboxd_api_types as api;
use sandboxd_runtime::EgressLists;
use sandboxd_store::{unix_millis_now, Sandbox, SandboxState};

/// What an update sets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EgressUpdate {
    /// Whether destinations in neither list are reachable; `None` keeps the sandbox's default.
    pub egress: Option<bool>,
    pub allow_out: Vec<String>,
    pub deny_out: Vec<String>,
    /// The egress gateway's rules, which must be those the sandbox has.
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
        let had = crate::egress::rules::from_stored(&sandbox.network);
        if crate::egress::rules::to_json(&policy.rules) != crate::egress::rules::to_json(&had) {
            return Err(ServiceError::InvalidRequest(
                "the egress gateway's rules of a running sandbox cannot change: send the rules it \
                 has with every update (none if it has none), or create a sandbox with the new ones"
                    .into(),
            ));
        }
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
}
