//! Which requests are proxy requests, and for which sandbox port.
//!
//! A request is a proxy request when either
//! 1. its host (the `Host` header, else the URI authority as HTTP/2 sends it) is `{port}-{sandboxId}.{domain}`,
//!    optionally followed by `:{listenport}` and/or a trailing dot, the domain compared case-insensitively; or
//! 2. it carries both `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers (header names are case-insensitive),
//!    which is how the E2B SDK addresses sandboxes when `E2B_SANDBOX_URL` is set.
//!
//! Failing both, an envd call ([`is_envd_call`]: `/files`, `/process.Process/…`,
//! `/filesystem.Filesystem/…`) that carries an `X-Access-Token` is the proxy's when the resolver knows
//! the token ([`envd_access_token`]) — older E2B SDKs address a sandbox they `connect`ed to this way.
//!
//! The host pattern wins over the headers. Sandbox ids are `[a-z0-9-]{1,63}` (uppercase is rejected, not
//! folded); ports are decimal `1..=65535` without sign or leading zero. Anything else is "not a proxy
//! request" (`None`), never an error or a panic, so the daemon's API router sees it.

use http::header::HOST;
use http::{HeaderMap, Uri};

/// A sandbox port a request is addressed to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub sandbox_id: String,
    pub port: u16,
}

/// `E2b-Sandbox-Id` (matched case-insensitively, as all header names).
pub const SANDBOX_ID_HEADER: &str = "e2b-sandbox-id";
/// `E2b-Sandbox-Port` (matched case-insensitively, as all header names).
pub const SANDBOX_PORT_HEADER: &str = "e2b-sandbox-port";

/// `X-Access-Token` (matched case-insensitively, as all header names).
pub const ACCESS_TOKEN_HEADER: &str = "x-access-token";

/// Whether `uri` is a call of the envd protocol (the agent's own surface, never the daemon's API).
pub(crate) fn is_envd_call(uri: &Uri) -> bool {
    let path = uri.path();
    path == "/files"
        || path.starts_with("/process.Process/")
        || path.starts_with("/filesystem.Filesystem/")
}

/// The access token of an envd call that carries one (non-empty, visible ASCII); `None` otherwise.
pub fn envd_access_token<'a>(headers: &'a HeaderMap, uri: &Uri) -> Option<&'a str> {
    if !is_envd_call(uri) {
        return None;
    }
    let token = headers.get(ACCESS_TOKEN_HEADER)?.to_str().ok()?;
    (!token.is_empty() && token.len() <= 256).then_some(token)
}

/// The target of a request given its headers and URI (host pattern first, then the E2B headers).
pub(crate) fn target_of(domain: &str, headers: &HeaderMap, uri: &Uri) -> Option<Target> {
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()));
    host.and_then(|h| target_of_host(domain, h))
        .or_else(|| target_of_headers(headers))
}

/// The host of a request (the `Host` header, else the URI authority), lowercase, without `:port` and
/// trailing dot; `None` when there is none or it is a bracketed IPv6 literal.
pub fn host_of(headers: &HeaderMap, uri: &Uri) -> Option<String> {
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))?;
    let host = strip_listen_port(host.trim())?;
    let host = host.strip_suffix('.').unwrap_or(host);
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// `{port}-{id}.{domain}[.][:listenport]` → target. `domain` must be lowercase without surrounding dots.
pub(crate) fn target_of_host(domain: &str, host: &str) -> Option<Target> {
    let host = strip_listen_port(host)?;
    let host = host.strip_suffix('.').unwrap_or(host);
    let split = host.len().checked_sub(domain.len() + 1)?;
    if !host.is_char_boundary(split) {
        return None;
    }
    let (label, suffix) = host.split_at(split);
    let suffix = suffix.strip_prefix('.')?;
    if !suffix.eq_ignore_ascii_case(domain) {
        return None;
    }
    let (port, sandbox_id) = label.split_once('-')?;
    Some(Target {
        port: parse_port(port)?,
        sandbox_id: valid_sandbox_id(sandbox_id)?.to_owned(),
    })
}

