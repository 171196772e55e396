//! Packing a directory in overlayfs layer form back into an OCI layer tar: the reverse of
//! [`crate::unpack`].
//!
//! [`pack_dir`] walks a sandbox's overlay `upper` dir (once the sandbox stopped) and writes the
//! image layer tar it stands for; [`commit_dir`] packs into a file and installs that blob into the
//! [`LayerStore`], through the hardened unpacker, so the committed layer is exactly what a pull of
//! the blob would install.
//!
//! Guarantees:
//! - **Deterministic.** The same tree gives the same bytes, so the same digest. Entries are
//!   written depth first, a directory before its contents, siblings sorted by their name's bytes.
//!   A header holds only type, name, link name, mode, owner, size and the mtime in whole seconds
//!   (no atime, ctime, user or group names, device numbers; sub-second mtimes are dropped, as
//!   Docker writes them). PAX records are written only when needed (a name or link target over
//!   100 bytes, a size of 8 GiB or more, xattrs), in a fixed order under one fixed name. The gzip
//!   header carries no file name and mtime 0.
//! - **Never follows a symlink.** The tree is walked fd by fd from `dir` (`O_NOFOLLOW |
//!   O_DIRECTORY`, `fstatat(AT_SYMLINK_NOFOLLOW)`); files are opened `O_NOFOLLOW` and checked to
//!   be the inode that was listed. A symlink becomes a symlink member with its target verbatim.
//!   `dir` itself may not be a symlink.
//! - **Kept:** regular files (content, mode with setuid, setgid and sticky, mtime, owner),
//!   directories, symlinks, FIFOs, and hardlinks: a regular file or FIFO with more than one link
//!   is written in full at its first path in walk order, and as a hardlink member to that path at
//!   every later one. The layer root is a `./` member (its owner, mode and xattrs).
//!   A whiteout (character device 0:0) becomes `.wh.NAME`, an empty regular file (mode 0600,
//!   the device's owner and mtime); a directory with `trusted.overlay.opaque=y` is followed by a
//!   `.wh..wh..opq` member inside it. The xattrs the unpacker keeps (`user.*` but
//!   `user.overlay.*`, and `security.capability`: one predicate, [`crate::unpack::kept_xattr`])
//!   are written as PAX `SCHILY.xattr.*` records for files and directories, sorted by name; a v3
//!   `security.capability` has its root uid unshifted like an owner.
//! - **Owners** in the tar are host id − `id_shift`. A host id outside `[id_shift, id_shift +
//!   65536)` has no id inside the sandbox and is written as 65534, the overflow id the unpacker
//!   clamps to as well: such a file comes back owned by `id_shift + 65534`, not its old owner.
//! - **Dropped:** every other `trusted.overlay.*` xattr (`origin`, `impure`, `nlink`, `upper`,
//!   `uuid`, `opaque` other than `y`: overlayfs's own bookkeeping) and every other xattr
//!   (`security.selinux`, `trusted.*`, ...); device nodes other than whiteouts and sockets (a layer
//!   cannot carry them; counted in [`Packed::skipped`]); the `exclude` paths with everything
//!   beneath them.
//! - **Refused** with a [`PackError`] naming the path: `trusted.overlay.redirect` or
//!   `trusted.overlay.metacopy` (the upper is not self-contained: it points into its lower layers;
//!   the runtime mounts without `redirect_dir` and `metacopy`, so they should never appear); a
//!   name starting with `.wh.` (every reader would take it for a whiteout); a member name longer
//!   than `PATH_MAX` (the unpacker would refuse it); an xattr name with `=` (PAX cannot carry it);
//!   a file whose size changes while it is read.
//!
//! Assumptions: nothing writes to `dir` while it is packed (the sandbox stopped; a concurrent
//! writer can make the pack fail, never make it follow a link); the process runs as root (to read
//! files of any owner and `trusted.*` xattrs). Blocking: run it off the async threads.

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsStr};
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use flate2::write::GzEncoder;
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{open, openat, readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

use crate::registry::LayerDescriptor;
use crate::unpack::{kept_xattr, ID_RANGE, OVERFLOW_ID};
use crate::{ImageError, LayerStore};

/// The media type of an uncompressed layer tar.
pub const MEDIA_TYPE_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
/// The media type of a gzip-compressed layer tar.
pub const MEDIA_TYPE_TAR_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// The longest member name written, in bytes: Linux's `PATH_MAX`, which the unpacker enforces.
const MAX_NAME: usize = 4096;
/// The longest name or link name a ustar header holds; longer ones go in PAX records.
const HEADER_NAME: usize = 100;
/// Sizes from here on do not fit the header's 11 octal digits and go in a PAX record too.
const OCTAL_SIZE_LIMIT: u64 = 1 << 33;
const BLOCK: usize = 512;

/// How a directory is packed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackOptions {
    /// The host id the sandbox's root maps to: an owner `h` on disk is `h - id_shift` in the tar;
    /// a host id outside `[id_shift, id_shift + 65536)` is written as 65534.
    pub id_shift: u32,
    /// Paths relative to the packed directory to leave out, with everything beneath them (the
    /// files the runtime writes per sandbox: `etc/hostname`, `etc/hosts`, `etc/resolv.conf`). A
    /// leading `/` or `./` is ignored; a path with a `..` component names nothing and is ignored.
    pub exclude: Vec<PathBuf>,
    /// Compress the tar with gzip (fast level).
    pub gzip: bool,
}

