//! The limits this daemon enforces, written into the document's request schemas and parameters: the
//! ones its configuration sets (CPUs, memory, disk, timeout), the shapes its validators check
//! ([`super::shapes`]), and the rules between fields (an image or a template, not both). A request the
//! document allows is one the daemon takes, and the other way round.

use super::shapes::*;
use sandboxd_service::ServiceConfig;
use serde_json::{json, Value};

/// Writes the limits of a daemon configured as `config`, offering isolation tiers `tiers`, into
/// `doc`.
pub(super) fn constrain(doc: &mut Value, config: &ServiceConfig, tiers: &[&str]) {
    let schemas = &mut doc["components"]["schemas"];
    let env = json!({"type": ["object", "null"], "propertyNames": {"pattern": ENV_NAME},
        "additionalProperties": {"type": "string", "pattern": NO_NUL}});
    let create = &mut schemas["CreateSandbox"];
    patch(
        &mut create["properties"]["name"],
        json!({"pattern": SANDBOX_NAME}),
    );
    patch(
        &mut create["properties"]["image"],
        json!({"anyOf": [{"maxLength": 0}, {"pattern": reference(), "maxLength": REFERENCE_MAX}]}),
    );
    patch(
        &mut create["properties"]["cpu"],
        json!({"minimum": 0.01, "maximum": config.max_cpus}),
    );
    patch(
        &mut create["properties"]["memoryMB"],
        json!({"minimum": sandboxd_service::sandboxes::MIN_MEMORY_MB, "maximum": config.max_memory_mb}),
    );
    if config.disk_quota {
        patch(
            &mut create["properties"]["diskMB"],
            json!({"minimum": sandboxd_service::sandboxes::MIN_DISK_MB, "maximum": config.max_disk_mb}),
        );
    } else if let Some(props) = create["properties"].as_object_mut() {
        // This host cannot limit disk: a create that asks for a limit is refused.
        props.remove("diskMB");
    }
    patch(
        &mut create["properties"]["timeoutSec"],
        json!({"maximum": config.max_timeout.as_secs()}),
    );
    create["properties"]["env"] = env.clone();
    patch(
        &mut create["properties"]["metadata"],
        json!({"maxProperties": 64,
               "propertyNames": {"minLength": 1, "maxLength": 128, "pattern": "^[^=]*$"},
               "additionalProperties": {"type": "string", "maxLength": 1024}}),
    );
    // An image and a template are two roots; registry credentials are for an image's pull.
    let image_given = json!({"properties": {"image": {"type": "string", "minLength": 1}},
        "required": ["image"]});
    create["allOf"] = json!([
        {"not": {"allOf": [image_given, {"properties": {"template": {"type": "string"}},
            "required": ["template"]}]}},
        {"if": {"properties": {"registryAuth": {"type": "object"}}, "required": ["registryAuth"]},
         "then": image_given},
    ]);
    // A tier this daemon offers, for a sandbox and for a template's sandboxes.
    let tier =
        json!({"enum": tiers.iter().map(|t| json!(t)).chain([Value::Null]).collect::<Vec<_>>()});
    patch(&mut create["properties"]["isolation"], tier.clone());
    patch(
        &mut schemas["CreateTemplate"]["properties"]["isolation"],
        tier,
    );
    // Auto-resume, and an auto-pause that keeps only the files, are for a timeout that pauses;
    // the two do not go together.
    let pausing =
        json!({"properties": {"onTimeout": {"const": "pause"}}, "required": ["onTimeout"]});
    schemas["Lifecycle"]["allOf"] = json!([
        {"if": {"properties": {"autoResume": {"const": true}}, "required": ["autoResume"]},
         "then": pausing},
        {"if": {"properties": {"pauseMode": {"const": "filesystem"}}, "required": ["pauseMode"]},
         "then": {"allOf": [pausing, {"properties": {"autoResume": {"const": false}}}]}},
    ]);
    for list in ["allowOut", "denyOut"] {
        patch(
            &mut schemas["NetworkPolicy"]["properties"][list],
            json!({"maxItems": 256, "items": {"type": "string", "anyOf": [
                {"pattern": IPV4_NET},
                {"pattern": egress_name(), "maxLength": 253},
            ]}}),
        );
    }
    let exec = &mut schemas["ExecRequest"];
    patch(
        &mut exec["properties"]["cmd"],
        json!({"minItems": 1, "prefixItems": [{"type": "string", "minLength": 1}],
               "items": {"type": "string", "pattern": NO_NUL}}),
    );
    exec["properties"]["env"] = env;
    patch(
        &mut exec["properties"]["user"],
        json!({"enum": ["user", "root", null]}),
    );
    patch(
        &mut schemas["ExposePort"]["properties"]["port"],
        json!({"minimum": 1, "maximum": 65535}),
    );
    patch(
        &mut schemas["ExposePort"]["properties"]["protocol"],
        json!({"enum": ["http", "tcp"]}),
    );
    patch(
        &mut schemas["BindDomain"]["properties"]["port"],
        json!({"minimum": 1, "maximum": 65535}),
    );
    patch(
        &mut schemas["BindDomain"]["properties"]["hostname"],
        json!({"pattern": hostname(config.allow_wildcard_domains), "maxLength": 253,
               "not": {"pattern": under(&config.domain)}}),
    );
    patch(
        &mut schemas["CreateSnapshot"]["properties"]["name"],
        json!({"pattern": TEMPLATE_NAME}),
    );
    // An API key's name: 1–64 characters, none of them a control character.
    patch(
        &mut schemas["CreateApiKey"]["properties"]["name"],
        json!({"minLength": 1, "maxLength": sandboxd_service::api_keys::MAX_NAME_LEN,
               "pattern": "^[^\\u0000-\\u001F\\u007F-\\u009F]*$"}),
    );
    patch(
        &mut schemas["PullImage"]["properties"]["reference"],
        json!({"pattern": reference(), "maxLength": REFERENCE_MAX}),
    );
    // A context for a language's default context, or a context of its own: not both.
    patch(
        &mut schemas["RunCode"],
        json!({"not": {"properties": {"contextId": {"type": "string"}, "language": {"type": "string"}},
            "required": ["contextId", "language"]}}),
    );
    let webhook = &mut schemas["CreateWebhook"]["properties"];
    patch(&mut webhook["url"], json!({"pattern": webhook_url()}));
    patch(
        &mut webhook["events"],
        json!({"minItems": 1, "items": {"type": "string", "enum": sandboxd_service::events::KINDS}}),
    );
    patch(
        &mut webhook["secret"],
        json!({"minLength": 16, "anyOf": [{"not": {"pattern": "^whsec_"}},
            {"pattern": BASE64.replacen('^', "^whsec_", 1)}]}),
    );
    patch(
        &mut schemas["CreateTemplate"]["properties"]["name"],
        json!({"pattern": TEMPLATE_NAME}),
    );
    patch(
        &mut schemas["CreateTemplate"]["properties"]["context"],
        json!({"pattern": BASE64}),
    );
    // An image, a Dockerfile (with its context and arguments), or only a built-in template's name.
    let given = |field: &str| json!({"properties": {field: {"type": ["string", "object"]}}, "required": [field]});
    let absent = |fields: &[&str]| {
        let props: serde_json::Map<String, Value> = fields
            .iter()
            .map(|f| (f.to_string(), json!({"type": "null"})))
            .collect();
        json!({"properties": props})
    };
    let builtins: Vec<&str> = sandboxd_service::builtin::BUILTINS
        .iter()
        .map(|b| b.name)
        .collect();
    schemas["CreateTemplate"]["allOf"] = json!([
        {"not": {"allOf": [given("image"), given("dockerfile")]}},
        {"if": given("image"), "then": absent(&["context", "buildArgs"])},
        {"if": {"not": {"anyOf": [given("image"), given("dockerfile")]}},
         "then": {"allOf": [absent(&["context", "buildArgs", "startCmd", "readyCmd"]),
                            {"properties": {"name": {"enum": builtins}}}]}},
    ]);
    // Parameters.
    let paths = &mut doc["paths"];
    // Bodies whose every field has a default: an empty request may leave them out.
    for path in ["/v1/sandboxes/{id}/pause", "/v1/sandboxes/{id}/fork"] {
        paths[path]["post"]["requestBody"]["required"] = json!(false);
    }
    for (path, method, file) in [
        ("/v1/sandboxes/{id}/files", "get", false),
        ("/v1/sandboxes/{id}/files", "put", true),
        ("/v1/sandboxes/{id}/files/list", "get", false),
    ] {
        param(
            &mut paths[path][method],
            "path",
            json!({"pattern": sandbox_path(file)}),
        );
    }
    let reference = reference();
    let image_key = format!(
        "^(sha256:[0-9a-f]{{64}}|{})$",
        &reference[1..reference.len() - 1]
    );
    for method in ["get", "delete"] {
        param(
            &mut paths["/v1/images/{key}"][method],
            "key",
            json!({"pattern": image_key, "maxLength": REFERENCE_MAX}),
        );
    }
    for method in ["get", "put"] {
        add_param(
            &mut paths["/v1/sandboxes/{id}/files"][method],
            json!({"name": "user", "in": "query", "required": false,
                "description": "who reads or writes it: `user` (default) or `root`",
                "schema": {"type": "string", "enum": ["user", "root"]}}),
        );
    }
    let list = &mut paths["/v1/sandboxes"]["get"];
    param(list, "metadata", json!({"pattern": "="}));
    let states: Vec<&str> = sandboxd_store::SandboxState::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    let state = format!("({})", states.join("|"));
    param(
        list,
        "state",
        json!({"pattern": format!("^{state}(,{state})*$")}),
    );
    param(
        list,
        "cursor",
        json!({"pattern": sandboxd_store::CURSOR_PATTERN}),
    );
    param(list, "limit", json!({"minimum": 1, "maximum": 1000}));
    param(
        &mut paths["/v1/webhooks/{id}/deliveries"]["get"],
        "limit",
        json!({"minimum": 1, "maximum": 1000}),
    );
    param(
        &mut paths["/v1/sandboxes/{id}/ports/{port}"]["delete"],
        "port",
        json!({"minimum": 1, "maximum": 65535}),
    );
}

