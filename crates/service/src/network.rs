//! A create's network posture: the egress default and the allow and deny lists, checked and parsed
//! once for both surfaces (`/v1`'s `network`, and E2B's `allow_internet_access` plus `network`).
//!
//! Contract: [`policy`] accepts exactly what the runtime can enforce and refuses the rest with an
//! [`ServiceError::InvalidRequest`] naming the field, so nothing is ever created with a list it does
//! not honour. An entry is an IPv4 address (`1.1.1.1`, meaning `/32`), a CIDR block (`8.8.8.0/24`;
//! host bits are cleared), a domain name (`api.example.com`) or every name below one
//! (`*.example.com`, not `example.com` itself), checked strictly ([`NamePattern`]: LDH labels of at
//! most 63 characters, at most 253 in all; case and a trailing dot do not matter). IPv6 is refused,
//! as is anything else, and so are lists of more than [`MAX_ENTRIES`] entries of either kind. The
//! lists come back canonical: blocks as [`Ipv4Net::normalize`] makes them (sorted, without
//! duplicates or blocks inside another), names lowercased, sorted and without duplicates, shown
//! after the blocks. Enforcement and its precedence (allowed beats denied beats the egress default)
//! are the runtime's (`sandboxd_runtime::namespace::egress`; names through the sandbox's own DNS
//! forwarder, `sandboxd_runtime::namespace::dns`).

use crate::ServiceError;
use sandboxd_api_types as api;
use sandboxd_runtime::{Ipv4Net, NamePattern};

/// Most entries one list may have (blocks and names together).
pub const MAX_ENTRIES: usize = 256;

/// A checked network posture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressPolicy {
    /// Whether destinations in neither list are reachable.
    pub egress: bool,
    /// Always reachable (`allowOut`'s addresses and blocks).
    pub allow: Vec<Ipv4Net>,
    /// Unreachable unless allowed (`denyOut`'s addresses and blocks).
    pub deny: Vec<Ipv4Net>,
    /// Names whose resolved addresses are always reachable (`allowOut`'s names).
    pub allow_names: Vec<NamePattern>,
    /// Names whose resolved addresses are unreachable unless allowed (`denyOut`'s names).
    pub deny_names: Vec<NamePattern>,
    /// Whether anyone may reach its ports through the proxy (`allowPublicTraffic`, see
    /// [`crate::previews`]); true by default.
    pub public: bool,
    /// The egress gateway's per-host headers (`rules`, [`crate::egress::rules`]).
    pub rules: Vec<crate::egress::rules::HostRules>,
}

impl Default for EgressPolicy {
    fn default() -> Self {
        Self {
            egress: false,
            allow: Vec::new(),
            deny: Vec::new(),
            allow_names: Vec::new(),
            deny_names: Vec::new(),
            public: true,
            rules: Vec::new(),
        }
    }
}

impl EgressPolicy {
    /// The posture as the store records it: `{"egress": …}`, plus `allowOut`/`denyOut` when set
    /// (blocks first, then names).
    pub fn to_json(&self) -> serde_json::Value {
        let mut json = serde_json::json!({ "egress": self.egress });
        for (key, nets, names) in [
            ("allowOut", &self.allow, &self.allow_names),
            ("denyOut", &self.deny, &self.deny_names),
        ] {
            if !nets.is_empty() || !names.is_empty() {
                let entries: Vec<String> = nets
                    .iter()
                    .map(Ipv4Net::to_string)
                    .chain(names.iter().map(NamePattern::to_string))
                    .collect();
                json[key] = entries.into();
            }
        }
        if !self.public {
            json["allowPublicTraffic"] = false.into();
        }
        if !self.rules.is_empty() {
            json["rules"] = crate::egress::rules::to_json(&self.rules);
        }
        json
    }
}

/// Checks and parses a create's `network` (absent: no egress, no lists).
pub fn policy(network: Option<&api::NetworkPolicy>) -> Result<EgressPolicy, ServiceError> {
    let Some(network) = network else {
        return Ok(EgressPolicy::default());
    };
    let (allow, allow_names) = list("network.allowOut", &network.allow_out)?;
    let (deny, deny_names) = list("network.denyOut", &network.deny_out)?;
    let rules = crate::egress::rules::rules(&network.rules, network.egress, &allow, &allow_names)?;
    Ok(EgressPolicy {
        egress: network.egress,
        allow,
        deny,
        allow_names,
        deny_names,
        public: network.allow_public_traffic != Some(false),
        rules,
    })
}

fn list(field: &str, entries: &[String]) -> Result<(Vec<Ipv4Net>, Vec<NamePattern>), ServiceError> {
    if entries.len() > MAX_ENTRIES {
        return Err(invalid(format!(
            "{field} has {} entries; at most {MAX_ENTRIES} are allowed",
            entries.len()
        )));
    }
    let (mut nets, mut names) = (Vec::new(), Vec::new());
    for entry in entries {
        match entry_of(field, entry)? {
            Entry::Net(net) => nets.push(net),
            Entry::Name(name) => names.push(name),
        }
    }
    Ok((Ipv4Net::normalize(nets), NamePattern::normalize(names)))
}

