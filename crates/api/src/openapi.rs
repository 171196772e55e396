//! The answers every `/v1` operation shares, declared in the OpenAPI document in one place so that no
//! route can forget them (the handlers declare only what is their own).
//!
//! What it guarantees, for each operation of the document:
//! - `401` (`unauthorized`): every `/v1` route sits behind [`crate::auth::require`];
//! - `400` (`invalid_request`) when it takes a body or parameters: a body that is not the JSON its
//!   schema describes, a parameter out of range or a path that is not UTF-8;
//! - `413` (`payload_too_large`) when it takes a body: every body has a size limit;
//! - `404` (`not_found`) when its path names a resource: there may be none of that name;
//! - `409` (`conflict`) when it acts on a sandbox (`/v1/sandboxes/{id}/…`): the sandbox may be in
//!   a state that does not allow it (stopped, paused, being created or deleted).
//!
//! Every one of them has the [`ApiError`](sandboxd_api_types::ApiError) body: axum's own rejections
//! are reshaped into it ([`crate::error::shape_rejections`]). What it assumes: the handlers' own
//! declarations come first and are kept (a handler's description of a `409` wins over none).
//!
//! [`document`] is what `/v1/openapi.json` serves: the generated document with the limits this
//! daemon enforces written into its request schemas — the ones its configuration sets (CPUs, memory,
//! disk, timeout) and the shapes the service's validators check (names, paths, references, ports),
//! so that a request the document allows is one the daemon takes and the other way round.

use sandboxd_service::ServiceConfig;
use serde_json::{json, Value};
use utoipa::openapi::{path::Operation, ContentBuilder, Ref, ResponseBuilder};

/// The [`utoipa::Modify`] adding the shared answers.
pub struct SharedResponses;

impl utoipa::Modify for SharedResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in operations.into_iter().flatten() {
                declare_shared(path, op);
            }
        }
    }
}

fn declare_shared(path: &str, op: &mut Operation) {
    let params = op.parameters.as_deref().unwrap_or_default();
    let has_path_param = params
        .iter()
        .any(|p| p.parameter_in == utoipa::openapi::path::ParameterIn::Path);
    let has_body = op.request_body.is_some();
    let mut add = |status: &str, description: &str| {
        op.responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| error_response(description).into());
    };
    add("401", "no token, or one the daemon does not accept");
    if path.starts_with("/v1/sandboxes/{id}/") {
        add("409", "the sandbox is not in a state that allows this");
    }
    if has_body || !params.is_empty() {
        add(
            "400",
            "a body that is not the JSON its schema describes, or a parameter out of range",
        );
    }
    if has_body {
        add("413", "the body is larger than this operation takes");
    }
    if has_path_param {
        add("404", "no such resource");
    }
}

fn error_response(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ApiError")))
                .build(),
        )
        .build()
}

/// A sandbox name (the service's `validate::name`), or "" for none.
const SANDBOX_NAME: &str = "^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)?$";
/// A template name ([`sandboxd_service::templates::validate_name`]).
const TEMPLATE_NAME: &str = "^[a-z0-9][a-z0-9._/-]{0,127}(:[a-z0-9._-]+)?$";
/// An image reference, the part of Docker's grammar ([`sandboxd_images::ImageRef`]) written with
/// lowercase names, sha256 digests and a registry that is an IPv4 address or a hostname whose last
/// label starts with a letter, with a port of 1–65535 (one a URL can name). Without a registry, the
/// first of several path components has no `.` (Docker would take it for a registry).
fn reference() -> String {
    let octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    let port =
        "([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])";
    let host = "([a-z0-9]([a-z0-9-]*[a-z0-9])?\\.)*[a-z]([a-z0-9-]*[a-z0-9])?";
    let registry = format!("({octet}(\\.{octet}){{3}}|{host})(:{port})?");
    let component = "[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*";
    let undotted = "[a-z0-9]+((_|__|-+)[a-z0-9]+)*";
    let name =
        format!("({registry}/{component}(/{component})*|{component}|{undotted}(/{component})+)");
    format!("^{name}(:[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(@sha256:[0-9a-f]{{64}})?$")
}
/// Longest reference documented (the grammar's repository limit, with room for `library/`).
const REFERENCE_MAX: u64 = 240;
/// A path component other than `..`.
const SEGMENT: &str =
    "(\\.|[^/.\\u0000][^/\\u0000]*|\\.[^/.\\u0000][^/\\u0000]*|\\.\\.[^/\\u0000]+)";

