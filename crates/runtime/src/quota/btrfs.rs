//! The btrfs backend: one subvolume per writable layer, its level-0 qgroup carrying the limit.
//!
//! Contract: [`Pool::open`] returns only when `layers/` is on a btrfs with quotas enabled — either
//! the filesystem the state directory already lives on, or a pool file `disk.btrfs` (sparse,
//! formatted once, atomically: it is formatted under a temporary name and renamed into place) that
//! it loop-mounts on `layers/`. An already-mounted pool is reused; a pool is never mounted over a
//! non-empty directory. The pool is never unmounted by the runtime: running sandboxes outlive it.
//!
//! Per layer: [`Pool::create`] makes subvolume `layers/<id>` and, with a limit, sets
//! `max_referenced` on its qgroup (`0/<subvolume id>`); a failed limit deletes the subvolume again.
//! [`Pool::remove`] deletes the subvolume with its contents and then asks for its qgroup to go; a
//! qgroup still busy (the kernel cleans a deleted subvolume in the background) is left to the
//! kernel, which recent kernels remove once the subvolume is gone (seen on 6.18); older ones keep a
//! stale, empty qgroup (`btrfs qgroup clear-stale` clears them). Either way it is harmless: subvolume
//! ids are never reused on a filesystem, so a leftover qgroup can never limit a later layer.
//!
//! Subvolumes and limits are made with ioctls (`BTRFS_IOC_SUBVOL_CREATE`, `BTRFS_IOC_QGROUP_LIMIT`,
//! `BTRFS_IOC_SNAP_DESTROY`, `BTRFS_IOC_QUOTA_CTL`), usage is read from sysfs
//! (`/sys/fs/btrfs/<fsid>/qgroups/0_<id>/`), the pool is attached to an auto-clearing loop device
//! (`LOOP_CTL_GET_FREE`, `LOOP_CONFIGURE`, Linux 5.8+) and mounted with mount(2); only formatting the
//! pool, once, shells out (`mkfs.btrfs`). Sandboxes cannot reach these ioctls: overlayfs does not pass
//! btrfs ioctls through to its upper layer, so a sandbox cannot nest a subvolume in its layer.

use super::{run, DiskUsage, QuotaError};
use nix::sys::statfs::{statfs, BTRFS_SUPER_MAGIC};
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The inode number of every subvolume's root directory (`BTRFS_FIRST_FREE_OBJECTID`).
const SUBVOLUME_ROOT_INO: u64 = 256;
/// `BTRFS_QGROUP_LIMIT_MAX_RFER`.
const LIMIT_MAX_RFER: u64 = 1;
/// `BTRFS_QUOTA_CTL_ENABLE`.
const QUOTA_CTL_ENABLE: u64 = 1;

/// `struct btrfs_ioctl_vol_args`.
#[repr(C)]
struct VolArgs {
    fd: i64,
    name: [u8; 4088],
}

/// `struct btrfs_ioctl_qgroup_limit_args` (with its `struct btrfs_qgroup_limit`).
#[repr(C)]
struct QgroupLimitArgs {
    qgroupid: u64,
    flags: u64,
    max_rfer: u64,
    max_excl: u64,
    rsv_rfer: u64,
    rsv_excl: u64,
}

/// `struct btrfs_ioctl_qgroup_create_args`.
#[repr(C)]
struct QgroupCreateArgs {
    create: u64,
    qgroupid: u64,
}

/// `struct btrfs_ioctl_quota_ctl_args`.
#[repr(C)]
struct QuotaCtlArgs {
    cmd: u64,
    status: u64,
}

/// `struct btrfs_ioctl_ino_lookup_args`.
#[repr(C)]
struct InoLookupArgs {
    treeid: u64,
    objectid: u64,
    name: [u8; 4080],
}

/// `struct btrfs_ioctl_fs_info_args`: only `fsid` (bytes 16..32) is read.
#[repr(C)]
struct FsInfoArgs {
    max_id: u64,
    num_devices: u64,
    fsid: [u8; 16],
    rest: [u8; 1024 - 32],
}

