//! The Daytona API, served under `/api` on the daemon's listener, so that the real Daytona SDKs
//! (`daytona` on PyPI, `@daytonaio/sdk`) work unmodified with `DAYTONA_API_URL=http://HOST:PORT/api`
//! and `DAYTONA_API_KEY` set to a daemon API key, admin or user (sent as `Authorization: Bearer`,
//! checked by [`sandboxd_surface::auth::authenticate`], refused in Daytona's error shape; Daytona's
//! organization headers are accepted and ignored).
//!
//! What is served so far (the rest of Daytona's surface answers 404, or 501 where the SDKs call it
//! and sandboxd refuses it on purpose: [`unsupported`]; `tests/daytona/surface/python.md` and
//! `typescript.md` list every method of the two SDKs in one of the two columns):
//! - Control ([`control`]): `POST /api/sandbox`, `GET /api/sandbox` (`{items, nextCursor}`,
//!   `labels` filter), `GET|DELETE /api/sandbox/{idOrName}`, `POST …/start`, `POST …/stop`,
//!   `GET …/toolbox-proxy-url`, `POST …/resize`, `POST …/pause`; creates waiting for their build ([`pending`]:
//!   `pending_build`, `building_snapshot`, `…/build-logs-url`, `…/build-logs`); inactivity ([`lifecycle`]: `autostop`, `autopause`, `autodelete`,
//!   `autoarchive`, `last-activity`); snapshots ([`snapshots`]: the daemon's templates, create,
//!   list, get, delete, activate, build logs); previews ([`previews`]: preview and signed links, `public`);
//!   a running sandbox's secrets and environment ([`env`]: `PUT …/secrets`, the toolbox's `/env`).
//! - Toolbox ([`toolbox`]) at `/api/toolbox/{id}/…`: `process/execute`, `process/code-run`, the
//!   interpreter's contexts and `run_code` WebSocket, `user-home-dir`, `work-dir`; sessions
//!   ([`sessions`]: create, exec sync and async, command status, logs and their `follow` WebSocket,
//!   delete); PTY sessions ([`pty`]: create, list, info, resize, kill, and their WebSockets,
//!   `create-connect` and `connect`).
//! - Toolbox file system ([`files`], [`transfer`]) at `/api/toolbox/{id}/files…`: list, `info`,
//!   `folder`, delete, `move`, `permissions`, `find`, `search`, `replace`, `bulk-upload`,
//!   `bulk-download` (multipart, [`multipart`]), `download`, `upload-v2`.
//! - Toolbox git ([`git`], [`git_more`], on the service's git flow) at `/api/toolbox/{id}/git/…`:
//!   `clone`, `status`, `add`, `commit`, `branches` (list, create, delete), `checkout`, `push`,
//!   `pull`, `init`, `remotes`, `reset`, `restore`, `config`, `config/user`, `credentials`.
//! - Toolbox language servers ([`lsp`]) at `/api/toolbox/{id}/lsp/…`: `start`, `stop`,
//!   `did-open`, `did-close`, `completions`, `document-symbols`, `workspacesymbols`.
//! - Signed file URLs ([`file_urls`]): `GET …/signing-key`, `POST …/signing-key/rotate`; a
//!   download or upload-v2 request signed with the key needs no token.
//! - Object storage ([`object_storage`]): `GET /api/object-storage/push-access`, credentials for
//!   the daemon's object store, where builds' local files are uploaded.
//! - The SDK's Socket.IO endpoint (`/api/socket.io/`) is a 404: the SDK then polls.
//!
//! Errors are `{statusCode, message, code}` ([`error`]) with the statuses the SDK maps; the file
//! and git routes add the daemon's codes and `source` ([`toolbox_error`]).

pub mod charts;
pub mod control;
pub mod env;
pub mod error;
pub mod file_urls;
pub mod files;
pub mod git;
pub mod git_more;
pub mod lifecycle;
pub mod lsp;
pub mod metrics;
pub mod models;
pub mod multipart;
pub mod network;
pub mod object_storage;
pub mod pending;
pub mod previews;
pub mod pty;
pub mod secrets;
pub mod sessions;
pub mod snapshots;
pub mod toolbox;
pub mod toolbox_error;
pub mod transfer;
pub mod unsupported;
pub mod volumes;
pub mod warm_pools;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{middleware, Router};
use sandboxd_service::Service;
use sandboxd_surface::auth::{self, Auth};
use sandboxd_surface::routes::{CreateRoute, ListRoute, ListShape, SurfaceRoutes, VolumesField};

/// Largest JSON body accepted.
const JSON_LIMIT: usize = 1024 * 1024;

/// This API's sandbox routes, for the cluster's forwarding layer.
pub const CLUSTER_ROUTES: SurfaceRoutes = SurfaceRoutes {
    sandbox_roots: &["/api/sandbox", "/api/toolbox"],
    not_sandboxes: &["paginated"],
    creates: &[CreateRoute {
        path: "/api/sandbox",
        template_field: "snapshot",
        volumes: VolumesField {
            list: "volumes",
            volume: "volumeId",
        },
        fingerprint: None,
    }],
    lists: &[
        ListRoute {
            path: "/api/sandbox",
            shape: ListShape::Envelope {
                items: "items",
                created: "createdAt",
                id: "id",
            },
        },
        ListRoute {
            path: "/api/volumes",
            shape: ListShape::Whole,
        },
    ],
    volume_roots: &["/api/volumes/by-name", "/api/volumes"],
};