/// The layer blob [`pack_dir`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// `sha256:<hex>` of the blob's bytes as written (compressed, with `gzip`).
    pub digest: String,
    /// `sha256:<hex>` of the uncompressed tar: the image config's `rootfs.diff_ids` entry.
    pub diff_id: String,
    /// Bytes written.
    pub size: u64,
    /// [`MEDIA_TYPE_TAR`] or [`MEDIA_TYPE_TAR_GZIP`].
    pub media_type: String,
    /// Members of the tar (PAX records not counted; whiteouts and opaque markers are).
    pub entries: u64,
    /// Device nodes (other than whiteouts) and sockets left out.
    pub skipped: u64,
}

impl Packed {
    /// The blob as a manifest lists it.
    pub fn descriptor(&self) -> LayerDescriptor {
        LayerDescriptor {
            digest: self.digest.clone(),
            media_type: self.media_type.clone(),
            size: self.size,
        }
    }
}

/// Why a directory could not be packed.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// The directory to pack is a symlink or not a directory.
    #[error("{path} is not a directory (a symlink is never followed)")]
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// A filesystem operation on the packed tree failed.
    #[error("could not {what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Writing the layer blob failed.
    #[error("could not write the layer blob")]
    Write(#[source] io::Error),
    /// The tree carries overlayfs state that only means something with its lower layers.
    #[error(
        "{path} carries {xattr}: the directory is not a self-contained overlay layer \
         (it was mounted with redirect_dir or metacopy)"
    )]
    NotSelfContained {
        /// The file or directory.
        path: PathBuf,
        /// The xattr found.
        xattr: &'static str,
    },
    /// A name a layer tar reserves for whiteouts.
    #[error("{path} has a name starting with `.wh.`, which a layer tar reserves for whiteouts")]
    ReservedName {
        /// The file.
        path: PathBuf,
    },
    /// A name longer than the unpacker accepts.
    #[error("{path} is {len} bytes long in the layer tar, longer than PATH_MAX")]
    NameTooLong {
        /// The file.
        path: PathBuf,
        /// Its member name's length.
        len: usize,
    },
    /// An xattr whose name a PAX record cannot carry.
    #[error("{path} has xattr {name:?}, whose `=` a PAX record cannot carry")]
    UnrepresentableXattr {
        /// The file.
        path: PathBuf,
        /// The xattr's name.
        name: String,
    },
    /// A file changed while it was packed (the tree is not quiescent).
    #[error("{path} changed while it was packed")]
    Changed {
        /// The file.
        path: PathBuf,
    },
}

