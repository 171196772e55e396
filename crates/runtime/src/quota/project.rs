//! The project-quota backend (XFS mounted with `prjquota`): the way container runtimes limit a
//! writable layer on a stock host.
//!
//! Only XFS, not ext4, although ext4 (`-O quota,project`, mounted `prjquota`) takes the same calls:
//! the generic quota code ext4 uses lets a writer with `CAP_SYS_RESOURCE` exceed hard limits
//! (`ignore_hardlimit`), and overlayfs writes to its upper layer with the credentials of whoever
//! mounted it — here the host's root, before the agent enters its user namespace — so an ext4 limit
//! would never bind a sandbox's writes. XFS enforces project limits whatever the writer's
//! capabilities (which is also why Docker's overlay2 `size` option exists for XFS only).
//!
//! Contract: [`Projects::open`] returns only when the filesystem under `layers/` is XFS, takes a project id
//! on a directory (`FS_IOC_FSSETXATTR`), enforces project limits (`Q_XGETQSTATV` reports
//! `FS_QUOTA_PDQ_ENFD`) and takes and reports back a limit (`Q_SETQUOTA`/`Q_GETQUOTA` with
//! `PRJQUOTA`), all tried on a probe directory and its own probe id that are removed again. The
//! quota calls go through `quotactl_fd(2)` on the layers directory (Linux 5.14+), so no block device
//! has to be found in `/proc/self/mountinfo`; XFS implements these generic calls.
//!
//! Per layer: [`Projects::create`] makes directory `layers/<id>` with a fresh project id and
//! `PROJINHERIT` (everything created below it inherits the id; only the initial user namespace may
//! change a project id, so a sandbox cannot move its files out of its quota) and sets the limit;
//! [`Projects::remove`] removes the tree and clears the limit.
//!
//! Project ids cannot collide: they come from one counter file (`layers/.project-ids`), advanced
//! under an exclusive `flock` and written with `fsync` before an id is used, in the range
//! [`FIRST_ID`]..=[`LAST_ID`] (far above the small ids administrators give projects in
//! `/etc/projid`), so two creates never get the same id and an id is handed out again only after
//! the whole range wrapped; even then an id the kernel still charges any inode or byte to (a layer
//! that leaked) is skipped.

use super::{DiskUsage, QuotaError};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The first project id this runtime hands out.
pub const FIRST_ID: u32 = 0x0100_0000;
/// The last one.
pub const LAST_ID: u32 = 0x7fff_ffff;
/// The id of the probe directory, outside the range handed out.
const PROBE_ID: u32 = FIRST_ID - 1;
/// How many ids in use are skipped before giving up.
const MAX_SKIPS: u32 = 4096;
/// Name of the counter file in `layers/`.
const COUNTER: &str = ".project-ids";

const FS_XFLAG_PROJINHERIT: u32 = 0x0000_0200;
const PRJQUOTA: u32 = 2;
const Q_GETQUOTA: u32 = 0x80_0007;
const Q_SETQUOTA: u32 = 0x80_0008;
/// `XQM_CMD(8)`.
const Q_XGETQSTATV: u32 = (b'X' as u32) << 8 | 8;
const FS_QSTATV_VERSION1: i8 = 1;
const FS_QUOTA_PDQ_ENFD: u16 = 1 << 5;
const QIF_BLIMITS: u32 = 1;
/// Block limits are in units of `QIF_DQBLKSIZE` bytes.
const QIF_DQBLKSIZE: u64 = 1024;

/// `struct fsxattr`.
#[repr(C)]
#[derive(Default)]
struct FsXattr {
    xflags: u32,
    extsize: u32,
    nextents: u32,
    projid: u32,
    cowextsize: u32,
    pad: [u8; 8],
}

/// `struct if_dqblk`.
#[repr(C)]
#[derive(Default, Debug)]
struct IfDqblk {
    bhardlimit: u64,
    bsoftlimit: u64,
    curspace: u64,
    ihardlimit: u64,
    isoftlimit: u64,
    curinodes: u64,
    btime: u64,
    itime: u64,
    valid: u32,
}

/// `struct fs_quota_statv`, of which only the version (in) and the flags (out) are used; sized
/// generously (the kernel's is 160 bytes).
#[repr(C)]
struct QuotaStatv {
    version: i8,
    pad1: u8,
    flags: u16,
    rest: [u8; 252],
}

