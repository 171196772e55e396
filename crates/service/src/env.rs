//! Changing a running sandbox's environment (Daytona's `update_env` and `update_secrets`): one
//! [`EnvChange`] — removals, then the variables set — applied to every copy of it.
//!
//! Guarantees:
//! - **One operation per sandbox at a time**, with stop, start, pause, resume and resize (the
//!   sandbox's lock), and only on a running sandbox (an auto-resuming one is woken first): its
//!   agent is the one that must hear it. Anything else is a conflict and changes nothing.
//! - **Checked before anything changes**, as a create's environment is: names and values
//!   ([`validate::env`]), and the secrets its placeholders name must exist. A sandbox that was not
//!   created behind the egress gateway (no secrets, no rules) cannot take secrets later: its
//!   traffic does not pass the gateway, so the placeholder would go out as text; that is the
//!   caller's 400, naming the fix.
//! - **The agent first, then the runtime, then the row.** An agent that does not take the change
//!   leaves everything as it was. Then the runtime's record (the next boot starts with it) and the
//!   row (what the gateway reads for each new connection, so secrets attached, detached or
//!   rotated apply to the next connection) follow. Processes already running keep theirs.

use crate::{validate, Service, ServiceError};
use sandboxd_envd::files::EnvChange;
use sandboxd_store::{unix_millis_now, Sandbox, SandboxState};
use std::collections::BTreeMap;

/// The prefix of the placeholders a sandbox's `secrets` are given as (Daytona's `update_secrets`
/// replaces every variable holding one).
pub const SECRET_PLACEHOLDER_PREFIX: &str = "${sandboxd.secrets.";

impl Service {
    /// Applies `change` to running sandbox `key`'s environment; returns the sandbox as it is then.
    pub async fn update_env(&self, key: &str, change: EnvChange) -> Result<Sandbox, ServiceError> {
        validate::env(&change.set)?;
        let unset: BTreeMap<String, String> = change
            .unset
            .iter()
            .map(|name| (name.clone(), String::new()))
            .collect();
        validate::env(&unset)?;
        let (id, client) = self.agent(key, None).await?;
        let _serial = self.inner.sandbox_locks.lock(&id).await;
        let sandbox = self.get(&id).await?;
        if sandbox.state != SandboxState::Running {
            return Err(ServiceError::Conflict(format!(
                "sandbox {id} is {}: only a running sandbox's environment can change",
                sandbox.state
            )));
        }
        let env = change.applied(sandbox.env.clone());
        let rules = crate::egress::rules::from_stored(&sandbox.network);
        let secrets = self.check_secret_uses(&env, &rules).await?;
        let info = self
            .runtime()
            .inspect(&id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("sandbox {id} not found")))?;
        if !secrets.is_empty() && info.spec.egress_gateway.is_none() {
            return Err(ServiceError::InvalidRequest(format!(
                "sandbox {id} was created without secrets or network rules, so its traffic does not \
                 pass the egress gateway and cannot take secrets ({}): create a sandbox with them",
                secrets.join(", ")
            )));
        }
        client
            .update_env(&change)
            .await
            .map_err(ServiceError::Agent)?;
        self.runtime()
            .set_envs(&id, change.applied(info.spec.envs))
            .await?;
        let rid = id.clone();
        self.writer()
            .write(move |tx| tx.set_env(&rid, &env, unix_millis_now()))
            .await?;
        self.get(&id).await
    }

    /// Replaces the secrets running sandbox `key` holds: each of `secrets` (variable → secret name)
    /// is set to its secret's placeholder, and every other variable holding one is removed.
    pub async fn update_secrets(
        &self,
        key: &str,
        secrets: BTreeMap<String, String>,
    ) -> Result<Sandbox, ServiceError> {
        for name in secrets.values() {
            sandboxd_secrets::check_name(name)
                .map_err(|e| ServiceError::InvalidRequest(e.to_string()))?;
        }
        let change = EnvChange {
            set: secrets
                .into_iter()
                .map(|(var, name)| (var, sandboxd_secrets::placeholder(&name)))
                .collect(),
            unset: Vec::new(),
            unset_value_prefix: Some(SECRET_PLACEHOLDER_PREFIX.into()),
        };
        self.update_env(key, change).await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_prefix_is_that_of_every_placeholder_a_secret_is_given_as() {
        let placeholder = sandboxd_secrets::placeholder("k");
        assert!(
            placeholder.starts_with(super::SECRET_PLACEHOLDER_PREFIX),
            "{placeholder}"
        );
    }
}
