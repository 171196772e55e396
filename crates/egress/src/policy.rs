//! A sandbox's egress policy, and how it rewrites one request's headers.
//!
//! Contract ([`Policy::rewrite`], for a request to host `h` on port `p`):
//! 1. **Rules.** Of the rule sets for any port and those for `p` ([`RuleHost`]), the one for `h`
//!    is the one whose host is `h` exactly, else the one whose `*.` wildcard is the longest suffix
//!    of `h`, else one naming `h`'s address; of two equally good, the one for `p` wins. Sets are
//!    never merged. Its headers are set in order (a later one replaces an earlier one of the same name).
//!    A placeholder in a rule's header is replaced by its secret's value whatever the secret's own
//!    hosts: the rule names the host, and rules come from the sandbox's creator, not from the code
//!    that runs in it.
//! 2. **Placeholders the request carries** (in any header the client sent) are replaced only for
//!    the secrets whose hosts allow `h`. A placeholder of any other secret goes out as the text it
//!    is: the request reaches the host unchanged, and the value never leaves for a host nobody
//!    allowed.
//! 3. A value that cannot be a header value (a line break in a secret) refuses the request
//!    ([`RewriteError`]) rather than splitting a header.
//!
//! [`Applied`] names the rule host and the secrets a rewrite used, never their values.
//! [`Policy::intercepts`] says whether `h`'s TLS must be terminated at all: only for a host with a
//! rule set or a secret that allows it; every other host's TLS passes through untouched.
//! [`Policy::ports`] are the ports besides 80 and 443 whose connections must reach the gateway:
//! those the rules name.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use sandboxd_secrets::{replace_placeholders, HostPattern, RuleError, SecretValue};

/// The host a rule set is for: a host as a secret's may be, and the one port it is limited to, if
/// any (`api.example.com:8443`, `10.0.0.7:8080`; an IPv6 address takes none, the sandboxes'
/// egress being IPv4); without one, the set is for every port that goes through the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleHost {
    pub pattern: HostPattern,
    pub port: Option<u16>,
}

impl RuleHost {
    /// Parses a host as a client writes it, with or without `:port` (1–65535; 253 characters at
    /// most with it).
    pub fn parse(text: &str) -> Result<Self, RuleError> {
        if let Ok(pattern) = HostPattern::parse(text) {
            return Ok(Self {
                pattern,
                port: None,
            });
        }
        let bad = || RuleError::RuleHost(text.to_string());
        // With its port, as long as a name may be.
        if text.len() > 253 {
            return Err(bad());
        }
        let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
        // Digits without a leading zero, 1–65535: written back as it was given.
        let port = Some(port)
            .filter(|p| !p.starts_with('0') && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(bad)?;
        let pattern = HostPattern::parse(host)
            .ok()
            .filter(|p| !matches!(p, HostPattern::Address(std::net::IpAddr::V6(_))))
            .ok_or_else(bad)?;
        Ok(Self {
            pattern,
            port: Some(port),
        })
    }

    fn serves(&self, host: &str, port: u16) -> bool {
        self.port.is_none_or(|p| p == port) && self.pattern.allows(host)
    }
}

impl From<HostPattern> for RuleHost {
    fn from(pattern: HostPattern) -> Self {
        Self {
            pattern,
            port: None,
        }
    }
}

impl std::fmt::Display for RuleHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            None => write!(f, "{}", self.pattern),
            Some(port) => write!(f, "{}:{port}", self.pattern),
        }
    }
}

/// A header a rule sets on matching requests; its value may hold placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderRule {
    pub name: HeaderName,
    pub value: String,
}

/// A secret a sandbox may use: its name, the hosts its placeholder is replaced for, its value.
#[derive(Debug, Clone)]
pub struct SecretUse {
    pub name: String,
    pub hosts: Vec<HostPattern>,
    pub value: SecretValue,
}

/// A sandbox's rules and secrets.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Per host (and port), the headers its requests get, in order.
    pub rules: Vec<(RuleHost, Vec<HeaderRule>)>,
    pub secrets: Vec<SecretUse>,
}

/// What a rewrite applied, by name only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The host (and port) of the rule set applied, if one was.
    pub rule: Option<String>,
    /// The secrets whose values went into the request, each once.
    pub secrets: Vec<String>,
}

/// A request the gateway refuses to send.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RewriteError {
    /// header {header} would not be a valid header value with secret {secret}'s value in it
    #[error(
        "header {header} would not be a valid header value with secret {secret}'s value in it"
    )]
    Value { header: String, secret: String },
}

fn host_of(host: &str) -> &str {
    // A Host header may carry a port; an IPv6 literal is in brackets (a bare one is whole).
    if host.parse::<std::net::IpAddr>().is_ok() {
        return host;
    }
    if let Some(v6) = host.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    host.rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
}