nix::ioctl_read!(ioc_fsgetxattr, b'X', 31, FsXattr);
nix::ioctl_write_ptr!(ioc_fssetxattr, b'X', 32, FsXattr);

/// `QCMD(cmd, PRJQUOTA)`.
fn qcmd(cmd: u32) -> u32 {
    (cmd << 8) | PRJQUOTA
}

/// Project quotas on the filesystem of `layers/`.
pub struct Projects {
    layers: PathBuf,
    /// `layers/`, the handle of every quota call.
    dir: File,
}

impl Projects {
    /// Probes `layers` for project quotas (see the module docs).
    pub fn open(layers: &Path) -> Result<Self, QuotaError> {
        let fs = nix::sys::statfs::statfs(layers)
            .map_err(|e| QuotaError::io("statfs", layers)(e.into()))?;
        if !binds_the_overlay(fs.filesystem_type()) {
            return Err(QuotaError::WrongFilesystem {
                path: layers.to_path_buf(),
                wanted: "XFS (other filesystems' project limits do not bind root-credentialed overlay writes)",
            });
        }
        let dir = open_dir(layers)?;
        let this = Self {
            layers: layers.to_path_buf(),
            dir,
        };
        let probe = layers.join(".probe");
        let _ = std::fs::remove_dir(&probe);
        mkdir(&probe)?;
        let probed = this.probe(&probe);
        let _ = this.set_limit(PROBE_ID, None);
        let _ = std::fs::remove_dir(&probe);
        probed.map(|()| this)
    }

    fn probe(&self, probe: &Path) -> Result<(), QuotaError> {
        set_project(probe, PROBE_ID)?;
        let mut stat = QuotaStatv {
            version: FS_QSTATV_VERSION1,
            pad1: 0,
            flags: 0,
            rest: [0; 252],
        };
        self.quotactl(Q_XGETQSTATV, 0, (&mut stat as *mut QuotaStatv).cast())
            .map_err(QuotaError::io("read the quota state of", &self.layers))?;
        if stat.flags & FS_QUOTA_PDQ_ENFD == 0 {
            return Err(QuotaError::WrongFilesystem {
                path: self.layers.clone(),
                wanted: "a filesystem enforcing project quotas",
            });
        }
        self.set_limit(PROBE_ID, Some(1024 * 1024))?;
        let got = self.get(PROBE_ID)?;
        if got.bhardlimit != 1024 {
            return Err(QuotaError::Parse {
                path: self.layers.clone(),
                detail: format!("probe limit of 1024 blocks read back as {}", got.bhardlimit),
            });
        }
        Ok(())
    }

    /// Makes `layer` with a fresh project id and `limit_bytes`; on failure nothing of it is left.
    pub fn create(&self, layer: &Path, limit_bytes: Option<u64>) -> Result<(), QuotaError> {
        let id = self.allocate()?;
        mkdir(layer)?;
        let made = set_project(layer, id).and_then(|()| self.set_limit(id, limit_bytes));
        if made.is_err() {
            let _ = self.set_limit(id, None);
            let _ = std::fs::remove_dir(layer);
        }
        made
    }

