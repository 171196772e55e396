//! Member names and how they are resolved beneath the layer directory.
//!
//! A name is normalised once into plain components (no empty, `.` or `..` component, no `/`),
//! and every later step resolves those components one at a time relative to a directory fd
//! with `O_NOFOLLOW | O_DIRECTORY`. A symlink or a non-directory anywhere in a parent path
//! stops the walk: nothing here ever follows a symlink, so nothing can reach outside the root
//! fd it started from.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{unlinkat, Gid, Uid, UnlinkatFlags};

/// The longest member name accepted, in bytes: Linux's `PATH_MAX`. It also bounds how deep a
/// tree the layer can build, and so how deep [`remove_tree`] recurses.
const MAX_NAME: usize = 4096;

/// One path component: never empty, never `.` or `..`, no `/` and no NUL.
pub(super) type Component = Vec<u8>;

/// Why a member name or hardlink target is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BadName {
    TooLong,
    Nul,
    DotDot,
}

impl BadName {
    /// The reason, for a member's own name.
    pub(super) fn as_name(self) -> &'static str {
        match self {
            BadName::TooLong => "the name is longer than PATH_MAX",
            BadName::Nul => "the name contains a NUL byte",
            BadName::DotDot => "the name has a `..` component",
        }
    }

    /// The reason, for a hardlink's target.
    pub(super) fn as_target(self) -> &'static str {
        match self {
            BadName::TooLong => "the hardlink target is longer than PATH_MAX",
            BadName::Nul => "the hardlink target contains a NUL byte",
            BadName::DotDot => "the hardlink target has a `..` component",
        }
    }
}

/// Normalises a member name (or a hardlink target) into its components. A leading `/` is
/// stripped (the name is taken relative to the layer root, as Docker does), `.` and empty
/// components are dropped; a `..` component, a NUL byte or a name longer than `PATH_MAX` is
/// refused. No components means the layer root itself.
pub(super) fn normalise(raw: &[u8]) -> Result<Vec<Component>, BadName> {
    if raw.len() > MAX_NAME {
        return Err(BadName::TooLong);
    }
    if raw.contains(&0) {
        return Err(BadName::Nul);
    }
    let mut components = Vec::new();
    for component in raw.split(|b| *b == b'/') {
        match component {
            b"" | b"." => {}
            b".." => return Err(BadName::DotDot),
            plain => components.push(plain.to_vec()),
        }
    }
    Ok(components)
}

/// `root` joined with `components`, for error messages only.
pub(super) fn display(root: &Path, components: &[Component]) -> PathBuf {
    let mut path = root.to_path_buf();
    for component in components {
        path.push(OsStr::from_bytes(component));
    }
    path
}

/// `root` joined with `dir` and `name`, for error messages only.
pub(super) fn display_child(root: &Path, dir: &[Component], name: &[u8]) -> PathBuf {
    let mut path = display(root, dir);
    path.push(OsStr::from_bytes(name));
    path
}

/// Why a parent directory could not be opened beneath the root.
#[derive(Debug)]
pub(super) enum WalkError {
    /// A component is a symlink; it is never followed.
    Symlink,
    /// A component exists but is not a directory.
    NotDir,
    /// A component does not exist (only when not creating).
    Missing,
    /// Any other failure of `openat`/`mkdirat`.
    Io(io::Error),
}

/// Owner and mode of the directories a walk creates for parents the layer never listed.
#[derive(Debug, Clone, Copy)]
pub(super) struct ImpliedDir {
    pub uid: u32,
    pub gid: u32,
}

