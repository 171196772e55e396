//! Unpacking one layer tar into its own directory.
//!
//! [`unpack_layer`] turns one OCI/Docker layer blob into a directory that stays in OCI *layer*
//! form, so overlayfs can stack it as a lowerdir: whiteouts become overlayfs whiteouts (a
//! character device 0:0) and opaque markers become `trusted.overlay.opaque=y`.
//!
//! Guarantees:
//! - Nothing is created, written, linked or changed outside `dest`. Every member is resolved
//!   component by component from a directory fd with `O_NOFOLLOW | O_DIRECTORY`; a symlink (or
//!   a non-directory) in a member's parent path refuses the member, it is never followed. Files
//!   are created with `O_CREAT | O_EXCL | O_NOFOLLOW` relative to their parent's fd.
//! - A hostile member is refused with [`UnpackError::Hostile`] naming it: a `..` component, a
//!   parent that is a symlink or not a directory, a hardlink to anything but an earlier regular
//!   file or FIFO of this layer (never to a symlink, a directory or through a symlink), a name
//!   longer than `PATH_MAX` or with a NUL, a member type a layer does not carry. Leading `/` are
//!   stripped: absolute names are relative to the layer root, as Docker reads them. PAX global
//!   headers and aufs `.wh..wh.*` bookkeeping are ignored.
//! - The only device node ever created is the 0:0 whiteout; block and character devices in the
//!   layer are skipped and counted in [`UnpackStats::skipped_devices`].
//! - Limits are enforced while streaming ([`UnpackLimits`]): member data bytes are counted as
//!   read (a sparse file counts its full size), members as met, and one member's headers (PAX,
//!   GNU long names) may not exceed [`MAX_MEMBER_HEADERS`]; past a limit, [`UnpackError::TooLarge`].
//! - Ownership is shifted: a uid or gid `n` in the layer is `id_shift + n` on the host; ids
//!   65536 and above (outside the sandbox's 65536-id mapping) are clamped to 65534, the
//!   overflow id the kernel shows for unmapped ids, before the shift.
//! - Mode bits (setuid, setgid and sticky included) and mtimes are kept; directory mtimes are
//!   set once the whole layer is written. Of the PAX `SCHILY.xattr.*` records only `user.*`
//!   other than `user.overlay.*`, and `security.capability`, are kept, on regular files and
//!   directories (the kernel takes `user.*` on nothing else). `trusted.*` and `user.overlay.*`
//!   (overlayfs would read them as its own markers), `security.selinux` and the rest are
//!   dropped. A v3 `security.capability` has its root uid shifted like an owner.
//! - A member replacing an earlier one behaves like Docker: the later wins, a directory over a
//!   directory merges, anything else removes the earlier one (a directory with its tree, found
//!   beneath `dest` only) first.
//!
//! - `blob` is read to its end, past the end of the archive, so compression trailers are checked
//!   and a digest computed while reading covers every byte.
//!
//! Assumptions: `dest` is an existing, empty directory (checked) that nothing else writes to
//! while unpacking (the walk is race-free against the layer, not against other writers); the
//! process runs as real root (for `mknod`, `lchown` and `trusted.*`). On any error `dest` is
//! left partially written: the caller deletes it.

mod budget;
mod meta;
mod paths;
#[cfg(test)]
mod tests;

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{futimens, makedev, mkdirat, mknodat, utimensat, Mode, SFlag, UtimensatFlags};
use nix::sys::time::TimeSpec;
use nix::unistd::{linkat, symlinkat};
use tar::EntryType;

use budget::{HeaderBudget, Metered};
use meta::{apply, chown_at, set_xattr, Meta, Target};
use paths::{Component, ImpliedDir, WalkError};

/// The xattr and id policy [`crate::pack`] applies in reverse, stated once here.
pub(crate) use meta::{kept_xattr, map_capability_rootid, ID_RANGE, OVERFLOW_ID};

/// How a layer blob is compressed (from its media type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// A plain tar.
    None,
    /// gzip (one or more members).
    Gzip,
    /// zstd (one or more frames).
    Zstd,
}