    /// Sets the limit of `layer`'s project to `limit_bytes` (a resize).
    pub fn relimit(&self, layer: &Path, limit_bytes: u64) -> Result<(), QuotaError> {
        match project_of(layer)? {
            0 => Err(QuotaError::io("limit", layer)(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the layer has no project",
            ))),
            id => self.set_limit(id, Some(limit_bytes)),
        }
    }

    /// Removes `layer` with everything in it and clears its project's limit; nothing there succeeds.
    pub fn remove(&self, layer: &Path) -> Result<(), QuotaError> {
        let id = match project_of(layer) {
            Ok(id) => id,
            Err(QuotaError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(())
            }
            Err(e) => return Err(e),
        };
        std::fs::remove_dir_all(layer).map_err(QuotaError::io("remove", layer))?;
        if id != 0 {
            self.set_limit(id, None)?;
        }
        Ok(())
    }

    /// The usage and limit of `layer`'s project; `None` when there is no such layer.
    pub fn usage(&self, layer: &Path) -> Result<Option<DiskUsage>, QuotaError> {
        let id = match project_of(layer) {
            Ok(0) => return Ok(None),
            Ok(id) => id,
            Err(QuotaError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let q = self.get(id)?;
        Ok(Some(DiskUsage {
            used_bytes: q.curspace,
            limit_bytes: (q.bhardlimit != 0).then(|| q.bhardlimit.saturating_mul(QIF_DQBLKSIZE)),
        }))
    }

    /// The next free project id, from the counter file under an exclusive lock.
    fn allocate(&self) -> Result<u32, QuotaError> {
        let path = self.layers.join(COUNTER);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(QuotaError::io("open", &path))?;
        // Held until `file` is dropped.
        let mut file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| QuotaError::io("lock", &path)(e.into()))?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(QuotaError::io("read", &path))?;
        let last = parse_counter(&text).map_err(|detail| QuotaError::Parse {
            path: path.clone(),
            detail,
        })?;
        let id = next_id(last, |id| self.in_use(id))?
            .ok_or_else(|| QuotaError::ProjectIdsExhausted(self.layers.clone()))?;
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(format!("{id}\n").as_bytes()))
            .and_then(|()| file.sync_data())
            .map_err(QuotaError::io("write", &path))?;
        Ok(id)
    }

    /// Whether the kernel charges anything to project `id`.
    fn in_use(&self, id: u32) -> Result<bool, QuotaError> {
        let q = self.get(id)?;
        Ok(q.curspace != 0 || q.curinodes != 0)
    }

    /// The quota of project `id`. XFS answers `ENOENT` for an id it has no record of — one never
    /// used, or whose usage and limits all went back to zero — which is a quota of all zeros.
    fn get(&self, id: u32) -> Result<IfDqblk, QuotaError> {
        let mut q = IfDqblk::default();
        match self.quotactl(Q_GETQUOTA, id, (&mut q as *mut IfDqblk).cast()) {
            Ok(()) => Ok(q),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(IfDqblk::default()),
            Err(e) => Err(QuotaError::io("read the project quota of", &self.layers)(e)),
        }
    }

    /// Sets (or with `None` clears) the block limit of project `id`.
    fn set_limit(&self, id: u32, limit_bytes: Option<u64>) -> Result<(), QuotaError> {
        let blocks = limit_bytes.map_or(0, limit_blocks);
        let mut q = IfDqblk {
            bhardlimit: blocks,
            bsoftlimit: blocks,
            valid: QIF_BLIMITS,
            ..Default::default()
        };
        self.quotactl(Q_SETQUOTA, id, (&mut q as *mut IfDqblk).cast())
            .map_err(QuotaError::io("set the project quota of", &self.layers))
    }

    fn quotactl(&self, cmd: u32, id: u32, addr: *mut libc::c_void) -> std::io::Result<()> {
        // SAFETY: quotactl_fd(fd, cmd, id, addr) with a valid descriptor and `addr` pointing to the
        // struct `cmd` reads or writes, owned by the caller for the duration of the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_quotactl_fd,
                self.dir.as_raw_fd(),
                qcmd(cmd),
                id,
                addr,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// Whether project limits on filesystem type `fs` bind the overlay's writes (see the module docs).
fn binds_the_overlay(fs: nix::sys::statfs::FsType) -> bool {
    fs == nix::sys::statfs::XFS_SUPER_MAGIC
}

/// The limit in quota blocks, rounded up so a limit is never smaller than asked.
fn limit_blocks(bytes: u64) -> u64 {
    bytes.div_ceil(QIF_DQBLKSIZE)
}

/// The last id handed out, from the counter file's text; empty means none yet.
fn parse_counter(text: &str) -> Result<Option<u32>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match text.parse::<u32>() {
        Ok(id) if (FIRST_ID..=LAST_ID).contains(&id) => Ok(Some(id)),
        _ => Err(format!("{text:?} is not a project id of this runtime")),
    }
}

