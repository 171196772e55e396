//! The server side of node-to-node RPC, on `--cluster-listen`.
//!
//! Contract: there is no unauthenticated endpoint. Every request must carry
//! `Authorization: Bearer <cluster secret>` (compared in constant time); anything else is answered
//! 401 and logged with the caller's address. Answers are the JSON of the handler's `Result`, which
//! [`crate::network`] turns back into openraft's errors.

use crate::network::paths;
use crate::node::{Cluster, JoinRequest};
use crate::state::Command;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use std::net::SocketAddr;
use subtle::ConstantTimeEq;

use crate::TypeConfig;

/// The RPC router of `cluster`.
pub fn router(cluster: Cluster) -> Router {
    Router::new()
        .route(paths::APPEND, post(append))
        .route(paths::VOTE, post(vote))
        .route(paths::SNAPSHOT, post(snapshot))
        .route(paths::PROPOSE, post(propose))
        .route(paths::JOIN, post(join))
        .route(paths::READ_INDEX, post(read_index))
        .layer(middleware::from_fn_with_state(
            cluster.clone(),
            authenticate,
        ))
        .with_state(cluster)
}

/// Serves [`router`] on `listener` until the runtime stops.
pub async fn serve(listener: tokio::net::TcpListener, cluster: Cluster) {
    let app = router(cluster).into_make_service_with_connect_info::<SocketAddr>();
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "the cluster listener stopped");
    }
}

async fn authenticate(State(cluster): State<Cluster>, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let expected = cluster.secret().as_bytes();
    if given.len() == expected.len() && bool::from(given.as_bytes().ct_eq(expected)) {
        return next.run(req).await;
    }
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.to_string())
        .unwrap_or_default();
    tracing::warn!(%peer, path = %req.uri().path(), "refused a cluster call: wrong or missing cluster secret");
    (
        StatusCode::UNAUTHORIZED,
        Json(serde_json::json!({"code": "unauthorized", "message": "wrong or missing cluster secret"})),
    )
        .into_response()
}

async fn append(
    State(cluster): State<Cluster>,
    Json(req): Json<AppendEntriesRequest<TypeConfig>>,
) -> impl IntoResponse {
    Json(cluster.raft().append_entries(req).await)
}

async fn vote(
    State(cluster): State<Cluster>,
    Json(req): Json<VoteRequest<crate::NodeId>>,
) -> impl IntoResponse {
    Json(cluster.raft().vote(req).await)
}

async fn snapshot(
    State(cluster): State<Cluster>,
    Json(req): Json<InstallSnapshotRequest<TypeConfig>>,
) -> impl IntoResponse {
    Json(cluster.raft().install_snapshot(req).await)
}

async fn propose(
    State(cluster): State<Cluster>,
    Json(command): Json<Command>,
) -> impl IntoResponse {
    Json(cluster.write_here(command).await)
}

async fn read_index(State(cluster): State<Cluster>) -> impl IntoResponse {
    Json(cluster.read_index_here().await)
}

async fn join(State(cluster): State<Cluster>, Json(req): Json<JoinRequest>) -> impl IntoResponse {
    Json(cluster.add_member(req).await)
}
