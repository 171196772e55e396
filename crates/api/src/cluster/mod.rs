//! Cluster mode at the HTTP edge: every call served on the node that owns its sandbox, forwarded once.
//!
//! Contract ([`forward`], a middleware outside the sandbox proxy, in front of every surface; the
//! layer knows no surface by name: each declares its sandbox routes as a
//! [`SurfaceRoutes`](sandboxd_surface::routes::SurfaceRoutes) — `/v1` in [`crate::v1`], the facades in
//! their crates — and [`crate::SURFACES`] lists those mounted):
//! - A request carrying [`FORWARDED_HEADER`] is served here, whatever it names: a request is
//!   forwarded at most once and never in a loop.
//! - A per-sandbox call — under a declared root: `/v1/sandboxes/{key}/…`, E2B `/sandboxes/{id}/…` and `/v2/sandboxes/{id}/…`,
//!   Daytona `/api/sandbox/{key}/…` and `/api/toolbox/{id}/…`, and proxy requests (`{port}-{id}.{domain}`
//!   hosts, signed preview links, `E2b-Sandbox-Id` headers, custom hostnames, and envd calls that carry only their
//!   `X-Access-Token`, found by its digest in the log) — whose sandbox the log places on another node
//!   (by id, or by a name the log gives to one) is forwarded to that node's API and answered from there, bodies and
//!   upgrades streamed. A key this node does not know is looked up again once it has caught up with
//!   the leader ([`Cluster::catch_up`]), so a sandbox or name acknowledged through one node is found
//!   through every other at once; a key still unknown is served here (and answers 404 here).
//! - A declared create (`POST /v1/sandboxes`, E2B `POST /sandboxes`, Daytona `POST /api/sandbox`) is
//!   placed ([`sandboxd_cluster::placement`]) by the template its surface's field names and forwarded
//!   to the chosen node, which reserves and creates; one its surface routes by fingerprint (E2B's) goes
//!   where the log routes the fingerprint. A create mounting volumes that live on two nodes, or on a
//!   node that is down, is refused with 409 `volume_unavailable` naming the volumes and nodes.
//! - A declared list (`GET` of those roots) is asked of every member and merged ([`lists`]): pages of `/v1` and
//!   E2B's `/v2` lists are cut from the merged order with a cursor every node understands; a member
//!   that does not answer is left out (and logged).
//! - The owner authenticates every forwarded call itself: forwarding grants nothing.

mod lists;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, StatusCode};
use sandboxd_api_types as api;
use sandboxd_cluster::placement::{self, Need};
use sandboxd_cluster::{Cluster, NodeId};
use sandboxd_proxy::{Proxy, ProxyError, Resolver, RouteError, Target, Upstream};
use sandboxd_service::Service;
use sandboxd_surface::routes::{self, CreateRoute, ListRoute, SurfaceRoutes};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Marks a request another node forwarded (its value: that node's id).
pub const FORWARDED_HEADER: &str = "x-sandboxd-forwarded";

/// What the forwarding layer needs.
#[derive(Clone)]
pub struct Forwarding {
    cluster: Cluster,
    service: Service,
    /// Finds the sandbox a proxy request is for.
    sandboxes: Arc<Proxy>,
    /// Sends requests to members' APIs.
    nodes: Arc<Proxy>,
    /// The sandbox routes of every surface mounted behind the layer.
    surfaces: Vec<&'static SurfaceRoutes>,
}

impl Forwarding {
    /// Forwarding for `cluster` in front of the surfaces whose routes are `surfaces`; `sandboxes` is
    /// the daemon's sandbox proxy.
    pub fn new(
        cluster: Cluster,
        service: Service,
        sandboxes: Arc<Proxy>,
        surfaces: Vec<&'static SurfaceRoutes>,
    ) -> Self {
        let nodes = Arc::new(Proxy::new(
            sandboxes.domain().to_string(),
            Arc::new(Members(cluster.clone())),
        ));
        Self {
            cluster,
            service,
            sandboxes,
            nodes,
            surfaces,
        }
    }
}

/// Names a member's API listener: the target's `sandbox_id` carries the node id.
struct Members(Cluster);

#[async_trait::async_trait]
impl Resolver for Members {
    async fn upstream(&self, target: &Target) -> Result<Upstream, RouteError> {
        let member = target
            .sandbox_id
            .parse::<NodeId>()
            .ok()
            .and_then(|id| self.0.members().get(&id).cloned())
            .ok_or_else(|| {
                RouteError::Unavailable(format!("node {} is not a member", target.sandbox_id))
            })?;
        let addr = tokio::net::lookup_host(&member.api_addr)
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                RouteError::Unavailable(format!(
                    "node address {} does not resolve",
                    member.api_addr
                ))
            })?;
        // Dialed from this node's own API address, as a request between hosts would be.
        let local = tokio::net::lookup_host(&self.0.member().api_addr)
            .await
            .ok()
            .and_then(|mut a| a.next())
            .map(|a| a.ip())
            .filter(|ip| !ip.is_unspecified());
        Ok(match local {
            Some(local) => Upstream::TcpFrom(addr, local),
            None => Upstream::Tcp(addr),
        })
    }
}

