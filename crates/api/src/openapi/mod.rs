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
//!   a state that does not allow it (stopped, paused, being created or deleted);
//! - `502` (`agent_error`) when it is carried out by the sandbox's agent ([`AGENT_OPERATIONS`]):
//!   the agent can fail or be gone (killed by the sandbox's memory limit, a build's sandbox
//!   committing its layer).
//!
//! Every one of them has the [`ApiError`](sandboxd_api_types::ApiError) body: axum's own rejections
//! are reshaped into it ([`crate::error::shape_rejections`]). What it assumes: the handlers' own
//! declarations come first and are kept (a handler's description of a `409` wins over none).
//!
//! [`document`] is what `/v1/openapi.json` serves: the generated document with the limits this
//! daemon enforces written into its request schemas ([`requests`], from the shapes in [`shapes`]),
//! so that a request the document allows is one the daemon takes and the other way round, and with
//! links from each create to what acts on its result ([`links`]). `tests/openapi_fuzz.rs` (in the
//! `sandboxd` crate) holds a real daemon to it.

mod links;
mod requests;
mod secrets;
mod shapes;
mod volumes;

use sandboxd_service::ServiceConfig;
use serde_json::Value;
use utoipa::openapi::{path::Operation, ContentBuilder, Ref, ResponseBuilder};

/// The document `/v1/openapi.json` serves for a daemon configured as `config` whose runtime offers
/// the isolation tiers `tiers`: the generated one with this daemon's limits ([`requests`]) and the
/// links between operations ([`links`]).
pub fn document(config: &ServiceConfig, tiers: &[&str]) -> Value {
    use utoipa::OpenApi;
    let mut doc = serde_json::to_value(crate::ApiDoc::openapi()).expect("the document serializes");
    requests::constrain(&mut doc, config, tiers);
    volumes::constrain(&mut doc, config.disk_quota);
    secrets::constrain(&mut doc);
    links::link_creates(&mut doc);
    unique_operation_ids(&mut doc);
    doc
}

/// Makes every `operationId` unique, as OpenAPI requires: utoipa names an operation after its
/// handler, and handlers of different modules share names (`create`, `list`), so each of those
/// outside the sandboxes' own module (`v1`) is prefixed with its module's tag (`webhooks_create`).
fn unique_operation_ids(doc: &mut Value) {
    let mut count = std::collections::HashMap::<String, usize>::new();
    for_each_operation(doc, |op| {
        if let Some(id) = op["operationId"].as_str() {
            *count.entry(id.to_string()).or_default() += 1;
        }
    });
    for_each_operation(doc, |op| {
        let (Some(id), Some(tag)) = (op["operationId"].as_str(), op["tags"][0].as_str()) else {
            return;
        };
        if count.get(id).is_some_and(|n| *n > 1) && tag != "v1" {
            op["operationId"] = Value::String(format!("{tag}_{id}"));
        }
    });
}

fn for_each_operation(doc: &mut Value, mut f: impl FnMut(&mut Value)) {
    let paths = doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut());
    for item in paths {
        for op in item
            .as_object_mut()
            .into_iter()
            .flat_map(|o| o.values_mut())
        {
            f(op);
        }
    }
}

/// The operations the sandbox's agent carries out (path, method).
pub const AGENT_OPERATIONS: [(&str, &str); 8] = [
    ("/v1/sandboxes/{id}/exec", "post"),
    ("/v1/sandboxes/{id}/exec/stream", "post"),
    ("/v1/sandboxes/{id}/code", "post"),
    ("/v1/sandboxes/{id}/files", "get"),
    ("/v1/sandboxes/{id}/files", "put"),
    ("/v1/sandboxes/{id}/files", "delete"),
    ("/v1/sandboxes/{id}/files/list", "get"),
    ("/v1/sandboxes/{id}/ports", "post"),
];

/// The [`utoipa::Modify`] adding the shared answers.
pub struct SharedResponses;

