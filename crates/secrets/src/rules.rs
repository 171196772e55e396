//! What a secret's name, value and hosts may be, and the placeholders that stand for a value.
//!
//! Contract:
//! - A name is 1–128 characters of `A–Z a–z 0–9 _ . -`, not starting with `.` or `-`, so it fits
//!   both vendors' placeholders and every surface's paths ([`check_name`]).
//! - A value is 1 to [`MAX_VALUE_CHARS`] characters.
//! - A host is a DNS name (`api.example.com`: labels of 1–63 letters, digits and inner `-`, 253
//!   characters at most), a wildcard of a name's subdomains (`*.example.com`, which does not cover
//!   `example.com` itself, and names two labels at least) or an IP address; nothing else: no
//!   scheme, port, path, brackets, spaces or final dot ([`HostPattern::parse`]). A request's host
//!   matches without regard to case or a final dot ([`HostPattern::allows`]).
//! - The placeholder of secret `n` is `${sandboxd.secrets.n}` ([`placeholder`]); `${e2b.secrets.n}`
//!   names it too ([`placeholders_in`]).

use std::net::IpAddr;

/// The longest value a secret may hold, characters.
pub const MAX_VALUE_CHARS: usize = 64 * 1024;
/// The most hosts one secret may name.
pub const MAX_HOSTS: usize = 64;
/// The longest name.
pub const MAX_NAME: usize = 128;

/// The prefixes a placeholder starts with: ours, then E2B's.
const PREFIXES: [&str; 2] = ["${sandboxd.secrets.", "${e2b.secrets."];

/// A name, value or host a secret cannot have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// secret name {0:?} is not usable: 1-128 characters of letters, digits, `_`, `.` and `-`, not starting with `.` or `-`
    #[error("secret name {0:?} is not usable: 1-128 characters of letters, digits, `_`, `.` and `-`, not starting with `.` or `-`")]
    Name(String),
    /// a secret's value must be 1 to 65536 characters
    #[error("a secret's value must be 1 to {MAX_VALUE_CHARS} characters")]
    Value,
    /// host {0:?} is not a host name, a `*.` wildcard of one, or an IP address (no scheme, port or path)
    #[error("host {0:?} is not a host name, a `*.` wildcard of one, or an IP address (no scheme, port or path)")]
    Host(String),
    /// rule host {0:?} is not a host name, a `*.` wildcard of one, or an IP address, with an optional `:port` (no scheme or path; 253 characters at most)
    #[error("rule host {0:?} is not a host name, a `*.` wildcard of one, or an IP address, with an optional `:port` (no scheme or path; 253 characters at most)")]
    RuleHost(String),
    /// a secret may name at most 64 hosts
    #[error("a secret may name at most {MAX_HOSTS} hosts")]
    TooManyHosts,
}

/// Checks a secret's name.
pub fn check_name(name: &str) -> Result<(), RuleError> {
    let ok = (1..=MAX_NAME).contains(&name.len())
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(RuleError::Name(name.to_string()))
    }
}

/// Checks a secret's value's size.
pub fn check_value(value: &str) -> Result<(), RuleError> {
    if !value.is_empty() && value.chars().nth(MAX_VALUE_CHARS).is_none() {
        Ok(())
    } else {
        Err(RuleError::Value)
    }
}

/// A host a secret's value may be sent to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// This name only (lowercase, no final dot).
    Name(String),
    /// Every name under this one (lowercase, no final dot), not the name itself.
    Subdomains(String),
    /// This address.
    Address(IpAddr),
}

impl HostPattern {
    /// Parses a host as a client writes it.
    pub fn parse(host: &str) -> Result<Self, RuleError> {
        let bad = || RuleError::Host(host.to_string());
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(Self::Address(ip));
        }
        let (wild, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        if name.ends_with('.') {
            return Err(bad());
        }
        let name = normal(name).ok_or_else(bad)?;
        // A wildcard over a top-level name alone (`*.com`) would send the value almost anywhere.
        if wild && !name.contains('.') {
            return Err(bad());
        }
        Ok(if wild {
            Self::Subdomains(name)
        } else {
            Self::Name(name)
        })
    }

    /// Whether a request to `host` (a name or an address, as the request names it) may carry the value.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim();
        match self {
            Self::Address(ip) => {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                host.parse::<IpAddr>().is_ok_and(|h| h == *ip)
            }
            Self::Name(name) => normal(host).is_some_and(|h| h == *name),
            Self::Subdomains(name) => normal(host).is_some_and(|h| {
                h.len() > name.len() + 1
                    && h.ends_with(name.as_str())
                    && h.as_bytes()[h.len() - name.len() - 1] == b'.'
            }),
        }
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::Subdomains(name) => write!(f, "*.{name}"),
            Self::Address(ip) => write!(f, "{ip}"),
        }
    }
}

/// A DNS name lowercased without its final dot, if it is one: labels of 1–63 letters, digits and
/// `-` (not at either end), 253 characters at most.
fn normal(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let ok = (1..=253).contains(&name.len())
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    ok.then_some(name)
}

/// Checks a secret's hosts, giving them in their normal form, each once, in the order given.
pub fn check_hosts<S: AsRef<str>>(hosts: &[S]) -> Result<Vec<HostPattern>, RuleError> {
    if hosts.len() > MAX_HOSTS {
        return Err(RuleError::TooManyHosts);
    }
    let mut out: Vec<HostPattern> = Vec::with_capacity(hosts.len());
    for host in hosts {
        let pattern = HostPattern::parse(host.as_ref())?;
        if !out.contains(&pattern) {
            out.push(pattern);
        }
    }
    Ok(out)
}