nix::ioctl_write_ptr!(ioc_subvol_create, 0x94, 14, VolArgs);
nix::ioctl_write_ptr!(ioc_snap_destroy, 0x94, 15, VolArgs);
nix::ioctl_readwrite!(ioc_ino_lookup, 0x94, 18, InoLookupArgs);
nix::ioctl_read!(ioc_fs_info, 0x94, 31, FsInfoArgs);
nix::ioctl_readwrite!(ioc_quota_ctl, 0x94, 40, QuotaCtlArgs);
nix::ioctl_write_ptr!(ioc_qgroup_create, 0x94, 42, QgroupCreateArgs);
nix::ioctl_read!(ioc_qgroup_limit, 0x94, 43, QgroupLimitArgs);

/// `layers/` on a btrfs with quotas enabled.
pub struct Pool {
    layers: PathBuf,
    /// `/sys/fs/btrfs/<fsid>/qgroups`.
    qgroups: PathBuf,
}

impl Pool {
    /// Makes `layers` a btrfs with quotas enabled (see the module docs): the filesystem it is on
    /// if that is btrfs, else the pool file `pool_file` (made with `pool_file_mb` MiB if missing)
    /// mounted on it.
    pub fn open(layers: &Path, pool_file: &Path, pool_file_mb: u64) -> Result<Self, QuotaError> {
        if !is_btrfs(layers)? {
            mount_pool(layers, pool_file, pool_file_mb)?;
            if !is_btrfs(layers)? {
                return Err(QuotaError::WrongFilesystem {
                    path: layers.to_path_buf(),
                    wanted: "btrfs after mounting the pool",
                });
            }
        }
        let dir = open_dir(layers)?;
        let mut ctl = QuotaCtlArgs {
            cmd: QUOTA_CTL_ENABLE,
            status: 0,
        };
        // SAFETY: a valid descriptor and a struct of the layout the ioctl expects.
        unsafe { ioc_quota_ctl(dir.as_raw_fd(), &mut ctl) }
            .map_err(|e| QuotaError::io("enable btrfs quotas on", layers)(e.into()))?;
        let mut info = FsInfoArgs {
            max_id: 0,
            num_devices: 0,
            fsid: [0; 16],
            rest: [0; 1024 - 32],
        };
        // SAFETY: as above.
        unsafe { ioc_fs_info(dir.as_raw_fd(), &mut info) }
            .map_err(|e| QuotaError::io("read the btrfs id of", layers)(e.into()))?;
        Ok(Self {
            layers: layers.to_path_buf(),
            qgroups: Path::new("/sys/fs/btrfs")
                .join(fsid_text(&info.fsid))
                .join("qgroups"),
        })
    }

    /// Makes subvolume `layer` (a child of `layers/`) with `limit_bytes` on its qgroup.
    pub fn create(&self, layer: &Path, limit_bytes: Option<u64>) -> Result<(), QuotaError> {
        let (parent, args) = self.vol_args(layer)?;
        // SAFETY: a valid descriptor and a NUL-terminated name in the struct the ioctl expects.
        unsafe { ioc_subvol_create(parent.as_raw_fd(), &*args) }
            .map_err(|e| QuotaError::io("create btrfs subvolume", layer)(e.into()))?;
        let Some(bytes) = limit_bytes else {
            return Ok(());
        };
        let limited = self.relimit(layer, bytes);
        if limited.is_err() {
            let _ = self.remove(layer);
        }
        limited
    }

    /// Sets the limit of subvolume `layer`'s qgroup to `limit_bytes` (at create, and a resize).
    pub fn relimit(&self, layer: &Path, limit_bytes: u64) -> Result<(), QuotaError> {
        let dir = open_dir(layer)?;
        let mut limit = QgroupLimitArgs {
            // 0: the qgroup of the subvolume the descriptor is in.
            qgroupid: 0,
            flags: LIMIT_MAX_RFER,
            max_rfer: limit_bytes,
            max_excl: 0,
            rsv_rfer: 0,
            rsv_excl: 0,
        };
        // SAFETY: a valid descriptor and the struct the ioctl expects, owned for the call.
        unsafe { ioc_qgroup_limit(dir.as_raw_fd(), &mut limit) }
            .map(drop)
            .map_err(|e| QuotaError::io("limit the qgroup of", layer)(e.into()))
    }

