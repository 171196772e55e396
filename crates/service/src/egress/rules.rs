//! A create's `network.rules`, checked: the per-host headers the egress gateway sets.
//!
//! Contract ([`rules`]): a host is what a secret's host may be (`sandboxd_secrets::HostPattern`),
//! with an optional `:port` that limits its rules to that port ([`RuleHost`]; the sandbox's
//! connections to every port its rules name go through the gateway, besides 80 and 443); at most [`MAX_HOSTS`] hosts, [`MAX_RULES`] rules a host and [`MAX_HEADERS`] headers a rule; a
//! header name is a valid HTTP header name other than the ones that frame a request (`host`,
//! `content-length`, `transfer-encoding`, `connection`), and a value a valid header value once its
//! placeholders are replaced by plain text. A rule grants no egress (E2B's rule): its host must be
//! reachable already — `egress` on, or covered by `allowOut` (an address in one of its blocks, a
//! name its names match, a wildcard under one of its wildcards). Anything else is the caller's
//! 400, naming the host. [`to_json`] writes the rules back in the shape they came in.

use crate::ServiceError;
use sandboxd_api_types as api;
use sandboxd_egress::{HeaderRule, RuleHost};
use sandboxd_runtime::{Ipv4Net, NamePattern};
use sandboxd_secrets::HostPattern;

/// Most hosts `network.rules` may name.
pub const MAX_HOSTS: usize = 64;
/// Most rules one host may have.
pub const MAX_RULES: usize = 16;
/// Most headers one rule may set.
pub const MAX_HEADERS: usize = 32;
/// Headers that frame a request, which no rule may set.
const FRAMING: [&str; 4] = ["host", "content-length", "transfer-encoding", "connection"];

/// A host's rules, checked: its headers in order.
pub type HostRules = (RuleHost, Vec<HeaderRule>);

fn invalid(message: String) -> ServiceError {
    ServiceError::InvalidRequest(message)
}

/// Whether `host` is reachable under the lists: in `allowOut`, or anywhere with `egress`.
fn reachable(host: &HostPattern, egress: bool, allow: &[Ipv4Net], names: &[NamePattern]) -> bool {
    if egress {
        return true;
    }
    match host {
        HostPattern::Address(std::net::IpAddr::V4(ip)) => {
            let one = Ipv4Net::new(*ip, 32).expect("a /32");
            allow.iter().any(|net| net.contains(&one))
        }
        HostPattern::Address(_) => false,
        HostPattern::Name(name) => names.iter().any(|p| p.matches(name)),
        // Every subdomain is covered only by a wildcard that covers them all.
        HostPattern::Subdomains(name) => names
            .iter()
            .any(|p| p.is_wildcard() && p.matches(&format!("x.{name}"))),
    }
}

/// Checks `network.rules` of a create whose lists are `allow`/`allow_names` and default `egress`.
pub fn rules(
    given: &std::collections::BTreeMap<String, Vec<api::NetworkRule>>,
    egress: bool,
    allow: &[Ipv4Net],
    allow_names: &[NamePattern],
) -> Result<Vec<HostRules>, ServiceError> {
    if given.len() > MAX_HOSTS {
        return Err(invalid(format!(
            "network.rules names {} hosts; at most {MAX_HOSTS} are allowed",
            given.len()
        )));
    }
    let mut out: Vec<HostRules> = Vec::with_capacity(given.len());
    for (host, list) in given {
        let shown: String = host.chars().take(100).collect();
        let rule_host =
            RuleHost::parse(host).map_err(|e| invalid(format!("network.rules: {e}")))?;
        if out.iter().any(|(h, _)| *h == rule_host) {
            return Err(invalid(format!("network.rules names {shown:?} twice")));
        }
        if !reachable(&rule_host.pattern, egress, allow, allow_names) {
            return Err(invalid(format!(
                "network.rules names {shown:?}, which the sandbox cannot reach: a rule grants no \
                 egress, so add it to network.allowOut"
            )));
        }
        if list.len() > MAX_RULES {
            return Err(invalid(format!(
                "network.rules[{shown:?}] has {} rules; at most {MAX_RULES} are allowed",
                list.len()
            )));
        }
        let mut headers = Vec::new();
        for rule in list {
            let set = rule
                .transform
                .as_ref()
                .map(|t| &t.headers)
                .into_iter()
                .flatten();
            if rule.transform.as_ref().map_or(0, |t| t.headers.len()) > MAX_HEADERS {
                return Err(invalid(format!(
                    "a rule of {shown:?} sets more than {MAX_HEADERS} headers"
                )));
            }
            for (name, value) in set {
                headers.push(header(&shown, name, value)?);
            }
        }
        out.push((rule_host, headers));
    }
    Ok(out)
}