fn target_of_headers(headers: &HeaderMap) -> Option<Target> {
    let id = headers.get(SANDBOX_ID_HEADER)?.to_str().ok()?.trim();
    let port = headers.get(SANDBOX_PORT_HEADER)?.to_str().ok()?.trim();
    Some(Target {
        port: parse_port(port)?,
        sandbox_id: valid_sandbox_id(id)?.to_owned(),
    })
}

/// `host[:digits]` → `host`; `None` for bracketed IPv6 literals, which are never proxy hosts.
fn strip_listen_port(host: &str) -> Option<&str> {
    if host.starts_with('[') {
        return None;
    }
    match host.rsplit_once(':') {
        None => Some(host),
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            Some(name)
        }
        Some(_) => None,
    }
}

fn parse_port(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || s.starts_with('0') || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `[a-z0-9-]{1,63}`.
pub(crate) fn valid_sandbox_id(id: &str) -> Option<&str> {
    let ok = (1..=63).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    ok.then_some(id)
}

#[cfg(test)]
mod tests {

    #[test]
    fn envd_calls_are_routed_by_their_access_token_only() {
        let mut headers = HeaderMap::new();
        headers.insert("X-Access-Token", "tok".parse().unwrap());
        for path in [
            "/files?path=/x",
            "/process.Process/Start",
            "/filesystem.Filesystem/Stat",
        ] {
            let uri: Uri = path.parse().unwrap();
            assert_eq!(envd_access_token(&headers, &uri), Some("tok"), "{path}");
        }
        for path in ["/v1/sandboxes", "/sandboxes", "/health", "/filesx", "/"] {
            let uri: Uri = path.parse().unwrap();
            assert_eq!(envd_access_token(&headers, &uri), None, "{path}");
        }
        let uri: Uri = "/files".parse().unwrap();
        assert_eq!(envd_access_token(&HeaderMap::new(), &uri), None);
        headers.insert("X-Access-Token", "".parse().unwrap());
        assert_eq!(envd_access_token(&headers, &uri), None);
    }
    use super::*;
    use http::HeaderValue;

    fn host(h: &str) -> Option<Target> {
        host_in("localhost", h)
    }

    fn host_in(domain: &str, h: &str) -> Option<Target> {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_str(h).unwrap());
        target_of(domain, &headers, &Uri::from_static("/"))
    }

    fn t(id: &str, port: u16) -> Option<Target> {
        Some(Target {
            sandbox_id: id.into(),
            port,
        })
    }

    #[test]
    fn host_pattern_with_default_domain() {
        assert_eq!(host("8000-abc.localhost"), t("abc", 8000));
        assert_eq!(host("8000-abc.localhost:21212"), t("abc", 8000));
        assert_eq!(host("49983-i4f2-x9.LOCALHOST."), t("i4f2-x9", 49983));
        assert_eq!(host("1-a.localhost"), t("a", 1));
        assert_eq!(host("65535-a.localhost"), t("a", 65535));
    }

    #[test]
    fn host_pattern_with_custom_domain() {
        assert_eq!(
            host_in("sb.example.com", "8000-abc.sb.example.com"),
            t("abc", 8000)
        );
        assert_eq!(
            host_in("sb.example.com", "8000-abc.sb.example.com:443"),
            t("abc", 8000)
        );
        assert_eq!(host_in("sb.example.com", "8000-abc.localhost"), None);
        assert_eq!(host_in("sb.example.com", "8000-abc.xsb.example.com"), None);
        assert_eq!(host_in("sb.example.com", "8000-abc.example.com"), None);
    }

    #[test]
    fn wrong_domain_or_shape_is_not_a_proxy_request() {
        assert_eq!(host("8000-abc.example.com"), None);
        assert_eq!(host("8000-abc.notlocalhost"), None);
        assert_eq!(host("8000-abc.localhost.evil.com"), None);
        assert_eq!(host("localhost"), None);
        assert_eq!(host("localhost:21212"), None);
        assert_eq!(host("127.0.0.1:21212"), None);
        assert_eq!(host(".localhost"), None);
        assert_eq!(host("8000.localhost"), None);
        assert_eq!(host("a.8000-abc.localhost"), None);
        assert_eq!(host("8000-abc.localhost:"), None);
        assert_eq!(host("8000-abc.localhost:x"), None);
        assert_eq!(host("[::1]:21212"), None);
    }

    #[test]
    fn bad_ports_are_rejected() {
        assert_eq!(host("0-abc.localhost"), None);
        assert_eq!(host("70000-abc.localhost"), None);
        assert_eq!(host("65536-abc.localhost"), None);
        assert_eq!(host("08000-abc.localhost"), None);
        assert_eq!(host("-abc.localhost"), None);
        assert_eq!(host("+80-abc.localhost"), None);
        assert_eq!(host("99999999999999999999-abc.localhost"), None);
    }

    #[test]
    fn uppercase_or_invalid_ids_are_rejected() {
        assert_eq!(host("8000-ABC.localhost"), None);
        assert_eq!(host("8000-aBc.localhost"), None);
        assert_eq!(host("8000-.localhost"), None);
        assert_eq!(host("8000-a_b.localhost"), None);
        assert_eq!(host(&format!("8000-{}.localhost", "a".repeat(64))), None);
        assert_eq!(
            host(&format!("8000-{}.localhost", "a".repeat(63))),
            t(&"a".repeat(63), 8000)
        );
    }

    #[test]
    fn e2b_headers_route_case_insensitively() {
        // HeaderName parsing lowercases, so any spelling the SDK sends lands on the same key.
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("127.0.0.1:21212"));
        headers.insert(
            http::HeaderName::from_bytes(b"e2b-sandbox-id").unwrap(),
            HeaderValue::from_static("abc"),
        );
        headers.insert(
            http::HeaderName::from_bytes(b"E2B-Sandbox-Port").unwrap(),
            HeaderValue::from_static("49983"),
        );
        let uri = Uri::from_static("/health");
        assert_eq!(target_of("localhost", &headers, &uri), t("abc", 49983));

        headers.insert(SANDBOX_PORT_HEADER, HeaderValue::from_static("0"));
        assert_eq!(target_of("localhost", &headers, &uri), None);
        headers.insert(SANDBOX_PORT_HEADER, HeaderValue::from_static("49983"));
        headers.insert(SANDBOX_ID_HEADER, HeaderValue::from_static("ABC"));
        assert_eq!(target_of("localhost", &headers, &uri), None);
        headers.remove(SANDBOX_ID_HEADER);
        assert_eq!(target_of("localhost", &headers, &uri), None);
    }

    #[test]
    fn host_pattern_wins_over_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("8000-abc.localhost"));
        headers.insert(SANDBOX_ID_HEADER, HeaderValue::from_static("other"));
        headers.insert(SANDBOX_PORT_HEADER, HeaderValue::from_static("1"));
        assert_eq!(
            target_of("localhost", &headers, &Uri::from_static("/")),
            t("abc", 8000)
        );
    }

    #[test]
    fn http2_authority_is_used_without_host_header() {
        let uri = Uri::from_static("http://3000-abc.localhost:21212/x");
        assert_eq!(
            target_of("localhost", &HeaderMap::new(), &uri),
            t("abc", 3000)
        );
    }

    #[test]
    fn host_of_strips_port_and_dot_and_lowercases() {
        let of = |h: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(HOST, HeaderValue::from_str(h).unwrap());
            host_of(&headers, &Uri::from_static("/"))
        };
        assert_eq!(
            of("App.Example.TEST:8080").as_deref(),
            Some("app.example.test")
        );
        assert_eq!(of("app.example.test.").as_deref(), Some("app.example.test"));
        assert_eq!(of("[::1]:80"), None);
        assert_eq!(of("x:y"), None);
        let uri = Uri::from_static("http://Secure.Example.test:443/x");
        assert_eq!(
            host_of(&HeaderMap::new(), &uri).as_deref(),
            Some("secure.example.test")
        );
    }

    #[test]
    fn no_host_and_no_headers_is_none() {
        assert_eq!(
            target_of("localhost", &HeaderMap::new(), &Uri::from_static("/")),
            None
        );
    }
}
