//! The limits of the secret operations, written into the document like [`super::volumes`]'s: a
//! secret's name, value, description, labels and hosts (`sandboxd_secrets::rules`); and of a
//! create's `network.rules` (`sandboxd_service::egress::rules`): hosts as a secret's, with an
//! optional `:port` on a name or an IPv4 address (`sandboxd_egress::RuleHost`), header names
//! HTTP tokens other than the framing ones, values without control characters but tab. Reaching a
//! rule's host is written as: no rules unless `egress` is on (the daemon also takes rules for
//! hosts `allowOut` covers, which no schema can say).

use serde_json::{json, Value};

/// A secret's name (`sandboxd_secrets::check_name`).
const SECRET_NAME: &str = "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$";

/// A host a secret may be sent to (`sandboxd_secrets::HostPattern::parse`): an IP address, a DNS
/// name, or `*.` and a name of two labels at least.
fn host() -> Value {
    let label = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    json!({"type": "string", "anyOf": [
        {"format": "ipv4"},
        {"format": "ipv6"},
        {"pattern": format!("^({label}\\.)*{label}$"), "maxLength": 253},
        {"pattern": format!("^\\*\\.({label}\\.)+{label}$"), "maxLength": 255},
    ]})
}

/// A rule's host (`sandboxd_egress::RuleHost::parse`): a secret's host, or a name, a wildcard or
/// an IPv4 address with `:port`, 1–65535 without a leading zero, 253 characters at most in all.
fn rule_host() -> Value {
    let label = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    let octet = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
    let port =
        "([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])";
    let mut any = host()["anyOf"].clone();
    if let Some(list) = any.as_array_mut() {
        list.extend([
            json!({"pattern": format!("^({octet}\\.){{3}}{octet}:{port}$")}),
            json!({"pattern": format!("^({label}\\.)*{label}:{port}$"), "maxLength": 253}),
            json!({"pattern": format!("^\\*\\.({label}\\.)+{label}:{port}$"), "maxLength": 253}),
        ]);
    }
    json!({"type": "string", "anyOf": any})
}

/// Writes `network.rules`' limits into `doc`.
fn constrain_rules(doc: &mut Value) {
    use sandboxd_service::egress::rules::{MAX_HEADERS, MAX_HOSTS, MAX_RULES};
    let schemas = &mut doc["components"]["schemas"];
    let framing = "^([Hh][Oo][Ss][Tt]|[Cc][Oo][Nn][Tt][Ee][Nn][Tt]-[Ll][Ee][Nn][Gg][Tt][Hh]|\
        [Tt][Rr][Aa][Nn][Ss][Ff][Ee][Rr]-[Ee][Nn][Cc][Oo][Dd][Ii][Nn][Gg]|\
        [Cc][Oo][Nn][Nn][Ee][Cc][Tt][Ii][Oo][Nn])$";
    schemas["NetworkTransform"]["properties"]["headers"] = json!({"type": "object",
        "maxProperties": MAX_HEADERS,
        "propertyNames": {"pattern": "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", "not": {"pattern": framing}},
        "additionalProperties": {"type": "string", "pattern": "^[^\\u0000-\\u0008\\u000a-\\u001f\\u007f]*$"}});
    let rules = &mut schemas["NetworkPolicy"]["properties"]["rules"];
    rules["maxProperties"] = json!(MAX_HOSTS);
    rules["propertyNames"] = rule_host();
    rules["additionalProperties"]["maxItems"] = json!(MAX_RULES);
    let none = json!({"properties": {"rules": {"maxProperties": 0}}});
    let egress = json!({"properties": {"egress": {"const": true}}, "required": ["egress"]});
    schemas["NetworkPolicy"]["allOf"] = json!([{"if": {"not": egress}, "then": none}]);
}

/// Writes the secret operations' limits into `doc`.
pub(super) fn constrain(doc: &mut Value) {
    constrain_rules(doc);
    let schemas = &mut doc["components"]["schemas"];
    let labels = json!({"maxProperties": 64,
        "propertyNames": {"minLength": 1, "maxLength": 128, "pattern": "^[^=]*$"},
        "additionalProperties": {"type": "string", "maxLength": 1024}});
    let hosts = json!({"maxItems": sandboxd_secrets::rules::MAX_HOSTS, "items": host()});
    let value = json!({"minLength": 1, "maxLength": sandboxd_secrets::MAX_VALUE_CHARS});
    for (schema, name) in [("CreateSecret", true), ("UpdateSecret", false)] {
        let props = &mut schemas[schema]["properties"];
        if name {
            props["name"]["pattern"] = json!(SECRET_NAME);
        }
        for (field, extra) in [
            ("value", &value),
            ("hosts", &hosts),
            ("description", &json!({"maxLength": 1024})),
            ("metadata", &labels),
        ] {
            if let (Some(schema), Some(extra)) = (props[field].as_object_mut(), extra.as_object()) {
                schema.extend(extra.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// The documented hosts are the ones the daemon takes.
    #[test]
    fn the_documented_hosts_are_the_daemons() {
        let doc = super::super::document(&Default::default(), &["namespace"]);
        let host = &doc["components"]["schemas"]["CreateSecret"]["properties"]["hosts"]["items"];
        let patterns: Vec<regex::Regex> = host["anyOf"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a["pattern"].as_str())
            .map(|p| regex::Regex::new(p).unwrap())
            .collect();
        assert_eq!(patterns.len(), 2);
        for h in [
            "api.example.com",
            "*.example.com",
            "localhost",
            "a-b.c",
            "*.com",
            "a.com.",
            "-a.com",
            "a_b.com",
            "https://a.com",
            "a.com:443",
        ] {
            let documented = patterns.iter().any(|p| p.is_match(h));
            let daemon = sandboxd_secrets::HostPattern::parse(h).is_ok();
            assert_eq!(documented, daemon, "{h}");
        }
    }
}
