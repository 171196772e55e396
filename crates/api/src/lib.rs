//! The daemon's HTTP surface on one listener.
//!
//! Where a request goes, in order:
//! 1. the proxy ([`sandboxd_proxy`]) takes it if its Host is `{port}-{id}.{domain}`, it carries the
//!    E2B sandbox headers, or its Host is a custom domain bound to a sandbox ([`domains`]);
//! 2. `/health`, `/metrics` and `/v1/openapi.json` answer without a token;
//! 3. everything under `/v1` needs a key ([`auth`]) and is handled in [`v1`], which calls the
//!    service; managing keys ([`keys`]), webhooks ([`webhooks`]) and the reconcilers takes an admin
//!    key;
//! 4. the E2B control API (`sandboxd_facade_e2b`) answers at the root (`/sandboxes`, `/v2/sandboxes`, …), and the
//!    Daytona API (`sandboxd_facade_daytona`) under `/api`, with a key (admin or user) too;
//! 5. `/mcp` serves the same tools over MCP's Streamable HTTP (`sandboxd_mcp`), with a key;
//! 6. anything else is a JSON 404 — in the E2B shape outside `/v1` (`sandboxd_facade_e2b::error::shape_errors`).
//!
//! Every request runs in a span with its id and the sandbox it names ([`request_log`]).
//!
//! Sandboxes' agents report on another listener, the callback socket ([`callbacks::router`]).

pub mod callbacks;
pub mod cluster;
pub mod domains;
pub mod files;
pub mod git;
pub mod images;
pub mod keys;
pub mod metrics;
pub mod openapi;
pub mod request_log;
pub mod secrets;
pub mod server_timing;
pub mod templates;
pub mod terminal;
pub mod v1;
pub mod volumes;
pub mod warm_pools;
pub mod webhooks;

pub use sandboxd_surface::{auth, error};

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::{middleware, Json, Router};
use openapi::SharedResponses;
use sandboxd_proxy::Proxy;
use sandboxd_service::Service;
use sandboxd_surface::routes::SurfaceRoutes;
use std::sync::Arc;
use utoipa::OpenApi;

/// The OpenAPI 3.1 document of `/v1`, generated from the handlers and the body types.
#[derive(OpenApi)]
#[openapi(
    info(title = "sandboxd", description = "Native API of sandboxd, a self-hostable sandbox platform."),
    paths(v1::create, v1::list, v1::get, v1::delete, v1::pause, v1::fork, v1::resume, v1::stop, v1::start, v1::update_network, v1::exec, v1::exec_stream, terminal::open, v1::run_code, v1::download, v1::upload,
          v1::list_files, files::remove, v1::expose, v1::ports, v1::unexpose, v1::reconcile, domains::bind, domains::list, domains::unbind,
          keys::create, keys::list, keys::delete,
          webhooks::create, webhooks::list, webhooks::delete, webhooks::deliveries, webhooks::events,
          callbacks::list, images::pull, images::import, images::list, images::get, images::remove, images::prune,
          templates::create, templates::list, templates::get, templates::delete, templates::logs,
          templates::snapshot, cluster::status,
          volumes::create, volumes::list, volumes::get, volumes::delete, volumes::list_files,
          volumes::download, volumes::upload, volumes::mkdir, volumes::remove,
          secrets::create, secrets::list, secrets::get, secrets::update, secrets::delete, secrets::egress,
          warm_pools::list, warm_pools::set,
          git::clone, git::status, git::add, git::commit, git::branches, git::create_branch,
          git::delete_branch, git::checkout, git::push, git::pull),
    components(schemas(sandboxd_api_types::ApiError)),
    modifiers(&BearerAuth, &SharedResponses)
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
        };
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        openapi.security = Some(vec![SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
    }
}

/// Largest JSON body accepted.
pub(crate) const JSON_LIMIT: usize = sandboxd_surface::JSON_LIMIT;
/// Largest template create accepted: its body carries its build context (base64, up to 256 MiB of
/// tar).
pub(crate) const TEMPLATE_LIMIT: usize = 360 << 20;

/// The sandbox routes of every surface mounted here, for the cluster's forwarding layer.
pub(crate) const SURFACES: [&SurfaceRoutes; 3] = [
    &v1::CLUSTER_ROUTES,
    &sandboxd_facade_e2b::CLUSTER_ROUTES,
    &sandboxd_facade_daytona::CLUSTER_ROUTES,
];

