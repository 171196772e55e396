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

/// The tar side: headers, PAX records, data, padding, the digests.
mod encode;
/// The tree side: the fd-by-fd walk, hard links, extended attributes.
mod walk;

use encode::*;

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