enum Entry {
    Net(Ipv4Net),
    Name(NamePattern),
}

fn entry_of(field: &str, entry: &str) -> Result<Entry, ServiceError> {
    if let Ok(net) = entry.parse() {
        return Ok(Entry::Net(net));
    }
    let shown: String = entry.chars().take(100).collect();
    if entry.contains(':') {
        return Err(invalid(format!(
            "IPv6 in {field} is not supported ({shown:?}); use IPv4 addresses, CIDR blocks or domain names"
        )));
    }
    entry.parse().map(Entry::Name).map_err(|why| {
        invalid(format!(
            "{field} entry {shown:?} is not an IPv4 address, CIDR block (a.b.c.d or a.b.c.d/n) \
             or domain name (example.com, *.example.com): {why}"
        ))
    })
}

/// Checks that every entry of a list that takes no domain names (Daytona's `networkAllowList`, whose
/// names go in `domainAllowList`) is an IPv4 address or CIDR block; the refusal names `field`.
pub fn addresses_only(field: &str, entries: &[String]) -> Result<(), ServiceError> {
    match entries.iter().find(|e| e.parse::<Ipv4Net>().is_err()) {
        None => Ok(()),
        Some(entry) => {
            let shown: String = entry.chars().take(100).collect();
            Err(invalid(format!(
                "{field} entry {shown:?} is not an IPv4 address or CIDR block (a.b.c.d or a.b.c.d/n); \
                 domain names go in domainAllowList"
            )))
        }
    }
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
            ..Default::default()
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
    fn names_come_back_canonical_after_the_blocks() {
        let p = policy(Some(&network(
            false,
            &[
                "API.OpenAI.com.",
                "1.1.1.1",
                "*.Example.com",
                "api.openai.com",
            ],
            &["*.example.com", "bad.example.com"],
        )))
        .unwrap();
        let text = |names: &[NamePattern]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(text(&p.allow_names), ["*.example.com", "api.openai.com"]);
        assert_eq!(text(&p.deny_names), ["*.example.com", "bad.example.com"]);
        assert!(p.deny.is_empty());
        assert_eq!(
            p.to_json(),
            serde_json::json!({"egress": false,
                "allowOut": ["1.1.1.1/32", "*.example.com", "api.openai.com"],
                "denyOut": ["*.example.com", "bad.example.com"]})
        );
    }

    #[test]
    fn bad_names_are_refused_with_the_field_and_the_reason() {
        let long_label = format!("{}.com", "a".repeat(64));
        for (bad, why) in [
            ("a_b.example.com", "it has the character '_'"),
            (long_label.as_str(), "it has a label of 64 characters"),
            ("a..com", "it has an empty label"),
            ("*.*.example.com", "'*' may only be the whole first label"),
            ("-a.example.com", "starts or ends with '-'"),
            ("localhost", "it is a single label"),
        ] {
            let m = message(policy(Some(&network(true, &[bad], &[]))));
            assert!(
                m.starts_with("network.allowOut entry") && m.contains(why),
                "{bad:?}: {m}"
            );
            let m = message(policy(Some(&network(true, &[], &[bad]))));
            assert!(
                m.starts_with("network.denyOut entry") && m.contains(why),
                "{bad:?}: {m}"
            );
        }
        let too_long = format!("{0}.{0}.{0}.{0}", "a".repeat(63));
        let m = message(policy(Some(&network(true, &[&too_long], &[]))));
        assert!(m.contains("at most 253"), "{m}");
    }

    #[test]
    fn ipv6_and_garbage_are_refused() {
        for v6 in ["::1", "2001:db8::/32", "::ffff:1.2.3.4"] {
            let m = message(policy(Some(&network(true, &[v6], &[]))));
            assert!(m.starts_with("IPv6 in network.allowOut"), "{m}");
            let m = message(policy(Some(&network(true, &[], &[v6]))));
            assert!(m.starts_with("IPv6 in network.denyOut"), "{m}");
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
    fn a_list_of_addresses_only_refuses_names() {
        let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(addresses_only("networkAllowList", &list(&["1.1.1.1", "8.8.8.0/24"])).is_ok());
        let err = addresses_only("networkAllowList", &list(&["1.1.1.1", "api.openai.com"]));
        assert_eq!(
            message(err.map(|()| EgressPolicy::default())),
            "networkAllowList entry \"api.openai.com\" is not an IPv4 address or CIDR block \
             (a.b.c.d or a.b.c.d/n); domain names go in domainAllowList"
        );
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
        // Blocks and names count together.
        let mut mixed: Vec<&str> = many[..MAX_ENTRIES].iter().map(String::as_str).collect();
        mixed.push("example.com");
        let m = message(policy(Some(&network(true, &mixed, &[]))));
        assert_eq!(
            m,
            "network.allowOut has 257 entries; at most 256 are allowed"
        );
    }
}