/// Where a request is served.
#[derive(Debug)]
enum Route {
    Here,
    Owner(String),
    /// A volume's own route: served by the node it lives on.
    Volume(String),
    Place(&'static CreateRoute),
    Merge(&'static ListRoute),
}

/// The route of a request by its method and path alone (proxy requests are found before), as the
/// surfaces declare their routes.
fn route_of(surfaces: &[&'static SurfaceRoutes], method: &Method, path: &str) -> Route {
    let path = path.trim_end_matches('/');
    if *method == Method::POST {
        if let Some(create) = surfaces.iter().find_map(|s| s.create(path)) {
            return Route::Place(create);
        }
    }
    if *method == Method::GET {
        if let Some(list) = surfaces.iter().find_map(|s| s.list(path)) {
            return Route::Merge(list);
        }
    }
    if let Some(key) = routes::sandbox_key_in(surfaces, path) {
        return Route::Owner(key.to_string());
    }
    match surfaces.iter().find_map(|s| s.volume_key(path)) {
        Some(key) => Route::Volume(key.to_string()),
        None => Route::Here,
    }
}

/// The middleware: see the module doc.
pub async fn forward(State(f): State<Option<Forwarding>>, req: Request, next: Next) -> Response {
    let Some(f) = f else {
        return next.run(req).await;
    };
    if req.headers().contains_key(FORWARDED_HEADER) {
        return next.run(req).await;
    }
    let route = match f.sandboxes.target_of_request(&req) {
        Some(target) => Route::Owner(target.sandbox_id),
        None => bound_sandbox(&f.cluster, &req)
            .map(Route::Owner)
            .unwrap_or_else(|| route_of(&f.surfaces, req.method(), req.uri().path())),
    };
    let me = f.cluster.id();
    match route {
        Route::Here => next.run(req).await,
        Route::Owner(key) => {
            let owner = match owner_of(&f.cluster, &key) {
                Some(owner) => Some(owner),
                // Unknown here: perhaps only not applied here yet. Caught up with the leader, this
                // node knows every sandbox and name acknowledged before the call (read-your-writes
                // through any node); without a quorum the call is served on what this node knows.
                None => match f.cluster.catch_up(CATCH_UP_WITHIN).await {
                    Ok(()) => owner_of(&f.cluster, &key),
                    Err(e) => {
                        tracing::debug!(%key, error = %e, "serving an unknown key without catching up");
                        None
                    }
                },
            };
            match owner {
                Some(owner) if owner != me => to_node(&f, owner, req).await,
                _ => next.run(req).await,
            }
        }
        Route::Volume(key) => {
            let home = match f.cluster.read(|s| s.volume_node(&key)) {
                Some(home) => Some(home),
                // Made a moment ago through another node, perhaps: catch up first.
                None => match f.cluster.catch_up(CATCH_UP_WITHIN).await {
                    Ok(()) => f.cluster.read(|s| s.volume_node(&key)),
                    Err(_) => None,
                },
            };
            match home {
                Some(home) if home != me => to_node(&f, home, req).await,
                _ => next.run(req).await,
            }
        }
        Route::Place(create) => place(&f, create, req, next).await,
        Route::Merge(list) => lists::merge(&f, list, req, next).await,
    }
}

/// The sandbox a request names by other means than its path: a custom hostname bound in the log, or
/// (an envd call carrying nothing else) the digest of its access token.
fn bound_sandbox(cluster: &Cluster, req: &Request) -> Option<String> {
    let host = sandboxd_proxy::host_of(req.headers(), req.uri());
    let token = sandboxd_proxy::envd_access_token(req.headers(), req.uri())
        .map(sandboxd_cluster::state::token_digest);
    cluster.read(|s| {
        host.and_then(|host| s.hostnames.get(&host).cloned())
            .or_else(|| token.and_then(|t| s.holder_of_token(&t).map(str::to_string)))
    })
}

/// How long a call naming an unknown key waits to catch up with the leader.
const CATCH_UP_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// The node the log places `key` (a sandbox id, a name the log gives to one, or a signed preview
/// link's token, which names its sandbox) on, as this node has applied it.
fn owner_of(cluster: &Cluster, key: &str) -> Option<NodeId> {
    let link = sandboxd_service::previews::link_sandbox(key);
    cluster.read(|s| {
        s.owner_of(key)
            .or_else(|| s.holder_of_name(key).and_then(|id| s.owner_of(id)))
            .or_else(|| link.and_then(|id| s.owner_of(id)))
    })
}

/// How many nodes a create is offered to before it answers 503.
const PLACE_ATTEMPTS: usize = 3;

/// Places a create and serves it there. The body is read first (a create is small JSON), so a node
/// found unreachable before anything was sent is left out and the next choice tried. A create its
/// surface routes by fingerprint (E2B's) goes where the log routes that fingerprint
/// ([`Service::route_fingerprint`]): every duplicate must meet the first there, so it is not retried
/// elsewhere.
async fn place(f: &Forwarding, create: &CreateRoute, req: Request, next: Next) -> Response {
    let me = f.cluster.id();
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, crate::JSON_LIMIT).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return crate::error::Error::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("a create body is at most {} bytes", crate::JSON_LIMIT),
            )
            .into_response()
        }
    };
    let fingerprint = create
        .fingerprint
        .and_then(|fp| (fp.of)(&bytes, f.service.config().default_timeout).map(|of| (of, fp)));
    let need = need_of(create, &bytes);
    // A template or volume made a moment ago through another node may not be applied here yet.
    let unknown_template = need.template.as_deref().is_some_and(|template| {
        template != sandboxd_service::sandboxes::DEFAULT_TEMPLATE
            && !f.cluster.read(|s| s.templates.contains_key(template))
    });
    let unknown_volume = need
        .volumes
        .iter()
        .any(|v| f.cluster.read(|s| s.volume_node(v).is_none()));
    if unknown_template || unknown_volume {
        if let Err(e) = f.cluster.catch_up(CATCH_UP_WITHIN).await {
            tracing::debug!(error = %e, "placing without catching up");
        }
    }
    let conflict = f
        .cluster
        .read(|s| placement::volume_conflict(s, &need.volumes, sandboxd_cluster::node::now_ms()));
    if let Some(conflict) = conflict {
        return crate::error::Error::new(
            StatusCode::CONFLICT,
            "volume_unavailable",
            conflict.to_string(),
        )
        .into_response();
    }
    let mut tried = BTreeSet::new();
    let mut last_error = None;
    for _ in 0..PLACE_ATTEMPTS {
        let now = sandboxd_cluster::node::now_ms();
        let chosen = f
            .cluster
            .read(|s| placement::choose(s, &need, now, &tried))
            .unwrap_or(me);
        let owner = match &fingerprint {
            Some((of, fp)) => match f.service.route_fingerprint(of, chosen).await {
                Ok(owner) => owner,
                Err(e) => return (fp.refusal)(e),
            },
            None => chosen,
        };
        let copy = Request::from_parts(parts.clone(), Body::from(bytes.clone()));
        if owner == me {
            return next.run(copy).await;
        }
        match try_node(f, owner, copy).await {
            Ok(resp) => return resp,
            Err(e) if fingerprint.is_none() && nothing_sent(&e) => {
                tracing::info!(node_id = owner, error = %e, "placement chose an unreachable node; choosing again");
                tried.insert(owner);
                last_error = Some(e);
            }
            Err(e) => return unreachable_owner(owner, e),
        }
    }
    match last_error {
        Some(e) => unreachable_owner(me, e),
        None => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
    }
}

