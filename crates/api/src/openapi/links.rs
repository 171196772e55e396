//! OpenAPI links: how what one operation creates is named in the operations that act on it (a
//! sandbox's id in its commands, files, ports and domains; a port, a hostname, a template, an image).
//! Clients that follow links, and schemathesis's stateful phase, go from a create to what uses it.

use serde_json::{json, Value};

/// Adds the links of every create to `doc`.
pub(super) fn link_creates(doc: &mut Value) {
    let id = [("id", "$response.body#/id")];
    link(
        doc,
        ("/v1/sandboxes", "post", "201"),
        "/v1/sandboxes/{id}",
        &id,
    );
    // Git's 404 names a repository (`git_repo_not_found`), not the sandbox: a link there would
    // read a missing repository as the created sandbox gone.
    unlink(
        doc,
        ("/v1/sandboxes", "post", "201"),
        "/v1/sandboxes/{id}/git/",
    );
    link(
        doc,
        ("/v1/webhooks", "post", "201"),
        "/v1/webhooks/{id}",
        &id,
    );
    let named = [("name", "$response.body#/name")];
    link(
        doc,
        ("/v1/templates", "post", "202"),
        "/v1/templates/{name}",
        &named,
    );
    let image = [("key", "$response.body#/digest")];
    link(
        doc,
        ("/v1/images", "post", "200"),
        "/v1/images/{key}",
        &image,
    );
    let port = [("id", "$request.path.id"), ("port", "$response.body#/port")];
    link(
        doc,
        ("/v1/sandboxes/{id}/ports", "post", "201"),
        "/v1/sandboxes/{id}/ports/{port}",
        &port,
    );
    let host = [
        ("id", "$request.path.id"),
        ("hostname", "$response.body#/hostname"),
    ];
    link(
        doc,
        ("/v1/sandboxes/{id}/domains", "post", "201"),
        "/v1/sandboxes/{id}/domains/{hostname}",
        &host,
    );
}

/// Removes from the `status` answer of `from` the links to operations under `prefix`.
fn unlink(doc: &mut Value, from: (&str, &str, &str), prefix: &str) {
    let (path, method, status) = from;
    let pointer = format!("~1{}", prefix.trim_start_matches('/').replace('/', "~1"));
    if let Some(links) = doc["paths"][path][method]["responses"][status]["links"].as_object_mut() {
        links.retain(|_, link| {
            !link["operationRef"]
                .as_str()
                .is_some_and(|r| r.starts_with(&format!("#/paths/{pointer}")))
        });
    }
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
    debug_assert!(
        answer.is_object(),
        "{from_method} {from_path} has no {status} answer"
    );
    if answer.is_object() {
        answer["links"] = Value::Object(links);
    }
}

#[cfg(test)]
mod tests {
    /// Every link names an operation of the document, with parameters that operation takes; a
    /// sandbox's create links to its commands.
    #[test]
    fn every_link_resolves() {
        let doc =
            super::super::document(&sandboxd_service::ServiceConfig::default(), &["namespace"]);
        let mut count = 0;
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                let answers = op["responses"].as_object().unwrap().values();
                for links in answers.filter_map(|a| a["links"].as_object()) {
                    for (name, link) in links {
                        let pointer = link["operationRef"]
                            .as_str()
                            .unwrap()
                            .trim_start_matches('#');
                        let target = doc
                            .pointer(pointer)
                            .unwrap_or_else(|| panic!("{name}: {pointer}"));
                        let takes: Vec<&str> = target["parameters"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|p| p["name"].as_str())
                            .collect();
                        for param in link["parameters"].as_object().unwrap().keys() {
                            assert!(
                                takes.contains(&param.as_str()),
                                "{name}: {param} in {takes:?}"
                            );
                        }
                        count += 1;
                    }
                }
            }
        }
        let create = &doc["paths"]["/v1/sandboxes"]["post"]["responses"]["201"]["links"];
        assert_eq!(
            create["post-exec"]["operationRef"],
            "#/paths/~1v1~1sandboxes~1{id}~1exec/post"
        );
        assert!(count > 20, "{count} links");
        assert!(
            !create
                .as_object()
                .unwrap()
                .values()
                .any(|l| l["operationRef"].as_str().unwrap().contains("~1git~1")),
            "a create links to git: {create}"
        );
    }
}
