//! Watching directories: the `WatchDir` stream and the polling watchers (`CreateWatcher`,
//! `GetWatcherEvents`, `RemoveWatcher`) the SDK's synchronous client uses.
//!
//! Contract:
//! - The path resolves like every filesystem call and must be a directory the caller may read: the
//!   initial watches are placed with the caller's filesystem identity (directories that appear later
//!   under a recursive watch are added by the agent itself, as envd does). A directory on NFS,
//!   CIFS/SMB or FUSE is refused unless `allowNetworkMounts` is set. With `includeEntry` each event
//!   carries the entry's `EntryInfo` when it can still be stat-ed (the agent stats it, as envd does).
//! - `WatchDir` opens with `start` once the watch is in place, sends keepalives when idle, and ends
//!   (with an error frame) only if the watch fails; the client ends it by going away.
//! - A watcher buffers up to [`MAX_BUFFERED`] events between polls (then it stops with an error that
//!   the next poll reports); it lives until `RemoveWatcher` or agent shutdown. At most
//!   [`MAX_WATCHERS`] exist at once.

mod inotify;

use super::super::auth::Caller;
use super::super::error::ServerError;
use super::super::rpc::{self, StreamShape};
use super::super::users::UserDb;
use super::super::AppState;
use super::{creds, entry, resolve_path};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use inotify::{Change, Parts, Watcher};
use sandboxd_envd::filesystem::{
    CreateWatcherRequest, CreateWatcherResponse, Empty, FilesystemEvent, GetWatcherEventsRequest,
    GetWatcherEventsResponse, RemoveWatcherRequest, RemoveWatcherResponse, WatchDirRequest,
    WatchDirResponse, WatchEvent,
};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Events a watcher holds between two polls.
pub const MAX_BUFFERED: usize = 100_000;
/// Watchers that may exist at once.
pub const MAX_WATCHERS: usize = 1024;

/// Filesystem magic numbers of network and FUSE filesystems (`linux/magic.h`).
const NETWORK_FS: [i64; 5] = [0x6969, 0xFF53_4D42, 0x517B, 0xFE53_4D42, 0x6573_5546];

/// A watch as the caller asked for it, ready to report.
struct Watch {
    watcher: Watcher,
    db: UserDb,
    include_entry: bool,
}

impl Watch {
    async fn open(caller: Caller, req: &WatchDirRequest) -> Result<Watch, ServerError> {
        let path = resolve_path(&req.path, &caller.user)?;
        let (recursive, allow_network) = (req.recursive, req.allow_network_mounts);
        let Caller { user, db } = caller;
        let parts = creds::run_as(&user, move || {
            check_watchable(&path, allow_network)?;
            Parts::open(&path, recursive).map_err(ServerError::io("watch", path.display()))
        })
        .await?;
        let watcher = Watcher::register(parts)
            .map_err(|e| ServerError::Internal(format!("cannot register the watch: {e}")))?;
        Ok(Watch {
            watcher,
            db,
            include_entry: req.include_entry,
        })
    }

    async fn next(&mut self) -> Result<FilesystemEvent, ServerError> {
        let change = self
            .watcher
            .next()
            .await
            .map_err(|e| ServerError::Internal(format!("watcher error: {e}")))?;
        Ok(self.event(change))
    }

    fn event(&self, change: Change) -> FilesystemEvent {
        let entry = self
            .include_entry
            .then(|| entry::entry_info(&change.path, &self.db).ok())
            .flatten();
        FilesystemEvent {
            name: change.name,
            event_type: change.kind,
            entry,
        }
    }
}

fn check_watchable(path: &Path, allow_network: bool) -> Result<(), ServerError> {
    let md = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            ServerError::NotFound(format!("path {} not found", path.display()))
        }
        _ => ServerError::io("stat", path.display())(e),
    })?;
    if !md.is_dir() {
        return Err(ServerError::InvalidArgument(format!(
            "path {} not a directory",
            path.display()
        )));
    }
    if !allow_network && on_network_mount(path) {
        return Err(ServerError::InvalidArgument(format!(
            "cannot watch path on network filesystem: {}",
            path.display()
        )));
    }
    Ok(())
}

fn on_network_mount(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(cpath) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs fills a zeroed struct through a valid pointer; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(cpath.as_ptr(), &mut st) } != 0 {
        return false;
    }
    NETWORK_FS.contains(&(st.f_type as i64))
}