/// Writes the layer tar of `dir` to `out` (buffered here; flushed at the end) and returns what
/// was written. See the module documentation for what is kept, dropped and refused. Blocking.
/// On an error, `out` holds a partial blob the caller discards.
pub fn pack_dir(dir: &Path, opts: &PackOptions, out: impl Write) -> Result<Packed, PackError> {
    let root = match open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOTDIR | Errno::ELOOP) => {
            return Err(PackError::NotADirectory {
                path: dir.to_path_buf(),
            })
        }
        Err(errno) => {
            return Err(PackError::Io {
                what: "open",
                path: dir.to_path_buf(),
                source: errno.into(),
            })
        }
    };
    let blob = Hashing::new(BufWriter::with_capacity(128 * 1024, out));
    let sink = if opts.gzip {
        Blob::Gzip(GzEncoder::new(blob, flate2::Compression::fast()))
    } else {
        Blob::Plain(blob)
    };
    let mut packer = Packer {
        root: dir,
        opts,
        exclude: exclude_set(&opts.exclude),
        tar: Hashing::new(sink),
        links: HashMap::new(),
        entries: 0,
        skipped: 0,
        buffer: vec![0; 128 * 1024],
    };
    packer.walk(root)?;

    // The end of the archive: two zero blocks, as `tar::Builder` writes it.
    packer
        .tar
        .write_all(&[0; 2 * BLOCK])
        .map_err(PackError::Write)?;
    let Packer {
        tar,
        entries,
        skipped,
        ..
    } = packer;
    let diff_id = format!("sha256:{}", hex::encode(tar.hasher.finalize()));
    let blob = tar.inner.finish().map_err(PackError::Write)?;
    let digest = format!("sha256:{}", hex::encode(blob.hasher.finalize()));
    let mut out = blob.inner;
    out.flush().map_err(PackError::Write)?;
    Ok(Packed {
        digest,
        diff_id,
        size: blob.written,
        media_type: if opts.gzip {
            MEDIA_TYPE_TAR_GZIP
        } else {
            MEDIA_TYPE_TAR
        }
        .to_string(),
        entries,
        skipped,
    })
}

/// Packs `dir` into a file in `tmp_dir` and installs it into `layers` (which unpacks it again
/// through the hardened unpacker and verifies its digest); returns the layer's descriptor and the
/// bytes its files take. The temporary file is removed whatever happens. Blocking.
pub fn commit_dir(
    dir: &Path,
    opts: &PackOptions,
    layers: &LayerStore,
    tmp_dir: &Path,
) -> Result<(LayerDescriptor, u64), ImageError> {
    let path = tmp_dir.join(format!(
        "pack-{}-{}.tar{}",
        std::process::id(),
        unique(),
        if opts.gzip { ".gz" } else { "" }
    ));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(ImageError::io("create", &path))?;
    let outcome = (|| {
        let packed = pack_dir(dir, opts, &file)?;
        drop(file);
        let descriptor = packed.descriptor();
        let blob = File::open(&path).map_err(ImageError::io("open", &path))?;
        let bytes = layers.install(&descriptor, BufReader::new(blob))?;
        tracing::info!(
            dir = %dir.display(),
            digest = %descriptor.digest,
            diff_id = %packed.diff_id,
            entries = packed.entries,
            skipped = packed.skipped,
            bytes,
            "committed a directory as a layer"
        );
        Ok((descriptor, bytes))
    })();
    let _ = std::fs::remove_file(&path);
    outcome
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The excluded paths as member names (components joined by `/`, no trailing slash).
fn exclude_set(exclude: &[PathBuf]) -> HashSet<Vec<u8>> {
    let mut set = HashSet::new();
    'paths: for path in exclude {
        let mut name = Vec::new();
        for component in path.components() {
            match component {
                Component::Normal(part) => {
                    if !name.is_empty() {
                        name.push(b'/');
                    }
                    name.extend_from_slice(part.as_bytes());
                }
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                Component::ParentDir => continue 'paths,
            }
        }
        if !name.is_empty() {
            set.insert(name);
        }
    }
    set
}

