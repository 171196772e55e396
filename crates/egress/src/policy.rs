//! A sandbox's egress policy, and how it rewrites one request's headers.
//!
//! Contract ([`Policy::rewrite`], for a request to host `h`):
//! 1. **Rules.** The rule set for `h` is the one whose host is `h` exactly, else the one whose
//!    `*.` wildcard is the longest suffix of `h`, else one naming `h`'s address; sets are never
//!    merged. Its headers are set in order (a later one replaces an earlier one of the same name).
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

use http::header::{HeaderMap, HeaderName, HeaderValue};
use sandboxd_secrets::{replace_placeholders, HostPattern, SecretValue};

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
    /// Per host pattern, the headers its requests get, in order.
    pub rules: Vec<(HostPattern, Vec<HeaderRule>)>,
    pub secrets: Vec<SecretUse>,
}

/// What a rewrite applied, by name only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The host pattern of the rule set applied, if one was.
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
    // A Host header may carry a port; an IPv6 literal is in brackets.
    if let Some(v6) = host.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    host.rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
}

impl Policy {
    /// The rule set for `host` (see the module doc for the order).
    fn rule_for(&self, host: &str) -> Option<&(HostPattern, Vec<HeaderRule>)> {
        let exact = self
            .rules
            .iter()
            .find(|(p, _)| matches!(p, HostPattern::Name(_)) && p.allows(host));
        let wildcard = || {
            self.rules
                .iter()
                .filter(|(p, _)| matches!(p, HostPattern::Subdomains(_)) && p.allows(host))
                .max_by_key(|(p, _)| p.to_string().len())
        };
        let address = || {
            self.rules
                .iter()
                .find(|(p, _)| matches!(p, HostPattern::Address(_)) && p.allows(host))
        };
        exact.or_else(wildcard).or_else(address)
    }

    /// Whether requests to `host` are rewritten at all (so its TLS must be terminated).
    pub fn intercepts(&self, host: &str) -> bool {
        let host = host_of(host);
        self.rule_for(host).is_some()
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

    /// Rewrites `headers` of a request to `host` (a name or an address, with or without a port).
    pub fn rewrite(&self, host: &str, headers: &mut HeaderMap) -> Result<Applied, RewriteError> {
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
        if let Some((pattern, rules)) = self.rule_for(host) {
            applied.rule = Some(pattern.to_string());
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

    fn rule(host: &str, headers: &[(&str, &str)]) -> (HostPattern, Vec<HeaderRule>) {
        (
            HostPattern::parse(host).unwrap(),
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
            .rewrite("API.example.com:443", &mut to_allowed)
            .unwrap();
        assert_eq!(to_allowed["authorization"], "Bearer sk-1");
        assert_eq!(applied.secrets, vec!["k".to_string()]);
        let mut elsewhere = headers(&[("authorization", "Bearer ${e2b.secrets.k}")]);
        let applied = policy.rewrite("evil.example.net", &mut elsewhere).unwrap();
        assert_eq!(elsewhere["authorization"], "Bearer ${e2b.secrets.k}");
        assert_eq!(applied, Applied::default());
        assert!(policy.intercepts("api.example.com"));
        assert!(!policy.intercepts("evil.example.net"));
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
        let applied = policy.rewrite("api.example.com", &mut h).unwrap();
        assert_eq!(h["authorization"], "Bearer sk-2");
        assert_eq!(h["x-other"], "1");
        assert_eq!(applied.rule.as_deref(), Some("api.example.com"));
        assert_eq!(applied.secrets, vec!["k".to_string()]);
        // The longest wildcard wins; sets are not merged (no authorization here).
        let mut h = headers(&[]);
        policy.rewrite("a.b.example.com", &mut h).unwrap();
        assert_eq!(h["x-wild"], "long");
        assert!(h.get("authorization").is_none());
        // The apex is not a subdomain.
        let mut h = headers(&[]);
        assert_eq!(
            policy.rewrite("example.com", &mut h).unwrap(),
            Applied::default()
        );
        // The client's placeholder for a host the secret does not allow stays text.
        let mut h = headers(&[("x-leak", "${sandboxd.secrets.k}")]);
        policy.rewrite("other.net", &mut h).unwrap();
        assert_eq!(h["x-leak"], "${sandboxd.secrets.k}");
    }

    #[test]
    fn a_value_that_would_split_a_header_refuses_the_request() {
        let policy = Policy {
            rules: vec![],
            secrets: vec![secret("k", &["a.com"], "x\r\nInjected: 1")],
        };
        let mut h = headers(&[("authorization", "${sandboxd.secrets.k}")]);
        let refused = policy.rewrite("a.com", &mut h).unwrap_err();
        assert!(!refused.to_string().contains("Injected"), "{refused}");
    }
}
