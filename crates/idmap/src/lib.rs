//! Idmapped mounts: the one way sandboxes share layers on disk yet own disjoint host ids.
//!
//! Every shared layer (the `base` template, image layers, image tops) is stored once, owned by host
//! ids `storage..storage+65536`; each sandbox's root is a different host id (its own range). The
//! sandbox sees a layer through an *idmapped* clone of it: a detached mount whose owners read as
//! `storage + k` → `range + k`, so a file owned by the layer's root shows as the sandbox's root, and
//! nothing on disk changes.
//!
//! Contract:
//! - [`user_namespace`] makes a user namespace whose uid and gid maps are exactly the given
//!   [`IdMapping`], and returns a descriptor on it. No process is left in it: the descriptor alone keeps
//!   it alive, so one namespace per range can be kept and handed to any number of mounts.
//! - [`idmapped_clone`] returns a detached mount of a directory seen through such a namespace; it is
//!   in no mount namespace until [`attach`] puts it at a path of the caller's. Both need the caller to
//!   be root of the initial user namespace, and a filesystem and kernel that support idmapped mounts
//!   (Linux 5.12 for ext4, XFS and btrfs; overlayfs takes idmapped layers since 5.19). A filesystem
//!   without support fails with `EINVAL`, which the caller can take as "no per-sandbox ranges here".
//!
//! Only system calls, no policy: which directories are mapped, and where to, is the runtime's.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `count` ids from `inside` (as a layer on disk owns them) read as `count` ids from `outside`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMapping {
    pub inside: u32,
    pub outside: u32,
    pub count: u32,
}

impl IdMapping {
    /// The line `/proc/<pid>/uid_map` (and `gid_map`) takes.
    fn line(&self) -> String {
        format!("{} {} {}\n", self.inside, self.outside, self.count)
    }
}

/// The stack the short-lived holder of a new namespace runs on (it only calls `pause`).
const HOLDER_STACK: usize = 16 * 1024;

extern "C" fn hold(_: *mut libc::c_void) -> libc::c_int {
    loop {
        // SAFETY: pause is async-signal-safe and touches no memory.
        unsafe { libc::pause() };
    }
}

/// A user namespace mapping uids and gids by `map`, held by the returned descriptor.
pub fn user_namespace(map: IdMapping) -> io::Result<OwnedFd> {
    let mut stack = vec![0u8; HOLDER_STACK];
    // SAFETY: the child shares our memory (CLONE_VM) but runs only `hold`, on its own stack (the top of
    // `stack`, 16-byte aligned, kept alive until the child is reaped below), and calls nothing but
    // pause. It is killed and reaped before this function returns.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(HOLDER_STACK) as usize & !15;
        libc::clone(
            hold,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_NEWUSER | libc::SIGCHLD,
            std::ptr::null_mut(),
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    let opened = (|| {
        for file in ["uid_map", "gid_map"] {
            std::fs::write(format!("/proc/{pid}/{file}"), map.line())?;
        }
        let path = CString::new(format!("/proc/{pid}/ns/user")).map_err(io::Error::other)?;
        // SAFETY: open returns a new descriptor we own, or -1.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    })();
    // SAFETY: `pid` is our child; it is killed and reaped exactly once.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        let mut status = 0;
        while libc::waitpid(pid, &mut status, libc::__WALL) < 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
    }
    drop(stack);
    opened
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// A detached mount of `path` resolved from `dirfd` (`AT_EMPTY_PATH` among `flags`: `dirfd` itself).
fn open_tree(dirfd: libc::c_int, path: &CString, flags: libc::c_uint) -> io::Result<OwnedFd> {
    // SAFETY: open_tree with a valid C string returns a new descriptor we own, or -1.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            dirfd,
            path.as_ptr(),
            libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC as libc::c_uint | flags,
        )
    };
    if tree < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `tree` was just returned by open_tree and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(tree as i32) })
}

/// A detached mount of the directory `dir` is open on, owners as they are: what it names can no
/// longer change, whatever is renamed or linked on its path afterwards. It can be put in place
/// (`move_mount`, as [`attach`] does) in any mount namespace its holder has entered since.
pub fn detached_clone(dir: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    open_tree(
        dir.as_raw_fd(),
        &CString::default(),
        libc::AT_EMPTY_PATH as libc::c_uint,
    )
}