impl Policy {
    /// The rule set for `host` on `port` (see the module doc for the order).
    fn rule_for(&self, host: &str, port: u16) -> Option<&(RuleHost, Vec<HeaderRule>)> {
        let serving = |kind: fn(&HostPattern) -> bool| {
            self.rules
                .iter()
                .filter(move |(h, _)| kind(&h.pattern) && h.serves(host, port))
        };
        let exact =
            || serving(|p| matches!(p, HostPattern::Name(_))).max_by_key(|(h, _)| h.port.is_some());
        let wildcard = || {
            serving(|p| matches!(p, HostPattern::Subdomains(_)))
                .max_by_key(|(h, _)| (h.pattern.to_string().len(), h.port.is_some()))
        };
        let address = || {
            serving(|p| matches!(p, HostPattern::Address(_))).max_by_key(|(h, _)| h.port.is_some())
        };
        exact().or_else(wildcard).or_else(address)
    }

    /// The ports besides 80 and 443 the rules name, ascending, each once.
    pub fn ports(rules: &[(RuleHost, Vec<HeaderRule>)]) -> Vec<u16> {
        let mut ports: Vec<u16> = rules
            .iter()
            .filter_map(|(h, _)| h.port)
            .filter(|p| ![80, 443].contains(p))
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// Whether requests to `host` on `port` are rewritten at all (so its TLS must be terminated).
    pub fn intercepts(&self, host: &str, port: u16) -> bool {
        let host = host_of(host);
        self.rule_for(host, port).is_some()
            || self
                .secrets
                .iter()
                .any(|s| s.hosts.iter().any(|h| h.allows(host)))
    }

    fn value(&self, name: &str) -> Option<&str> {
        self.secrets
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.value.expose())
    }

