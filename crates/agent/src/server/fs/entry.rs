//! Describing filesystem entries the way envd does (metadata included), and resolving request paths.
//!
//! These run on a [`super::creds::run_as`] thread: every `stat` here is the user's.

use super::super::error::ServerError;
use super::super::users::{User, UserDb};
use sandboxd_envd::filesystem::{permissions_string, rfc3339, EntryInfo, FileType};
use std::fs::{self, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// envd's path rules: empty is the user's home, `~` and `~/x` expand to it, relative paths are under
/// it; `~other` is refused. The result is absolute and lexically clean (`.`/`..` resolved).
pub fn resolve_path(path: &str, user: &User) -> Result<PathBuf, ServerError> {
    if path.contains('\0') {
        return Err(ServerError::InvalidArgument(
            "path contains a NUL byte".into(),
        ));
    }
    let joined = if path.is_empty() || path == "~" {
        user.home.clone()
    } else if let Some(rest) = path.strip_prefix("~/") {
        user.home.join(rest)
    } else if path.starts_with('~') {
        return Err(ServerError::InvalidArgument(format!(
            "failed to expand path '{path}' for user '{}': cannot expand user-specific home dir",
            user.name
        )));
    } else {
        user.home.join(path)
    };
    Ok(clean(&joined))
}

/// Lexical cleaning of an absolute path (like Go's `filepath.Clean`).
fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn file_type(md: &Metadata) -> FileType {
    if md.is_file() {
        FileType::File
    } else if md.is_dir() {
        FileType::Directory
    } else if md.file_type().is_symlink() {
        FileType::Symlink
    } else {
        FileType::Unspecified
    }
}

/// The entry at `path` itself (a symlink is not followed, but its target's type and mode are reported).
pub fn entry_info(path: &Path, db: &UserDb) -> Result<EntryInfo, ServerError> {
    let md = fs::symlink_metadata(path).map_err(ServerError::io("stat", path.display()))?;
    Ok(describe(path, &md, db))
}

/// Builds the [`EntryInfo`] of `path` from its `lstat` result.
pub fn describe(path: &Path, md: &Metadata, db: &UserDb) -> EntryInfo {
    let (file_type, mode, symlink_target, is_symlink) = if md.file_type().is_symlink() {
        match fs::canonicalize(path) {
            Ok(target) => match fs::metadata(&target) {
                Ok(t) => (file_type(&t), t.mode() & 0o777, Some(target), true),
                Err(_) => (FileType::Symlink, 0, Some(target), true),
            },
            Err(_) => (FileType::Symlink, 0, fs::read_link(path).ok(), true),
        }
    } else {
        (file_type(md), md.mode() & 0o777, None, false)
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/".into());
    let nanos = u32::try_from(md.mtime_nsec()).unwrap_or(0);
    EntryInfo {
        name,
        file_type,
        path: path.to_string_lossy().into_owned(),
        size: i64::try_from(md.len()).unwrap_or(i64::MAX),
        mode,
        permissions: permissions_string(md.mode()),
        owner: db.user_name(md.uid()),
        group: db.group_name(md.gid()),
        modified_time: Some(rfc3339(md.mtime(), nanos)),
        symlink_target: symlink_target.map(|t| t.to_string_lossy().into_owned()),
        metadata: super::xattr::read(path),
        is_symlink,
    }
}

/// The entries under the directory `path` down to `depth` levels (1 = its children), not following
/// symlinks below `path`. Entries are reported under `path` as requested. Unreadable subdirectories
/// are skipped; an unreadable `path` is an error.
pub fn walk(path: &Path, depth: u32, db: &UserDb) -> Result<Vec<EntryInfo>, ServerError> {
    let resolved = fs::canonicalize(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => ServerError::NotFound(format!("path not found: {}", path.display())),
        _ => ServerError::io("resolve", path.display())(e),
    })?;
    let md = fs::metadata(&resolved).map_err(ServerError::io("stat", resolved.display()))?;
    if !md.is_dir() {
        return Err(ServerError::InvalidArgument(format!(
            "path is not a directory: {}",
            path.display()
        )));
    }
    let mut out = Vec::new();
    let mut stack: Vec<(PathBuf, PathBuf, u32)> = vec![(resolved, path.to_path_buf(), 1)];
    while let Some((real, shown, level)) = stack.pop() {
        let read = match fs::read_dir(&real) {
            Ok(r) => r,
            Err(e) if level == 1 => {
                return Err(ServerError::io("read directory", shown.display())(e))
            }
            Err(e) => {
                tracing::debug!(dir = %real.display(), error = %e, "skipping unreadable directory");
                continue;
            }
        };
        let mut children = Vec::new();
        for item in read.flatten() {
            let Ok(md) = item.metadata() else { continue };
            let shown_child = shown.join(item.file_name());
            let mut info = describe(&real.join(item.file_name()), &md, db);
            info.path = shown_child.to_string_lossy().into_owned();
            if md.is_dir() && level < depth {
                children.push((item.path(), shown_child, level + 1));
            }
            out.push(info);
        }
        stack.extend(children);
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> User {
        User {
            name: "user".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/user".into(),
            shell: String::new(),
            groups: vec![],
        }
    }

    #[test]
    fn paths_resolve_like_envd() {
        let u = user();
        let r = |p: &str| resolve_path(p, &u).map(|p| p.to_string_lossy().into_owned());
        assert_eq!(r("").unwrap(), "/home/user");
        assert_eq!(r("~").unwrap(), "/home/user");
        assert_eq!(r("~/a/b").unwrap(), "/home/user/a/b");
        assert_eq!(r("a/./b/../c").unwrap(), "/home/user/a/c");
        assert_eq!(r("/tmp//x/").unwrap(), "/tmp/x");
        assert_eq!(r("/../../etc").unwrap(), "/etc");
        assert_eq!(r("../..").unwrap(), "/");
        assert!(r("~root/x").is_err());
        assert!(r("a\0b").is_err());
    }

    #[test]
    fn describes_files_dirs_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f.txt");
        fs::write(&f, b"hello").unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        fs::write(dir.path().join("sub/inner"), b"").unwrap();
        std::os::unix::fs::symlink(&f, dir.path().join("link")).unwrap();
        let db = UserDb::parse("root:x:0:0::/root:/bin/sh\n", "root:x:0:\n");
        let info = entry_info(&f, &db).unwrap();
        assert_eq!(
            (info.name.as_str(), info.file_type, info.size),
            ("f.txt", FileType::File, 5)
        );
        assert!(info.permissions.starts_with('-'));
        let link = entry_info(&dir.path().join("link"), &db).unwrap();
        assert!(link.is_symlink);
        assert_eq!(link.file_type, FileType::File);
        assert!(link.permissions.starts_with('L'));
        assert_eq!(
            link.symlink_target.as_deref(),
            Some(f.canonicalize().unwrap().to_str().unwrap())
        );
        let shallow = walk(dir.path(), 1, &db).unwrap();
        assert_eq!(shallow.len(), 3);
        let deep = walk(dir.path(), 2, &db).unwrap();
        assert_eq!(deep.len(), 4);
        assert!(deep.iter().any(|e| e.path.ends_with("sub/inner")));
        assert!(matches!(
            walk(&f, 1, &db),
            Err(ServerError::InvalidArgument(_))
        ));
        assert!(matches!(
            walk(&dir.path().join("nope"), 1, &db),
            Err(ServerError::NotFound(_))
        ));
    }
}
