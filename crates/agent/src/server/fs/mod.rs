//! `filesystem.Filesystem`: Stat, ListDir, MakeDir, Move, Remove, each done with the caller's
//! filesystem identity (see [`creds`]), and watching directories ([`watch`]). Semantics follow envd:
//! MakeDir creates parents and answers `already_exists` for an existing directory (`invalid_argument`
//! for an existing non-directory); Move creates the destination's parents; Remove is recursive and
//! succeeds when nothing is there; entries carry their metadata ([`xattr`]).

pub mod creds;
mod entry;
mod watch;
pub mod xattr;

pub use watch::WatcherTable;

pub use entry::resolve_path;

use super::auth::Caller;
use super::error::ServerError;
use super::rpc;
use super::AppState;
use axum::routing::post;
use axum::Router;
use sandboxd_envd::filesystem::{
    self as proto, ListDirRequest, ListDirResponse, MakeDirRequest, MakeDirResponse, MoveRequest,
    MoveResponse, RemoveRequest, RemoveResponse, StatRequest, StatResponse,
};
use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(&proto::path("Stat"), rpc::unary(stat))
        .route(&proto::path("ListDir"), rpc::unary(list_dir))
        .route(&proto::path("MakeDir"), rpc::unary(make_dir))
        .route(&proto::path("Move"), rpc::unary(move_entry))
        .route(&proto::path("Remove"), rpc::unary(remove))
        .route(&proto::path("WatchDir"), post(watch::watch_dir))
        .route(
            &proto::path("CreateWatcher"),
            rpc::unary(watch::create_watcher),
        )
        .route(
            &proto::path("GetWatcherEvents"),
            rpc::unary(watch::get_watcher_events),
        )
        .route(
            &proto::path("RemoveWatcher"),
            rpc::unary(watch::remove_watcher),
        )
}

async fn stat(
    _state: AppState,
    caller: Caller,
    req: StatRequest,
) -> Result<StatResponse, ServerError> {
    let path = resolve_path(&req.path, &caller.user)?;
    let Caller { user, db } = caller;
    creds::run_as(&user, move || {
        entry::entry_info(&path, &db).map_err(|e| match e.code() {
            sandboxd_envd::Code::NotFound => {
                ServerError::NotFound(format!("file not found: {}", path.display()))
            }
            _ => e,
        })
    })
    .await
    .map(|entry| StatResponse { entry })
}

async fn list_dir(
    _state: AppState,
    caller: Caller,
    req: ListDirRequest,
) -> Result<ListDirResponse, ServerError> {
    let path = resolve_path(&req.path, &caller.user)?;
    let depth = req.depth.max(1);
    let Caller { user, db } = caller;
    creds::run_as(&user, move || entry::walk(&path, depth, &db))
        .await
        .map(|entries| ListDirResponse { entries })
}

async fn make_dir(
    _state: AppState,
    caller: Caller,
    req: MakeDirRequest,
) -> Result<MakeDirResponse, ServerError> {
    let path = resolve_path(&req.path, &caller.user)?;
    let Caller { user, db } = caller;
    creds::run_as(&user, move || {
        match fs::metadata(&path) {
            Ok(md) if md.is_dir() => {
                return Err(ServerError::AlreadyExists(format!(
                    "directory already exists: {}",
                    path.display()
                )))
            }
            Ok(_) => {
                return Err(ServerError::InvalidArgument(format!(
                    "path already exists but it is not a directory: {}",
                    path.display()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ServerError::io("stat", path.display())(e)),
        }
        create_dirs(&path)?;
        entry::entry_info(&path, &db)
    })
    .await
    .map(|entry| MakeDirResponse { entry })
}

async fn move_entry(
    _state: AppState,
    caller: Caller,
    req: MoveRequest,
) -> Result<MoveResponse, ServerError> {
    let source = resolve_path(&req.source, &caller.user)?;
    let destination = resolve_path(&req.destination, &caller.user)?;
    let Caller { user, db } = caller;
    creds::run_as(&user, move || {
        if let Some(parent) = destination.parent() {
            create_dirs(parent)?;
        }
        fs::rename(&source, &destination).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) if fs::symlink_metadata(&source).is_err() => {
                ServerError::NotFound(format!("source file not found: {}", source.display()))
            }
            _ => ServerError::io(
                "rename",
                format!("{} to {}", source.display(), destination.display()),
            )(e),
        })?;
        entry::entry_info(&destination, &db)
    })
    .await
    .map(|entry| MoveResponse { entry })
}

async fn remove(
    _state: AppState,
    caller: Caller,
    req: RemoveRequest,
) -> Result<RemoveResponse, ServerError> {
    let path = resolve_path(&req.path, &caller.user)?;
    if path == Path::new("/") {
        return Err(ServerError::InvalidArgument("refusing to remove /".into()));
    }
    let user = caller.user;
    creds::run_as(&user, move || {
        let result = match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => Err(e),
            Ok(md) if md.is_dir() => fs::remove_dir_all(&path),
            Ok(_) => fs::remove_file(&path),
        };
        result.map_err(ServerError::io("remove", path.display()))
    })
    .await
    .map(|()| RemoveResponse {})
}

/// `mkdir -p` with mode 0755; new directories belong to the calling thread's fsuid/fsgid.
pub fn create_dirs(path: &Path) -> Result<(), ServerError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(ServerError::io("create directory", path.display()))
}