    /// Deletes subvolume `layer` with its contents (a plain directory there is removed as one);
    /// nothing there succeeds.
    pub fn remove(&self, layer: &Path) -> Result<(), QuotaError> {
        let meta = match std::fs::symlink_metadata(layer) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(QuotaError::io("inspect", layer)(e)),
        };
        if !meta.is_dir() || meta.ino() != SUBVOLUME_ROOT_INO {
            return std::fs::remove_dir_all(layer).map_err(QuotaError::io("remove", layer));
        }
        let id = subvolume_id(layer)?;
        let (parent, args) = self.vol_args(layer)?;
        // SAFETY: as in `create`.
        unsafe { ioc_snap_destroy(parent.as_raw_fd(), &*args) }
            .map_err(|e| QuotaError::io("delete btrfs subvolume", layer)(e.into()))?;
        let destroy = QgroupCreateArgs {
            create: 0,
            qgroupid: id,
        };
        // Best effort: busy until the kernel has cleaned the subvolume, then removed by the kernel.
        // SAFETY: as above.
        let _ = unsafe { ioc_qgroup_create(parent.as_raw_fd(), &destroy) };
        Ok(())
    }

    /// The usage and limit of subvolume `layer`; `None` when there is none.
    pub fn usage(&self, layer: &Path) -> Result<Option<DiskUsage>, QuotaError> {
        match std::fs::symlink_metadata(layer) {
            Ok(meta) if meta.is_dir() && meta.ino() == SUBVOLUME_ROOT_INO => {}
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(QuotaError::io("inspect", layer)(e)),
        }
        let dir = self.qgroups.join(format!("0_{}", subvolume_id(layer)?));
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path)
                .map_err(QuotaError::io("read", &path))
                .map(|text| (path, text))
        };
        let (path, referenced) = read("referenced")?;
        let (_, flags) = read("limit_flags")?;
        let (_, max) = read("max_referenced")?;
        parse_usage(&referenced, &flags, &max)
            .map(Some)
            .map_err(|detail| QuotaError::Parse { path, detail })
    }

    /// The descriptor of `layers/` and the ioctl argument naming `layer` in it.
    fn vol_args(&self, layer: &Path) -> Result<(File, Box<VolArgs>), QuotaError> {
        let name = match (layer.parent(), layer.file_name()) {
            (Some(parent), Some(name)) if parent == self.layers => name,
            _ => {
                return Err(QuotaError::Parse {
                    path: layer.to_path_buf(),
                    detail: format!("not an entry of {}", self.layers.display()),
                })
            }
        };
        let args = vol_args(name).ok_or_else(|| QuotaError::Parse {
            path: layer.to_path_buf(),
            detail: "name too long for a subvolume".into(),
        })?;
        Ok((open_dir(&self.layers)?, args))
    }
}

/// The ioctl argument naming `name`: `None` when it does not fit or holds a NUL or a slash.
fn vol_args(name: &OsStr) -> Option<Box<VolArgs>> {
    let bytes = name.as_bytes();
    let mut args = Box::new(VolArgs {
        fd: 0,
        name: [0; 4088],
    });
    if bytes.is_empty()
        || bytes.len() >= args.name.len()
        || bytes.contains(&0)
        || bytes.contains(&b'/')
    {
        return None;
    }
    args.name[..bytes.len()].copy_from_slice(bytes);
    Some(args)
}

/// The id of the subvolume whose root is `dir`.
fn subvolume_id(dir: &Path) -> Result<u64, QuotaError> {
    let fd = open_dir(dir)?;
    let mut args = Box::new(InoLookupArgs {
        // 0: the tree of the descriptor, answered in `treeid`.
        treeid: 0,
        objectid: SUBVOLUME_ROOT_INO,
        name: [0; 4080],
    });
    // SAFETY: a valid descriptor and a struct of the layout the ioctl expects.
    unsafe { ioc_ino_lookup(fd.as_raw_fd(), &mut *args) }
        .map_err(|e| QuotaError::io("look up the subvolume id of", dir)(e.into()))?;
    Ok(args.treeid)
}

/// Reads a qgroup's sysfs values: `referenced`, `limit_flags` and `max_referenced`.
fn parse_usage(referenced: &str, flags: &str, max: &str) -> Result<DiskUsage, String> {
    let number = |what: &str, text: &str| {
        text.trim()
            .parse::<u64>()
            .map_err(|e| format!("{what} {text:?}: {e}"))
    };
    let used_bytes = number("referenced", referenced)?;
    let flags = number("limit_flags", flags)?;
    let max = number("max_referenced", max)?;
    Ok(DiskUsage {
        used_bytes,
        limit_bytes: (flags & LIMIT_MAX_RFER != 0).then_some(max),
    })
}