fn header(host: &str, name: &str, value: &str) -> Result<HeaderRule, ServiceError> {
    let parsed = http::HeaderName::from_bytes(name.as_bytes())
        .ok()
        .filter(|n| !FRAMING.contains(&n.as_str()))
        .ok_or_else(|| {
            invalid(format!(
                "network.rules[{host:?}]: {name:?} is not a header a rule may set"
            ))
        })?;
    // Checked with its placeholders as they are: a secret's value is checked when it goes in.
    http::HeaderValue::from_str(value).map_err(|_| {
        invalid(format!(
            "network.rules[{host:?}]: the value of {name} is not a valid header value"
        ))
    })?;
    Ok(HeaderRule {
        name: parsed,
        value: value.to_string(),
    })
}

/// The rules in the shape `network.rules` takes (each host's headers as one rule).
pub fn to_json(rules: &[HostRules]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (host, headers) in rules {
        let headers: serde_json::Map<String, serde_json::Value> = headers
            .iter()
            .map(|h| (h.name.to_string(), h.value.clone().into()))
            .collect();
        out.insert(
            host.to_string(),
            serde_json::json!([{ "transform": { "headers": headers } }]),
        );
    }
    out.into()
}

/// The rules a stored network posture holds (what [`to_json`] wrote); none when it holds none or
/// something unreadable.
pub fn from_stored(network: &serde_json::Value) -> Vec<HostRules> {
    let Some(stored) = network.get("rules") else {
        return Vec::new();
    };
    let Ok(given) = serde_json::from_value(stored.clone()) else {
        return Vec::new();
    };
    // Stored rules were checked at create, their reachability too.
    rules(&given, true, &[], &[]).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn given(host: &str, headers: &[(&str, &str)]) -> BTreeMap<String, Vec<api::NetworkRule>> {
        let transform = api::NetworkTransform {
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        };
        BTreeMap::from([(
            host.to_string(),
            vec![api::NetworkRule {
                transform: Some(transform),
            }],
        )])
    }

    fn names(list: &[&str]) -> Vec<NamePattern> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn a_rule_grants_no_egress() {
        let g = given(
            "api.example.com",
            &[("authorization", "Bearer ${e2b.secrets.k}")],
        );
        let refused = rules(&g, false, &[], &[]).unwrap_err().to_string();
        assert!(
            refused.contains("api.example.com") && refused.contains("allowOut"),
            "{refused}"
        );
        assert!(rules(&g, false, &[], &names(&["api.example.com"])).is_ok());
        assert!(rules(&g, false, &[], &names(&["*.example.com"])).is_ok());
        assert!(rules(&g, true, &[], &[]).is_ok());
        let wild = given("*.example.com", &[("x-a", "1")]);
        assert!(rules(&wild, false, &[], &names(&["api.example.com"])).is_err());
        assert!(rules(&wild, false, &[], &names(&["*.example.com"])).is_ok());
        let ip = given("10.0.0.7", &[("x-a", "1")]);
        let block: Vec<Ipv4Net> = vec!["10.0.0.0/24".parse().unwrap()];
        assert!(rules(&ip, false, &block, &[]).is_ok());
        assert!(rules(&ip, false, &[], &[]).is_err());
    }

    #[test]
    fn framing_headers_and_bad_values_are_refused() {
        for (name, value) in [
            ("host", "x"),
            ("content-length", "1"),
            ("bad name", "x"),
            ("x-a", "a\nb"),
        ] {
            assert!(
                rules(&given("a.com", &[(name, value)]), true, &[], &[]).is_err(),
                "{name}"
            );
        }
        assert!(rules(&given("https://a.com", &[]), true, &[], &[]).is_err());
    }

    #[test]
    fn rules_survive_the_store_and_name_their_secrets() {
        let g = given(
            "api.example.com",
            &[
                ("authorization", "Bearer ${e2b.secrets.k}"),
                ("x-b", "${sandboxd.secrets.j}"),
            ],
        );
        let checked = rules(&g, true, &[], &[]).unwrap();
        let stored = serde_json::json!({ "egress": true, "rules": to_json(&checked) });
        assert_eq!(from_stored(&stored), checked);
        let used = crate::egress::secrets_used(&BTreeMap::new(), &checked);
        assert_eq!(used, vec!["k".to_string(), "j".into()]);
    }

    #[test]
    fn a_host_may_name_a_port_and_is_reachable_as_its_host_is() {
        let g = given("api.example.com:8443", &[("x-a", "1")]);
        let checked = rules(&g, false, &[], &names(&["api.example.com"])).unwrap();
        assert_eq!(checked[0].0.port, Some(8443));
        assert!(rules(&g, false, &[], &names(&["other.example.com"])).is_err());
        let stored = serde_json::json!({ "rules": to_json(&checked) });
        assert_eq!(from_stored(&stored), checked);
        let refused = rules(&given("a.com:0", &[]), true, &[], &[]).unwrap_err();
        assert!(refused.to_string().contains(":port"), "{refused}");
    }
}