impl utoipa::Modify for SharedResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let operations = [
                ("get", &mut item.get),
                ("put", &mut item.put),
                ("post", &mut item.post),
                ("delete", &mut item.delete),
                ("patch", &mut item.patch),
            ];
            for (method, op) in operations {
                if let Some(op) = op {
                    let by_agent = AGENT_OPERATIONS.contains(&(path.as_str(), method));
                    declare_shared(path, by_agent, op);
                }
            }
        }
    }
}

fn declare_shared(path: &str, by_agent: bool, op: &mut Operation) {
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
    if let Some(limit) = body_limit(path).filter(|_| has_body) {
        add("413", &limit);
    }
    if has_path_param {
        add("404", "no such resource");
    }
    if by_agent {
        add("502", "the sandbox's agent failed or cannot be reached");
    }
}

/// What `413` says for the operation at `path`, naming the size limit of its body; `None` where
/// the body is streamed and has none (a file upload, an image archive).
fn body_limit(path: &str) -> Option<String> {
    let mib = |bytes: usize| bytes >> 20;
    match path {
        "/v1/sandboxes/{id}/files" | "/v1/images/import" => None,
        "/v1/templates" => Some(format!(
            "the body is larger than {} MiB (a template's carries its build context)",
            mib(crate::TEMPLATE_LIMIT)
        )),
        _ => Some(format!(
            "the body is larger than {} MiB",
            mib(crate::JSON_LIMIT)
        )),
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

#[cfg(test)]
mod tests {
    use crate::ApiDoc;
    use utoipa::OpenApi;

    fn document() -> serde_json::Value {
        serde_json::to_value(ApiDoc::openapi()).unwrap()
    }

    /// Every operation has an id of its own; the sandboxes' keep their handlers' names.
    #[test]
    fn operation_ids_are_unique() {
        let doc = super::document(&sandboxd_service::ServiceConfig::default(), &["namespace"]);
        let mut ids = std::collections::BTreeSet::new();
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                let id = op["operationId"].as_str().unwrap();
                assert!(ids.insert(id.to_string()), "{id} twice");
            }
        }
        assert_eq!(
            doc["paths"]["/v1/sandboxes"]["post"]["operationId"],
            "create"
        );
        assert_eq!(
            doc["paths"]["/v1/webhooks"]["post"]["operationId"],
            "webhooks_create"
        );
        assert_eq!(
            doc["paths"]["/v1/sandboxes/{id}/exec"]["post"]["operationId"],
            "exec"
        );
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
        assert_eq!(
            create["413"]["description"],
            "the body is larger than 1 MiB"
        );
        let template = &doc["paths"]["/v1/templates"]["post"]["responses"]["413"];
        assert!(
            template["description"]
                .as_str()
                .unwrap()
                .contains("360 MiB"),
            "{template}"
        );
        let upload = &doc["paths"]["/v1/sandboxes/{id}/files"]["put"]["responses"];
        assert!(
            upload["413"].is_null(),
            "a streamed upload has no body limit: {upload}"
        );
        let webhook = &doc["paths"]["/v1/webhooks"]["post"]["responses"];
        assert!(webhook["404"].is_null(), "no path parameter, no 404");
        let exec = &doc["paths"]["/v1/sandboxes/{id}/exec"]["post"]["responses"];
        for status in ["400", "401", "404", "413"] {
            assert!(exec[status].is_object(), "exec {status}");
        }
        for (path, method) in super::AGENT_OPERATIONS {
            let agent = &doc["paths"][path][method]["responses"]["502"];
            assert!(agent.is_object(), "{method} {path} 502");
        }
        let pause = &doc["paths"]["/v1/sandboxes/{id}/pause"]["post"]["responses"];
        assert_eq!(
            pause["409"]["description"],
            "already paused, or not running"
        );
        assert!(pause["413"].is_object(), "a pause takes a body (its mode)");
        let resume = &doc["paths"]["/v1/sandboxes/{id}/resume"]["post"]["responses"];
        assert!(resume["413"].is_null(), "no body, no 413");
    }
}
