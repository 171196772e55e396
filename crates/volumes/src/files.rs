//! The volume file API: what a caller without a sandbox may do to a volume's files.
//!
//! Contract: every operation opens what it touches through [`crate::beneath`], so no symbolic link
//! a sandbox planted is ever followed and nothing outside the volume's root is read, written,
//! changed or removed (`tests::links_planted_in_the_volume_are_never_followed`). Owners are shown
//! and set as sandboxes see them: the volume stores id `k` of a sandbox as host id `base + k`
//! (`base` being the storage range the runtime maps every sandbox's ids from), and what this API
//! creates is owned by `user` (1000) unless the caller names another owner. A write past the
//! volume's quota fails with [`VolumeError::NoSpace`] and leaves no partial file behind.
//!
//! Every function blocks; async callers run them on a blocking thread.

use crate::beneath::{self, BadPath, RelPath};
use nix::dir::Dir;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{fchown, fchownat, unlinkat, Gid, Uid, UnlinkatFlags};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

/// The sandbox user that owns what the API creates unless told otherwise.
pub const DEFAULT_OWNER: u32 = 1000;
/// Most entries one listing returns.
pub const MAX_LIST: usize = 100_000;
/// Deepest tree a recursive removal descends (Linux's PATH_MAX allows no deeper plain path).
const MAX_DEPTH: usize = 2048;

/// A failed volume file operation; each names the path as the caller gave it.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// The path is not a path inside a volume.
    #[error(transparent)]
    BadPath(#[from] BadPath),
    /// Nothing is at the path.
    #[error("{0} not found in the volume")]
    NotFound(String),
    /// A component of the path is a symbolic link, which the volume API never follows.
    #[error("{0} is or passes through a symbolic link; the volume API never follows links")]
    Link(String),
    /// A component of the path is not a directory.
    #[error("{0}: a component of the path is not a directory")]
    NotADirectory(String),
    /// A directory where a file is needed.
    #[error("{0} is a directory")]
    IsADirectory(String),
    /// Something other than a regular file where one is needed.
    #[error("{0} is not a regular file")]
    NotAFile(String),
    /// Something exists at the path already.
    #[error("{0} already exists")]
    Exists(String),
    /// The volume's root cannot be removed or replaced through the API.
    #[error("the volume's root cannot be removed")]
    Root,
    /// The volume (or the host) is out of space.
    #[error("the volume is full: {0} could not be written")]
    NoSpace(String),
    /// Any other failure of the host's filesystem.
    #[error("{op} {path}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
}

impl VolumeError {
    fn from_io<'a>(
        op: &'static str,
        path: &'a RelPath,
    ) -> impl FnOnce(io::Error) -> VolumeError + 'a {
        move |e| {
            let shown = path.display();
            match e.raw_os_error() {
                Some(libc::ENOENT) => VolumeError::NotFound(shown),
                Some(libc::ELOOP) | Some(libc::EXDEV) => VolumeError::Link(shown),
                Some(libc::ENOTDIR) => VolumeError::NotADirectory(shown),
                Some(libc::EISDIR) => VolumeError::IsADirectory(shown),
                Some(libc::EEXIST) => VolumeError::Exists(shown),
                Some(libc::ENOSPC) | Some(libc::EDQUOT) => VolumeError::NoSpace(shown),
                Some(libc::ENAMETOOLONG) => VolumeError::BadPath(BadPath::NameTooLong),
                _ => VolumeError::Io {
                    op,
                    path: shown,
                    source: e,
                },
            }
        }
    }
}

fn errno(e: nix::errno::Errno) -> io::Error {
    io::Error::from(e)
}

/// What is at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Other,
}

/// One entry of a volume, as a sandbox would see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name (`""` for the root).
    pub name: String,
    /// Its path inside the volume, from `/`.
    pub path: String,
    pub kind: EntryKind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Owner and group as a sandbox sees them.
    pub uid: u32,
    pub gid: u32,
    /// Last access, modification and status change, Unix milliseconds.
    pub atime_ms: i64,
    pub mtime_ms: i64,
    pub ctime_ms: i64,
    /// Where a symbolic link points (never followed).
    pub target: Option<String>,
}

/// Owner, group and permission bits to give what a call creates or changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attrs {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub mode: Option<u32>,
}

/// How [`Volume::write`] treats what is, or is not, there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteOpts {
    /// Make the missing directories above the file.
    pub parents: bool,
    /// Replace a file that exists (else that is [`VolumeError::Exists`]).
    pub overwrite: bool,
    /// Owner, group and mode of what the write creates.
    pub attrs: Attrs,
}