/// The placeholder that stands for secret `name`'s value.
pub fn placeholder(name: &str) -> String {
    format!("{}{name}}}", PREFIXES[0])
}

/// Each placeholder in `text`: its byte range and the name it stands for, in order.
fn spans(text: &str) -> Vec<(std::ops::Range<usize>, &str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some((at, prefix)) = PREFIXES
        .iter()
        .filter_map(|p| text[from..].find(p).map(|at| (from + at, *p)))
        .min_by_key(|(at, _)| *at)
    {
        let name_at = at + prefix.len();
        match text[name_at..].find('}') {
            Some(len) => {
                out.push((at..name_at + len + 1, &text[name_at..name_at + len]));
                from = name_at + len + 1;
            }
            None => break,
        }
    }
    out
}

/// The names of the secrets `text`'s placeholders stand for, each once, in order of appearance
/// (whether or not they are usable names: the caller says which it knows).
pub fn placeholders_in(text: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (_, name) in spans(text) {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    names
}

/// `text` with each placeholder whose secret `value_of` gives a value replaced by that value, and
/// the names replaced (each once); placeholders it gives none for stay as they are.
pub fn replace_placeholders<'v>(
    text: &str,
    mut value_of: impl FnMut(&str) -> Option<&'v str>,
) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut used: Vec<String> = Vec::new();
    let mut last = 0;
    for (range, name) in spans(text) {
        if let Some(value) = value_of(name) {
            out.push_str(&text[last..range.start]);
            out.push_str(value);
            last = range.end;
            if !used.iter().any(|n| n == name) {
                used.push(name.to_string());
            }
        }
    }
    out.push_str(&text[last..]);
    (out, used)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_both_vendors_placeholders() {
        for ok in [
            "openai-api-key",
            "OPENAI_KEY",
            "a",
            "db.password",
            "_x",
            "9lives",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        let long = "a".repeat(MAX_NAME + 1);
        for bad in [
            "",
            "-x",
            ".x",
            "a b",
            "a{b",
            "a}b",
            "a/b",
            "ключ",
            long.as_str(),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn values_are_bounded() {
        assert!(check_value("").is_err());
        assert!(check_value(&"x".repeat(MAX_VALUE_CHARS + 1)).is_err());
        assert!(check_value(&"é".repeat(MAX_VALUE_CHARS)).is_ok());
    }

    #[test]
    fn host_patterns_allow_what_they_name_and_nothing_else() {
        let name = HostPattern::parse("API.Example.com").unwrap();
        assert_eq!(name, HostPattern::Name("api.example.com".into()));
        assert!(name.allows("api.example.com"));
        assert!(name.allows("API.EXAMPLE.COM."));
        assert!(!name.allows("evil-api.example.com"));
        assert!(!name.allows("api.example.com.evil.net"));

        let wild = HostPattern::parse("*.example.com").unwrap();
        assert!(wild.allows("a.example.com"));
        assert!(wild.allows("a.b.example.com"));
        assert!(!wild.allows("example.com"));
        assert!(!wild.allows("badexample.com"));
        assert_eq!(wild.to_string(), "*.example.com");

        let ip = HostPattern::parse("10.0.0.7").unwrap();
        assert!(ip.allows("10.0.0.7"));
        assert!(!ip.allows("10.0.0.70"));
        let v6 = HostPattern::parse("::1").unwrap();
        assert!(v6.allows("[::1]"));
        assert!(v6.allows("::1"));
    }

    #[test]
    fn hosts_with_schemes_ports_paths_or_bare_wildcards_are_refused() {
        for bad in [
            "",
            "https://a.com",
            "a.com:443",
            "a.com/x",
            "*.com",
            "*",
            "a..com",
            "-a.com",
            "a_b.com",
            "[::1]",
            " a.com",
            "a.com.",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?}");
        }
        let many: Vec<String> = (0..=MAX_HOSTS).map(|i| format!("h{i}.com")).collect();
        assert_eq!(check_hosts(&many), Err(RuleError::TooManyHosts));
        let twice = check_hosts(&["a.com", "A.com", "b.com"]).unwrap();
        assert_eq!(twice.len(), 2);
    }

    #[test]
    fn placeholders_of_both_forms_are_found_once_each() {
        assert_eq!(placeholder("k"), "${sandboxd.secrets.k}");
        let text = "Bearer ${e2b.secrets.k} and ${sandboxd.secrets.db} ${e2b.secrets.k} ${e2b.secrets.open";
        assert_eq!(placeholders_in(text), vec!["k".to_string(), "db".into()]);
        assert!(placeholders_in("${HOME} $e2b.secrets.x").is_empty());
    }

    #[test]
    fn only_placeholders_with_a_value_are_replaced() {
        let text = "a ${e2b.secrets.k} b ${sandboxd.secrets.other} ${sandboxd.secrets.k}";
        let (out, used) = replace_placeholders(text, |n| (n == "k").then_some("V"));
        assert_eq!(out, "a V b ${sandboxd.secrets.other} V");
        assert_eq!(used, vec!["k".to_string()]);
        assert_eq!(replace_placeholders("plain", |_| Some("x")).0, "plain");
    }
}