/// A writer that hashes and counts what passes through it.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W> Hashing<W> {
    fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The blob: the tar as it is, or gzipped.
enum Blob<W: Write> {
    Plain(Hashing<W>),
    Gzip(GzEncoder<Hashing<W>>),
}

impl<W: Write> Blob<W> {
    /// Ends the compressed stream (its trailer) and gives back the hashed writer.
    fn finish(self) -> io::Result<Hashing<W>> {
        match self {
            Blob::Plain(blob) => Ok(blob),
            Blob::Gzip(encoder) => encoder.finish(),
        }
    }
}

impl<W: Write> Write for Blob<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Blob::Plain(blob) => blob.write(buf),
            Blob::Gzip(encoder) => encoder.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Blob::Plain(blob) => blob.flush(),
            Blob::Gzip(encoder) => encoder.flush(),
        }
    }
}

/// A directory being walked: its fd, its member name (with its trailing `/`; empty for the
/// root) and the names in it still to pack, sorted.
struct Frame {
    fd: OwnedFd,
    prefix: Vec<u8>,
    names: std::vec::IntoIter<Vec<u8>>,
}

/// A file's kept xattrs (sorted by name, values as the tar carries them) and whether overlayfs
/// marks it opaque.
#[derive(Default)]
struct Xattrs {
    kept: Vec<(Vec<u8>, Vec<u8>)>,
    opaque: bool,
}

/// What one member carries besides its header.
enum Data<'a> {
    None,
    File(&'a mut File),
}

struct Packer<'a, W: Write> {
    root: &'a Path,
    opts: &'a PackOptions,
    exclude: HashSet<Vec<u8>>,
    /// The uncompressed tar stream, hashed for the diff id.
    tar: Hashing<Blob<W>>,
    /// The member name each multiply linked inode (device, inode) was first written under.
    links: HashMap<(u64, u64), Vec<u8>>,
    entries: u64,
    skipped: u64,
    buffer: Vec<u8>,
}