/// A volume's tree on the host.
#[derive(Debug, Clone)]
pub struct Volume {
    root: PathBuf,
    base: u32,
}

impl Volume {
    /// The volume rooted at `root`, its owners stored from host id `base`.
    pub fn new(root: impl Into<PathBuf>, base: u32) -> Self {
        Self {
            root: root.into(),
            base,
        }
    }

    fn open_root(&self) -> Result<OwnedFd, VolumeError> {
        beneath::open_root(&self.root).map_err(|source| VolumeError::Io {
            op: "open the volume's root",
            path: "/".into(),
            source,
        })
    }

    fn shown(&self, host: u32) -> u32 {
        host.checked_sub(self.base)
            .filter(|k| *k < 65536)
            .unwrap_or(65534)
    }

    fn host(&self, id: u32) -> u32 {
        self.base.saturating_add(id.min(65535))
    }

    fn entry(&self, path: &RelPath, st: &FileStat, target: Option<String>) -> Entry {
        let kind = match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
            SFlag::S_IFREG => EntryKind::File,
            SFlag::S_IFDIR => EntryKind::Dir,
            SFlag::S_IFLNK => EntryKind::Symlink,
            _ => EntryKind::Other,
        };
        Entry {
            name: path.name().unwrap_or("").to_string(),
            path: path.display(),
            kind,
            size: st.st_size.max(0) as u64,
            mode: st.st_mode & 0o7777,
            uid: self.shown(st.st_uid),
            gid: self.shown(st.st_gid),
            atime_ms: ms(st.st_atime, st.st_atime_nsec),
            mtime_ms: ms(st.st_mtime, st.st_mtime_nsec),
            ctime_ms: ms(st.st_ctime, st.st_ctime_nsec),
            target,
        }
    }

    fn stat_at(&self, dir: &OwnedFd, name: &str, path: &RelPath) -> Result<Entry, VolumeError> {
        let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(errno)
            .map_err(VolumeError::from_io("stat", path))?;
        let target = (st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFLNK.bits())
            .then(|| nix::fcntl::readlinkat(dir, name).ok())
            .flatten()
            .map(|t| t.to_string_lossy().into_owned());
        Ok(self.entry(path, &st, target))
    }

    /// What is at `path` (a link is described, not followed).
    pub fn stat(&self, path: &str) -> Result<Entry, VolumeError> {
        let rel = RelPath::parse(path)?;
        let root = self.open_root()?;
        match beneath::open_parent(&root, &rel).map_err(VolumeError::from_io("open", &rel))? {
            Some((dir, name)) => self.stat_at(&dir, name, &rel),
            None => {
                let st = fstat(&root)
                    .map_err(errno)
                    .map_err(VolumeError::from_io("stat", &rel))?;
                Ok(self.entry(&rel, &st, None))
            }
        }
    }

    /// The entries of directory `path`, `depth` levels down (1: its own entries), by path.
    pub fn list(&self, path: &str, depth: u32) -> Result<Vec<Entry>, VolumeError> {
        let rel = RelPath::parse(path)?;
        let root = self.open_root()?;
        let dir =
            beneath::open_dir(&root, &rel, false).map_err(VolumeError::from_io("open", &rel))?;
        let mut out = Vec::new();
        self.list_into(dir, &rel, depth.max(1), &mut out)?;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    fn list_into(
        &self,
        dir: OwnedFd,
        rel: &RelPath,
        depth: u32,
        out: &mut Vec<Entry>,
    ) -> Result<(), VolumeError> {
        let names = names_in(&dir).map_err(VolumeError::from_io("list", rel))?;
        for name in names {
            if out.len() >= MAX_LIST {
                return Ok(());
            }
            let child = rel.join(&name);
            let entry = match self.stat_at(&dir, &name, &child) {
                Ok(entry) => entry,
                // Removed meanwhile (by a sandbox): not there any more.
                Err(VolumeError::NotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            let descend = depth > 1 && entry.kind == EntryKind::Dir;
            out.push(entry);
            if descend {
                if let Ok(sub) = open_child_dir(&dir, &name) {
                    self.list_into(sub, &child, depth - 1, out)?;
                }
            }
        }
        Ok(())
    }

    /// Opens what is at `rel` for reading, never through a link (and without blocking on a FIFO
    /// or taking a terminal).
    fn open_existing(&self, rel: &RelPath) -> Result<OwnedFd, VolumeError> {
        let root = self.open_root()?;
        beneath::open_file(
            &root,
            rel,
            OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY,
            Mode::empty(),
        )
        .map_err(VolumeError::from_io("open", rel))
    }

    /// Opens regular file `path` for reading.
    pub fn read(&self, path: &str) -> Result<std::fs::File, VolumeError> {
        let rel = RelPath::parse(path)?;
        let fd = self.open_existing(&rel)?;
        let st = fstat(&fd)
            .map_err(errno)
            .map_err(VolumeError::from_io("stat", &rel))?;
        match st.st_mode & SFlag::S_IFMT.bits() {
            m if m == SFlag::S_IFREG.bits() => Ok(std::fs::File::from(fd)),
            m if m == SFlag::S_IFDIR.bits() => Err(VolumeError::IsADirectory(rel.display())),
            _ => Err(VolumeError::NotAFile(rel.display())),
        }
    }

    /// Makes the directories of `rel` that are missing, each owned as `attrs` says.
    fn make_dirs(&self, root: &OwnedFd, rel: &RelPath, attrs: Attrs) -> Result<(), VolumeError> {
        let mut at = RelPath::default();
        for part in rel.components() {
            let parent =
                beneath::open_dir(root, &at, true).map_err(VolumeError::from_io("open", &at))?;
            at = at.join(part);
            match mkdirat(
                &parent,
                part.as_str(),
                Mode::from_bits_truncate(attrs.mode.unwrap_or(0o755)),
            ) {
                Ok(()) => self.own_at(&parent, part, &at, attrs)?,
                Err(nix::errno::Errno::EEXIST) => {}
                Err(e) => return Err(VolumeError::from_io("mkdir", &at)(errno(e))),
            }
        }
        // What exists must be a directory reached without a link.
        beneath::open_dir(root, rel, true).map_err(VolumeError::from_io("open", rel))?;
        Ok(())
    }

    fn own_at(
        &self,
        dir: &OwnedFd,
        name: &str,
        rel: &RelPath,
        attrs: Attrs,
    ) -> Result<(), VolumeError> {
        let uid = self.host(attrs.uid.unwrap_or(DEFAULT_OWNER));
        let gid = self.host(attrs.gid.or(attrs.uid).unwrap_or(DEFAULT_OWNER));
        fchownat(
            dir,
            name,
            Some(Uid::from_raw(uid)),
            Some(Gid::from_raw(gid)),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(errno)
        .map_err(VolumeError::from_io("chown", rel))
    }

    /// Makes directory `path` (and, with `parents`, the missing ones above it; then an existing
    /// directory is no error).
    pub fn mkdir(&self, path: &str, parents: bool, attrs: Attrs) -> Result<Entry, VolumeError> {
        let rel = RelPath::parse(path)?;
        let root = self.open_root()?;
        if parents {
            self.make_dirs(&root, &rel, attrs)?;
            return self.stat(path);
        }
        let Some((dir, name)) =
            beneath::open_parent(&root, &rel).map_err(VolumeError::from_io("open", &rel))?
        else {
            return Err(VolumeError::Exists("/".into()));
        };
        mkdirat(
            &dir,
            name,
            Mode::from_bits_truncate(attrs.mode.unwrap_or(0o755)),
        )
        .map_err(errno)
        .map_err(VolumeError::from_io("mkdir", &rel))?;
        self.own_at(&dir, name, &rel, attrs)?;
        self.stat_at(&dir, name, &rel)
    }

    /// Writes `data` to file `path` (a file, never a link or a directory), replacing one that is
    /// there only with `opts.overwrite`; with `opts.parents`, missing directories above it are
    /// made. A new file is owned as `opts.attrs` says; a failed write removes what it wrote.
    pub fn write(
        &self,
        path: &str,
        data: &mut dyn Read,
        opts: WriteOpts,
    ) -> Result<Entry, VolumeError> {
        let WriteOpts {
            parents,
            overwrite,
            attrs,
        } = opts;
        let rel = RelPath::parse(path)?;
        if rel.is_root() {
            return Err(VolumeError::Root);
        }
        let root = self.open_root()?;
        if parents {
            self.make_dirs(
                &root,
                &rel.parent(),
                Attrs {
                    mode: None,
                    ..attrs
                },
            )?;
        }
        let mode = Mode::from_bits_truncate(attrs.mode.unwrap_or(0o644));
        let flags = OFlag::O_WRONLY | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
        let (fd, created) =
            match beneath::open_file(&root, &rel, flags | OFlag::O_CREAT | OFlag::O_EXCL, mode) {
                Ok(fd) => (fd, true),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) && !overwrite => {
                    return Err(VolumeError::Exists(rel.display()))
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => (
                    beneath::open_file(&root, &rel, flags, Mode::empty())
                        .map_err(VolumeError::from_io("open", &rel))?,
                    false,
                ),
                Err(e) => return Err(VolumeError::from_io("create", &rel)(e)),
            };
        let st = fstat(&fd)
            .map_err(errno)
            .map_err(VolumeError::from_io("stat", &rel))?;
        if st.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFREG.bits() {
            return Err(VolumeError::NotAFile(rel.display()));
        }
        if created {
            let uid = self.host(attrs.uid.unwrap_or(DEFAULT_OWNER));
            let gid = self.host(attrs.gid.or(attrs.uid).unwrap_or(DEFAULT_OWNER));
            fchown(&fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
                .map_err(errno)
                .map_err(VolumeError::from_io("chown", &rel))?;
        }
        let mut file = std::fs::File::from(fd);
        let written = file
            .set_len(0)
            .and_then(|()| io::copy(data, &mut file))
            .and_then(|_| file.flush());
        if let Err(e) = written {
            let _ = file.set_len(0);
            drop(file);
            if created {
                if let Ok(Some((dir, name))) = beneath::open_parent(&root, &rel) {
                    let _ = unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir);
                }
            }
            return Err(VolumeError::from_io("write", &rel)(e));
        }
        self.stat(path)
    }

    /// Removes `path`: a file or link, or a directory with everything in it (links inside are
    /// removed, never followed).
    pub fn remove(&self, path: &str) -> Result<(), VolumeError> {
        let rel = RelPath::parse(path)?;
        let root = self.open_root()?;
        let Some((dir, name)) =
            beneath::open_parent(&root, &rel).map_err(VolumeError::from_io("open", &rel))?
        else {
            return Err(VolumeError::Root);
        };
        remove_at(&dir, name, 0).map_err(VolumeError::from_io("remove", &rel))
    }

    /// Changes the owner, group or permission bits of `path` (never through a link).
    pub fn set_attrs(&self, path: &str, attrs: Attrs) -> Result<Entry, VolumeError> {
        let rel = RelPath::parse(path)?;
        let fd = self.open_existing(&rel)?;
        if let Some(mode) = attrs.mode {
            fchmod(&fd, Mode::from_bits_truncate(mode & 0o7777))
                .map_err(errno)
                .map_err(VolumeError::from_io("chmod", &rel))?;
        }
        if attrs.uid.is_some() || attrs.gid.is_some() {
            fchown(
                &fd,
                attrs.uid.map(|u| Uid::from_raw(self.host(u))),
                attrs.gid.map(|g| Gid::from_raw(self.host(g))),
            )
            .map_err(errno)
            .map_err(VolumeError::from_io("chown", &rel))?;
        }
        self.stat(path)
    }
}

fn ms(sec: i64, nsec: i64) -> i64 {
    sec.saturating_mul(1000).saturating_add(nsec / 1_000_000)
}

/// The names in directory `dir` (without `.` and `..`).
fn names_in(dir: &OwnedFd) -> io::Result<Vec<String>> {
    let dup = dir.as_fd().try_clone_to_owned()?;
    let mut listing = Dir::from_fd(dup).map_err(errno)?;
    let mut names = Vec::new();
    for entry in listing.iter() {
        let entry = entry.map_err(errno)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "." && name != ".." {
            names.push(name);
        }
    }
    Ok(names)
}

fn open_child_dir(dir: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)
}

/// Removes `name` in `dir`, descending into directories without following links.
fn remove_at(dir: &OwnedFd, name: &str, depth: usize) -> io::Result<()> {
    let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(errno)?;
    if st.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFDIR.bits() {
        return unlinkat(dir, name, UnlinkatFlags::NoRemoveDir).map_err(errno);
    }
    if depth > MAX_DEPTH {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    let sub = open_child_dir(dir, name)?;
    for child in names_in(&sub)? {
        match remove_at(&sub, &child, depth + 1) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            other => other?,
        }
    }
    unlinkat(dir, name, UnlinkatFlags::RemoveDir).map_err(errno)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt};

    const PARENTS: WriteOpts = WriteOpts {
        parents: true,
        overwrite: true,
        attrs: Attrs {
            uid: None,
            gid: None,
            mode: None,
        },
    };
    const REPLACE: WriteOpts = WriteOpts {
        parents: false,
        ..PARENTS
    };

    fn volume() -> (tempfile::TempDir, Volume) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("vol")).unwrap();
        // Base 0: the test need not be root to own what it writes as itself.
        let base = nix::unistd::geteuid()
            .as_raw()
            .saturating_sub(DEFAULT_OWNER);
        let v = Volume::new(dir.path().join("vol"), base);
        (dir, v)
    }

    #[test]
    fn files_round_trip_with_their_metadata() {
        let (_dir, v) = volume();
        let e = v
            .write("/a/b/hello.txt", &mut &b"hello"[..], PARENTS)
            .unwrap();
        assert_eq!(
            (e.kind, e.size, e.mode, e.path.as_str()),
            (EntryKind::File, 5, 0o644, "/a/b/hello.txt")
        );
        let mut text = String::new();
        v.read("a/b/hello.txt")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "hello");
        assert!(matches!(
            v.write("/a/b/hello.txt", &mut &b"no"[..], WriteOpts::default()),
            Err(VolumeError::Exists(_))
        ));
        v.write("/a/b/hello.txt", &mut &b"hi"[..], REPLACE).unwrap();
        assert_eq!(v.stat("/a/b/hello.txt").unwrap().size, 2);
        let listed: Vec<String> = v
            .list("/", 3)
            .unwrap()
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(listed, ["/a", "/a/b", "/a/b/hello.txt"]);
        assert_eq!(v.list("/", 1).unwrap().len(), 1);
        assert!(matches!(
            v.mkdir("/a", false, Attrs::default()),
            Err(VolumeError::Exists(_))
        ));
        assert!(v.mkdir("/a", true, Attrs::default()).is_ok());
        assert!(matches!(v.read("/a"), Err(VolumeError::IsADirectory(_))));
        assert!(matches!(v.read("/nope"), Err(VolumeError::NotFound(_))));
        let changed = v
            .set_attrs(
                "/a/b/hello.txt",
                Attrs {
                    mode: Some(0o600),
                    ..Attrs::default()
                },
            )
            .unwrap();
        assert_eq!(changed.mode, 0o600);
        v.remove("/a").unwrap();
        assert!(v.list("/", 5).unwrap().is_empty());
        assert!(matches!(v.remove("/"), Err(VolumeError::Root)));
    }

    #[test]
    fn links_planted_in_the_volume_are_never_followed() {
        let (dir, v) = volume();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), "host").unwrap();
        let mode_before = std::fs::metadata(outside.join("secret")).unwrap().mode();
        let root = dir.path().join("vol");
        symlink(&outside, root.join("escape")).unwrap();
        symlink(outside.join("secret"), root.join("secret-link")).unwrap();
        for path in ["/escape/secret", "/secret-link"] {
            assert!(matches!(v.read(path), Err(VolumeError::Link(_))), "{path}");
            assert!(matches!(
                v.write(path, &mut &b"x"[..], PARENTS),
                Err(VolumeError::Link(_))
            ));
            assert!(matches!(
                v.set_attrs(
                    path,
                    Attrs {
                        mode: Some(0o777),
                        ..Attrs::default()
                    }
                ),
                Err(VolumeError::Link(_))
            ));
        }
        assert!(matches!(v.list("/escape", 1), Err(VolumeError::Link(_))));
        assert!(matches!(
            v.mkdir("/escape/new", true, Attrs::default()),
            Err(VolumeError::Link(_))
        ));
        assert!(matches!(
            v.remove("/escape/secret"),
            Err(VolumeError::Link(_))
        ));
        // The link itself is described, and removing it removes the link only.
        let link = v.stat("/escape").unwrap();
        assert_eq!(link.kind, EntryKind::Symlink);
        assert_eq!(link.target.as_deref(), outside.to_str());
        std::fs::create_dir(root.join("tree")).unwrap();
        symlink(&outside, root.join("tree/link")).unwrap();
        v.remove("/tree").unwrap();
        v.remove("/escape").unwrap();
        assert_eq!(
            std::fs::read_to_string(outside.join("secret")).unwrap(),
            "host"
        );
        assert_eq!(
            std::fs::metadata(outside.join("secret")).unwrap().mode(),
            mode_before
        );
    }
}