/// A detached mount of directory `path` (its own mount, rooted there), owners as they are: a
/// directory of a filesystem can be put in place ([`attach`]) without the filesystem's root.
pub fn detached_clone_of(path: &Path) -> io::Result<OwnedFd> {
    open_tree(libc::AT_FDCWD, &c_path(path)?, 0)
}

/// A detached mount of `dir` whose owners read through `userns` (see [`user_namespace`]).
pub fn idmapped_clone(dir: &Path, userns: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let tree = open_tree(libc::AT_FDCWD, &c_path(dir)?, 0)?;
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: mount_setattr reads `attr` (of the size given) and changes only the detached mount.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(tree)
}

/// Puts the detached mount `tree` at `target` (an existing directory) in the caller's mount namespace.
pub fn attach(tree: OwnedFd, target: &Path) -> io::Result<()> {
    let path = c_path(target)?;
    // SAFETY: move_mount with valid descriptors and C strings; it only changes mounts.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::{lchown, MetadataExt};

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn the_namespace_maps_exactly_the_mapping() {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let map = IdMapping {
            inside: 100_000,
            outside: 300_000,
            count: 65536,
        };
        let ns = user_namespace(map).unwrap();
        // A second one is a different namespace: each call makes its own.
        let other = user_namespace(map).unwrap();
        let ino = |fd: &OwnedFd| {
            std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
                .unwrap()
                .ino()
        };
        assert_ne!(ino(&ns), ino(&other));
    }

    /// Through the clone, an owner `inside + k` reads as `outside + k`; one outside the mapping reads
    /// as the overflow id; the directory itself, on disk, is unchanged.
    #[test]
    fn a_clone_shows_owners_through_the_mapping() {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mapped = dir.path().join("mapped");
        let unmapped = dir.path().join("unmapped");
        std::fs::write(&mapped, b"").unwrap();
        std::fs::write(&unmapped, b"").unwrap();
        lchown(&mapped, Some(100_005), Some(100_007)).unwrap();
        lchown(&unmapped, Some(5), Some(5)).unwrap();
        let ns = user_namespace(IdMapping {
            inside: 100_000,
            outside: 300_000,
            count: 65536,
        })
        .unwrap();
        let tree = match idmapped_clone(dir.path(), ns.as_fd()) {
            Ok(tree) => tree,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                eprintln!("skipped: this filesystem takes no idmapped mounts");
                return;
            }
            Err(e) => panic!("idmapped clone: {e}"),
        };
        let through = |name: &str| {
            std::fs::metadata(format!("/proc/self/fd/{}/{name}", tree.as_raw_fd())).unwrap()
        };
        assert_eq!(
            (through("mapped").uid(), through("mapped").gid()),
            (300_005, 300_007)
        );
        assert_eq!(through("unmapped").uid(), 65534);
        let on_disk = std::fs::metadata(&mapped).unwrap();
        assert_eq!((on_disk.uid(), on_disk.gid()), (100_005, 100_007));
    }

    /// A plain clone names the directory it was opened on, even once that path is a link elsewhere.
    #[test]
    fn a_plain_clone_keeps_its_directory_when_the_path_changes() {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("file"), b"inside").unwrap();
        let opened = std::fs::File::open(&sub).unwrap();
        let tree = detached_clone(opened.as_fd()).unwrap();
        std::fs::rename(&sub, dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink("/etc", &sub).unwrap();
        let through = format!("/proc/self/fd/{}/file", tree.as_raw_fd());
        assert_eq!(std::fs::read(&through).unwrap(), b"inside");
        assert!(std::fs::metadata(format!("/proc/self/fd/{}/passwd", tree.as_raw_fd())).is_err());
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_panic() {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let ns = user_namespace(IdMapping {
            inside: 0,
            outside: 300_000,
            count: 1,
        })
        .unwrap();
        let err = idmapped_clone(Path::new("/nonexistent/sandboxd-idmap"), ns.as_fd()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(idmapped_clone(Path::new("a\0b"), ns.as_fd()).is_err());
    }
}
