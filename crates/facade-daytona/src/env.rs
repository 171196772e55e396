//! A running sandbox's environment and secrets, changed (onto [`sandboxd_service::env`]):
//!
//! - `PUT /api/sandbox/{idOrName}/secrets {secrets: [{ENV_VAR: secret name}]}` → the sandbox:
//!   replaces the secrets it holds (`update_secrets`; `[]` detaches them all). Each variable holds
//!   its secret's placeholder for commands started afterwards, and the egress gateway uses the new
//!   set from the next connection on. A sandbox created without secrets or rules cannot take any
//!   (its traffic does not pass the gateway): a 400 that says so.
//! - `POST /api/toolbox/{id}/env {set?, unset?, unsetValuePrefix?}` → the sandbox's environment as
//!   its create gave it, changed (`update_env`): commands, sessions and terminals started
//!   afterwards see it; processes already running keep theirs.
//!
//! A variable named twice, a bad name or an unknown secret is a 400; a sandbox that is not running
//! (and does not resume on demand) is a 409; nothing changes then.

use super::control::{describe, parse, toolbox_url};
use super::error::DaytonaError;
use super::models::DaytonaSandbox;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use sandboxd_envd::files::EnvChange;
use sandboxd_service::Service;
use std::collections::BTreeMap;

/// The body of `update_sandbox_secrets`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateSecrets {
    secrets: Option<Vec<BTreeMap<String, String>>>,
}

/// `PUT /api/sandbox/{idOrName}/secrets`.
pub async fn update_secrets(
    State(service): State<Service>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    let req: UpdateSecrets = parse(&body)?;
    let Some(list) = req.secrets else {
        return Err(DaytonaError::bad_request(
            "secrets must be a list of {ENV_VAR: secret name}",
        ));
    };
    let mut secrets = BTreeMap::new();
    for (var, name) in list.into_iter().flatten() {
        if secrets.insert(var.clone(), name).is_some() {
            return Err(DaytonaError::bad_request(format!(
                "{var} is named twice in secrets"
            )));
        }
    }
    let sandbox = service.update_secrets(&key, secrets).await?;
    Ok(Json(
        describe(&service, &sandbox, &toolbox_url(&headers)).await?,
    ))
}

/// The body of the toolbox's `/env`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct UpdateEnv {
    set: Option<BTreeMap<String, String>>,
    unset: Option<Vec<String>>,
    unset_value_prefix: Option<String>,
}

/// `POST /api/toolbox/{id}/env`.
pub async fn update_env(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<BTreeMap<String, String>>, DaytonaError> {
    let req: UpdateEnv = parse(&body)?;
    let change = EnvChange {
        set: req.set.unwrap_or_default(),
        unset: req.unset.unwrap_or_default(),
        unset_value_prefix: req.unset_value_prefix,
    };
    let sandbox = service.update_env(&id, change).await?;
    Ok(Json(sandbox.env))
}
