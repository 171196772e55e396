//! A sandbox's network posture (`network` of `POST /v1/sandboxes`): the egress default, its
//! exceptions, whether its ports are public, and the egress gateway's per-host rules.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// Network posture of a sandbox: `egress` is the default for every destination, `allowOut` and
/// `denyOut` are the exceptions. A destination in `allowOut` is reachable even when it is also in
/// `denyOut` or `egress` is false; one in `denyOut` only is unreachable. The host's own addresses
/// are unreachable unless they are in `allowOut`. A domain name's destinations are the IPv4
/// addresses the sandbox's own resolver (the daemon's DNS forwarder, its only nameserver when a list
/// names domains) answered for it, from that answer on and for its TTL (at least 30 s); a sandbox's
/// network comes back with blocks canonical and names lowercased, sorted and deduplicated, after the
/// blocks.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkPolicy {
    /// Whether the sandbox may reach the outside world (default false); never the host itself.
    #[serde(default)]
    pub egress: bool,
    /// Destinations the sandbox may reach whatever `egress` says: IPv4 addresses (`"1.1.1.1"`),
    /// CIDR blocks (`"8.8.8.0/24"`), domain names (`"api.openai.com"`) or every name below one
    /// (`"*.example.com"`, not `example.com` itself), at most 256 in all. IPv6 is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_out: Vec<String>,
    /// Destinations the sandbox may not reach unless they are in `allowOut`: IPv4 addresses, CIDR
    /// blocks, domain names or `*.` patterns, at most 256 in all (`"0.0.0.0/0"` denies everything
    /// not allowed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_out: Vec<String>,
    /// Whether anyone may reach the sandbox's ports through the proxy (absent: yes). When `false`,
    /// a request needs the sandbox's traffic token (header `X-Daytona-Preview-Token` or
    /// `e2b-traffic-access-token`), an API key (`Authorization: Bearer`), or a signed preview link;
    /// the agent's own port is opened by its own token either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_public_traffic: Option<bool>,
    /// Per-host rules of the egress gateway (E2B's `network.rules`): for a host (`api.example.com`,
    /// `*.example.com` for its subdomains, or an IP address), the headers its HTTP and HTTPS
    /// requests get; a value may hold secrets' placeholders, which the gateway replaces with their
    /// values. The exact host wins over the longest wildcard; sets are not merged. A host may name
    /// a port (`api.example.com:8443`, not on an IPv6 address): its rules then apply on that port
    /// only (and win there over the host's rules without one), and the sandbox's connections to
    /// that port go through the gateway as those to 80 and 443 do. A rule grants no egress: its
    /// host must be reachable (`egress`, or in `allowOut`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rules: BTreeMap<String, Vec<NetworkRule>>,
}

/// One rule of `network.rules`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkRule {
    /// What the rule does to a matching request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transform: Option<NetworkTransform>,
}

/// What a rule does to a matching request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkTransform {
    /// Headers set on the request (replacing the client's); values may hold placeholders.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}
