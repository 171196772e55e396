//! The E2B control API, served at the root of the daemon's listener beside `/v1`, so that the real E2B
//! SDKs work unmodified with `E2B_API_URL` and `E2B_SANDBOX_URL` pointed at the daemon and
//! `E2B_API_KEY` set to a daemon API key, admin or user — minted ones are `e2b_` + 40 hex digits, as
//! E2B's are (sent as `X-API-KEY`, checked by [`sandboxd_surface::auth::require`]).
//!
//! Routes (as the SDKs' generated clients call them):
//! - `POST /v2/sandboxes`, `POST /sandboxes` (older SDKs): create → 201 `Sandbox`; identical bodies
//!   within the replay window get one sandbox ([`sandboxd_service::e2b`]), and an `Idempotency-Key`
//!   header is honoured too.
//! - `GET /v2/sandboxes` (paged, `x-next-token`), `GET /sandboxes` (older, all running): listings.
//! - `GET /sandboxes/{id}`, `DELETE /sandboxes/{id}` (204, 404 when unknown).
//! - `POST /sandboxes/{id}/timeout` (204), `POST /sandboxes/{id}/pause` (204, 409 when paused),
//!   `POST /v2/sandboxes/{id}/connect` and `POST /sandboxes/{id}/connect` (resume if paused: 201, else
//!   200), `POST /sandboxes/{id}/resume` (older: 201, 409 when running).
//! - `GET /sandboxes/{id}/metrics`: one sample of the sandbox's cgroup.
//! - Templates and snapshots ([`templates`]): `POST /v3/templates`, `GET /templates/{id}/files/{hash}`,
//!   `PUT /e2b/files/{hash}` (the signed upload URL, no API key), `POST /v2/templates/{id}/builds/{b}`,
//!   `GET /templates/{id}/builds/{b}/status`, `GET /templates/aliases/{alias}`,
//!   `DELETE /templates/{id}`, `POST /sandboxes/{id}/snapshots`, `GET /snapshots`.
//! - Volumes ([`volumes`]): `/volumes`, `/volumes/{id}` and the volume content API.
//! - Secrets ([`secrets`]): `POST`/`GET /secrets`, `GET`/`POST`/`DELETE /secrets/{id}`; values are
//!   write-only.
//!
//! The sandbox side (envd at port 49983, the sandbox's own ports) is the proxy's: with
//! `E2B_SANDBOX_URL` the SDK sends `E2b-Sandbox-Id`/`E2b-Sandbox-Port` headers to the same listener and
//! `X-Access-Token: <envdAccessToken>`, which the sandbox's agent checks.
//!
//! Older SDKs (2.20) send `POST /sandboxes/{id}/connect` to the control API with the sandbox headers
//! aimed at envd; [`unroute_control_calls`] takes those headers off control-API paths so the proxy
//! leaves such calls to this router (envd has no such routes).
//!
//! Errors are always `{"code": <status>, "message": ...}` ([`error`]). Sandboxes other than running or
//! paused ones (being created or deleted, failed, lost) do not exist for E2B clients.

pub mod error;
pub mod handlers;
pub mod models;
pub mod secrets;
pub mod templates;
pub mod volumes;

use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{middleware, Router};
use sandboxd_proxy::{SANDBOX_ID_HEADER, SANDBOX_PORT_HEADER};
use sandboxd_service::ports::AGENT_PORT;
use sandboxd_service::{Service, ServiceError};
use sandboxd_surface::auth::{self, Auth};
use sandboxd_surface::routes::{
    CreateRoute, Fingerprint, ListRoute, ListShape, SurfaceRoutes, VolumesField,
};

/// Largest JSON body accepted.
const JSON_LIMIT: usize = sandboxd_surface::JSON_LIMIT;

/// This API's sandbox routes, for the cluster's forwarding layer: creates are routed by their
/// dedupe fingerprint, so every duplicate meets the first on one node.
pub const CLUSTER_ROUTES: SurfaceRoutes = SurfaceRoutes {
    sandbox_roots: &["/sandboxes", "/v2/sandboxes"],
    not_sandboxes: &[],
    creates: &[
        CreateRoute {
            path: "/sandboxes",
            template_field: "templateID",
            volumes: MOUNTS,
            fingerprint: Some(FINGERPRINT),
        },
        CreateRoute {
            path: "/v2/sandboxes",
            template_field: "templateID",
            volumes: MOUNTS,
            fingerprint: Some(FINGERPRINT),
        },
    ],
    lists: &[
        ListRoute {
            path: "/v2/sandboxes",
            shape: ListShape::Paged {
                created: "startedAt",
                id: "sandboxID",
            },
        },
        ListRoute {
            path: "/sandboxes",
            shape: ListShape::Whole,
        },
        ListRoute {
            path: "/volumes",
            shape: ListShape::Whole,
        },
    ],
    volume_roots: &["/volumes", "/volumecontent"],
};