    /// Rewrites `headers` of a request to `host` (a name or an address, with or without a port) on
    /// `port`.
    pub fn rewrite(
        &self,
        host: &str,
        port: u16,
        headers: &mut HeaderMap,
    ) -> Result<Applied, RewriteError> {
        let host = host_of(host);
        let mut applied = Applied::default();
        let note = |used: Vec<String>, applied: &mut Applied| {
            for name in used {
                if !applied.secrets.contains(&name) {
                    applied.secrets.push(name);
                }
            }
        };
        // The client's own headers: only secrets that allow this host.
        let allowed = |name: &str| {
            self.secrets
                .iter()
                .find(|s| s.name == name && s.hosts.iter().any(|h| h.allows(host)))
                .map(|s| s.value.expose())
        };
        // Most requests carry no placeholder at all: only the headers that might are looked at.
        let names: Vec<HeaderName> = headers
            .iter()
            .filter(|(_, v)| v.as_bytes().windows(2).any(|w| w == b"${"))
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            let values: Vec<HeaderValue> = headers.get_all(&name).iter().cloned().collect();
            let mut changed = false;
            let mut rewritten = Vec::with_capacity(values.len());
            for value in values {
                let Ok(text) = value.to_str() else {
                    rewritten.push(value);
                    continue;
                };
                let (out, used) = replace_placeholders(text, allowed);
                if used.is_empty() {
                    rewritten.push(value);
                    continue;
                }
                changed = true;
                let value = HeaderValue::from_str(&out).map_err(|_| RewriteError::Value {
                    header: name.to_string(),
                    secret: used.join(", "),
                })?;
                rewritten.push(value);
                note(used, &mut applied);
            }
            if changed {
                headers.remove(&name);
                for value in rewritten {
                    headers.append(name.clone(), value);
                }
            }
        }
        // The rule set's headers, after, so a rule wins over what the client sent.
        if let Some((rule_host, rules)) = self.rule_for(host, port) {
            applied.rule = Some(rule_host.to_string());
            for rule in rules {
                let (out, used) = replace_placeholders(&rule.value, |n| self.value(n));
                let value = HeaderValue::from_str(&out).map_err(|_| RewriteError::Value {
                    header: rule.name.to_string(),
                    secret: used.join(", "),
                })?;
                headers.insert(rule.name.clone(), value);
                note(used, &mut applied);
            }
        }
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, hosts: &[&str], value: &str) -> SecretUse {
        SecretUse {
            name: name.into(),
            hosts: sandboxd_secrets::check_hosts(hosts).unwrap(),
            value: SecretValue::new(value.into()),
        }
    }

    fn rule(host: &str, headers: &[(&str, &str)]) -> (RuleHost, Vec<HeaderRule>) {
        (
            RuleHost::parse(host).unwrap(),
            headers
                .iter()
                .map(|(n, v)| HeaderRule {
                    name: HeaderName::from_bytes(n.as_bytes()).unwrap(),
                    value: v.to_string(),
                })
                .collect(),
        )
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (n, v) in pairs {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn a_placeholder_becomes_its_value_only_for_the_hosts_its_secret_allows() {
        let policy = Policy {
            rules: vec![],
            secrets: vec![secret("k", &["api.example.com"], "sk-1")],
        };
        let mut to_allowed = headers(&[("authorization", "Bearer ${sandboxd.secrets.k}")]);
        let applied = policy
            .rewrite("API.example.com:443", 443, &mut to_allowed)
            .unwrap();
        assert_eq!(to_allowed["authorization"], "Bearer sk-1");
        assert_eq!(applied.secrets, vec!["k".to_string()]);
        let mut elsewhere = headers(&[("authorization", "Bearer ${e2b.secrets.k}")]);
        let applied = policy
            .rewrite("evil.example.net", 443, &mut elsewhere)
            .unwrap();
        assert_eq!(elsewhere["authorization"], "Bearer ${e2b.secrets.k}");
        assert_eq!(applied, Applied::default());
        assert!(policy.intercepts("api.example.com", 443));
        assert!(
            policy.intercepts("api.example.com", 8443),
            "a secret's hosts are for any port"
        );
        assert!(!policy.intercepts("evil.example.net", 443));
    }

    #[test]
    fn a_rule_sets_its_headers_with_any_secret_of_the_sandbox_and_wins_over_the_client() {
        let policy = Policy {
            rules: vec![
                rule(
                    "api.example.com",
                    &[("authorization", "Bearer ${e2b.secrets.k}")],
                ),
                rule("*.example.com", &[("x-wild", "short")]),
                rule("*.b.example.com", &[("x-wild", "long")]),
            ],
            // No hosts of its own: only the rule may send it.
            secrets: vec![secret("k", &[], "sk-2")],
        };
        let mut h = headers(&[("authorization", "Bearer guess"), ("x-other", "1")]);
        let applied = policy.rewrite("api.example.com", 443, &mut h).unwrap();
        assert_eq!(h["authorization"], "Bearer sk-2");
        assert_eq!(h["x-other"], "1");
        assert_eq!(applied.rule.as_deref(), Some("api.example.com"));
        assert_eq!(applied.secrets, vec!["k".to_string()]);
        // The longest wildcard wins; sets are not merged (no authorization here).
        let mut h = headers(&[]);
        policy.rewrite("a.b.example.com", 443, &mut h).unwrap();
        assert_eq!(h["x-wild"], "long");
        assert!(h.get("authorization").is_none());
        // The apex is not a subdomain.
        let mut h = headers(&[]);
        assert_eq!(
            policy.rewrite("example.com", 443, &mut h).unwrap(),
            Applied::default()
        );
        // The client's placeholder for a host the secret does not allow stays text.
        let mut h = headers(&[("x-leak", "${sandboxd.secrets.k}")]);
        policy.rewrite("other.net", 443, &mut h).unwrap();
        assert_eq!(h["x-leak"], "${sandboxd.secrets.k}");
    }

    #[test]
    fn a_value_that_would_split_a_header_refuses_the_request() {
        let policy = Policy {
            rules: vec![],
            secrets: vec![secret("k", &["a.com"], "x\r\nInjected: 1")],
        };
        let mut h = headers(&[("authorization", "${sandboxd.secrets.k}")]);
        let refused = policy.rewrite("a.com", 443, &mut h).unwrap_err();
        assert!(!refused.to_string().contains("Injected"), "{refused}");
    }

    #[test]
    fn a_rule_with_a_port_serves_that_port_only_and_wins_there() {
        let policy = Policy {
            rules: vec![
                rule("api.example.com", &[("x-set", "any")]),
                rule("api.example.com:8443", &[("x-set", "8443")]),
                rule("*.example.org:9000", &[("x-set", "wild")]),
                rule("10.0.0.7:8080", &[("x-set", "v4")]),
            ],
            secrets: vec![],
        };
        let set = |host: &str, port: u16| {
            let mut h = headers(&[]);
            let applied = policy.rewrite(host, port, &mut h).unwrap();
            (
                h.get("x-set").map(|v| v.to_str().unwrap().to_string()),
                applied.rule,
            )
        };
        assert_eq!(
            set("api.example.com", 443),
            (Some("any".into()), Some("api.example.com".into()))
        );
        assert_eq!(
            set("api.example.com", 8443),
            (Some("8443".into()), Some("api.example.com:8443".into()))
        );
        assert_eq!(set("a.example.org", 9000).0.as_deref(), Some("wild"));
        assert_eq!(
            set("a.example.org", 443),
            (None, None),
            "a port-bound rule is for its port only"
        );
        assert!(!policy.intercepts("a.example.org", 443));
        assert_eq!(set("10.0.0.7", 8080).0.as_deref(), Some("v4"));
        assert_eq!(set("10.0.0.7", 8081).0, None);
        assert_eq!(Policy::ports(&policy.rules), vec![8080, 8443, 9000]);
    }

    #[test]
    fn rule_hosts_parse_with_and_without_a_port_and_write_back_the_same() {
        for text in [
            "api.example.com",
            "api.example.com:8443",
            "*.example.org:9000",
            "10.0.0.7:81",
            "2001:db8::1",
            "10.0.0.7:65535",
        ] {
            assert_eq!(RuleHost::parse(text).unwrap().to_string(), text);
        }
        for bad in [
            "api.example.com:",
            "api.example.com:0",
            "api.example.com:65536",
            "a.com:x",
            "2001:db8::1:8080x",
            "[a.com]:80",
            "[2001:db8::1]:8080",
            "a.com:080",
            "https://a.com",
            "a.com:80/p",
        ] {
            assert!(RuleHost::parse(bad).is_err(), "{bad}");
        }
    }
}