/// What a create body asks of its node, as far as placement cares: the template it names in its
/// surface's field (`/v1`'s `template`, E2B's `templateID`, Daytona's `snapshot`) and the volumes
/// it mounts (`volumes[].name`, `volumeMounts[].name`, `volumes[].volumeId`). A body that does not
/// parse asks nothing (the node it lands on refuses it).
fn need_of(create: &CreateRoute, body: &[u8]) -> Need {
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Need::default();
    };
    let template = body
        .get(create.template_field)
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    Need {
        template,
        volumes: create.volumes.of(&body),
        ..Need::default()
    }
}

/// What went wrong talking to a member, in its own words (the proxy's message speaks of sandbox ports).
fn failure(e: &ProxyError) -> String {
    match e {
        ProxyError::Connect { source, .. } => source.to_string(),
        ProxyError::ConnectTimeout { timeout, .. } => format!("no connection within {timeout:?}"),
        ProxyError::Upstream { source, .. } => source.to_string(),
        ProxyError::Route(route) => route.to_string(),
        other => other.to_string(),
    }
}

/// Whether forwarding failed before the request left (so another node may take it).
fn nothing_sent(e: &ProxyError) -> bool {
    matches!(
        e,
        ProxyError::Connect { .. } | ProxyError::ConnectTimeout { .. } | ProxyError::Route(_)
    )
}

