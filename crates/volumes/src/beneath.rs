//! Paths inside a volume, and opening them beneath its root.
//!
//! Contract: a [`RelPath`] is a list of plain components (never empty, `.` or `..`, no `/` or NUL),
//! parsed once from the caller's text; [`open_dir`] and [`open_parent`] resolve it from a
//! descriptor on the volume's root with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so a
//! symbolic link anywhere on the way is `ELOOP` and nothing outside the root is reachable, even
//! while a sandbox changes the tree concurrently. The last component of a path is then handled
//! relative to its parent's descriptor with `*at` calls that do not follow links either.

use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The longest path accepted, in bytes (Linux's `PATH_MAX`).
const MAX_PATH: usize = 4096;
/// The longest component accepted, in bytes (Linux's `NAME_MAX`).
pub const MAX_NAME: usize = 255;

/// A path inside a volume, relative to its root.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RelPath(Vec<String>);

/// Why a path is not a path inside a volume.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPath {
    /// The path has a `..` component.
    #[error("{0:?} has a `..` component; paths stay inside the volume")]
    DotDot(String),
    /// The path contains a NUL byte.
    #[error("{0:?} contains a NUL byte")]
    Nul(String),
    /// The path is longer than PATH_MAX.
    #[error("the path is longer than {MAX_PATH} bytes")]
    TooLong,
    /// A component is longer than NAME_MAX.
    #[error("a component of the path is longer than {MAX_NAME} bytes")]
    NameTooLong,
}

impl RelPath {
    /// Parses `text`: a leading `/` is the volume's root, empty and `.` components are dropped, a
    /// `..` component is refused.
    pub fn parse(text: &str) -> Result<Self, BadPath> {
        if text.len() > MAX_PATH {
            return Err(BadPath::TooLong);
        }
        if text.contains('\0') {
            return Err(BadPath::Nul(text.to_string()));
        }
        let mut parts = Vec::new();
        for part in text.split('/') {
            match part {
                "" | "." => {}
                ".." => return Err(BadPath::DotDot(text.to_string())),
                part if part.len() > MAX_NAME => return Err(BadPath::NameTooLong),
                part => parts.push(part.to_string()),
            }
        }
        Ok(Self(parts))
    }

    /// Whether this is the volume's root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The path's last component (`None` for the root).
    pub fn name(&self) -> Option<&str> {
        self.0.last().map(String::as_str)
    }

    /// The path without its last component (the root's parent is the root).
    pub fn parent(&self) -> RelPath {
        let mut parts = self.0.clone();
        parts.pop();
        RelPath(parts)
    }

    /// This path with `name` appended.
    pub fn join(&self, name: &str) -> RelPath {
        let mut parts = self.0.clone();
        parts.push(name.to_string());
        RelPath(parts)
    }

    /// The components, outermost first.
    pub fn components(&self) -> &[String] {
        &self.0
    }

    /// The relative path `openat2` takes (`.` for the root).
    pub fn relative(&self) -> PathBuf {
        if self.0.is_empty() {
            PathBuf::from(".")
        } else {
            self.0.iter().collect()
        }
    }

    /// The path as the volume's users see it: `/` followed by its components.
    pub fn display(&self) -> String {
        format!("/{}", self.0.join("/"))
    }
}

/// A descriptor on the volume root `root` itself (a directory the caller trusts; not a link).
pub fn open_root(root: &Path) -> io::Result<OwnedFd> {
    nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

fn how(flags: OFlag) -> OpenHow {
    OpenHow::new().flags(flags | OFlag::O_CLOEXEC).resolve(
        ResolveFlag::RESOLVE_BENEATH
            | ResolveFlag::RESOLVE_NO_SYMLINKS
            | ResolveFlag::RESOLVE_NO_MAGICLINKS,
    )
}

/// Opens directory `rel` beneath `root` (`O_PATH` with `O_PATH`, else for reading its entries).
/// `ELOOP` when a component is a symbolic link, `ENOTDIR` when one is not a directory.
pub fn open_dir(root: &OwnedFd, rel: &RelPath, path_only: bool) -> io::Result<OwnedFd> {
    let flags = if path_only {
        OFlag::O_PATH | OFlag::O_DIRECTORY
    } else {
        OFlag::O_RDONLY | OFlag::O_DIRECTORY
    };
    openat2(root, &rel.relative(), how(flags)).map_err(io::Error::from)
}

/// Opens `rel`'s parent directory beneath `root` for `*at` calls on its last component, which is
/// returned with it. `None` for the root itself (it has no name in its parent).
pub fn open_parent<'a>(root: &OwnedFd, rel: &'a RelPath) -> io::Result<Option<(OwnedFd, &'a str)>> {
    match rel.name() {
        None => Ok(None),
        Some(name) => Ok(Some((open_dir(root, &rel.parent(), false)?, name))),
    }
}

/// Opens `rel` beneath `root` with `flags` (a file: `O_NOFOLLOW` is implied by the resolve flags).
pub fn open_file(root: &OwnedFd, rel: &RelPath, flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
    openat2(root, &rel.relative(), how(flags).mode(mode)).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn parsing_keeps_paths_inside() {
        assert_eq!(RelPath::parse("/a//./b/").unwrap().display(), "/a/b");
        assert!(RelPath::parse("/").unwrap().is_root());
        assert!(RelPath::parse("").unwrap().is_root());
        assert!(matches!(
            RelPath::parse("a/../../etc"),
            Err(BadPath::DotDot(_))
        ));
        assert!(matches!(RelPath::parse("a\0b"), Err(BadPath::Nul(_))));
        assert_eq!(RelPath::parse(&"a/".repeat(3000)), Err(BadPath::TooLong));
        assert_eq!(RelPath::parse(&"a".repeat(256)), Err(BadPath::NameTooLong));
        assert!(RelPath::parse(&"a".repeat(255)).is_ok());
        let p = RelPath::parse("x/y/z").unwrap();
        assert_eq!(p.parent().display(), "/x/y");
        assert_eq!(p.name(), Some("z"));
        assert_eq!(p.join("w").relative(), PathBuf::from("x/y/z/w"));
    }

    #[test]
    fn no_link_is_ever_followed_even_one_that_stays_inside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("vol");
        std::fs::create_dir_all(root.join("real")).unwrap();
        symlink("/", root.join("escape")).unwrap();
        symlink("real", root.join("inside")).unwrap();
        let fd = open_root(&root).unwrap();
        for planted in ["escape", "escape/etc", "inside"] {
            let err = open_dir(&fd, &RelPath::parse(planted).unwrap(), true).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{planted}");
        }
        let err = open_file(
            &fd,
            &RelPath::parse("escape/etc/passwd").unwrap(),
            OFlag::O_RDONLY,
            Mode::empty(),
        )
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP));
        assert!(open_dir(&fd, &RelPath::parse("real").unwrap(), true).is_ok());
        let new = RelPath::parse("real/new").unwrap();
        let (_, name) = open_parent(&fd, &new).unwrap().unwrap();
        assert_eq!(name, "new");
    }
}