/// E2B names a create's volumes in `volumeMounts[].name`.
const MOUNTS: VolumesField = VolumesField {
    list: "volumeMounts",
    volume: "name",
};

const FINGERPRINT: Fingerprint = Fingerprint {
    of: handlers::create_fingerprint,
    refusal: refuse,
};

fn refuse(e: ServiceError) -> Response {
    error::E2bError::from(e).into_response()
}

/// The E2B routes, authenticated. Merge into the daemon's router and layer [`error::shape_errors`]
/// over the whole of it, so that what other layers answer on these paths has the E2B shape too.
pub fn router(service: Service, auth: Auth) -> Router {
    Router::new()
        .route("/sandboxes", post(handlers::create).get(handlers::list_v1))
        .route(
            "/v2/sandboxes",
            post(handlers::create).get(handlers::list_v2),
        )
        .route("/sandboxes/{id}", get(handlers::get).delete(handlers::kill))
        .route("/sandboxes/{id}/timeout", post(handlers::set_timeout))
        .route("/sandboxes/{id}/network", put(handlers::update_network))
        .route("/sandboxes/{id}/pause", post(handlers::pause))
        .route("/sandboxes/{id}/fork", post(handlers::fork))
        .route("/sandboxes/{id}/resume", post(handlers::resume))
        .route("/sandboxes/{id}/connect", post(handlers::connect_v1))
        .route("/v2/sandboxes/{id}/connect", post(handlers::connect_v2))
        .route("/sandboxes/{id}/metrics", get(handlers::metrics))
        .route("/sandboxes/{id}/snapshots", post(templates::snapshot))
        .route("/snapshots", get(templates::list_snapshots))
        .route("/v3/templates", post(templates::request_build))
        .route("/templates/aliases/{alias}", get(templates::alias))
        .route(
            "/templates/tags",
            post(templates::tags_refused).delete(templates::tags_refused),
        )
        .route("/templates/{id}/tags", get(templates::tags_refused))
        .route("/templates/{id}", delete(templates::delete_template))
        .route("/templates/{id}/files/{hash}", get(templates::file_link))
        .route(
            "/v2/templates/{id}/builds/{build}",
            post(templates::start_build),
        )
        .route(
            "/templates/{id}/builds/{build}/status",
            get(templates::build_status),
        )
        .route("/volumes", post(volumes::create).get(volumes::list))
        .route("/volumes/{id}", get(volumes::get).delete(volumes::destroy))
        .route("/secrets", post(secrets::create).get(secrets::list))
        .route(
            "/secrets/{id}",
            get(secrets::get)
                .post(secrets::update)
                .delete(secrets::destroy),
        )
        .layer(DefaultBodyLimit::max(JSON_LIMIT))
        .route_layer(middleware::from_fn_with_state(auth, auth::require))
        .with_state(service.clone())
        // The upload URL carries its own authorization (the SDK sends no API key there); the body
        // is streamed to disk under its own cap.
        .merge(
            Router::new()
                .route("/e2b/files/{hash}", put(templates::upload))
                // The volume content API carries the volume's own token (`volumes::volume`).
                .route(
                    "/volumecontent/{id}/dir",
                    get(volumes::list_dir).post(volumes::make_dir),
                )
                .route(
                    "/volumecontent/{id}/path",
                    get(volumes::get_path)
                        .patch(volumes::patch_path)
                        .delete(volumes::remove),
                )
                .route(
                    "/volumecontent/{id}/file",
                    get(volumes::read_file).put(volumes::write_file),
                )
                .layer(DefaultBodyLimit::disable())
                .with_state(service),
        )
}

/// Whether `path` is one of this API's sandbox routes (`/sandboxes…`, `/v2/sandboxes…`).
fn is_control_path(path: &str) -> bool {
    ["/sandboxes", "/v2/sandboxes"].iter().any(|root| {
        path.strip_prefix(root)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Middleware, outside the proxy: a control-API call that carries the E2B sandbox headers aimed at
/// envd (port 49983) loses them, so it is answered here rather than forwarded to the sandbox's agent.
/// Host-routed requests and requests to the sandbox's own ports are untouched.
pub async fn unroute_control_calls(mut req: Request, next: Next) -> Response {
    let to_envd = req
        .headers()
        .get(SANDBOX_PORT_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.trim() == AGENT_PORT.to_string());
    if to_envd && is_control_path(req.uri().path()) {
        req.headers_mut().remove(SANDBOX_ID_HEADER);
        req.headers_mut().remove(SANDBOX_PORT_HEADER);
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_paths_are_the_sandbox_routes_only() {
        for yes in [
            "/sandboxes",
            "/sandboxes/abc/connect",
            "/v2/sandboxes",
            "/v2/sandboxes/a/connect",
        ] {
            assert!(is_control_path(yes), "{yes}");
        }
        for no in [
            "/sandboxesx",
            "/files",
            "/process.Process/Start",
            "/health",
            "/v2/other",
            "/",
        ] {
            assert!(!is_control_path(no), "{no}");
        }
    }
}