impl<W: Write> Packer<'_, W> {
    /// The path on disk of member `name`, for messages.
    fn path(&self, name: &[u8]) -> PathBuf {
        let name = name.strip_suffix(b"/").unwrap_or(name);
        if name.is_empty() || name == b"." {
            self.root.to_path_buf()
        } else {
            self.root.join(OsStr::from_bytes(name))
        }
    }

    fn io(&self, what: &'static str, name: &[u8]) -> impl FnOnce(io::Error) -> PackError {
        let path = self.path(name);
        move |source| PackError::Io { what, path, source }
    }

    fn errno(&self, what: &'static str, name: &[u8]) -> impl FnOnce(Errno) -> PackError {
        let io = self.io(what, name);
        move |errno| io(errno.into())
    }

    /// Depth first from the root, with an explicit stack (a deep tree costs heap and one fd per
    /// level, never the thread's stack).
    fn walk(&mut self, root: OwnedFd) -> Result<(), PackError> {
        let stat = fstat(&root).map_err(self.errno("inspect", b""))?;
        if file_type(&stat) != SFlag::S_IFDIR {
            return Err(PackError::NotADirectory {
                path: self.root.to_path_buf(),
            });
        }
        self.directory(root.as_fd(), b"./", &stat)?;
        let names = self.list(root.as_fd(), b"")?;
        let mut stack = vec![Frame {
            fd: root,
            prefix: Vec::new(),
            names,
        }];
        while let Some(frame) = stack.last_mut() {
            let Some(name) = frame.names.next() else {
                stack.pop();
                continue;
            };
            let mut member = frame.prefix.clone();
            member.extend_from_slice(&name);
            if self.exclude.contains(&member) {
                continue;
            }
            if let Some(child) = self.child(frame.fd.as_fd(), &name, member)? {
                stack.push(child);
            }
        }
        Ok(())
    }

    /// The names in directory `fd` (member name `prefix`), sorted by their bytes.
    fn list(
        &self,
        fd: BorrowedFd<'_>,
        prefix: &[u8],
    ) -> Result<std::vec::IntoIter<Vec<u8>>, PackError> {
        let reopened = openat(
            fd,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(self.errno("list", prefix))?;
        let mut listing = Dir::from_fd(reopened).map_err(self.errno("list", prefix))?;
        let mut names = Vec::new();
        for child in listing.iter() {
            let child = child.map_err(self.errno("list", prefix))?;
            let child = child.file_name().to_bytes();
            if child != b"." && child != b".." {
                names.push(child.to_vec());
            }
        }
        names.sort();
        Ok(names.into_iter())
    }

    /// Packs `name` in directory `dir` as member `member`; a directory is returned to be walked.
    fn child(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        mut member: Vec<u8>,
    ) -> Result<Option<Frame>, PackError> {
        if name.starts_with(b".wh.") {
            return Err(PackError::ReservedName {
                path: self.path(&member),
            });
        }
        let stat = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(self.errno("inspect", &member))?;
        match file_type(&stat) {
            SFlag::S_IFDIR => {
                let fd = openat(
                    dir,
                    name,
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(self.errno("open the directory", &member))?;
                let stat = self.same_inode(fd.as_fd(), &stat, &member)?;
                member.push(b'/');
                self.directory(fd.as_fd(), &member, &stat)?;
                let names = self.list(fd.as_fd(), &member)?;
                Ok(Some(Frame {
                    fd,
                    prefix: member,
                    names,
                }))
            }
            SFlag::S_IFREG => {
                if self.hardlink(&stat, &member)? {
                    return Ok(None);
                }
                // O_NONBLOCK: were it swapped for a FIFO since, opening it must not hang.
                let fd = openat(
                    dir,
                    name,
                    OFlag::O_RDONLY
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_NONBLOCK
                        | OFlag::O_NOCTTY
                        | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(self.errno("open", &member))?;
                let stat = self.same_inode(fd.as_fd(), &stat, &member)?;
                let xattrs = self.xattrs(fd.as_fd(), &member)?;
                let size = u64::try_from(stat.st_size).unwrap_or(0);
                let header = self.header(EntryType::Regular, &stat, size);
                let mut file = File::from(fd);
                self.member(header, &member, None, &xattrs.kept, Data::File(&mut file))?;
                Ok(None)
            }
            SFlag::S_IFLNK => {
                let target =
                    readlinkat(dir, name).map_err(self.errno("read the symlink", &member))?;
                let header = self.header(EntryType::Symlink, &stat, 0);
                self.member(header, &member, Some(target.as_bytes()), &[], Data::None)?;
                Ok(None)
            }
            SFlag::S_IFIFO => {
                if !self.hardlink(&stat, &member)? {
                    let header = self.header(EntryType::Fifo, &stat, 0);
                    self.member(header, &member, None, &[], Data::None)?;
                }
                Ok(None)
            }
            SFlag::S_IFCHR if stat.st_rdev == 0 => {
                // A whiteout. Overlayfs may share one whiteout inode between many names: each
                // is its own `.wh.` member, never a hardlink.
                let mut whiteout = member[..member.len() - name.len()].to_vec();
                whiteout.extend_from_slice(b".wh.");
                whiteout.extend_from_slice(name);
                let mut header = self.header(EntryType::Regular, &stat, 0);
                header.set_mode(0o600);
                self.member(header, &whiteout, None, &[], Data::None)?;
                Ok(None)
            }
            _ => {
                self.skipped += 1;
                tracing::debug!(path = %self.path(&member).display(), "device node or socket left out of the layer");
                Ok(None)
            }
        }
    }

    /// The directory `fd` as member `member` (with its trailing `/`), and its opaque marker.
    fn directory(
        &mut self,
        fd: BorrowedFd<'_>,
        member: &[u8],
        stat: &FileStat,
    ) -> Result<(), PackError> {
        let xattrs = self.xattrs(fd, member)?;
        let header = self.header(EntryType::Directory, stat, 0);
        self.member(header, member, None, &xattrs.kept, Data::None)?;
        if xattrs.opaque {
            // As Docker writes it: an empty file with the directory's owner and permissions.
            let mut marker = if member == b"./" {
                Vec::new()
            } else {
                member.to_vec()
            };
            marker.extend_from_slice(b".wh..wh..opq");
            let mut header = self.header(EntryType::Regular, stat, 0);
            header.set_mode(stat.st_mode & 0o777);
            self.member(header, &marker, None, &[], Data::None)?;
        }
        Ok(())
    }

    /// For a regular file or FIFO with more than one link: writes a hardlink member if an earlier
    /// path of its inode was written (true), or records this path as the inode's first (false).
    fn hardlink(&mut self, stat: &FileStat, member: &[u8]) -> Result<bool, PackError> {
        if stat.st_nlink <= 1 {
            return Ok(false);
        }
        let inode = (stat.st_dev, stat.st_ino);
        let Some(first) = self.links.get(&inode).cloned() else {
            self.links.insert(inode, member.to_vec());
            return Ok(false);
        };
        let header = self.header(EntryType::Link, stat, 0);
        self.member(header, member, Some(&first), &[], Data::None)?;
        Ok(true)
    }

    /// The stat of what `fd` opened, refused unless it is the inode `listed`.
    fn same_inode(
        &self,
        fd: BorrowedFd<'_>,
        listed: &FileStat,
        member: &[u8],
    ) -> Result<FileStat, PackError> {
        let stat = fstat(fd).map_err(self.errno("inspect", member))?;
        if stat.st_dev != listed.st_dev
            || stat.st_ino != listed.st_ino
            || file_type(&stat) != file_type(listed)
        {
            return Err(PackError::Changed {
                path: self.path(member),
            });
        }
        Ok(stat)
    }

    /// A header with the file's mode, unshifted owner, whole-second mtime, `kind` and `size`.
    fn header(&self, kind: EntryType, stat: &FileStat, size: u64) -> Header {
        let mut header = Header::new_ustar();
        header.set_entry_type(kind);
        header.set_mode(stat.st_mode & 0o7777);
        header.set_uid(u64::from(unshift(stat.st_uid, self.opts.id_shift)));
        header.set_gid(u64::from(unshift(stat.st_gid, self.opts.id_shift)));
        header.set_mtime(u64::try_from(stat.st_mtime).unwrap_or(0));
        header.set_size(size);
        header
    }

    /// The kept xattrs of the file or directory `fd`; refuses the overlayfs markers that make a
    /// layer not self-contained.
    fn xattrs(&self, fd: BorrowedFd<'_>, member: &[u8]) -> Result<Xattrs, PackError> {
        let mut xattrs = Xattrs::default();
        let mut names = list_xattrs(fd).map_err(self.io("list the xattrs of", member))?;
        names.sort();
        for name in names {
            if let Some(overlay) = name.strip_prefix(b"trusted.overlay.") {
                let refused = match overlay {
                    b"redirect" => Some("trusted.overlay.redirect"),
                    b"metacopy" => Some("trusted.overlay.metacopy"),
                    _ => None,
                };
                if let Some(xattr) = refused {
                    return Err(PackError::NotSelfContained {
                        path: self.path(member),
                        xattr,
                    });
                }
                if overlay == b"opaque" {
                    let value =
                        get_xattr(fd, &name).map_err(self.io("read the xattrs of", member))?;
                    xattrs.opaque = value.as_deref() == Some(b"y");
                }
                continue;
            }
            if !kept_xattr(&name) {
                continue;
            }
            if name.contains(&b'=') {
                return Err(PackError::UnrepresentableXattr {
                    path: self.path(member),
                    name: String::from_utf8_lossy(&name).into_owned(),
                });
            }
            let Some(mut value) =
                get_xattr(fd, &name).map_err(self.io("read the xattrs of", member))?
            else {
                // Removed between listing and reading.
                continue;
            };
            if name == b"security.capability" {
                unshift_capability_rootid(&mut value, self.opts.id_shift);
            }
            xattrs.kept.push((name, value));
        }
        Ok(xattrs)
    }

    /// Writes one member: its PAX records if it needs any, its header, its data and padding.
    fn member(
        &mut self,
        mut header: Header,
        name: &[u8],
        link: Option<&[u8]>,
        xattrs: &[(Vec<u8>, Vec<u8>)],
        data: Data<'_>,
    ) -> Result<(), PackError> {
        if name.len() > MAX_NAME {
            return Err(PackError::NameTooLong {
                path: self.path(name),
                len: name.len(),
            });
        }
        let mut pax = Vec::new();
        let fields = header.as_old_mut();
        copy_name(&mut fields.name, name, b"path", &mut pax);
        if let Some(link) = link {
            copy_name(&mut fields.linkname, link, b"linkpath", &mut pax);
        }
        let size = header.size().unwrap_or(0);
        if size >= OCTAL_SIZE_LIMIT {
            pax_record(&mut pax, b"size", size.to_string().as_bytes());
        }
        for (key, value) in xattrs {
            let mut record = b"SCHILY.xattr.".to_vec();
            record.extend_from_slice(key);
            pax_record(&mut pax, &record, value);
        }
        if !pax.is_empty() {
            let mut extension = Header::new_ustar();
            extension.as_old_mut().name[..b"PaxHeader".len()].copy_from_slice(b"PaxHeader");
            extension.set_entry_type(EntryType::XHeader);
            extension.set_mode(0o644);
            extension.set_uid(0);
            extension.set_gid(0);
            extension.set_size(pax.len() as u64);
            extension.set_cksum();
            self.write(extension.as_bytes())?;
            self.write(&pax)?;
            self.pad(pax.len() as u64)?;
        }
        header.set_cksum();
        self.write(header.as_bytes())?;
        if let Data::File(file) = data {
            self.copy(file, size, name)?;
            self.pad(size)?;
        }
        self.entries += 1;
        Ok(())
    }

    /// Copies exactly `size` bytes of `file` into the tar; a file that is shorter or longer now
    /// than when it was listed is [`PackError::Changed`] (the tar would be malformed otherwise).
    fn copy(&mut self, file: &mut File, size: u64, name: &[u8]) -> Result<(), PackError> {
        let mut remaining = size;
        loop {
            // One read past the end, to see that the file did not grow.
            let want = usize::try_from(remaining)
                .unwrap_or(usize::MAX)
                .clamp(1, self.buffer.len());
            let read = match file.read(&mut self.buffer[..want]) {
                Ok(read) => read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(self.io("read", name)(error)),
            };
            if read == 0 && remaining == 0 {
                return Ok(());
            }
            if read == 0 || remaining == 0 {
                return Err(PackError::Changed {
                    path: self.path(name),
                });
            }
            self.tar
                .write_all(&self.buffer[..read])
                .map_err(PackError::Write)?;
            remaining -= read as u64;
        }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), PackError> {
        self.tar.write_all(bytes).map_err(PackError::Write)
    }

    /// Zeroes up to the next block boundary after `len` bytes of data.
    fn pad(&mut self, len: u64) -> Result<(), PackError> {
        let rest = (len % BLOCK as u64) as usize;
        if rest == 0 {
            return Ok(());
        }
        self.write(&[0; BLOCK][rest..])
    }
}

/// Puts `name` in a header field if it fits, verbatim (no normalisation); else a PAX record
/// `key` carries it and the field holds its first bytes.
fn copy_name(field: &mut [u8], name: &[u8], key: &[u8], pax: &mut Vec<u8>) {
    let fits = name.len().min(field.len());
    field[..fits].copy_from_slice(&name[..fits]);
    if name.len() > HEADER_NAME.min(field.len()) {
        pax_record(pax, key, name);
    }
}

/// Appends the PAX record `<length> <key>=<value>\n`, whose length counts its own digits.
fn pax_record(pax: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    let rest = key.len() + value.len() + 3; // ' ', '=', '\n'
    let mut length = rest + rest.to_string().len();
    if length.to_string().len() != rest.to_string().len() {
        length = rest + length.to_string().len();
    }
    pax.extend_from_slice(length.to_string().as_bytes());
    pax.push(b' ');
    pax.extend_from_slice(key);
    pax.push(b'=');
    pax.extend_from_slice(value);
    pax.push(b'\n');
}

/// A host id as the sandbox sees it; one outside the sandbox's range is the overflow id.
fn unshift(id: u32, shift: u32) -> u32 {
    id.checked_sub(shift)
        .filter(|id| *id < ID_RANGE)
        .unwrap_or(OVERFLOW_ID)
}

/// A v3 `security.capability` names the host uid that is root for it; unshift it like an owner
/// (the unpacker shifts it back). v2 values carry none and are kept as they are.
fn unshift_capability_rootid(value: &mut [u8], shift: u32) {
    crate::unpack::map_capability_rootid(value, |rootid| unshift(rootid, shift));
}

/// The file type bits of a stat.
fn file_type(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits())
}

/// The xattr names of `fd`; none where the filesystem has no xattrs.
fn list_xattrs(fd: BorrowedFd<'_>) -> io::Result<Vec<Vec<u8>>> {
    // The list can grow between asking its size and reading it: ask again a few times.
    for _ in 0..8 {
        // SAFETY: a null buffer of size 0 asks only for the size; `fd` is open for the call.
        let size = unsafe { libc::flistxattr(fd.as_raw_fd(), std::ptr::null_mut(), 0) };
        let size = match usize::try_from(size) {
            Ok(0) => return Ok(Vec::new()),
            Ok(size) => size,
            Err(_) => match Errno::last() {
                Errno::ENOTSUP => return Ok(Vec::new()),
                errno => return Err(errno.into()),
            },
        };
        let mut buffer = vec![0u8; size];
        // SAFETY: `buffer` is valid for writes of `buffer.len()` bytes; `fd` is open.
        let got =
            unsafe { libc::flistxattr(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
        match usize::try_from(got) {
            Ok(got) => {
                buffer.truncate(got);
                return Ok(buffer
                    .split(|b| *b == 0)
                    .filter(|name| !name.is_empty())
                    .map(<[u8]>::to_vec)
                    .collect());
            }
            Err(_) if Errno::last() == Errno::ERANGE => continue,
            Err(_) => return Err(Errno::last().into()),
        }
    }
    Err(Errno::ERANGE.into())
}

/// The value of xattr `name` of `fd`; `None` if it has none by that name.
fn get_xattr(fd: BorrowedFd<'_>, name: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let Ok(name) = CString::new(name) else {
        return Ok(None);
    };
    for _ in 0..8 {
        // SAFETY: `name` is NUL-terminated; a null buffer of size 0 asks only for the size.
        let size =
            unsafe { libc::fgetxattr(fd.as_raw_fd(), name.as_ptr(), std::ptr::null_mut(), 0) };
        let size = match usize::try_from(size) {
            Ok(size) => size,
            Err(_) => match Errno::last() {
                Errno::ENODATA => return Ok(None),
                errno => return Err(errno.into()),
            },
        };
        let mut buffer = vec![0u8; size];
        // SAFETY: `buffer` is valid for writes of `buffer.len()` bytes; `name` is
        // NUL-terminated; `fd` is open.
        let got = unsafe {
            libc::fgetxattr(
                fd.as_raw_fd(),
                name.as_ptr(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
            )
        };
        match usize::try_from(got) {
            Ok(got) => {
                buffer.truncate(got);
                return Ok(Some(buffer));
            }
            Err(_) => match Errno::last() {
                Errno::ERANGE => continue,
                Errno::ENODATA => return Ok(None),
                errno => return Err(errno.into()),
            },
        }
    }
    Err(Errno::ERANGE.into())
}