/// A path inside a sandbox (the service's `validate::sandbox_path`): absolute, no `..` component, no
/// NUL; a file's path does not end with `/`.
fn sandbox_path(file: bool) -> String {
    if file {
        format!("^(/{SEGMENT}?)*/{SEGMENT}$")
    } else {
        format!("^(/{SEGMENT}?)+$")
    }
}

/// A hostname a sandbox can be bound to (the service's `domains::validate_hostname`): at least two
/// RFC 1123 labels, the last starting with a letter (never an IP address), a `*.` only where the
/// daemon allows wildcards; and, in [`document`], none under the daemon's own domain.
fn hostname(allow_wildcard: bool) -> String {
    let label = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    let last = "[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    let wildcard = if allow_wildcard { "(\\*\\.)?" } else { "" };
    format!("^{wildcard}({label}\\.)+{last}\\.?$")
}

/// Matches a name equal to or under `domain`, in any case.
fn under(domain: &str) -> String {
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
const ENV_NAME: &str = "^[A-Za-z_][A-Za-z0-9_]*$";
/// Text without NUL.
const NO_NUL: &str = "^[^\\u0000]*$";
/// An IPv4 address or CIDR block ([`sandboxd_service::network`]).
const IPV4_NET: &str = "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(/(3[0-2]|[12][0-9]|[0-9]))?$";
/// A base64 text (standard alphabet, padded).
/// A base64 text (standard alphabet, padded, canonical: the bits padding drops are zero).
const BASE64: &str =
    "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$";

/// The document `/v1/openapi.json` serves for a daemon configured as `config`.
pub fn document(config: &ServiceConfig) -> Value {
    use utoipa::OpenApi;
    let mut doc = serde_json::to_value(crate::ApiDoc::openapi()).expect("the document serializes");
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
    patch(
        &mut schemas["Lifecycle"],
        json!({"if": {"properties": {"autoResume": {"const": true}}, "required": ["autoResume"]},
               "then": {"properties": {"onTimeout": {"const": "pause"}}, "required": ["onTimeout"]}}),
    );
    for list in ["allowOut", "denyOut"] {
        patch(
            &mut schemas["NetworkPolicy"]["properties"][list],
            json!({"maxItems": 256, "items": {"type": "string", "pattern": IPV4_NET}}),
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
    patch(
        &mut webhook["url"],
        json!({"pattern": "^https?://([a-z0-9]([a-z0-9-]*[a-z0-9])?\\.)*[a-z]([a-z0-9-]*[a-z0-9])?(:[0-9]{1,4})?(/[A-Za-z0-9._~/-]*)?$"}),
    );
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
    // How what one operation creates is named in the others: the stateful clients (and schemathesis)
    // follow these from a create to what acts on its result.
    let sandbox = [("id", "$response.body#/id")];
    link(
        &mut doc,
        ("/v1/sandboxes", "post", "201"),
        "/v1/sandboxes/{id}",
        &sandbox,
    );
    link(
        &mut doc,
        ("/v1/webhooks", "post", "201"),
        "/v1/webhooks/{id}",
        &sandbox,
    );
    let named = [("name", "$response.body#/name")];
    link(
        &mut doc,
        ("/v1/templates", "post", "202"),
        "/v1/templates/{name}",
        &named,
    );
    let image = [("key", "$response.body#/digest")];
    link(
        &mut doc,
        ("/v1/images", "post", "200"),
        "/v1/images/{key}",
        &image,
    );
    let port = [("id", "$request.path.id"), ("port", "$response.body#/port")];
    link(
        &mut doc,
        ("/v1/sandboxes/{id}/ports", "post", "201"),
        "/v1/sandboxes/{id}/ports/{port}",
        &port,
    );
    let host = [
        ("id", "$request.path.id"),
        ("hostname", "$response.body#/hostname"),
    ];
    link(
        &mut doc,
        ("/v1/sandboxes/{id}/domains", "post", "201"),
        "/v1/sandboxes/{id}/domains/{hostname}",
        &host,
    );
    doc
}

/// Adds to the `status` answer of `from` (path, method) an OpenAPI link to every operation under
/// `prefix`, passing `parameters` (name, runtime expression).
fn link(doc: &mut Value, from: (&str, &str, &str), prefix: &str, parameters: &[(&str, &str)]) {
    let (from_path, from_method, status) = from;
    let mut links = serde_json::Map::new();
    let targets = doc["paths"].as_object().into_iter().flatten();
    for (path, item) in targets.filter(|(p, _)| p.starts_with(prefix) && *p != from_path) {
        for method in item.as_object().into_iter().flatten().map(|(m, _)| m) {
            let name = format!(
                "{method}{}",
                path[prefix.len()..].replace(['/', '{', '}'], "-")
            );
            let pointer = path.replace('~', "~0").replace('/', "~1");
            let params: serde_json::Map<String, Value> = parameters
                .iter()
                .map(|(n, e)| (n.to_string(), json!(e)))
                .collect();
            links.insert(
                name.trim_end_matches('-').replace("--", "-"),
                json!({"operationRef": format!("#/paths/{pointer}/{method}"), "parameters": params}),
            );
        }
    }
    let answer = &mut doc["paths"][from_path][from_method]["responses"][status];
    if answer.is_object() {
        answer["links"] = Value::Object(links);
    }
}

/// Merges `extra` into the object `schema`.
fn patch(schema: &mut Value, extra: Value) {
    if let (Some(schema), Value::Object(extra)) = (schema.as_object_mut(), extra) {
        schema.extend(extra);
    }
}

/// Merges `extra` into the schema of the parameter `name` of `op`.
fn param(op: &mut Value, name: &str, extra: Value) {
    let found = op["parameters"]
        .as_array_mut()
        .and_then(|ps| ps.iter_mut().find(|p| p["name"] == name));
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
    use crate::ApiDoc;
    use utoipa::OpenApi;

    use super::*;

    fn document() -> serde_json::Value {
        serde_json::to_value(ApiDoc::openapi()).unwrap()
    }

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

    /// The limits a daemon is configured with are the ones its document states.
    #[test]
    fn the_document_states_the_configured_limits() {
        let config = ServiceConfig {
            max_cpus: 3.0,
            max_memory_mb: 2048,
            ..ServiceConfig::default()
        };
        let doc = super::document(&config);
        let create = &doc["components"]["schemas"]["CreateSandbox"]["properties"];
        assert_eq!(create["cpu"]["maximum"], 3.0);
        assert_eq!(create["memoryMB"]["maximum"], 2048);
        assert_eq!(create["memoryMB"]["minimum"], 32);
        assert!(create["diskMB"].is_null(), "no quota backend, no diskMB");
        let with_quota = super::document(&ServiceConfig {
            disk_quota: true,
            max_disk_mb: 4096,
            ..ServiceConfig::default()
        });
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

    /// Every operation declares the 401 of the auth middleware, with the error body.
    #[test]
    fn every_operation_declares_401() {
        let doc = document();
        let mut seen = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let unauthorized = &op["responses"]["401"];
                assert_eq!(
                    unauthorized["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ApiError",
                    "{method} {path}"
                );
                seen += 1;
            }
        }
        assert!(seen > 30, "{seen} operations");
    }

    /// A body can be malformed or too large; a path naming a resource can name none. A handler's own
    /// description of a status is kept.
    #[test]
    fn bodies_and_path_parameters_declare_their_errors() {
        let doc = document();
        let create = &doc["paths"]["/v1/sandboxes"]["post"]["responses"];
        for status in ["400", "401", "413"] {
            assert!(create[status].is_object(), "POST /v1/sandboxes {status}");
        }
        let webhook = &doc["paths"]["/v1/webhooks"]["post"]["responses"];
        assert!(webhook["404"].is_null(), "no path parameter, no 404");
        let exec = &doc["paths"]["/v1/sandboxes/{id}/exec"]["post"]["responses"];
        for status in ["400", "401", "404", "413"] {
            assert!(exec[status].is_object(), "exec {status}");
        }
        let pause = &doc["paths"]["/v1/sandboxes/{id}/pause"]["post"]["responses"];
        assert_eq!(
            pause["409"]["description"],
            "already paused, or not running"
        );
        assert!(pause["413"].is_null(), "no body, no 413");
    }
}