/// `WatchDir`: `start`, then the changes as they happen.
pub async fn watch_dir(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let opened = async {
        let req: WatchDirRequest = rpc::stream_request(&headers, &body)?;
        let caller = Caller::from_headers(&state, &headers)?;
        Watch::open(caller, &req).await
    }
    .await;
    let watch = match opened {
        Ok(w) => w,
        Err(e) => return rpc::stream_error(&e),
    };
    let events = futures::stream::unfold(watch, |mut watch| async move {
        let event = watch.next().await.map(WatchEvent::Filesystem);
        Some((event, watch))
    });
    let shape = StreamShape {
        keepalive_message: WatchEvent::Keepalive(Empty {}),
        keepalive: rpc::keepalive_interval(&headers, state.opts.keepalive),
        is_last: |_| false,
        on_exhausted: None,
    };
    let first: WatchDirResponse = WatchEvent::Start(Empty {});
    rpc::stream_response(Body::from_stream(rpc::message_stream(first, events, shape)))
}

/// The polling watchers, by id.
#[derive(Default)]
pub struct WatcherTable {
    watchers: Mutex<HashMap<String, Arc<Buffered>>>,
}

/// A watcher's buffered events, filled by its task (aborted when the watcher goes).
struct Buffered {
    state: Mutex<BufferState>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

#[derive(Default)]
struct BufferState {
    events: Vec<FilesystemEvent>,
    failed: Option<String>,
}

impl Buffered {
    fn lock(&self) -> std::sync::MutexGuard<'_, BufferState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Buffered {
    fn drop(&mut self) {
        let task = self.task.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(task) = task.take() {
            task.abort();
        }
    }
}

impl WatcherTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Buffered>>> {
        self.watchers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, id: &str) -> Result<Arc<Buffered>, ServerError> {
        self.lock()
            .get(id)
            .cloned()
            .ok_or_else(|| ServerError::NotFound(format!("watcher with id {id} not found")))
    }
}

pub async fn create_watcher(
    state: AppState,
    caller: Caller,
    req: CreateWatcherRequest,
) -> Result<CreateWatcherResponse, ServerError> {
    if state.watchers.lock().len() >= MAX_WATCHERS {
        return Err(ServerError::ResourceExhausted(format!(
            "too many watchers (at most {MAX_WATCHERS}); remove some first"
        )));
    }
    let mut watch = Watch::open(caller, &req).await?;
    let buffered = Arc::new(Buffered {
        state: Mutex::new(BufferState::default()),
        task: Mutex::new(None),
    });
    let sink = Arc::downgrade(&buffered);
    let task = tokio::spawn(async move {
        loop {
            let next = watch.next().await;
            let Some(buffered) = sink.upgrade() else {
                return;
            };
            let mut st = buffered.lock();
            match next {
                Ok(event) if st.events.len() < MAX_BUFFERED => st.events.push(event),
                Ok(_) => {
                    st.failed = Some(format!(
                        "more than {MAX_BUFFERED} events were not collected; the watcher stopped"
                    ));
                    return;
                }
                Err(e) => {
                    st.failed = Some(e.message());
                    return;
                }
            }
        }
    });
    *buffered.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task.abort_handle());
    let id = watcher_id()?;
    state.watchers.lock().insert(id.clone(), buffered);
    tracing::debug!(watcher = %id, path = %req.path, recursive = req.recursive, "watcher created");
    Ok(CreateWatcherResponse { watcher_id: id })
}

pub async fn get_watcher_events(
    state: AppState,
    _caller: Caller,
    req: GetWatcherEventsRequest,
) -> Result<GetWatcherEventsResponse, ServerError> {
    let buffered = state.watchers.get(&req.watcher_id)?;
    let mut st = buffered.lock();
    if let Some(failed) = &st.failed {
        return Err(ServerError::Internal(failed.clone()));
    }
    Ok(GetWatcherEventsResponse {
        events: std::mem::take(&mut st.events),
    })
}

pub async fn remove_watcher(
    state: AppState,
    _caller: Caller,
    req: RemoveWatcherRequest,
) -> Result<RemoveWatcherResponse, ServerError> {
    let removed = state.watchers.lock().remove(&req.watcher_id);
    match removed {
        Some(_) => Ok(RemoveWatcherResponse {}),
        None => Err(ServerError::NotFound(format!(
            "watcher with id {} not found",
            req.watcher_id
        ))),
    }
}

/// `w` and 16 random hex digits, like envd's ids.
fn watcher_id() -> Result<String, ServerError> {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom fills at most `bytes.len()` bytes of a valid buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        return Err(ServerError::Internal(
            "no randomness for a watcher id".into(),
        ));
    }
    Ok(std::iter::once("w".to_string())
        .chain(bytes.iter().map(|b| format!("{b:02x}")))
        .collect())
}
