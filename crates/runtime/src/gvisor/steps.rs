//! The small host-side steps the gVisor runtime's flows are made of: running runsc to its end,
//! copying a writable layer, waiting on the agent's markers, and files made, removed and synced
//! without caring whether they were there.

use super::SUSPEND_TIMEOUT;
use crate::RuntimeError;
use std::path::Path;
use std::time::Duration;

/// Runs `cmd` to its end within `limit`; a failure carries its standard error.
pub(super) async fn run_to_end(
    cmd: std::process::Command,
    limit: Duration,
    what: &str,
) -> Result<(), RuntimeError> {
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(limit, cmd.output())
        .await
        .map_err(|_| RuntimeError::Host(format!("{what} did not finish within {limit:?}")))?
        .map_err(RuntimeError::Spawn)?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let first = stderr.lines().next().unwrap_or_default();
    Err(RuntimeError::Host(format!(
        "{what} failed ({}): {first}",
        output.status
    )))
}

/// Copies the writable layer `from` into `to` (empty), keeping owners, modes, links and overlay
/// whiteouts; shares the data blocks where the filesystem can (reflinks on btrfs and XFS).
pub(super) async fn copy_layer(from: &Path, to: &Path) -> Result<(), RuntimeError> {
    let mut cmd = tokio::process::Command::new("cp");
    cmd.arg("-a")
        .arg("--reflink=auto")
        .arg("--")
        .arg(from.join("."))
        .arg(to)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = cmd.output().await.map_err(RuntimeError::Spawn)?;
    if output.status.success() {
        return Ok(());
    }
    Err(RuntimeError::Host(format!(
        "copying the writable layer {} failed: {}",
        from.display(),
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

/// Polls `done` every 2 ms until it holds; when [`SUSPEND_TIMEOUT`] passes first, a boot error of
/// `stage` saying the agent did not `what` in time.
pub(super) async fn wait_for_agent<F, Fut>(
    stage: &str,
    what: &str,
    mut done: F,
) -> Result<(), RuntimeError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + SUSPEND_TIMEOUT;
    while !done().await {
        if tokio::time::Instant::now() > deadline {
            return Err(RuntimeError::Boot {
                stage: stage.into(),
                message: format!("the agent did not {what} within {SUSPEND_TIMEOUT:?}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// Whether the agent answers an HTTP request through the socket at `path` within a second: its
/// door listens *and* relays to the core (a connect alone is taken by the listener's backlog
/// before the door process serves it).
pub(super) async fn answers(path: &Path) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let round_trip = async {
        let mut stream = tokio::net::UnixStream::connect(path).await.ok()?;
        stream
            .write_all(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .await
            .ok()?;
        let mut head = [0u8; 7];
        stream.read_exact(&mut head).await.ok()?;
        (&head == b"HTTP/1.").then_some(())
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), round_trip).await,
        Ok(Some(()))
    )
}

/// Creates the empty file `path`.
pub(super) fn touch(path: &Path) -> Result<(), RuntimeError> {
    std::fs::File::create(path)
        .map(drop)
        .map_err(RuntimeError::io("create", path))
}

pub(super) fn remove_file(path: &Path) -> Result<(), RuntimeError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RuntimeError::io("remove", path)(e)),
    }
}

pub(super) fn remove_dir(path: &Path) -> Result<(), RuntimeError> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RuntimeError::io("remove", path)(e)),
    }
}

/// The mark of an image taken out of use and being removed (`<image>.spent-<pid>-<n>`).
pub(super) const SPENT: &str = ".spent-";

/// Takes checkpoint image `image` out of use at once and removes it behind the caller.
///
/// The image is renamed aside first, so nothing can restore it once this returns; the removal
/// (60 ms for a 256 MiB image on a filesystem mounted with online discard) runs on a blocking thread, off a resume's or a fork's path,
/// after the rename is synced. A daemon killed before it ends leaves the renamed image, which the
/// tier's next start removes ([`SPENT`]). An image that is not there is already discarded.
pub(super) fn discard_image(image: &Path) -> Result<(), RuntimeError> {
    static DISCARDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = DISCARDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = image.file_name().unwrap_or_default().to_os_string();
    name.push(format!("{SPENT}{}-{n}", std::process::id()));
    let spent = image.with_file_name(name);
    match std::fs::rename(image, &spent) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(RuntimeError::io("rename", image)(e)),
    }
    tokio::task::spawn_blocking(move || {
        let synced = spent.parent().map_or(Ok(()), |dir| {
            std::fs::File::open(dir).and_then(|d| d.sync_all())
        });
        if let Err(e) = synced
            .map_err(|e| e.to_string())
            .and_then(|()| remove_dir(&spent).map_err(|e| e.to_string()))
        {
            tracing::warn!(image = %spent.display(), error = %e, "removing a spent checkpoint image");
        }
    });
    Ok(())
}

/// Syncs every file directly in `dir`, then `dir` itself.
pub(super) fn sync_dir(dir: &Path) -> Result<(), RuntimeError> {
    for entry in std::fs::read_dir(dir).map_err(RuntimeError::io("list", dir))? {
        let path = entry.map_err(RuntimeError::io("list", dir))?.path();
        if path.is_file() {
            std::fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(RuntimeError::io("sync", &path))?;
        }
    }
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(RuntimeError::io("sync", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A discarded image is gone from its name when the call returns, and its files follow.
    #[tokio::test]
    async fn a_discarded_image_leaves_its_name_at_once_and_its_files_behind() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("sb-1");
        std::fs::create_dir(&image).unwrap();
        std::fs::write(image.join("pages.img"), vec![7u8; 1 << 20]).unwrap();
        discard_image(&image).unwrap();
        assert!(!image.exists(), "nothing may restore a discarded image");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::fs::read_dir(dir.path()).unwrap().next().is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "the spent image stayed"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        discard_image(&image).expect("an image that is not there is discarded already");
    }
}