/// The cluster as this node sees it (404 on a single node).
#[utoipa::path(get, path = "/v1/cluster",
    responses((status = 200, body = api::ClusterStatus),
              (status = 403, body = api::ApiError, description = "a user key"),
              (status = 404, body = api::ApiError, description = "the daemon runs as a single node")))]
pub async fn status(
    State(service): State<Service>,
) -> Result<axum::Json<api::ClusterStatus>, crate::error::Error> {
    let cluster = service.cluster().ok_or_else(|| {
        crate::error::Error::new(
            StatusCode::NOT_FOUND,
            "not_clustered",
            "this daemon runs as a single node (start it with --cluster-listen to form a cluster)",
        )
    })?;
    Ok(axum::Json(cluster.status()))
}

/// Sends `req` to `node` and streams its answer back.
pub(crate) async fn to_node(f: &Forwarding, node: NodeId, req: Request) -> Response {
    match try_node(f, node, req).await {
        Ok(resp) => resp,
        Err(e) => unreachable_owner(node, e),
    }
}

/// [`to_node`] without the error mapping.
async fn try_node(f: &Forwarding, node: NodeId, mut req: Request) -> Result<Response, ProxyError> {
    let me = HeaderValue::from_str(&f.cluster.id().to_string()).expect("digits are a header value");
    req.headers_mut().insert(FORWARDED_HEADER, me);
    let target = Target {
        sandbox_id: node.to_string(),
        port: 0,
    };
    f.nodes.try_forward(&target, req).await
}

