//! The shapes of what the daemon's validators accept, as ECMA-262 regular expressions for the
//! document (no look-around, so clients and schemathesis can generate from them): each one describes
//! what its validator takes, or a part of it where the whole cannot be a regular expression (a
//! reference's registry must also be one a URL can name). The tests hold each to its validator.

/// An IPv4 address's octet, 0–255 without leading zeros.
const OCTET: &str = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
/// A TCP port, 1–65535.
const PORT: &str =
    "([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])";
/// A hostname of either case whose last label starts with a letter (so no URL takes it for an
/// IPv4 address).
const HOST: &str =
    "([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\\.)*[A-Za-z]([A-Za-z0-9-]*[A-Za-z0-9])?";

/// A sandbox name (the service's `validate::name`), or "" for none.
pub(super) const SANDBOX_NAME: &str = "^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)?$";
/// A template name ([`sandboxd_service::templates::validate_name`]).
pub(super) const TEMPLATE_NAME: &str = "^[a-z0-9][a-z0-9._/-]{0,127}(:[a-z0-9._-]+)?$";
/// An image reference, the part of Docker's grammar ([`sandboxd_images::ImageRef`]) written with
/// lowercase names, sha256 digests and a registry that is an IPv4 address or a hostname whose last
/// label starts with a letter, with a port of 1–65535 (one a URL can name). Without a registry, the
/// first of several path components has no `.` (Docker would take it for a registry).
pub(super) fn reference() -> String {
    let host = "([a-z0-9]([a-z0-9-]*[a-z0-9])?\\.)*[a-z]([a-z0-9-]*[a-z0-9])?";
    let registry = format!("({OCTET}(\\.{OCTET}){{3}}|{host})(:{PORT})?");
    let component = "[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*";
    let undotted = "[a-z0-9]+((_|__|-+)[a-z0-9]+)*";
    let name =
        format!("({registry}/{component}(/{component})*|{component}|{undotted}(/{component})+)");
    format!("^{name}(:[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(@sha256:[0-9a-f]{{64}})?$")
}
/// A webhook's URL (the service's webhook validation): `http` or `https`, a host that is an IPv4
/// address or a hostname whose last label starts with a letter, a port of 1–65535, and anything
/// printable after.
pub(super) fn webhook_url() -> String {
    format!("^https?://({OCTET}(\\.{OCTET}){{3}}|{HOST})(:{PORT})?([/?#][!-~]*)?$")
}

/// Longest reference documented (the grammar's repository limit, with room for `library/`).
pub(super) const REFERENCE_MAX: u64 = 240;
/// A path component other than `..`.
const SEGMENT: &str =
    "(\\.|[^/.\\u0000][^/\\u0000]*|\\.[^/.\\u0000][^/\\u0000]*|\\.\\.[^/\\u0000]+)";

/// A path inside a sandbox (the service's `validate::sandbox_path`): absolute, no `..` component, no
/// NUL; a file's path does not end with `/`.
pub(super) fn sandbox_path(file: bool) -> String {
    if file {
        format!("^(/{SEGMENT}?)*/{SEGMENT}$")
    } else {
        format!("^(/{SEGMENT}?)+$")
    }
}

/// A hostname a sandbox can be bound to (the service's `domains::validate_hostname`): at least two
/// RFC 1123 labels, the last starting with a letter (never an IP address), a `*.` only where the
/// daemon allows wildcards; and, in [`document`], none under the daemon's own domain.
pub(super) fn hostname(allow_wildcard: bool) -> String {
    let label = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    let last = "[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    let wildcard = if allow_wildcard { "(\\*\\.)?" } else { "" };
    format!("^{wildcard}({label}\\.)+{last}\\.?$")
}

/// A domain name in an egress list ([`sandboxd_service::network`]): labels of letters, digits and
/// `-` (1–63, no `-` at either end), the last starting with a letter; at least two labels, or `*.`
/// and at least one; a trailing dot. The whole is at most 253 characters (`maxLength` beside it).
pub(super) fn egress_name() -> String {
    let label = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    let last = "[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    format!("^(\\*\\.({label}\\.)*{last}|({label}\\.)+{last})\\.?$")
}

/// Matches a name equal to or under `domain`, in any case.
pub(super) fn under(domain: &str) -> String {
    let any_case: String = domain
        .trim_matches('.')
        .chars()
        .map(|c| match c {
            c if c.is_ascii_alphabetic() => {
                format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
            }
            '.' => "\\.".to_string(),
            c => c.to_string(),
        })
        .collect();
    format!("(^|\\.){any_case}\\.?$")
}

