//! [`Watcher`]: inotify on one directory (and, recursively, the directories below it), reporting
//! changes the way envd's fsnotify does.
//!
//! Mapping of inotify events: `IN_CREATE`/`IN_MOVED_TO` → create, `IN_MOVED_FROM`/`IN_MOVE_SELF` →
//! rename, `IN_ATTRIB` → chmod, `IN_MODIFY` → write, `IN_DELETE`/`IN_DELETE_SELF` → remove; one
//! inotify event may yield several, in that order. Names are relative to the watched directory
//! (`sub/file.txt`; the directory itself is `.`). A recursive watcher adds directories created or
//! moved into the tree as it sees them (changes inside one before its watch is in place are missed,
//! as with fsnotify) and drops those moved out. A kernel queue overflow ends the watch with an error.
//!
//! [`Parts::open`] does the blocking part (adding the watches) and may run on a thread with the
//! caller's filesystem identity; [`Watcher::register`] then hands the descriptor to the runtime.

use sandboxd_envd::filesystem::EventType;
use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use tokio::io::unix::AsyncFd;

const MASK: u32 = libc::IN_CREATE
    | libc::IN_MOVED_TO
    | libc::IN_MOVED_FROM
    | libc::IN_MOVE_SELF
    | libc::IN_ATTRIB
    | libc::IN_MODIFY
    | libc::IN_DELETE
    | libc::IN_DELETE_SELF
    | libc::IN_ONLYDIR;
/// Size of `struct inotify_event` without its name.
const HEADER: usize = 16;

/// One change under the watched directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Relative to the watched directory.
    pub name: String,
    pub kind: EventType,
    /// Absolute path of the entry.
    pub path: PathBuf,
}

/// Why a watch stopped.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("too many changes at once: the kernel's event queue overflowed")]
    Overflow,
    #[error("reading filesystem events failed")]
    Read(#[source] io::Error),
}

/// The inotify descriptor and its watches, before the runtime knows about them.
pub struct Parts {
    fd: OwnedFd,
    root: PathBuf,
    recursive: bool,
    dirs: HashMap<i32, PathBuf>,
}

impl Parts {
    /// Watches `root` (and with `recursive` every directory below it, not following symlinks).
    pub fn open(root: &Path, recursive: bool) -> io::Result<Parts> {
        // SAFETY: inotify_init1 takes flags only; a valid result is an fd we own.
        let fd = unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(fd)
        };
        let mut parts = Parts {
            fd,
            root: root.to_path_buf(),
            recursive,
            dirs: HashMap::new(),
        };
        let wd = add_watch(&parts.fd, root)?;
        parts.dirs.insert(wd, PathBuf::new());
        if recursive {
            parts.add_below(root, Path::new(""));
        }
        Ok(parts)
    }

    /// Watches the directories below `dir` (`rel` relative to the root); failures skip a directory.
    fn add_below(&mut self, dir: &Path, rel: &Path) {
        let mut stack = vec![(dir.to_path_buf(), rel.to_path_buf())];
        while let Some((abs, rel)) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&abs) else {
                continue;
            };
            for entry in entries.flatten() {
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let (child_abs, child_rel) = (entry.path(), rel.join(entry.file_name()));
                match add_watch(&self.fd, &child_abs) {
                    Ok(wd) => {
                        self.dirs.insert(wd, child_rel.clone());
                        stack.push((child_abs, child_rel));
                    }
                    Err(e) => {
                        tracing::debug!(dir = %child_abs.display(), error = %e, "cannot watch directory")
                    }
                }
            }
        }
    }

    /// Adds `rel` (just created or moved in) and everything below it.
    fn add_tree(&mut self, rel: &Path) {
        let abs = self.root.join(rel);
        if let Ok(wd) = add_watch(&self.fd, &abs) {
            self.dirs.insert(wd, rel.to_path_buf());
            self.add_below(&abs, rel);
        }
    }

    /// Stops watching `rel` and everything below it (moved out of the tree).
    fn remove_tree(&mut self, rel: &Path) {
        let gone: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, d)| d.starts_with(rel))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
            // SAFETY: inotify_rm_watch on our own inotify fd; a stale wd only yields EINVAL.
            unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), wd) };
        }
    }
}