/// The 503 of a node that could not be reached.
fn unreachable_owner(node: NodeId, e: ProxyError) -> Response {
    tracing::warn!(node_id = node, error = %e, "forwarding to a member failed");
    let mut resp = crate::error::Error::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "cluster_unavailable",
        format!(
            "cluster member {node}, which serves this, did not answer: {}",
            failure(&e)
        ),
    )
    .into_response();
    resp.headers_mut()
        .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(path: &str) -> &'static CreateRoute {
        crate::SURFACES
            .iter()
            .find_map(|s| s.create(path))
            .unwrap_or_else(|| panic!("{path} is no create"))
    }

    #[test]
    fn a_create_names_its_volumes_in_each_surfaces_field() {
        let volumes = |path: &str, body: &str| need_of(create(path), body.as_bytes()).volumes;
        for (path, body) in [
            (
                "/v1/sandboxes",
                r#"{"volumes":[{"name":"data","path":"/d"}]}"#,
            ),
            (
                "/v2/sandboxes",
                r#"{"volumeMounts":[{"name":"data","path":"/d"}]}"#,
            ),
            (
                "/api/sandbox",
                r#"{"volumes":[{"volumeId":"data","mountPath":"/d"}]}"#,
            ),
        ] {
            assert_eq!(volumes(path, body), ["data"], "{path}");
        }
        assert!(volumes("/v1/sandboxes", r#"{"volumes":null}"#).is_empty());
        assert!(volumes("/v1/sandboxes", "not json").is_empty());
    }

    #[test]
    fn a_create_names_its_template_in_each_surfaces_field() {
        let template = |path: &str, body: &str| need_of(create(path), body.as_bytes()).template;
        for (path, body) in [
            ("/v1/sandboxes", r#"{"template":"py"}"#),
            ("/sandboxes", r#"{"templateID":"py"}"#),
            ("/v2/sandboxes", r#"{"templateID":"py"}"#),
            ("/api/sandbox", r#"{"snapshot":"py"}"#),
        ] {
            assert_eq!(template(path, body), Some("py".into()), "{path}");
        }
        assert_eq!(template("/v1/sandboxes", r#"{"template":""}"#), None);
        assert_eq!(template("/v1/sandboxes", r#"{"template":7}"#), None);
        assert_eq!(template("/v1/sandboxes", "not json"), None);
        assert_eq!(template("/api/sandbox", r#"{"template":"py"}"#), None);
    }

    /// A route as the tests compare it.
    #[derive(Debug, PartialEq, Eq)]
    enum Seen {
        Here,
        Owner(String),
        Volume(String),
        Place,
        Merge,
    }

    fn route(method: &Method, path: &str) -> Seen {
        match route_of(&crate::SURFACES, method, path) {
            Route::Here => Seen::Here,
            Route::Owner(key) => Seen::Owner(key),
            Route::Volume(key) => Seen::Volume(key),
            Route::Place(_) => Seen::Place,
            Route::Merge(_) => Seen::Merge,
        }
    }

    #[test]
    fn routes_follow_the_surfaces_paths() {
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(route(&post, "/v1/sandboxes"), Seen::Place);
        assert_eq!(route(&post, "/sandboxes"), Seen::Place);
        assert_eq!(route(&post, "/api/sandbox"), Seen::Place);
        assert_eq!(route(&get, "/v1/sandboxes"), Seen::Merge);
        assert_eq!(route(&get, "/v2/sandboxes"), Seen::Merge);
        assert_eq!(route(&get, "/api/sandbox"), Seen::Merge);
        assert_eq!(
            route(&get, "/v1/sandboxes/sb1/files"),
            Seen::Owner("sb1".into())
        );
        assert_eq!(
            route(&post, "/sandboxes/sb2/timeout"),
            Seen::Owner("sb2".into())
        );
        assert_eq!(
            route(&get, "/api/toolbox/sb3/toolbox/files"),
            Seen::Owner("sb3".into())
        );
        assert_eq!(route(&get, "/api/sandbox/paginated"), Seen::Here);
        assert_eq!(route(&get, "/v1/images"), Seen::Here);
        assert_eq!(route(&get, "/v1/sandboxesx"), Seen::Here);
        assert_eq!(route(&get, "/health"), Seen::Here);
        // A volume's own routes go to the node it lives on; making one stays here, and a listing
        // merges every node's.
        let vol = |k: &str| Seen::Volume(k.into());
        assert_eq!(route(&get, "/v1/volumes/data/files/content"), vol("data"));
        assert_eq!(route(&Method::DELETE, "/volumes/vol1"), vol("vol1"));
        assert_eq!(route(&Method::PUT, "/volumecontent/vol1/file"), vol("vol1"));
        assert_eq!(route(&get, "/api/volumes/by-name/data"), vol("data"));
        assert_eq!(route(&get, "/api/volumes/vol1"), vol("vol1"));
        assert_eq!(route(&post, "/v1/volumes"), Seen::Here);
        assert_eq!(route(&get, "/volumes"), Seen::Merge);
        assert_eq!(route(&get, "/v1/volumes"), Seen::Merge);
        assert_eq!(route(&get, "/api/volumes"), Seen::Merge);
    }
}
