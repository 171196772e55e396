//! A create's network posture: the egress default and the allow and deny lists, checked and parsed
//! once for both surfaces (`/v1`'s `network`, and E2B's `allow_internet_access` plus `network`).
//!
//! Contract: [`policy`] accepts exactly what the runtime can enforce and refuses the rest with an
//! [`ServiceError::InvalidRequest`] naming the field, so nothing is ever created with a list it does
//! not honour. An entry is an IPv4 address (`1.1.1.1`, meaning `/32`) or CIDR block (`8.8.8.0/24`;
//! host bits are cleared); domain names (`example.com`, `*.example.com`) and IPv6 are refused, as is
//! anything else, and so are lists of more than [`MAX_ENTRIES`]. The lists come back canonical
//! ([`Ipv4Net::normalize`]: sorted, without duplicates or blocks inside another). Enforcement and its
//! precedence (allowed beats denied beats the egress default) are the runtime's
//! (`sandboxd_runtime::namespace::egress`).

use crate::ServiceError;
use sandboxd_api_types as api;
use sandboxd_runtime::Ipv4Net;

/// Most entries one list may have.
pub const MAX_ENTRIES: usize = 256;

/// A checked network posture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressPolicy {
    /// Whether destinations in neither list are reachable.
    pub egress: bool,
    /// Always reachable (`allowOut`).
    pub allow: Vec<Ipv4Net>,
    /// Unreachable unless allowed (`denyOut`).
    pub deny: Vec<Ipv4Net>,
    /// Whether anyone may reach its ports through the proxy (`allowPublicTraffic`, see
    /// [`crate::previews`]); true by default.
    pub public: bool,
}

impl Default for EgressPolicy {
    fn default() -> Self {
        Self {
            egress: false,
            allow: Vec::new(),
            deny: Vec::new(),
            public: true,
        }
    }
}

impl EgressPolicy {
    /// The posture as the store records it: `{"egress": …}`, plus `allowOut`/`denyOut` when set.
    pub fn to_json(&self) -> serde_json::Value {
        let mut json = serde_json::json!({ "egress": self.egress });
        for (key, nets) in [("allowOut", &self.allow), ("denyOut", &self.deny)] {
            if !nets.is_empty() {
                json[key] = nets.iter().map(Ipv4Net::to_string).collect();
            }
        }
        if !self.public {
            json["allowPublicTraffic"] = false.into();
        }
        json
    }
}

/// Checks and parses a create's `network` (absent: no egress, no lists).
pub fn policy(network: Option<&api::NetworkPolicy>) -> Result<EgressPolicy, ServiceError> {
    let Some(network) = network else {
        return Ok(EgressPolicy::default());
    };
    Ok(EgressPolicy {
        egress: network.egress,
        allow: list("network.allowOut", &network.allow_out)?,
        deny: list("network.denyOut", &network.deny_out)?,
        public: network.allow_public_traffic != Some(false),
    })
}

fn list(field: &str, entries: &[String]) -> Result<Vec<Ipv4Net>, ServiceError> {
    if entries.len() > MAX_ENTRIES {
        return Err(invalid(format!(
            "{field} has {} entries; at most {MAX_ENTRIES} are allowed",
            entries.len()
        )));
    }
    let nets = entries
        .iter()
        .map(|entry| entry_of(field, entry))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Ipv4Net::normalize(nets))
}

fn entry_of(field: &str, entry: &str) -> Result<Ipv4Net, ServiceError> {
    if let Ok(net) = entry.parse() {
        return Ok(net);
    }
    let shown: String = entry.chars().take(100).collect();
    Err(invalid(if entry.contains(':') {
        format!("IPv6 in {field} is not supported ({shown:?}); use IPv4 addresses or CIDR blocks")
    } else if looks_like_domain(entry) {
        format!("domain names in {field} are not supported; use IPv4 addresses or CIDR blocks")
    } else {
        format!(
            "{field} entry {shown:?} is not an IPv4 address or CIDR block (a.b.c.d or a.b.c.d/n)"
        )
    }))
}

