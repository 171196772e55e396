//! A member's owner, mode, mtime and xattrs, and putting them on what was written.

use std::ffi::{CStr, CString};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::{fchmod, futimens, Mode};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchown, fchownat, Gid, Uid};

/// Host ids stay below this many after the shift, so no id wraps or becomes `-1` ("unchanged").
pub(crate) const ID_RANGE: u32 = 65536;
/// What an id outside the sandbox's range is clamped to: the kernel's overflow id.
pub(crate) const OVERFLOW_ID: u32 = 65534;

/// Owner, mode, mtime and kept xattrs of one member, ids already shifted.
pub(super) struct Meta {
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) mode: u32,
    pub(super) mtime: TimeSpec,
    pub(super) xattrs: Vec<(CString, Vec<u8>)>,
}

impl Meta {
    /// Shifted owner, mode, mtime and kept xattrs of a member; an error is a malformed header.
    pub(super) fn read<R: Read>(entry: &mut tar::Entry<'_, R>, id_shift: u32) -> io::Result<Meta> {
        let header = entry.header();
        let uid = header.uid()?;
        let gid = header.gid()?;
        let mode = header.mode()? & 0o7777;
        let mut mtime = TimeSpec::new(i64::try_from(header.mtime()?).unwrap_or(i64::MAX), 0);
        let mut xattrs = Vec::new();
        if let Some(extensions) = entry.pax_extensions()? {
            for extension in extensions {
                let extension = extension?;
                let key = extension.key_bytes();
                if key == b"mtime" {
                    if let Some(precise) = pax_time(extension.value_bytes()) {
                        mtime = precise;
                    }
                } else if let Some(name) = key.strip_prefix(b"SCHILY.xattr.") {
                    if kept_xattr(name) {
                        if let Ok(name) = CString::new(name) {
                            xattrs.push((name, extension.value_bytes().to_vec()));
                        }
                    }
                }
            }
        }
        for (name, value) in &mut xattrs {
            if name.as_bytes() == b"security.capability" {
                shift_capability_rootid(value, id_shift);
            }
        }
        Ok(Meta {
            uid: shift_id(uid, id_shift),
            gid: shift_id(gid, id_shift),
            mode,
            mtime,
            xattrs,
        })
    }
}

/// Which `SCHILY.xattr.*` records are kept: `user.*` but `user.overlay.*` (overlayfs mounted
/// with `userxattr` would read those as its own opaque/redirect/metacopy markers), and
/// `security.capability`. `trusted.*`, `security.selinux` and the rest are dropped.
pub(crate) fn kept_xattr(name: &[u8]) -> bool {
    (name.starts_with(b"user.") && !name.starts_with(b"user.overlay."))
        || name == b"security.capability"
}

/// An id of the layer as a host id: clamped into the sandbox's range, then shifted. The caller
/// checked that `shift + ID_RANGE` does not overflow.
pub(super) fn shift_id(id: u64, shift: u32) -> u32 {
    let id = u32::try_from(id)
        .ok()
        .filter(|id| *id < ID_RANGE)
        .unwrap_or(OVERFLOW_ID);
    shift.saturating_add(id)
}

/// A v3 `security.capability` names the uid that is root for it; shift it like an owner.
/// v2 values carry none and are kept as they are.
pub(super) fn shift_capability_rootid(value: &mut [u8], shift: u32) {
    map_capability_rootid(value, |rootid| shift_id(u64::from(rootid), shift));
}

/// Replaces the root uid of a v3 `security.capability` value with `map` of it; other values (v2,
/// malformed) are left as they are. Shared by the unpacker (shift) and `pack` (unshift).
pub(crate) fn map_capability_rootid(value: &mut [u8], map: impl FnOnce(u32) -> u32) {
    const VFS_CAP_REVISION_3: u32 = 0x0300_0000;
    const VFS_CAP_REVISION_MASK: u32 = 0xff00_0000;
    if value.len() != 24 {
        return;
    }
    let magic = u32::from_le_bytes([value[0], value[1], value[2], value[3]]);
    if magic & VFS_CAP_REVISION_MASK != VFS_CAP_REVISION_3 {
        return;
    }
    let rootid = u32::from_le_bytes([value[20], value[21], value[22], value[23]]);
    value[20..24].copy_from_slice(&map(rootid).to_le_bytes());
}

/// A PAX time, `seconds[.fraction]`.
pub(super) fn pax_time(value: &[u8]) -> Option<TimeSpec> {
    let value = std::str::from_utf8(value).ok()?;
    let (seconds, fraction) = value.split_once('.').unwrap_or((value, ""));
    let seconds: i64 = seconds.parse().ok()?;
    if seconds < 0 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits: String = fraction
        .chars()
        .chain(std::iter::repeat('0'))
        .take(9)
        .collect();
    let nanoseconds: i64 = digits.parse().ok()?;
    Some(TimeSpec::new(seconds, nanoseconds))
}

/// What [`apply`] puts metadata on: which of xattrs and mtime it takes through its fd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    /// Xattrs and mtime.
    File,
    /// Xattrs; the mtime is set once the layer is written, as writing inside changes it.
    Dir,
    /// The mtime; the kernel takes `user.*` xattrs on regular files and directories only.
    Fifo,
}

/// Owner, then mode (a chown clears setuid/setgid), then xattrs (a chown clears
/// `security.capability`), then the mtime, as `target` takes them.
pub(super) fn apply(fd: BorrowedFd<'_>, meta: &Meta, target: Target) -> io::Result<()> {
    fchown(
        fd,
        Some(Uid::from_raw(meta.uid)),
        Some(Gid::from_raw(meta.gid)),
    )?;
    fchmod(fd, Mode::from_bits_truncate(meta.mode))?;
    if target != Target::Fifo {
        for (name, value) in &meta.xattrs {
            set_xattr(fd, name, value)?;
        }
    }
    if target != Target::Dir {
        futimens(fd, &meta.mtime, &meta.mtime)?;
    }
    Ok(())
}

pub(super) fn chown_at(dir: BorrowedFd<'_>, name: &[u8], meta: &Meta) -> io::Result<()> {
    Ok(fchownat(
        dir,
        name,
        Some(Uid::from_raw(meta.uid)),
        Some(Gid::from_raw(meta.gid)),
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )?)
}

pub(super) fn set_xattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated, `value` is valid for `value.len()` bytes, and `fd` is
    // an open descriptor borrowed for the call.
    let result = unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(Errno::last().into())
    }
}