/// Merges `extra` into the object `schema` (one that is missing is a bug the tests catch: a field
/// renamed without its limits).
fn patch(schema: &mut Value, extra: Value) {
    debug_assert!(schema.is_object(), "no schema to constrain with {extra}");
    if let (Some(schema), Value::Object(extra)) = (schema.as_object_mut(), extra) {
        schema.extend(extra);
    }
}

/// Merges `extra` into the schema of the parameter `name` of `op`.
fn param(op: &mut Value, name: &str, extra: Value) {
    let found = op["parameters"]
        .as_array_mut()
        .and_then(|ps| ps.iter_mut().find(|p| p["name"] == name));
    debug_assert!(found.is_some(), "no parameter {name}");
    if let Some(p) = found {
        patch(&mut p["schema"], extra);
    }
}

/// Adds a parameter to `op`.
fn add_param(op: &mut Value, parameter: Value) {
    if let Some(ps) = op["parameters"].as_array_mut() {
        ps.push(parameter);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The limits a daemon is configured with are the ones its document states.
    #[test]
    fn the_document_states_the_configured_limits() {
        let config = ServiceConfig {
            max_cpus: 3.0,
            max_memory_mb: 2048,
            ..ServiceConfig::default()
        };
        let doc = super::super::document(&config, &["namespace"]);
        let create = &doc["components"]["schemas"]["CreateSandbox"]["properties"];
        assert_eq!(create["cpu"]["maximum"], 3.0);
        // Only the tiers the runtime offers.
        assert_eq!(create["isolation"]["enum"], json!(["namespace", null]));
        assert_eq!(create["memoryMB"]["maximum"], 2048);
        assert_eq!(create["memoryMB"]["minimum"], 32);
        assert!(create["diskMB"].is_null(), "no quota backend, no diskMB");
        let with_quota = super::super::document(
            &ServiceConfig {
                disk_quota: true,
                max_disk_mb: 4096,
                ..ServiceConfig::default()
            },
            &["namespace", "gvisor"],
        );
        let tiers = &with_quota["components"]["schemas"]["CreateTemplate"]["properties"];
        assert_eq!(
            tiers["isolation"]["enum"],
            json!(["namespace", "gvisor", null])
        );
        let disk = &with_quota["components"]["schemas"]["CreateSandbox"]["properties"]["diskMB"];
        assert_eq!(
            (disk["minimum"].as_u64(), disk["maximum"].as_u64()),
            (Some(16), Some(4096))
        );
        let for_regex = |v: &Value| v.as_str().map(str::to_string);
        // Every pattern in the document is a regular expression.
        let mut stack = vec![&doc];
        while let Some(v) = stack.pop() {
            if let Some(map) = v.as_object() {
                if let Some(p) = map.get("pattern").and_then(for_regex) {
                    regex::Regex::new(&p).unwrap_or_else(|e| panic!("{p}: {e}"));
                }
                stack.extend(map.values());
            } else if let Some(items) = v.as_array() {
                stack.extend(items);
            }
        }
    }
}
