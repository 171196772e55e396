//! `POST /api/sandbox/{idOrName}/network-settings {networkBlockAll?, networkAllowList?,
//! domainAllowList?}` (`update_network_settings`) → the sandbox: a running sandbox's egress
//! changed on the service's one flow ([`sandboxd_service::network_update`]). As Daytona's, the
//! update is partial: `networkBlockAll` sets the default, `networkAllowList` (comma-separated
//! IPv4 addresses and CIDR blocks) replaces the addresses it may always reach and
//! `domainAllowList` (comma-separated names, `*.` patterns) the names; what is not given is kept,
//! its `denyOut` and its egress gateway's rules too.

use super::control::{describe, toolbox_url};
use super::error::DaytonaError;
use super::models::{is_domain, DaytonaSandbox};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use sandboxd_api_types as api;
use sandboxd_service::network_update::EgressUpdate;
use sandboxd_service::Service;
use serde::Deserialize;

/// The body of an update.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NetworkSettings {
    #[serde(default)]
    network_block_all: Option<bool>,
    #[serde(default)]
    network_allow_list: Option<String>,
    #[serde(default)]
    domain_allow_list: Option<String>,
}

/// The entries of a comma-separated list, each checked to be of the list's kind: IPv4 addresses
/// and CIDR blocks (`networkAllowList`), or domain names and `*.` patterns (`domainAllowList`,
/// whose names the service checks further).
pub(crate) fn entries(field: &str, list: &str, domains: bool) -> Result<Vec<String>, DaytonaError> {
    let entries: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect();
    if !domains {
        sandboxd_service::network::addresses_only(field, &entries)?;
    } else if let Some(address) = entries.iter().find(|e| !is_domain(e)) {
        return Err(DaytonaError::bad_request(format!(
            "{field} holds domain names, not {address:?}: addresses go in networkAllowList"
        )));
    }
    Ok(entries)
}

/// `POST /api/sandbox/{idOrName}/network-settings`.
pub async fn update(
    State(service): State<Service>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    let settings: NetworkSettings = super::control::parse(&body)?;
    let sandbox = service.get(&key).await?;
    let current: api::NetworkPolicy =
        serde_json::from_value(sandbox.network.clone()).unwrap_or_default();
    let (mut addresses, mut domains): (Vec<String>, Vec<String>) =
        current.allow_out.into_iter().partition(|e| !is_domain(e));
    if let Some(list) = &settings.network_allow_list {
        addresses = entries("networkAllowList", list, false)?;
    }
    if let Some(list) = &settings.domain_allow_list {
        domains = entries("domainAllowList", list, true)?;
    }
    let update = EgressUpdate {
        egress: settings.network_block_all.map(|block| !block),
        allow_out: addresses.into_iter().chain(domains).collect(),
        deny_out: current.deny_out,
        rules: current.rules,
        public: None,
    };
    let sandbox = service.update_egress(&sandbox.id, update).await?;
    Ok(Json(
        describe(&service, &sandbox, &toolbox_url(&headers)).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_list_takes_only_its_own_kind() {
        assert_eq!(
            entries("a", " 1.1.1.1, 10.0.0.0/8 ,", false).unwrap(),
            ["1.1.1.1", "10.0.0.0/8"]
        );
        assert_eq!(
            entries("d", "example.com,*.example.org", true).unwrap(),
            ["example.com", "*.example.org"]
        );
        assert!(entries("a", "example.com", false).is_err());
        assert!(entries("a", "1.1.1.300", false).is_err());
        assert!(entries("d", "1.1.1.1", true).is_err());
    }
}
