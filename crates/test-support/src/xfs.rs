//! A loop-mounted XFS with project quotas (`prjquota`), for the tests of the project-quota disk
//! backend — the one a host whose data directory is on XFS takes.
//!
//! Kernels without quota support (`CONFIG_QUOTA` off, as on some cloud kernels) refuse the mount:
//! then [`QuotaXfs::mount_on`] says why and returns `None`, and the test skips — unless
//! `SANDBOXD_EXPECT_PROJECT_QUOTAS` is set (the Debian VM of `scripts/test-debian-vm` sets it, its
//! kernel has them), where a missing feature fails the test instead of skipping it unseen.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether this run requires project quotas (see the module docs).
pub fn project_quotas_expected() -> bool {
    std::env::var_os("SANDBOXD_EXPECT_PROJECT_QUOTAS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Skips (returns `None`, after printing `reason`) or, when project quotas are expected, panics.
fn unavailable<T>(reason: String) -> Option<T> {
    if project_quotas_expected() {
        panic!("project quotas are expected (SANDBOXD_EXPECT_PROJECT_QUOTAS) but {reason}");
    }
    eprintln!("SKIPPED: {reason}");
    None
}

/// An XFS mounted with `prjquota` on a directory, from a sparse image in a directory of its own;
/// lazily unmounted (and its loop device released) when dropped.
pub struct QuotaXfs {
    mount: PathBuf,
    _image: tempfile::TempDir,
}

impl QuotaXfs {
    /// Makes a sparse image of `size_mb` MiB, formats it and mounts it on `mount` (created with its
    /// parents if missing) with project quotas; `None` (a skip) when the kernel cannot.
    pub fn mount_on(mount: &Path, size_mb: u64) -> Option<QuotaXfs> {
        let image = tempfile::Builder::new()
            .prefix("sandboxd-xfs-")
            .tempdir()
            .expect("tempdir for the XFS image");
        let file = image.path().join("xfs.img");
        std::fs::File::create(&file)
            .and_then(|f| f.set_len(size_mb << 20))
            .expect("sparse XFS image");
        let mkfs = Command::new("mkfs.xfs")
            .arg("-q")
            .arg(&file)
            .output()
            .expect("run mkfs.xfs (xfsprogs)");
        assert!(
            mkfs.status.success(),
            "mkfs.xfs: {}",
            String::from_utf8_lossy(&mkfs.stderr)
        );
        std::fs::create_dir_all(mount).expect("create the mount point");
        let mounted = Command::new("mount")
            .args(["-t", "xfs", "-o", "loop,prjquota"])
            .arg(&file)
            .arg(mount)
            .output()
            .expect("run mount");
        if !mounted.status.success() {
            return unavailable(format!(
                "this kernel cannot mount XFS with project quotas: {}",
                String::from_utf8_lossy(&mounted.stderr).trim()
            ));
        }
        Some(QuotaXfs {
            mount: mount.to_path_buf(),
            _image: image,
        })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }
}

impl Drop for QuotaXfs {
    fn drop(&mut self) {
        use std::os::unix::ffi::OsStrExt;
        let Ok(path) = std::ffi::CString::new(self.mount.as_os_str().as_bytes()) else {
            return;
        };
        // SAFETY: umount2 with a NUL-terminated path; an already detached mount fails harmlessly.
        unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
    }
}