impl Compression {
    /// The compression of a layer media type, OCI or Docker, distributable or not; `None` for a
    /// media type that is not a layer tar.
    pub fn from_media_type(mt: &str) -> Option<Compression> {
        match mt.trim() {
            "application/vnd.oci.image.layer.v1.tar"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar"
            | "application/vnd.docker.image.rootfs.diff.tar" => Some(Compression::None),
            "application/vnd.oci.image.layer.v1.tar+gzip"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
            | "application/vnd.docker.image.rootfs.diff.tar.gzip"
            | "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip" => {
                Some(Compression::Gzip)
            }
            "application/vnd.oci.image.layer.v1.tar+zstd"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd" => {
                Some(Compression::Zstd)
            }
            _ => None,
        }
    }
}

/// Limits against hostile layers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Total uncompressed member data bytes read: written to files, or read and discarded for
    /// members that carry data they do not need, and whatever follows the end of the archive
    /// (a sparse file counts its full size).
    pub max_bytes: u64,
    /// Members of the tar, whiteouts and skipped ones included.
    pub max_entries: u64,
}

impl Default for UnpackLimits {
    /// 64 GiB and 2 000 000 members.
    fn default() -> Self {
        UnpackLimits {
            max_bytes: 64 << 30,
            max_entries: 2_000_000,
        }
    }
}

/// What unpacking wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnpackStats {
    /// Members of the tar, whiteouts and skipped devices included.
    pub entries: u64,
    /// Bytes written to regular files.
    pub bytes: u64,
    /// Block and character devices in the layer, skipped.
    pub skipped_devices: u64,
}

/// The most bytes one member's headers may take (its own, PAX extensions, GNU long name and long
/// link together); the tar parser holds them in memory.
pub const MAX_MEMBER_HEADERS: u64 = 16 << 20;

/// Why a layer could not be unpacked. `dest` may be partly written; the caller deletes it.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The destination is not an empty directory.
    #[error("layer destination {path} is not an empty directory")]
    DestNotEmpty { path: PathBuf },
    /// The uid/gid shift leaves no room for the sandbox's 65536 ids below `u32::MAX`.
    #[error("uid/gid shift {id_shift} leaves no room for 65536 ids")]
    BadIdShift { id_shift: u32 },
    /// The blob could not be read or decompressed, or the tar inside is malformed.
    #[error("layer blob is not a readable (compressed) tar")]
    Corrupt(#[source] io::Error),
    /// A member the unpacker refuses: it would reach outside the layer directory, or is no kind
    /// of file a layer may carry.
    #[error("layer member {entry:?} refused: {reason}")]
    Hostile { entry: String, reason: &'static str },
    /// The layer exceeds one of its unpack limits.
    #[error("layer exceeds its unpack limit of {limit} {what}")]
    TooLarge { what: &'static str, limit: u64 },
    /// A filesystem operation beneath the destination failed.
    #[error("could not {what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Unpacks the layer `blob` (compressed as `compression`) into the EMPTY directory `dest`,
/// shifting every owner uid/gid by `id_shift` (sandbox uid 0 → host uid `id_shift`; an id of
/// 65536 or more inside the layer is clamped to 65534 before the shift). See the module
/// documentation for what is guaranteed. `blob` is read to its end, so a digest computed while
/// reading it covers every byte. On any error `dest` is left partly written and the caller
/// deletes it.
pub fn unpack_layer(
    blob: impl Read,
    compression: Compression,
    dest: &Path,
    id_shift: u32,
    limits: &UnpackLimits,
) -> Result<UnpackStats, UnpackError> {
    if id_shift > u32::MAX - ID_RANGE {
        return Err(UnpackError::BadIdShift { id_shift });
    }
    let root: OwnedFd = File::open(dest)
        .map_err(|source| UnpackError::Io {
            what: "open the layer directory",
            path: dest.to_path_buf(),
            source,
        })?
        .into();
    match paths::is_empty_dir(root.as_fd()) {
        Ok(true) => {}
        Ok(false) => {
            return Err(UnpackError::DestNotEmpty {
                path: dest.to_path_buf(),
            })
        }
        Err(source) => {
            return Err(UnpackError::Io {
                what: "list the layer directory",
                path: dest.to_path_buf(),
                source,
            })
        }
    }
    let headers = HeaderBudget::default();
    let stream = Metered {
        inner: decompress(blob, compression).map_err(UnpackError::Corrupt)?,
        budget: headers.clone(),
    };
    let mut unpacker = Unpacker {
        root: root.as_fd(),
        dest,
        id_shift,
        limits,
        stats: UnpackStats::default(),
        dir_times: Vec::new(),
        data_read: 0,
    };
    let mut archive = tar::Archive::new(stream);
    let mut entries = archive.entries().map_err(UnpackError::Corrupt)?;
    loop {
        headers.start();
        let next = entries.next();
        headers.stop();
        let mut entry = match next {
            None => break,
            Some(Ok(entry)) => entry,
            Some(Err(_)) if headers.exceeded() => {
                return Err(UnpackError::TooLarge {
                    what: "header bytes for one member",
                    limit: MAX_MEMBER_HEADERS,
                })
            }
            Some(Err(error)) => return Err(UnpackError::Corrupt(error)),
        };
        unpacker.member(&mut entry)?;
        // Whatever data the member carried and did not need is read here, counted, rather than
        // skipped by the parser where no limit sees it.
        unpacker.discard(&mut entry)?;
    }
    // Read the stream to its end (the tar's end-of-archive blocks, its record padding, the
    // compression's trailer and checksum), so a digest computed over `blob` while it is read
    // covers all of it, and a damaged trailer is noticed.
    unpacker.discard(&mut archive.into_inner())?;
    unpacker.set_dir_times()?;
    Ok(unpacker.stats)
}

fn decompress<'a>(
    blob: impl Read + 'a,
    compression: Compression,
) -> io::Result<Box<dyn Read + 'a>> {
    Ok(match compression {
        Compression::None => Box::new(blob),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(blob)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(blob)?),
    })
}