/// `example.com`, `*.example.com`: dotted labels of letters, digits, '-' and '_', at least one letter,
/// optionally after a `*.`.
fn looks_like_domain(entry: &str) -> bool {
    let name = entry.strip_prefix("*.").unwrap_or(entry);
    let name = name.strip_suffix('.').unwrap_or(name);
    name.contains('.')
        && name.bytes().any(|b| b.is_ascii_alphabetic())
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

fn invalid(message: String) -> ServiceError {
    ServiceError::InvalidRequest(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network(egress: bool, allow: &[&str], deny: &[&str]) -> api::NetworkPolicy {
        let strings = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        api::NetworkPolicy {
            egress,
            allow_out: strings(allow),
            deny_out: strings(deny),
            allow_public_traffic: None,
        }
    }

    fn message(result: Result<EgressPolicy, ServiceError>) -> String {
        match result {
            Err(ServiceError::InvalidRequest(m)) => m,
            other => panic!("expected an invalid request, got {other:?}"),
        }
    }

    #[test]
    fn addresses_and_blocks_come_back_canonical() {
        let p = policy(Some(&network(
            false,
            &["1.1.1.1", "8.8.8.9/24", "1.1.1.1"],
            &["10.0.0.0/8", "10.1.0.0/16", "0.0.0.0/0"],
        )))
        .unwrap();
        let text = |nets: &[Ipv4Net]| nets.iter().map(Ipv4Net::to_string).collect::<Vec<_>>();
        assert!(!p.egress);
        assert_eq!(text(&p.allow), ["1.1.1.1/32", "8.8.8.0/24"]);
        assert_eq!(text(&p.deny), ["0.0.0.0/0"]);
        assert_eq!(
            p.to_json(),
            serde_json::json!({"egress": false, "allowOut": ["1.1.1.1/32", "8.8.8.0/24"],
                               "denyOut": ["0.0.0.0/0"]})
        );
        assert_eq!(policy(None).unwrap(), EgressPolicy::default());
        let plain = policy(Some(&network(true, &[], &[]))).unwrap();
        assert_eq!(plain.to_json(), serde_json::json!({"egress": true}));
    }

    #[test]
    fn domains_are_refused_with_the_field_named() {
        for domain in [
            "example.com",
            "*.example.com",
            "api.example.com.",
            "a-b.c_d.io",
        ] {
            let m = message(policy(Some(&network(true, &[domain], &[]))));
            assert_eq!(
                m,
                "domain names in network.allowOut are not supported; use IPv4 addresses or CIDR blocks"
            );
            let m = message(policy(Some(&network(true, &[], &[domain]))));
            assert!(m.starts_with("domain names in network.denyOut"), "{m}");
        }
    }

    #[test]
    fn ipv6_and_garbage_are_refused() {
        for v6 in ["::1", "2001:db8::/32", "::ffff:1.2.3.4"] {
            let m = message(policy(Some(&network(true, &[v6], &[]))));
            assert!(m.starts_with("IPv6 in network.allowOut"), "{m}");
        }
        for bad in [
            "bad",
            "",
            "1.2.3.4/33",
            "1.2.3",
            "1.2.3.4 ",
            "1.2.3.4;drop",
            "10.0.0.0/8/8",
        ] {
            let m = message(policy(Some(&network(true, &[], &[bad]))));
            assert!(
                m.starts_with("network.denyOut entry") && m.contains("not an IPv4 address"),
                "{bad:?}: {m}"
            );
        }
    }

    #[test]
    fn lists_over_the_limit_are_refused() {
        let many: Vec<String> = (0..=MAX_ENTRIES)
            .map(|i| format!("10.0.{}.{}", i / 256, i % 256))
            .collect();
        let at_limit: Vec<&str> = many[..MAX_ENTRIES].iter().map(String::as_str).collect();
        assert_eq!(
            policy(Some(&network(true, &at_limit, &[])))
                .unwrap()
                .allow
                .len(),
            MAX_ENTRIES
        );
        let over: Vec<&str> = many.iter().map(String::as_str).collect();
        let m = message(policy(Some(&network(true, &[], &over))));
        assert_eq!(
            m,
            "network.denyOut has 257 entries; at most 256 are allowed"
        );
    }
}