/// Opens the directory `components` names beneath `root`, one component at a time, never
/// following a symlink. With `create`, missing components are created (mode 0755, owned as
/// given); without it a missing component is [`WalkError::Missing`]. No components opens the
/// root itself.
pub(super) fn open_dir(
    root: BorrowedFd<'_>,
    components: &[Component],
    create: Option<ImpliedDir>,
) -> Result<OwnedFd, WalkError> {
    let mut current = reopen(root).map_err(WalkError::Io)?;
    for component in components {
        let next = match open_child_dir(current.as_fd(), component) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => match create {
                None => return Err(WalkError::Missing),
                Some(owner) => create_child_dir(current.as_fd(), component, owner)?,
            },
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(match lstat_at(current.as_fd(), component) {
                    Ok(Some(stat)) if file_type(&stat) == SFlag::S_IFLNK => WalkError::Symlink,
                    Ok(_) => WalkError::NotDir,
                    Err(error) => WalkError::Io(error),
                });
            }
            Err(errno) => return Err(WalkError::Io(errno.into())),
        };
        current = next;
    }
    Ok(current)
}

/// A new fd for the directory `dir` itself.
pub(super) fn reopen(dir: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    Ok(openat(dir, ".", dir_flags(), Mode::empty())?)
}

/// Opens the child directory `name` of `dir` without following a symlink.
pub(super) fn open_child_dir(dir: BorrowedFd<'_>, name: &[u8]) -> Result<OwnedFd, Errno> {
    openat(dir, name, dir_flags(), Mode::empty())
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

fn create_child_dir(
    dir: BorrowedFd<'_>,
    name: &[u8],
    owner: ImpliedDir,
) -> Result<OwnedFd, WalkError> {
    match mkdirat(dir, name, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(errno) => return Err(WalkError::Io(errno.into())),
    }
    let fd = match open_child_dir(dir, name) {
        Ok(fd) => fd,
        Err(Errno::ELOOP | Errno::ENOTDIR) => return Err(WalkError::NotDir),
        Err(errno) => return Err(WalkError::Io(errno.into())),
    };
    nix::unistd::fchown(
        &fd,
        Some(Uid::from_raw(owner.uid)),
        Some(Gid::from_raw(owner.gid)),
    )
    .map_err(|errno| WalkError::Io(errno.into()))?;
    fchmod(&fd, Mode::from_bits_truncate(0o755)).map_err(|errno| WalkError::Io(errno.into()))?;
    Ok(fd)
}

/// `lstat` of `name` in `dir`; `None` when it does not exist.
pub(super) fn lstat_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<Option<FileStat>> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(stat)),
        Err(Errno::ENOENT) => Ok(None),
        Err(errno) => Err(errno.into()),
    }
}

/// The file type bits of a stat.
pub(super) fn file_type(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits())
}

/// Removes whatever `name` in `dir` is, so a later member can take its place: a directory with
/// everything beneath it (never following a symlink inside it), anything else by `unlinkat`.
/// Nothing there is a no-op.
pub(super) fn remove_existing(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    match lstat_at(dir, name)? {
        None => Ok(()),
        Some(stat) if file_type(&stat) == SFlag::S_IFDIR => remove_tree(dir, name),
        Some(_) => Ok(unlinkat(dir, name, UnlinkatFlags::NoRemoveDir)?),
    }
}

/// Removes the directory `name` in `dir` and everything beneath it. Entries are told apart by
/// `lstat`, so a symlink inside is unlinked, never entered.
fn remove_tree(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    let fd = open_child_dir(dir, name)?;
    let mut children = Vec::new();
    {
        let mut listing = Dir::from_fd(fd.try_clone()?)?;
        for child in listing.iter() {
            let child = child?;
            let child = child.file_name().to_bytes();
            if child != b"." && child != b".." {
                children.push(child.to_vec());
            }
        }
    }
    for child in &children {
        remove_existing(fd.as_fd(), child)?;
    }
    Ok(unlinkat(dir, name, UnlinkatFlags::RemoveDir)?)
}

/// Whether the directory `dir` has no entry besides `.` and `..`.
pub(super) fn is_empty_dir(dir: BorrowedFd<'_>) -> io::Result<bool> {
    let mut listing = Dir::from_fd(reopen(dir)?)?;
    for child in listing.iter() {
        let child = child?;
        let child = child.file_name().to_bytes();
        if child != b"." && child != b".." {
            return Ok(false);
        }
    }
    Ok(true)
}