/// What a member is, once its name and type are read.
enum Kind {
    File,
    Dir,
    Symlink(Vec<u8>),
    Hardlink(Vec<u8>),
    Fifo,
    Device,
    /// Metadata for the whole archive (PAX global header): nothing to write.
    Ignored,
}

/// Where a member goes: its name in its parent's fd, and the path for error messages.
struct At<'a> {
    dir: BorrowedFd<'a>,
    name: &'a [u8],
    path: PathBuf,
}

impl At<'_> {
    fn io(&self, what: &'static str) -> impl FnOnce(io::Error) -> UnpackError + '_ {
        move |source| UnpackError::Io {
            what,
            path: self.path.clone(),
            source,
        }
    }

    fn errno(&self, what: &'static str) -> impl FnOnce(Errno) -> UnpackError + '_ {
        move |errno| self.io(what)(errno.into())
    }
}

struct Unpacker<'a> {
    root: BorrowedFd<'a>,
    dest: &'a Path,
    id_shift: u32,
    limits: &'a UnpackLimits,
    stats: UnpackStats,
    /// Directories whose mtime is set at the end, once nothing more is written into them.
    dir_times: Vec<(Vec<Component>, TimeSpec)>,
    /// Member data bytes read so far, written or discarded: what `max_bytes` limits.
    data_read: u64,
}