fn add_watch(fd: &OwnedFd, dir: &Path) -> io::Result<i32> {
    let path = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a NUL-terminated path on our own inotify fd.
    let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), MASK) };
    if wd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(wd)
}

/// A running watch; see the module docs.
pub struct Watcher {
    fd: AsyncFd<OwnedFd>,
    parts: Parts,
    buf: Vec<u8>,
    pending: VecDeque<Change>,
}

impl Watcher {
    /// Registers the watch with the runtime (call on a runtime thread).
    pub fn register(mut parts: Parts) -> io::Result<Watcher> {
        // The watch list stays in `parts`; the descriptor moves to the reactor, a duplicate kept for
        // adding and removing watches.
        let dup = parts.fd.try_clone()?;
        let fd = std::mem::replace(&mut parts.fd, dup);
        // SAFETY: `fd` is an open inotify descriptor owned by the AsyncFd until it drops.
        let fd = unsafe { AsyncFd::register(fd) }.map_err(|e| e.into_parts().1)?;
        Ok(Watcher {
            fd,
            parts,
            buf: vec![0u8; 64 << 10],
            pending: VecDeque::new(),
        })
    }

    /// The next change, waiting for one.
    pub async fn next(&mut self) -> Result<Change, WatchError> {
        loop {
            if let Some(change) = self.pending.pop_front() {
                return Ok(change);
            }
            let n = {
                let mut guard = self.fd.readable().await.map_err(WatchError::Read)?;
                let buf = &mut self.buf;
                match guard.try_io(|fd| {
                    // SAFETY: reads into a valid buffer of `buf.len()` bytes.
                    let n =
                        unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(n as usize)
                    }
                }) {
                    Ok(Ok(n)) => n,
                    Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Ok(Err(e)) => return Err(WatchError::Read(e)),
                    Err(_would_block) => continue,
                }
            };
            self.parse(n)?;
        }
    }

    fn parse(&mut self, len: usize) -> Result<(), WatchError> {
        let mut at = 0;
        while at + HEADER <= len {
            let field = |o: usize| {
                let b = &self.buf[at + o..at + o + 4];
                [b[0], b[1], b[2], b[3]]
            };
            let wd = i32::from_ne_bytes(field(0));
            let mask = u32::from_ne_bytes(field(4));
            let name_len = u32::from_ne_bytes(field(12)) as usize;
            let end = (at + HEADER + name_len).min(len);
            let raw = &self.buf[at + HEADER..end];
            let name = raw.split(|b| *b == 0).next().unwrap_or(&[]);
            let name = std::ffi::OsStr::from_bytes(name).to_os_string();
            at = end;
            self.handle(wd, mask, Path::new(&name))?;
        }
        Ok(())
    }

    fn handle(&mut self, wd: i32, mask: u32, name: &Path) -> Result<(), WatchError> {
        if mask & libc::IN_Q_OVERFLOW != 0 {
            return Err(WatchError::Overflow);
        }
        if mask & libc::IN_IGNORED != 0 {
            self.parts.dirs.remove(&wd);
            return Ok(());
        }
        let Some(dir) = self.parts.dirs.get(&wd).cloned() else {
            return Ok(());
        };
        let is_self = mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0;
        if is_self && !dir.as_os_str().is_empty() {
            // A subdirectory's own removal or move is reported by its parent's watch.
            return Ok(());
        }
        let rel = if is_self { dir.clone() } else { dir.join(name) };
        if self.parts.recursive && mask & libc::IN_ISDIR != 0 {
            if mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
                self.parts.add_tree(&rel);
            } else if mask & libc::IN_MOVED_FROM != 0 {
                self.parts.remove_tree(&rel);
            }
        }
        let shown = if rel.as_os_str().is_empty() {
            ".".to_string()
        } else {
            rel.to_string_lossy().into_owned()
        };
        let path = self.parts.root.join(&rel);
        for (bits, kind) in [
            (libc::IN_CREATE | libc::IN_MOVED_TO, EventType::Create),
            (libc::IN_MOVED_FROM | libc::IN_MOVE_SELF, EventType::Rename),
            (libc::IN_ATTRIB, EventType::Chmod),
            (libc::IN_MODIFY, EventType::Write),
            (libc::IN_DELETE | libc::IN_DELETE_SELF, EventType::Remove),
        ] {
            if mask & bits != 0 {
                self.pending.push_back(Change {
                    name: shown.clone(),
                    kind,
                    path: path.clone(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn next(w: &mut Watcher) -> Change {
        tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .expect("an event in time")
            .expect("an event")
    }

    /// Changes until none arrives for a moment.
    async fn drain(w: &mut Watcher) -> Vec<(String, EventType)> {
        let mut out = Vec::new();
        while let Ok(Ok(c)) = tokio::time::timeout(Duration::from_millis(300), w.next()).await {
            out.push((c.name, c.kind));
        }
        out
    }

    #[tokio::test]
    async fn reports_create_write_chmod_rename_remove() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Watcher::register(Parts::open(dir.path(), false).unwrap()).unwrap();
        let f = dir.path().join("a.txt");
        std::fs::write(&f, b"x").unwrap();
        let c = next(&mut w).await;
        assert_eq!((c.name.as_str(), c.kind), ("a.txt", EventType::Create));
        assert_eq!(c.path, f);
        assert!(drain(&mut w)
            .await
            .contains(&("a.txt".into(), EventType::Write)));
        std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        assert_eq!(
            drain(&mut w).await,
            vec![("a.txt".into(), EventType::Chmod)]
        );
        std::fs::rename(&f, dir.path().join("b.txt")).unwrap();
        assert_eq!(
            drain(&mut w).await,
            vec![
                ("a.txt".into(), EventType::Rename),
                ("b.txt".into(), EventType::Create)
            ]
        );
        std::fs::remove_file(dir.path().join("b.txt")).unwrap();
        assert_eq!(
            drain(&mut w).await,
            vec![("b.txt".into(), EventType::Remove)]
        );
        // Not recursive: changes in a subdirectory are not reported, only its creation.
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/inner"), b"x").unwrap();
        assert_eq!(drain(&mut w).await, vec![("sub".into(), EventType::Create)]);
    }

    #[tokio::test]
    async fn recursive_watches_follow_new_and_moved_directories() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("old/deep")).unwrap();
        let mut w = Watcher::register(Parts::open(dir.path(), true).unwrap()).unwrap();
        std::fs::write(dir.path().join("old/deep/f"), b"x").unwrap();
        assert!(drain(&mut w)
            .await
            .contains(&("old/deep/f".into(), EventType::Create)));
        std::fs::create_dir(dir.path().join("new")).unwrap();
        assert_eq!(drain(&mut w).await, vec![("new".into(), EventType::Create)]);
        std::fs::write(dir.path().join("new/g"), b"x").unwrap();
        assert!(drain(&mut w)
            .await
            .contains(&("new/g".into(), EventType::Create)));
        // Moved out of the tree: no longer reported.
        let outside = tempfile::tempdir().unwrap();
        std::fs::rename(dir.path().join("new"), outside.path().join("moved")).unwrap();
        assert_eq!(drain(&mut w).await, vec![("new".into(), EventType::Rename)]);
        std::fs::write(outside.path().join("moved/h"), b"x").unwrap();
        assert_eq!(drain(&mut w).await, vec![]);
        std::fs::remove_dir_all(dir.path().join("old")).unwrap();
        let removed = drain(&mut w).await;
        assert!(
            removed.contains(&("old/deep/f".into(), EventType::Remove)),
            "{removed:?}"
        );
        assert!(
            removed.contains(&("old".into(), EventType::Remove)),
            "{removed:?}"
        );
    }
}