/// Builds the whole router.
pub fn router(
    service: Service,
    auth: auth::Auth,
    metrics: metrics::Metrics,
    proxy: Arc<Proxy>,
) -> Router {
    let forwarding = service.cluster().map(|c| {
        cluster::Forwarding::new(c.clone(), service.clone(), proxy.clone(), SURFACES.to_vec())
    });
    let e2b = sandboxd_facade_e2b::router(service.clone(), auth.clone());
    let daytona = sandboxd_facade_daytona::router(service.clone(), auth.clone());
    let mcp = Router::new()
        .nest_service("/mcp", sandboxd_mcp::service(service.clone()))
        .layer(middleware::from_fn_with_state(auth.clone(), auth::require));
    // What only admin keys may do: manage keys, webhooks and warm pools, run the reconcilers.
    let admin = Router::new()
        .route("/api-keys", post(keys::create).get(keys::list))
        .route("/api-keys/{id}", axum::routing::delete(keys::delete))
        .route("/webhooks", post(webhooks::create).get(webhooks::list))
        .route("/webhooks/{id}", axum::routing::delete(webhooks::delete))
        .route("/webhooks/{id}/deliveries", get(webhooks::deliveries))
        .route("/admin/reconcile", post(v1::reconcile))
        .route("/warm-pools", get(warm_pools::list))
        .route(
            "/warm-pools/{template}",
            axum::routing::put(warm_pools::set),
        )
        .route("/cluster", get(cluster::status))
        .route_layer(middleware::from_fn(auth::admin_only));
    let sandboxes = Router::new()
        .merge(admin)
        .route("/sandboxes", post(v1::create).get(v1::list))
        .route("/sandboxes/{id}", get(v1::get).delete(v1::delete))
        .route("/sandboxes/{id}/pause", post(v1::pause))
        .route("/sandboxes/{id}/fork", post(v1::fork))
        .route("/sandboxes/{id}/resume", post(v1::resume))
        .route("/sandboxes/{id}/stop", post(v1::stop))
        .route("/sandboxes/{id}/network", put(v1::update_network))
        .route("/sandboxes/{id}/start", post(v1::start))
        .route("/images", post(images::pull).get(images::list))
        .route("/images/prune", post(images::prune))
        .route("/images/{key}", get(images::get).delete(images::remove))
        .route(
            "/templates/{name}",
            get(templates::get).delete(templates::delete),
        )
        .route("/templates/{name}/logs", get(templates::logs))
        .route("/volumes", post(volumes::create).get(volumes::list))
        .route("/volumes/{name}", get(volumes::get).delete(volumes::delete))
        .route(
            "/volumes/{name}/files",
            get(volumes::list_files).delete(volumes::remove),
        )
        .route("/volumes/{name}/files/mkdir", post(volumes::mkdir))
        .route("/secrets", post(secrets::create).get(secrets::list))
        .route(
            "/secrets/{name}",
            get(secrets::get)
                .patch(secrets::update)
                .delete(secrets::delete),
        )
        .route("/sandboxes/{id}/snapshot", post(templates::snapshot))
        .route("/events", get(webhooks::events))
        .route("/sandboxes/{id}/agent-events", get(callbacks::list))
        .route("/sandboxes/{id}/egress", get(secrets::egress))
        .route("/sandboxes/{id}/exec", post(v1::exec))
        .route("/sandboxes/{id}/exec/stream", post(v1::exec_stream))
        .route("/sandboxes/{id}/terminal", get(terminal::open))
        .route("/sandboxes/{id}/code", post(v1::run_code))
        .route("/sandboxes/{id}/files/list", get(v1::list_files))
        .route("/sandboxes/{id}/ports", post(v1::expose).get(v1::ports))
        .route(
            "/sandboxes/{id}/ports/{port}",
            axum::routing::delete(v1::unexpose),
        )
        .route(
            "/sandboxes/{id}/domains",
            post(domains::bind).get(domains::list),
        )
        .route(
            "/sandboxes/{id}/domains/{hostname}",
            axum::routing::delete(domains::unbind),
        )
        .merge(git::router())
        .layer(DefaultBodyLimit::max(JSON_LIMIT))
        .route(
            "/sandboxes/{id}/files",
            get(v1::download)
                .put(v1::upload)
                .delete(files::remove)
                .layer(DefaultBodyLimit::disable()),
        )
        .route(
            "/images/import",
            post(images::import).layer(DefaultBodyLimit::disable()),
        )
        .route(
            "/volumes/{name}/files/content",
            get(volumes::download)
                .put(volumes::upload)
                .layer(DefaultBodyLimit::disable()),
        )
        .route(
            "/templates",
            get(templates::list)
                .post(templates::create)
                .layer(DefaultBodyLimit::max(TEMPLATE_LIMIT)),
        )
        .route_layer(middleware::from_fn_with_state(auth, auth::require))
        .layer(middleware::from_fn(error::shape_rejections))
        .with_state(service.clone());
    let open = Router::new()
        .route(
            "/health",
            get(|| async { Json(serde_json::json!({"status": "ok"})) }),
        )
        .route("/v1/openapi.json", {
            let tiers: Vec<&str> = service.offered_tiers().iter().map(|t| t.as_str()).collect();
            let doc = Arc::new(openapi::document(service.config(), &tiers));
            get(move || async move { Json(doc.as_ref().clone()) })
        })
        .route(
            "/metrics",
            get(metrics::render).with_state((metrics.clone(), service)),
        );
    Router::new()
        .nest("/v1", sandboxes)
        .merge(open)
        .merge(e2b)
        .merge(daytona)
        .merge(mcp)
        .merge(sandboxd_console::router())
        .fallback(|| async {
            error::Error::new(StatusCode::NOT_FOUND, "not_found", "no such route").into_response()
        })
        .method_not_allowed_fallback(|| async {
            error::Error::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed here",
            )
            .into_response()
        })
        // An early answer (a full volume, a refused upload) keeps its connection: the client still
        // writing the body reads the answer instead of a broken pipe. API requests only; the proxy
        // relays sandboxes' bodies as they are.
        .layer(middleware::from_fn(sandboxd_drain::drain_unread))
        // The steps a flow timed, named on its answer.
        .layer(middleware::from_fn(server_timing::server_timing))
        .layer(middleware::from_fn(
            sandboxd_facade_e2b::error::shape_errors,
        ))
        .layer(middleware::from_fn_with_state(metrics, metrics::track))
        .layer(middleware::from_fn_with_state(
            proxy,
            sandboxd_proxy::middleware,
        ))
        .layer(middleware::from_fn_with_state(forwarding, cluster::forward))
        .layer(middleware::from_fn(
            sandboxd_facade_e2b::unroute_control_calls,
        ))
        // Outermost: every line logged while a request is served carries its id and sandbox.
        .layer(middleware::from_fn_with_state(
            &SURFACES[..],
            request_log::request_span,
        ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key routes are in the document with every status they answer; so is the 403 of the
    /// routes only admin keys may call.
    #[test]
    fn api_key_routes_are_documented_with_their_statuses() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let statuses = |path: &str, method: &str| -> Vec<String> {
            doc["paths"][path][method]["responses"]
                .as_object()
                .unwrap_or_else(|| panic!("{method} {path} is not documented"))
                .keys()
                .cloned()
                .collect()
        };
        assert_eq!(
            statuses("/v1/api-keys", "post"),
            ["201", "400", "401", "403", "413"]
        );
        assert_eq!(statuses("/v1/api-keys", "get"), ["200", "401", "403"]);
        assert_eq!(
            statuses("/v1/api-keys/{id}", "delete"),
            ["204", "400", "401", "403", "404", "409"]
        );
        for (path, method) in [
            ("/v1/webhooks", "post"),
            ("/v1/webhooks", "get"),
            ("/v1/webhooks/{id}", "delete"),
            ("/v1/webhooks/{id}/deliveries", "get"),
            ("/v1/admin/reconcile", "post"),
        ] {
            assert!(
                statuses(path, method).iter().any(|s| s == "403"),
                "{method} {path}"
            );
        }
        let created = &doc["components"]["schemas"]["CreatedApiKey"];
        assert!(created.is_object(), "{created}");
    }

    /// Every `$ref` in the OpenAPI document names a schema the document defines (a body type that
    /// gains a nested type without deriving `ToSchema` into the components would break clients).
    #[test]
    fn every_schema_reference_resolves() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        let mut refs = Vec::new();
        let mut stack = vec![&doc];
        while let Some(v) = stack.pop() {
            match v {
                serde_json::Value::Object(map) => {
                    if let Some(serde_json::Value::String(r)) = map.get("$ref") {
                        refs.push(r.clone());
                    }
                    stack.extend(map.values());
                }
                serde_json::Value::Array(items) => stack.extend(items),
                _ => {}
            }
        }
        assert!(refs.iter().any(|r| r.ends_with("/Lifecycle")), "{refs:?}");
        for r in refs {
            let name = r.strip_prefix("#/components/schemas/").expect("local ref");
            assert!(schemas.contains_key(name), "{r} is not defined");
        }
    }
}