/// The id after `last` (wrapping inside the range) that `in_use` does not report busy; `None` after
/// [`MAX_SKIPS`] busy ones.
fn next_id(
    last: Option<u32>,
    mut in_use: impl FnMut(u32) -> Result<bool, QuotaError>,
) -> Result<Option<u32>, QuotaError> {
    let mut id = last.unwrap_or(LAST_ID);
    for _ in 0..=MAX_SKIPS {
        id = if id >= LAST_ID { FIRST_ID } else { id + 1 };
        if !in_use(id)? {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// Gives directory `dir` project `id`, inherited by everything created below it.
fn set_project(dir: &Path, id: u32) -> Result<(), QuotaError> {
    let fd = open_dir(dir)?;
    let mut attr = FsXattr::default();
    // SAFETY: a valid descriptor and a struct of the layout the ioctl expects.
    unsafe { ioc_fsgetxattr(fd.as_raw_fd(), &mut attr) }
        .map_err(|e| QuotaError::io("read the attributes of", dir)(e.into()))?;
    attr.projid = id;
    attr.xflags |= FS_XFLAG_PROJINHERIT;
    // SAFETY: as above.
    unsafe { ioc_fssetxattr(fd.as_raw_fd(), &attr) }
        .map_err(|e| QuotaError::io("set the project id of", dir)(e.into()))?;
    Ok(())
}

/// The project id of directory `dir`.
fn project_of(dir: &Path) -> Result<u32, QuotaError> {
    let fd = open_dir(dir)?;
    let mut attr = FsXattr::default();
    // SAFETY: as in `set_project`.
    unsafe { ioc_fsgetxattr(fd.as_raw_fd(), &mut attr) }
        .map_err(|e| QuotaError::io("read the attributes of", dir)(e.into()))?;
    Ok(attr.projid)
}

fn open_dir(path: &Path) -> Result<File, QuotaError> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .map_err(QuotaError::io("open", path))
}

fn mkdir(path: &Path) -> Result<(), QuotaError> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(QuotaError::io("create", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_structs_and_commands_have_the_kernels_values() {
        assert_eq!(std::mem::size_of::<FsXattr>(), 28);
        assert_eq!(std::mem::size_of::<IfDqblk>(), 72);
        assert!(std::mem::size_of::<QuotaStatv>() >= 160);
        assert_eq!(qcmd(Q_SETQUOTA), 0x8000_0802);
        assert_eq!(qcmd(Q_GETQUOTA), 0x8000_0702);
        assert_eq!(Q_XGETQSTATV, 0x5808);
    }

    #[test]
    fn ids_advance_from_the_counter_and_wrap_inside_the_range() {
        let free = |_| Ok(false);
        assert_eq!(next_id(None, free).unwrap(), Some(FIRST_ID));
        assert_eq!(next_id(Some(FIRST_ID), free).unwrap(), Some(FIRST_ID + 1));
        assert_eq!(next_id(Some(LAST_ID), free).unwrap(), Some(FIRST_ID));
        assert!(!(FIRST_ID..=LAST_ID).contains(&PROBE_ID));
    }

    #[test]
    fn ids_still_charged_by_the_kernel_are_skipped() {
        let busy = [FIRST_ID + 5, FIRST_ID + 6];
        let id = next_id(Some(FIRST_ID + 4), |id| Ok(busy.contains(&id))).unwrap();
        assert_eq!(id, Some(FIRST_ID + 7));
        // Everything busy: exhausted, not an endless loop.
        assert_eq!(next_id(None, |_| Ok(true)).unwrap(), None);
        // A failing check is an error, never a guess.
        let failing = next_id(None, |_| {
            Err(QuotaError::ProjectIdsExhausted(PathBuf::from("/x")))
        });
        assert!(failing.is_err());
    }

    #[test]
    fn the_counter_file_is_read_strictly() {
        assert_eq!(parse_counter(""), Ok(None));
        assert_eq!(parse_counter(&format!("{FIRST_ID}\n")), Ok(Some(FIRST_ID)));
        // A foreign or corrupt counter could hand out an id in use: refused, not repaired.
        for bad in ["x", "-1", "5", &(u64::from(LAST_ID) + 1).to_string()] {
            assert!(parse_counter(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_xfs_is_trusted_with_project_limits() {
        use nix::sys::statfs::{BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC};
        assert!(binds_the_overlay(XFS_SUPER_MAGIC));
        for other in [EXT4_SUPER_MAGIC, BTRFS_SUPER_MAGIC, TMPFS_MAGIC] {
            assert!(!binds_the_overlay(other));
        }
    }

    #[test]
    fn limits_round_up_to_whole_blocks() {
        assert_eq!(limit_blocks(64 * 1024 * 1024), 65536);
        assert_eq!(limit_blocks(1), 1);
        assert_eq!(limit_blocks(0), 0);
        assert_eq!(limit_blocks(u64::MAX), u64::MAX / 1024 + 1);
    }

    /// A loop-mounted XFS, detached again on drop.
    struct Xfs {
        mnt: PathBuf,
        quotas: bool,
        _dir: tempfile::TempDir,
    }

    impl Xfs {
        /// Mounted with `prjquota` where the kernel has quotas, else without.
        fn new() -> Xfs {
            let dir = tempfile::tempdir().unwrap();
            let img = dir.path().join("xfs.img");
            std::fs::File::create(&img)
                .unwrap()
                .set_len(320 * 1024 * 1024)
                .unwrap();
            super::super::run("mkfs.xfs", &["-q".as_ref(), img.as_os_str()]).expect("mkfs.xfs");
            let mnt = dir.path().join("mnt");
            std::fs::create_dir(&mnt).unwrap();
            let mount = |opts: &str| {
                super::super::run(
                    "mount",
                    &[
                        "-o".as_ref(),
                        opts.as_ref(),
                        img.as_os_str(),
                        mnt.as_os_str(),
                    ],
                )
            };
            let quotas = mount("loop,prjquota").is_ok();
            if !quotas {
                mount("loop").expect("mount xfs");
            }
            Xfs {
                mnt,
                quotas,
                _dir: dir,
            }
        }
    }

    impl Drop for Xfs {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(&self.mnt, nix::mount::MntFlags::MNT_DETACH);
        }
    }

    /// On XFS a layer's project id and `PROJINHERIT` reach what is created below it (the ioctl
    /// structs are right); where the kernel has quotas, the whole backend: limit, `ENOSPC` (XFS's
    /// answer for a project over its limit) on a filesystem with room to spare, usage,
    /// removal with the limit cleared.
    #[test]
    fn on_xfs_layers_carry_an_inherited_project_id_and_its_limit() {
        if !sandboxd_test_support::require_root() {
            return;
        }
        let xfs = Xfs::new();
        let layers = xfs.mnt.join("layers");
        std::fs::create_dir(&layers).unwrap();
        let child = layers.join("sb").join("upper");
        if !xfs.quotas {
            assert!(
                !sandboxd_test_support::xfs::project_quotas_expected(),
                "project quotas are expected, yet this kernel cannot mount XFS with prjquota"
            );
            assert!(
                Projects::open(&layers).is_err(),
                "no quotas, yet the probe passed"
            );
            let layer = layers.join("sb");
            mkdir(&layer).unwrap();
            set_project(&layer, FIRST_ID + 7).unwrap();
            std::fs::create_dir(&child).unwrap();
            assert_eq!(project_of(&layer).unwrap(), FIRST_ID + 7);
            assert_eq!(project_of(&child).unwrap(), FIRST_ID + 7);
            return;
        }
        let projects = Projects::open(&layers).expect("prjquota probe");
        let layer = layers.join("sb");
        projects.create(&layer, Some(8 * 1024 * 1024)).unwrap();
        std::fs::create_dir(&child).unwrap();
        let id = project_of(&child).unwrap();
        assert!((FIRST_ID..=LAST_ID).contains(&id));
        let chunk = vec![0u8; 1024 * 1024];
        let mut file = File::create(child.join("fill")).unwrap();
        let err = (0..16)
            .try_for_each(|_| file.write_all(&chunk).and_then(|()| file.sync_data()))
            .expect_err("16 MiB under an 8 MiB limit");
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
        let usage = projects.usage(&layer).unwrap().unwrap();
        assert_eq!(usage.limit_bytes, Some(8 * 1024 * 1024));
        assert!(usage.used_bytes <= 8 * 1024 * 1024, "{usage:?}");
        drop(file);
        // The next layer gets the next id.
        projects.create(&layers.join("sb2"), None).unwrap();
        assert_eq!(project_of(&layers.join("sb2")).unwrap(), id + 1);
        projects.remove(&layer).unwrap();
        assert!(!layer.exists());
        assert_eq!(projects.get(id).unwrap().bhardlimit, 0);
        assert!(projects.usage(&layer).unwrap().is_none());
        projects.remove(&layer).unwrap();
    }

    /// On a filesystem without project quotas (this host's ext4 without CONFIG_QUOTA, a tmpfs) the
    /// probe fails, and leaves nothing behind.
    #[test]
    fn the_probe_refuses_a_filesystem_without_project_quotas_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let supported = Projects::open(dir.path()).is_ok();
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "probe left {left:?}");
        if supported {
            eprintln!("this host's temp directory has project quotas; nothing refused");
        }
    }
}