/// The Daytona routes, authenticated, to merge into the daemon's router.
pub fn router(service: Service, auth: Auth) -> Router {
    Router::new()
        .route("/api/sandbox", post(control::create).get(control::list))
        .route("/api/volumes", post(volumes::create).get(volumes::list))
        .route(
            "/api/volumes/{key}",
            get(volumes::get).delete(volumes::delete),
        )
        .route("/api/volumes/by-name/{key}", get(volumes::get))
        .merge(
            Router::new()
                .route(
                    "/api/warm-pools",
                    post(warm_pools::create).get(warm_pools::list),
                )
                .route(
                    "/api/warm-pools/{id}",
                    axum::routing::patch(warm_pools::update).delete(warm_pools::delete),
                )
                .route_layer(axum::middleware::from_fn(
                    sandboxd_surface::auth::admin_only,
                )),
        )
        .route("/api/secret", post(secrets::create).get(secrets::list))
        .route("/api/secret/paginated", get(secrets::paginated))
        .route(
            "/api/secret/{id}",
            get(secrets::get)
                .patch(secrets::update)
                .delete(secrets::delete),
        )
        .route(
            "/api/sandbox/{key}",
            get(control::get).delete(control::delete),
        )
        .route("/api/sandbox/{key}/start", post(control::start))
        .route("/api/sandbox/{key}/stop", post(control::stop))
        .route("/api/sandbox/{key}/pause", post(control::pause))
        .route("/api/sandbox/{key}/resize", post(control::resize))
        .route(
            "/api/sandbox/{key}/secrets",
            axum::routing::put(env::update_secrets),
        )
        .route(
            "/api/sandbox/{key}/build-logs-url",
            get(pending::build_logs_url),
        )
        .route("/api/sandbox/{key}/build-logs", get(pending::build_logs))
        .route(
            "/api/sandbox/{key}/autostop/{minutes}",
            post(lifecycle::autostop),
        )
        .route("/api/sandbox/{key}/ttl/{minutes}", post(lifecycle::ttl))
        .route("/api/sandbox/{key}/network-settings", post(network::update))
        .route(
            "/api/sandbox/{key}/autopause/{minutes}",
            post(lifecycle::autopause),
        )
        .route(
            "/api/sandbox/{key}/autodelete/{minutes}",
            post(lifecycle::autodelete),
        )
        .route(
            "/api/sandbox/{key}/autoarchive/{minutes}",
            post(lifecycle::autoarchive),
        )
        .route("/api/sandbox/{key}/snapshot", post(snapshots::of_sandbox))
        .route("/api/sandbox/{key}/fork", post(snapshots::fork))
        .route(
            "/api/sandbox/{key}/last-activity",
            post(lifecycle::last_activity),
        )
        .route(
            "/api/sandbox/{key}/toolbox-proxy-url",
            get(control::toolbox_proxy_url),
        )
        .route(
            "/api/sandbox/{key}/public/{public}",
            post(previews::set_public),
        )
        .route(
            "/api/sandbox/{key}/labels",
            axum::routing::put(previews::replace_labels),
        )
        .route(
            "/api/sandbox/{key}/ports/{port}/preview-url",
            get(previews::preview_url),
        )
        .route(
            "/api/sandbox/{key}/ports/{port}/signed-preview-url",
            get(previews::signed_preview_url),
        )
        .route(
            "/api/sandbox/{key}/ports/{port}/signed-preview-url/{token}/expire",
            post(previews::expire_signed_preview_url),
        )
        .route(
            "/api/snapshots",
            post(snapshots::create).get(snapshots::list),
        )
        .route(
            "/api/snapshots/{name}",
            get(snapshots::get).delete(snapshots::delete),
        )
        .route("/api/snapshots/{name}/activate", post(snapshots::activate))
        .route(
            "/api/snapshots/{name}/build-logs-url",
            get(snapshots::build_logs_url),
        )
        .route(
            "/api/snapshots/{name}/build-logs",
            get(snapshots::build_logs),
        )
        .route(
            "/api/object-storage/push-access",
            get(object_storage::push_access),
        )
        .route("/api/toolbox/{id}/process/execute", post(toolbox::execute))
        .route("/api/toolbox/{id}/system/metrics", get(metrics::latest))
        .route("/api/sandbox/{key}/telemetry/metrics", get(metrics::series))
        .route("/api/config", get(metrics::config))
        .route(
            "/api/toolbox/{id}/process/code-run",
            post(toolbox::code_run),
        )
        .route(
            "/api/toolbox/{id}/process/interpreter/context",
            post(toolbox::create_context).get(toolbox::list_contexts),
        )
        .route(
            "/api/toolbox/{id}/process/interpreter/context/{context}",
            delete(toolbox::delete_context),
        )
        .route(
            "/api/toolbox/{id}/process/interpreter/execute",
            get(toolbox::run_code_socket),
        )
        .route(
            "/api/toolbox/{id}/process/session",
            post(sessions::create).get(sessions::list),
        )
        .route(
            "/api/toolbox/{id}/process/session/{sid}",
            get(sessions::get).delete(sessions::delete),
        )
        .route(
            "/api/toolbox/{id}/process/session/{sid}/exec",
            post(sessions::exec),
        )
        .route(
            "/api/toolbox/{id}/process/session/{sid}/command/{cid}",
            get(sessions::command),
        )
        .route(
            "/api/toolbox/{id}/process/session/{sid}/command/{cid}/logs",
            get(sessions::logs),
        )
        .route(
            "/api/toolbox/{id}/process/session/{sid}/command/{cid}/input",
            post(sessions::input),
        )
        .merge(pty_router())
        .route(
            "/api/toolbox/{id}/user-home-dir",
            get(toolbox::user_home_dir),
        )
        .route("/api/toolbox/{id}/work-dir", get(toolbox::work_dir))
        .route("/api/toolbox/{id}/env", post(env::update_env))
        .merge(files_router())
        .merge(git_router())
        .merge(lsp::router())
        .merge(unsupported::router())
        .route(
            "/api/sandbox/{key}/signing-key",
            get(file_urls::signing_key),
        )
        .route(
            "/api/sandbox/{key}/signing-key/rotate",
            post(file_urls::rotate_signing_key),
        )
        .layer(DefaultBodyLimit::max(JSON_LIMIT))
        .route_layer(middleware::from_fn_with_state(
            (auth, service.clone()),
            require,
        ))
        .with_state(service)
}