/// An environment variable name (the service's `validate::env`).
pub(super) const ENV_NAME: &str = "^[A-Za-z_][A-Za-z0-9_]*$";
/// Text without NUL.
pub(super) const NO_NUL: &str = "^[^\\u0000]*$";
/// An IPv4 address or CIDR block ([`sandboxd_service::network`]).
pub(super) const IPV4_NET: &str = "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(/(3[0-2]|[12][0-9]|[0-9]))?$";
/// A base64 text (standard alphabet, padded, canonical: the bits padding drops are zero).
pub(super) const BASE64: &str =
    "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$";

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, text: &str) -> bool {
        regex::Regex::new(pattern).unwrap().is_match(text)
    }

    /// Every reference the documented pattern allows is one the daemon parses; a few it refuses are
    /// refused by the pattern too.
    #[test]
    fn documented_references_parse() {
        let good = [
            "python:3.12-slim",
            "alpine",
            "team/app__x.y-z:v1.0_rc",
            "127.0.0.1:5000/team/app",
            "localhost:5000/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "ghcr.io/a/b/c:latest",
            "a-b.example.com:65535/x",
            "python.x",
            "ghcr.io/a.b/c",
        ];
        for r in good {
            assert!(matches(&reference(), r), "{r}");
            assert!(r.parse::<sandboxd_images::ImageRef>().is_ok(), "{r}");
        }
        for bad in [
            "",
            "Upper",
            ":tag",
            "a b",
            "x:99999/y",
            "-a",
            "a/",
            "h.08/x",
            "a.b_c/x",
            "x@sha256:00",
        ] {
            assert!(!matches(&reference(), bad), "{bad}");
        }
    }

    /// Webhook URLs the pattern allows are absolute http(s) URLs with a host, as the service asks.
    #[test]
    fn documented_webhook_urls_parse() {
        for ok in [
            "http://127.0.0.1:8080/hook?token=a%20b",
            "https://Hooks.Example.com",
            "http://x.io#f",
        ] {
            assert!(matches(&webhook_url(), ok), "{ok}");
            let url = url::Url::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert!(matches!(url.scheme(), "http" | "https") && url.host_str().is_some());
        }
        for bad in [
            "",
            "ftp://a.com",
            "http://",
            "http://a.1",
            "http://a.com:0",
            "http://a .com",
            "//a.com",
        ] {
            assert!(!matches(&webhook_url(), bad), "{bad}");
        }
    }

    /// The path patterns are the service's rule: absolute, no `..` component, no NUL; a file's path
    /// does not end with `/`.
    #[test]
    fn documented_paths_are_the_services() {
        let dir = sandbox_path(false);
        let file = sandbox_path(true);
        for ok in ["/", "/home/user", "/a/.b/..c/c../.", "//x", "/a/b/"] {
            assert!(matches(&dir, ok), "{ok}");
        }
        for ok in ["/a", "/home/user/x.txt", "/a//b", "/.x"] {
            assert!(matches(&file, ok), "{ok}");
        }
        for bad in ["", "a", "../x", "/a/..", "/../b", "/a/../b", "/a\u{0}b"] {
            assert!(!matches(&dir, bad) && !matches(&file, bad), "{bad:?}");
        }
        for dir_only in ["/", "/a/"] {
            assert!(!matches(&file, dir_only), "{dir_only}");
        }
    }

    /// A hostname the pattern allows (and that is not under the daemon's domain) is one the service
    /// binds; the service's refusals are refused by the pattern.
    #[test]
    fn documented_hostnames_are_the_services() {
        use sandboxd_service::domains::validate_hostname;
        let pattern = hostname(false);
        let reserved = under("localhost");
        for ok in ["app.example.com", "A-1.b2.Co.", "x.y"] {
            assert!(matches(&pattern, ok) && !matches(&reserved, ok), "{ok}");
            assert!(validate_hostname(ok, "localhost", false).is_ok(), "{ok}");
        }
        for bad in [
            "", "example", "1.2.3.4", "a.1", "-a.com", "a-.com", "*.a.com", "a_b.com",
        ] {
            assert!(!matches(&pattern, bad), "{bad}");
            assert!(validate_hostname(bad, "localhost", false).is_err(), "{bad}");
        }
        for under_ours in ["x.localhost", "a.b.LocalHost."] {
            assert!(matches(&reserved, under_ours), "{under_ours}");
            assert!(
                validate_hostname(under_ours, "localhost", false).is_err(),
                "{under_ours}"
            );
        }
        assert!(matches(&hostname(true), "*.a.com"));
    }

    /// An egress list entry either pattern allows is one the service takes, and the service's
    /// refusals are refused by both.
    #[test]
    fn documented_egress_entries_are_the_services() {
        use sandboxd_api_types::NetworkPolicy;
        let accepted = |entry: &str| {
            sandboxd_service::network::policy(Some(&NetworkPolicy {
                egress: false,
                allow_out: vec![entry.to_string()],
                ..Default::default()
            }))
            .is_ok()
        };
        let name = egress_name();
        let documented = |entry: &str| matches(IPV4_NET, entry) || matches(&name, entry);
        let longest = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "a".repeat(61));
        for ok in [
            "1.1.1.1",
            "8.8.8.0/24",
            "api.openai.com",
            "API.Example.Com.",
            "*.example.com",
            "*.internal",
            "1.2.3.example",
            "xn--bcher-kva.example",
            longest.as_str(),
        ] {
            assert!(documented(ok) && accepted(ok), "{ok}");
        }
        for bad in [
            "",
            "localhost",
            "1.2.3",
            "a.1",
            "*.10",
            "example.1com",
            "a..com",
            "-a.com",
            "a-.com",
            "a_b.com",
            "*",
            "*.*.a.com",
            "a.*.com",
            "::1",
            "1.2.3.4/33",
            "b\u{fc}cher.de",
        ] {
            assert!(!documented(bad) && !accepted(bad), "{bad}");
        }
        let label_too_long = format!("{}.com", "a".repeat(64));
        assert!(!documented(&label_too_long) && !accepted(&label_too_long));
    }
}