/// A btrfs fsid as sysfs names it: the lowercase UUID form.
fn fsid_text(fsid: &[u8; 16]) -> String {
    let hex: String = fsid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn is_btrfs(path: &Path) -> Result<bool, QuotaError> {
    statfs(path)
        .map(|s| s.filesystem_type() == BTRFS_SUPER_MAGIC)
        .map_err(|e| QuotaError::io("statfs", path)(e.into()))
}

fn open_dir(path: &Path) -> Result<File, QuotaError> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(path)
        .map_err(QuotaError::io("open", path))
}

/// Formats the pool file if there is none yet, then loop-mounts it on `layers` (which must be
/// empty).
fn mount_pool(layers: &Path, pool_file: &Path, pool_file_mb: u64) -> Result<(), QuotaError> {
    let mut entries = std::fs::read_dir(layers).map_err(QuotaError::io("list", layers))?;
    if entries.next().is_some() {
        return Err(QuotaError::NotEmpty(layers.to_path_buf()));
    }
    if !pool_file.exists() {
        let tmp = pool_file.with_extension("btrfs.tmp");
        let _ = std::fs::remove_file(&tmp);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(QuotaError::io("create", &tmp))?;
        file.set_len(pool_file_mb.saturating_mul(1024 * 1024))
            .map_err(QuotaError::io("size", &tmp))?;
        drop(file);
        let formatted = run(
            "mkfs.btrfs",
            &["-q".as_ref(), "-K".as_ref(), tmp.as_os_str()],
        );
        if let Err(e) = formatted {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, pool_file).map_err(QuotaError::io("rename", pool_file))?;
    }
    let (device, _attached) = attach_loop(pool_file)?;
    nix::mount::mount(
        Some(&device),
        layers,
        Some("btrfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(|e| QuotaError::io("mount the btrfs pool on", layers)(e.into()))
    // Dropping `_attached` now leaves the device to the mount: it detaches itself once unmounted.
}

/// `struct loop_config` (with its `struct loop_info64`).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    device: u64,
    inode: u64,
    rdevice: u64,
    offset: u64,
    sizelimit: u64,
    number: u32,
    encrypt_type: u32,
    encrypt_key_size: u32,
    flags: u32,
    file_name: [u8; 64],
    crypt_name: [u8; 64],
    encrypt_key: [u8; 32],
    init: [u64; 2],
    reserved: [u64; 8],
}

/// `LO_FLAGS_AUTOCLEAR`: the device detaches itself when its last user (the mount) lets go.
const LO_FLAGS_AUTOCLEAR: u32 = 4;
/// Attempts at grabbing a free loop device another process may grab first.
const LOOP_ATTEMPTS: usize = 16;

nix::ioctl_none_bad!(ioc_loop_ctl_get_free, 0x4C82);
nix::ioctl_write_ptr_bad!(ioc_loop_configure, 0x4C0A, LoopConfig);

/// Attaches `file` to a free loop device (auto-clearing); returns its path and the open device,
/// which holds the attachment until it is mounted.
fn attach_loop(file: &Path) -> Result<(PathBuf, File), QuotaError> {
    let ctl_path = Path::new("/dev/loop-control");
    let backing = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(file)
        .map_err(QuotaError::io("open", file))?;
    let ctl = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(ctl_path)
        .map_err(QuotaError::io("open", ctl_path))?;
    let mut config = LoopConfig {
        fd: u32::try_from(backing.as_raw_fd()).unwrap_or(u32::MAX),
        block_size: 0,
        device: 0,
        inode: 0,
        rdevice: 0,
        offset: 0,
        sizelimit: 0,
        number: 0,
        encrypt_type: 0,
        encrypt_key_size: 0,
        flags: LO_FLAGS_AUTOCLEAR,
        file_name: [0; 64],
        crypt_name: [0; 64],
        encrypt_key: [0; 32],
        init: [0; 2],
        reserved: [0; 8],
    };
    let name = file.as_os_str().as_bytes();
    let len = name.len().min(config.file_name.len() - 1);
    config.file_name[..len].copy_from_slice(&name[..len]);
    let mut last = None;
    for _ in 0..LOOP_ATTEMPTS {
        // SAFETY: a valid descriptor of /dev/loop-control; the ioctl takes no argument.
        let n = unsafe { ioc_loop_ctl_get_free(ctl.as_raw_fd()) }
            .map_err(|e| QuotaError::io("find a free loop device with", ctl_path)(e.into()))?;
        let path = PathBuf::from(format!("/dev/loop{n}"));
        let device = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map_err(QuotaError::io("open", &path))?;
        // SAFETY: a valid loop device descriptor and a struct of the layout the ioctl expects.
        match unsafe { ioc_loop_configure(device.as_raw_fd(), &config) } {
            Ok(_) => return Ok((path, device)),
            // Another process attached it between our two calls: ask for the next free one.
            Err(nix::errno::Errno::EBUSY) => last = Some(path),
            Err(e) => return Err(QuotaError::io("attach the pool file to", path)(e.into())),
        }
    }
    Err(QuotaError::io(
        "attach the pool file to",
        last.unwrap_or_else(|| ctl_path.to_path_buf()),
    )(nix::errno::Errno::EBUSY.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_structs_have_the_kernels_sizes() {
        assert_eq!(std::mem::size_of::<VolArgs>(), 4096);
        assert_eq!(std::mem::size_of::<InoLookupArgs>(), 4096);
        assert_eq!(std::mem::size_of::<QgroupLimitArgs>(), 48);
        assert_eq!(std::mem::size_of::<QgroupCreateArgs>(), 16);
        assert_eq!(std::mem::size_of::<QuotaCtlArgs>(), 16);
        assert_eq!(std::mem::size_of::<FsInfoArgs>(), 1024);
    }

    #[test]
    fn loop_config_has_the_kernels_size() {
        assert_eq!(std::mem::size_of::<LoopConfig>(), 304);
    }

    #[test]
    fn qgroup_values_parse_with_and_without_a_limit() {
        assert_eq!(
            parse_usage("10469376\n", "1\n", "10485760\n"),
            Ok(DiskUsage {
                used_bytes: 10_469_376,
                limit_bytes: Some(10_485_760)
            })
        );
        // No MAX_RFER flag: max_referenced means nothing (the kernel shows 0).
        assert_eq!(
            parse_usage("16384\n", "0\n", "0\n"),
            Ok(DiskUsage {
                used_bytes: 16384,
                limit_bytes: None
            })
        );
        // An exclusive-only limit is not a referenced limit.
        assert_eq!(parse_usage("0", "2", "5").unwrap().limit_bytes, None);
        for (r, f, m) in [
            ("", "0", "0"),
            ("x", "0", "0"),
            ("1", "-1", "0"),
            ("1", "1", "none"),
        ] {
            assert!(parse_usage(r, f, m).is_err(), "{r:?} {f:?} {m:?}");
        }
    }

    #[test]
    fn fsids_are_named_as_sysfs_names_them() {
        let fsid = [
            0xf5, 0x32, 0xd0, 0x11, 0x5b, 0x39, 0x42, 0xf0, 0x9d, 0xb4, 0xdd, 0xfc, 0x83, 0x0c,
            0x95, 0x63,
        ];
        assert_eq!(fsid_text(&fsid), "f532d011-5b39-42f0-9db4-ddfc830c9563");
    }

    #[test]
    fn subvolume_names_must_be_one_path_component() {
        assert!(vol_args(OsStr::new("sb-1")).is_some());
        for bad in ["", "a/b", "a\0b"] {
            assert!(vol_args(OsStr::new(bad)).is_none(), "{bad:?}");
        }
        assert!(vol_args(OsStr::new(&"a".repeat(4088))).is_none());
        let args = vol_args(OsStr::new("sb-1")).unwrap();
        assert_eq!(&args.name[..5], b"sb-1\0");
    }

    #[test]
    fn a_layer_outside_the_pool_is_refused() {
        let pool = Pool {
            layers: "/srv/layers".into(),
            qgroups: "/nonexistent".into(),
        };
        assert!(pool.vol_args(Path::new("/srv/other/sb")).is_err());
        assert!(pool.vol_args(Path::new("/srv/layers/a/b")).is_err());
    }
}