/// [`auth::require`], refusing in Daytona's error shape (the SDK reads `statusCode`); a signed
/// file URL ([`file_urls`]) stands in for the token on its one request.
async fn require(
    State((auth, service)): State<(Auth, Service)>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(signed) = file_urls::SignedRequest::of(&req) {
        return match signed.check(&service).await {
            Ok(()) => next.run(req).await,
            Err(e) => error::DaytonaError::from(e).into_response(),
        };
    }
    match auth::authenticate(&auth, req).await {
        Ok(req) => next.run(req).await,
        Err(e) => error::DaytonaError::from(e).into_response(),
    }
}

/// The toolbox's file-system routes ([`files`], [`transfer`]); transfers take bodies of any size.
fn files_router() -> Router<Service> {
    let t = "/api/toolbox/{id}/files";
    Router::new()
        .route(t, get(files::list).delete(files::delete))
        .route(&format!("{t}/info"), get(files::info))
        .route(&format!("{t}/folder"), post(files::create_folder))
        .route(&format!("{t}/move"), post(files::move_file))
        .route(&format!("{t}/permissions"), post(files::set_permissions))
        .route(&format!("{t}/find"), get(files::find))
        .route(&format!("{t}/search"), get(files::search))
        .route(&format!("{t}/replace"), post(files::replace))
        .route(&format!("{t}/bulk-download"), post(transfer::bulk_download))
        .route(&format!("{t}/download"), get(transfer::download))
        .route(&format!("{t}/bulk-upload"), post(transfer::bulk_upload))
        .route(&format!("{t}/upload-v2"), post(transfer::upload))
}

/// The toolbox's PTY session routes ([`pty`]).
fn pty_router() -> Router<Service> {
    let p = "/api/toolbox/{id}/process/pty";
    Router::new()
        .route(p, post(pty::create).get(pty::list))
        .route(&format!("{p}/create-connect"), get(pty::create_connect))
        .route(&format!("{p}/{{sid}}"), get(pty::get).delete(pty::delete))
        .route(&format!("{p}/{{sid}}/connect"), get(pty::connect))
        .route(&format!("{p}/{{sid}}/resize"), post(pty::resize))
}

/// The toolbox's git routes ([`git`], [`git_more`]).
fn git_router() -> Router<Service> {
    let g = "/api/toolbox/{id}/git";
    Router::new()
        .route(&format!("{g}/clone"), post(git::clone))
        .route(&format!("{g}/status"), get(git::status))
        .route(&format!("{g}/add"), post(git::add))
        .route(&format!("{g}/commit"), post(git::commit))
        .route(
            &format!("{g}/branches"),
            get(git::branches)
                .post(git::create_branch)
                .delete(git::delete_branch),
        )
        .route(&format!("{g}/checkout"), post(git::checkout))
        .route(&format!("{g}/push"), post(git::push))
        .route(&format!("{g}/pull"), post(git::pull))
        .route(&format!("{g}/init"), post(git_more::init))
        .route(
            &format!("{g}/remotes"),
            get(git_more::remotes).post(git_more::add_remote),
        )
        .route(&format!("{g}/reset"), post(git_more::reset))
        .route(&format!("{g}/restore"), post(git_more::restore))
        .route(
            &format!("{g}/config"),
            get(git_more::get_config).post(git_more::set_config),
        )
        .route(&format!("{g}/config/user"), post(git_more::configure_user))
        .route(&format!("{g}/credentials"), post(git_more::authenticate))
}