impl Unpacker<'_> {
    fn member<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<(), UnpackError> {
        self.stats.entries += 1;
        if self.stats.entries > self.limits.max_entries {
            return Err(UnpackError::TooLarge {
                what: "members",
                limit: self.limits.max_entries,
            });
        }
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let hostile = |reason: &'static str| UnpackError::Hostile {
            entry: shown.clone(),
            reason,
        };
        let mut components = paths::normalise(&raw).map_err(|bad| hostile(bad.as_name()))?;
        let kind = match entry.header().entry_type() {
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                // Old tars mark directories only by a trailing slash.
                if raw.ends_with(b"/") {
                    Kind::Dir
                } else {
                    Kind::File
                }
            }
            EntryType::Directory => Kind::Dir,
            EntryType::Symlink => Kind::Symlink(self.link_name(entry, &hostile)?),
            EntryType::Link => Kind::Hardlink(self.link_name(entry, &hostile)?),
            EntryType::Fifo => Kind::Fifo,
            EntryType::Char | EntryType::Block => Kind::Device,
            EntryType::XGlobalHeader => Kind::Ignored,
            _ => return Err(hostile("the member type is not one a layer may carry")),
        };
        if matches!(kind, Kind::Ignored) {
            return Ok(());
        }

        let meta = Meta::read(entry, self.id_shift).map_err(UnpackError::Corrupt)?;
        let Some(name) = components.pop() else {
            // The layer root itself, as `./`.
            return match kind {
                Kind::Dir => self.set_root(&meta),
                _ => Err(hostile("the layer root can only be a directory")),
            };
        };

        if name == b".wh..wh..opq" {
            return self.opaque(&components, &hostile);
        }
        if name.starts_with(b".wh..wh.") {
            // aufs bookkeeping (`.wh..wh.plnk`, `.wh..wh.aufs`), meaningless to overlayfs.
            return Ok(());
        }
        if let Some(hidden) = name.strip_prefix(b".wh.") {
            if hidden.is_empty() || hidden == b"." || hidden == b".." {
                return Err(hostile("the whiteout names no file"));
            }
            return self.whiteout(&components, hidden, &meta, &hostile);
        }

        if let Kind::Device = kind {
            self.stats.skipped_devices += 1;
            return Ok(());
        }
        // A hardlink target is checked before anything at the member's own name is replaced.
        let link_source = match &kind {
            Kind::Hardlink(target) => {
                Some(self.hardlink_source(target, &components, &name, &hostile)?)
            }
            _ => None,
        };
        let parent = self.parent(&components, &hostile)?;
        let at = At {
            dir: parent.as_fd(),
            name: &name,
            path: paths::display_child(self.dest, &components, &name),
        };
        let existing = paths::lstat_at(at.dir, at.name).map_err(at.io("inspect"))?;
        let existing_is_dir = existing
            .as_ref()
            .is_some_and(|stat| paths::file_type(stat) == SFlag::S_IFDIR);
        if existing.is_some() && !(existing_is_dir && matches!(kind, Kind::Dir)) {
            paths::remove_existing(at.dir, at.name)
                .map_err(at.io("remove the earlier member at"))?;
        }

        match kind {
            Kind::File => self.create_file(entry, &at, &meta),
            Kind::Dir => {
                if !existing_is_dir {
                    mkdirat(at.dir, at.name, Mode::from_bits_truncate(0o700))
                        .map_err(at.errno("create the directory"))?;
                }
                let fd = paths::open_child_dir(at.dir, at.name)
                    .map_err(at.errno("open the directory"))?;
                apply(fd.as_fd(), &meta, Target::Dir)
                    .map_err(at.io("set the owner, mode or xattrs of"))?;
                components.push(name.clone());
                self.dir_times.push((components, meta.mtime));
                Ok(())
            }
            Kind::Symlink(target) => {
                symlinkat(target.as_slice(), at.dir, at.name)
                    .map_err(at.errno("create the symlink"))?;
                chown_at(at.dir, at.name, &meta).map_err(at.io("set the owner of"))?;
                utimensat(
                    at.dir,
                    at.name,
                    &meta.mtime,
                    &meta.mtime,
                    UtimensatFlags::NoFollowSymlink,
                )
                .map_err(at.errno("set the mtime of"))
            }
            Kind::Hardlink(_) => match link_source {
                Some((source_dir, source_name)) => linkat(
                    source_dir.as_fd(),
                    source_name.as_slice(),
                    at.dir,
                    at.name,
                    AtFlags::empty(),
                )
                .map_err(at.errno("create the hardlink")),
                None => Ok(()),
            },
            Kind::Fifo => {
                mknodat(
                    at.dir,
                    at.name,
                    SFlag::S_IFIFO,
                    Mode::from_bits_truncate(0o600),
                    0,
                )
                .map_err(at.errno("create the FIFO"))?;
                // Opening a FIFO for reading without blocking succeeds at once and writes nothing.
                let fd = openat(
                    at.dir,
                    at.name,
                    OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(at.errno("open the FIFO"))?;
                apply(fd.as_fd(), &meta, Target::Fifo)
                    .map_err(at.io("set the owner, mode or mtime of"))
            }
            Kind::Device | Kind::Ignored => Ok(()),
        }
    }

    /// A regular file, created `O_EXCL | O_NOFOLLOW` in its parent and filled from the member.
    fn create_file<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        at: &At<'_>,
        meta: &Meta,
    ) -> Result<(), UnpackError> {
        let fd = openat(
            at.dir,
            at.name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(at.errno("create"))?;
        let mut file = File::from(fd);
        self.copy_data(entry, &mut file, &at.path)?;
        apply(file.as_fd(), meta, Target::File)
            .map_err(at.io("set the owner, mode, xattrs or mtime of"))
    }

    fn link_name<R: Read>(
        &self,
        entry: &tar::Entry<'_, R>,
        hostile: &impl Fn(&'static str) -> UnpackError,
    ) -> Result<Vec<u8>, UnpackError> {
        match entry.link_name_bytes() {
            Some(target) if !target.is_empty() => Ok(target.into_owned()),
            _ => Err(hostile("the link has no target")),
        }
    }

    /// Opens the parent directory of a member, creating missing ones owned by the sandbox's root.
    fn parent(
        &self,
        components: &[Component],
        hostile: &impl Fn(&'static str) -> UnpackError,
    ) -> Result<OwnedFd, UnpackError> {
        let implied = ImpliedDir {
            uid: self.id_shift,
            gid: self.id_shift,
        };
        paths::open_dir(self.root, components, Some(implied)).map_err(|error| match error {
            WalkError::Symlink => {
                hostile("a parent directory is a symlink, which is never followed")
            }
            WalkError::NotDir | WalkError::Missing => hostile("a parent is not a directory"),
            WalkError::Io(source) => UnpackError::Io {
                what: "open or create the parent directory",
                path: paths::display(self.dest, components),
                source,
            },
        })
    }

    /// Resolves a hardlink's target beneath the root without following a symlink: it must be
    /// a regular file or FIFO this layer already wrote. Returns its directory and name.
    fn hardlink_source(
        &self,
        target: &[u8],
        components: &[Component],
        name: &Component,
        hostile: &impl Fn(&'static str) -> UnpackError,
    ) -> Result<(OwnedFd, Component), UnpackError> {
        let mut target = paths::normalise(target).map_err(|bad| hostile(bad.as_target()))?;
        let Some(target_name) = target.pop() else {
            return Err(hostile("the hardlink target is the layer root"));
        };
        if target == components && &target_name == name {
            return Err(hostile("the hardlink targets itself"));
        }
        let dir = paths::open_dir(self.root, &target, None).map_err(|error| match error {
            WalkError::Symlink => {
                hostile("a parent of the hardlink target is a symlink, which is never followed")
            }
            WalkError::NotDir | WalkError::Missing => {
                hostile("the hardlink target is not an earlier member of this layer")
            }
            WalkError::Io(source) => UnpackError::Io {
                what: "open the directory of the hardlink target",
                path: paths::display(self.dest, &target),
                source,
            },
        })?;
        let stat =
            paths::lstat_at(dir.as_fd(), &target_name).map_err(|source| UnpackError::Io {
                what: "inspect the hardlink target",
                path: paths::display_child(self.dest, &target, &target_name),
                source,
            })?;
        match stat.map(|stat| paths::file_type(&stat)) {
            None => Err(hostile(
                "the hardlink target is not an earlier member of this layer",
            )),
            Some(SFlag::S_IFREG | SFlag::S_IFIFO) => Ok((dir, target_name)),
            Some(SFlag::S_IFLNK) => Err(hostile("the hardlink target is a symlink")),
            Some(SFlag::S_IFDIR) => Err(hostile("the hardlink target is a directory")),
            Some(_) => Err(hostile("the hardlink target is a device")),
        }
    }

    /// The layer's `./` member: its owner, mode and xattrs go on `dest` itself.
    fn set_root(&mut self, meta: &Meta) -> Result<(), UnpackError> {
        apply(self.root, meta, Target::Dir).map_err(|source| UnpackError::Io {
            what: "set the owner, mode or xattrs of",
            path: self.dest.to_path_buf(),
            source,
        })?;
        self.dir_times.push((Vec::new(), meta.mtime));
        Ok(())
    }

    /// `.wh..wh..opq` in `dir`: the directory (created if missing) hides the layers below it.
    fn opaque(
        &mut self,
        dir: &[Component],
        hostile: &impl Fn(&'static str) -> UnpackError,
    ) -> Result<(), UnpackError> {
        let fd = self.parent(dir, hostile)?;
        set_xattr(fd.as_fd(), c"trusted.overlay.opaque", b"y").map_err(|source| UnpackError::Io {
            what: "mark opaque the directory",
            path: paths::display(self.dest, dir),
            source,
        })
    }

    /// `.wh.NAME` in `dir`: a 0:0 character device named NAME, which overlayfs reads as "NAME is
    /// deleted in this layer". It replaces whatever this layer put at NAME before.
    fn whiteout(
        &mut self,
        dir: &[Component],
        hidden: &[u8],
        meta: &Meta,
        hostile: &impl Fn(&'static str) -> UnpackError,
    ) -> Result<(), UnpackError> {
        let parent = self.parent(dir, hostile)?;
        let at = At {
            dir: parent.as_fd(),
            name: hidden,
            path: paths::display_child(self.dest, dir, hidden),
        };
        paths::remove_existing(at.dir, at.name).map_err(at.io("remove the earlier member at"))?;
        mknodat(
            at.dir,
            at.name,
            SFlag::S_IFCHR,
            Mode::empty(),
            makedev(0, 0),
        )
        .map_err(at.errno("create the whiteout"))?;
        chown_at(at.dir, at.name, meta).map_err(at.io("set the owner of the whiteout"))
    }

    /// Writes a regular file's data, counting bytes against the limit as they are read.
    fn copy_data<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        file: &mut File,
        path: &Path,
    ) -> Result<(), UnpackError> {
        let stated = entry.size();
        if self.data_read.saturating_add(stated) > self.limits.max_bytes {
            return Err(self.too_many_bytes());
        }
        let mut buffer = vec![0u8; 128 * 1024];
        loop {
            let read = match entry.read(&mut buffer) {
                Ok(0) => return Ok(()),
                Ok(read) => read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(UnpackError::Corrupt(error)),
            };
            self.charge(read)?;
            self.stats.bytes += read as u64;
            file.write_all(&buffer[..read])
                .map_err(|source| UnpackError::Io {
                    what: "write",
                    path: path.to_path_buf(),
                    source,
                })?;
        }
    }

    /// Reads and drops what is left of a member's data, or of the stream after the archive,
    /// counting it against the byte limit.
    fn discard(&mut self, reader: &mut impl Read) -> Result<(), UnpackError> {
        let mut buffer = [0u8; 8192];
        loop {
            let read = match reader.read(&mut buffer) {
                Ok(0) => return Ok(()),
                Ok(read) => read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(UnpackError::Corrupt(error)),
            };
            self.charge(read)?;
        }
    }

    /// Counts `read` member data bytes against `max_bytes`.
    fn charge(&mut self, read: usize) -> Result<(), UnpackError> {
        self.data_read = self.data_read.saturating_add(read as u64);
        if self.data_read > self.limits.max_bytes {
            return Err(self.too_many_bytes());
        }
        Ok(())
    }

    fn too_many_bytes(&self) -> UnpackError {
        UnpackError::TooLarge {
            what: "bytes",
            limit: self.limits.max_bytes,
        }
    }

    /// Sets the recorded directories' mtimes, skipping those a later member replaced.
    fn set_dir_times(&mut self) -> Result<(), UnpackError> {
        for (components, mtime) in std::mem::take(&mut self.dir_times) {
            let path = || paths::display(self.dest, &components);
            let dir = match paths::open_dir(self.root, &components, None) {
                Ok(dir) => dir,
                Err(WalkError::Io(source)) => {
                    return Err(UnpackError::Io {
                        what: "open the directory",
                        path: path(),
                        source,
                    })
                }
                Err(_) => continue,
            };
            futimens(dir.as_fd(), &mtime, &mtime).map_err(|errno| UnpackError::Io {
                what: "set the mtime of",
                path: path(),
                source: errno.into(),
            })?;
        }
        Ok(())
    }
}
