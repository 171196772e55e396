//! Layers built in memory, unpacked into `<tempdir>/dest` next to a sibling `<tempdir>/outside`
//! holding a marker file. Every attack aims inside the tempdir, so a failure cannot damage the host.

use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use tar::{EntryType, Header};

use super::*;

mod hostile;
mod metadata;

const SHIFT: u32 = 100_000;

struct Scene {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    dest: PathBuf,
    outside: PathBuf,
}

impl Scene {
    fn new() -> Scene {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let dest = root.join("dest");
        let outside = root.join("outside");
        fs::create_dir(&dest).unwrap();
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("marker"), b"untouched").unwrap();
        Scene {
            _tmp: tmp,
            root,
            dest,
            outside,
        }
    }

    fn unpack(&self, tar: &[u8]) -> Result<UnpackStats, UnpackError> {
        unpack_layer(
            tar,
            Compression::None,
            &self.dest,
            SHIFT,
            &UnpackLimits::default(),
        )
    }

    /// The tempdir's path without its leading `/`, for names that would reach it from `/`.
    fn root_relative(&self) -> String {
        self.root
            .to_str()
            .unwrap()
            .trim_start_matches('/')
            .to_string()
    }

    /// Nothing appeared next to `dest` and `outside` holds only its marker, unchanged and
    /// with one link.
    fn assert_outside_untouched(&self) {
        let mut siblings: Vec<_> = fs::read_dir(&self.root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        siblings.sort();
        assert_eq!(siblings, ["dest", "outside"]);
        let inside: Vec<_> = fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(inside, ["marker"]);
        let marker = self.outside.join("marker");
        assert_eq!(fs::read(&marker).unwrap(), b"untouched");
        assert_eq!(fs::symlink_metadata(&marker).unwrap().nlink(), 1);
        assert_eq!(fs::symlink_metadata(&marker).unwrap().uid(), 0);
    }
}

fn assert_hostile(result: Result<UnpackStats, UnpackError>, name: &str) {
    match result {
        Err(UnpackError::Hostile { entry, reason }) => {
            assert_eq!(
                entry, name,
                "refused {entry:?} ({reason}), expected {name:?}"
            )
        }
        other => panic!("expected {name:?} to be refused, got {other:?}"),
    }
}

/// A header whose name and link name bytes are written as given, bypassing the builder's checks.
fn raw_header(name: &[u8], kind: EntryType, link: &[u8], size: u64, mode: u32) -> Header {
    let mut header = Header::new_gnu();
    {
        let old = header.as_old_mut();
        old.name[..name.len()].copy_from_slice(name);
        old.linkname[..link.len()].copy_from_slice(link);
    }
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(mode);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(1_600_000_000);
    header.set_cksum();
    header
}

struct Layer {
    builder: tar::Builder<Vec<u8>>,
}

impl Layer {
    fn raw(mut self, name: &str, kind: EntryType, link: &str, data: &[u8]) -> Layer {
        let header = raw_header(
            name.as_bytes(),
            kind,
            link.as_bytes(),
            data.len() as u64,
            0o644,
        );
        self.builder.append(&header, data).unwrap();
        self
    }

    fn owned(
        mut self,
        name: &str,
        kind: EntryType,
        link: &str,
        data: &[u8],
        mode: u32,
        uid: u64,
    ) -> Layer {
        let mut header = raw_header(
            name.as_bytes(),
            kind,
            link.as_bytes(),
            data.len() as u64,
            mode,
        );
        header.set_uid(uid);
        header.set_gid(uid);
        header.set_cksum();
        self.builder.append(&header, data).unwrap();
        self
    }

    fn file(self, name: &str, data: &[u8]) -> Layer {
        self.raw(name, EntryType::Regular, "", data)
    }

    fn dir(self, name: &str) -> Layer {
        self.owned(name, EntryType::Directory, "", b"", 0o755, 0)
    }

    fn symlink(self, name: &str, target: &str) -> Layer {
        self.raw(name, EntryType::Symlink, target, b"")
    }

    fn hardlink(self, name: &str, target: &str) -> Layer {
        self.raw(name, EntryType::Link, target, b"")
    }

    /// A PAX extended header describing the next member.
    fn pax(mut self, records: &[(&str, &[u8])]) -> Layer {
        let mut data = Vec::new();
        for (key, value) in records {
            let body = key.len() + value.len() + 3; // ' ', '=', '\n'
            let mut length = body + 1;
            while length != body + length.to_string().len() {
                length = body + length.to_string().len();
            }
            data.extend_from_slice(format!("{length} {key}=").as_bytes());
            data.extend_from_slice(value);
            data.push(b'\n');
        }
        let header = raw_header(
            b"PaxHeaders/x",
            EntryType::XHeader,
            b"",
            data.len() as u64,
            0o644,
        );
        self.builder.append(&header, data.as_slice()).unwrap();
        self
    }

    fn device(mut self, name: &str, kind: EntryType, major: u32, minor: u32) -> Layer {
        let mut header = raw_header(name.as_bytes(), kind, b"", 0, 0o600);
        header.set_device_major(major).unwrap();
        header.set_device_minor(minor).unwrap();
        header.set_cksum();
        self.builder.append(&header, &b""[..]).unwrap();
        self
    }

    fn build(self) -> Vec<u8> {
        self.builder.into_inner().unwrap()
    }
}

fn layer() -> Layer {
    Layer {
        builder: tar::Builder::new(Vec::new()),
    }
}

fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let path = CString::new(path.as_os_str().as_bytes()).unwrap();
    let name = CString::new(name).unwrap();
    let mut buffer = vec![0u8; 256];
    // SAFETY: both strings are NUL-terminated and the buffer is valid for its length.
    let read = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
        )
    };
    let read = usize::try_from(read).ok()?;
    buffer.truncate(read);
    Some(buffer)
}

#[test]
fn media_types_name_their_compression() {
    let cases = [
        (
            "application/vnd.oci.image.layer.v1.tar",
            Some(Compression::None),
        ),
        (
            "application/vnd.oci.image.layer.v1.tar+gzip",
            Some(Compression::Gzip),
        ),
        (
            "application/vnd.oci.image.layer.v1.tar+zstd",
            Some(Compression::Zstd),
        ),
        (
            "application/vnd.docker.image.rootfs.diff.tar.gzip",
            Some(Compression::Gzip),
        ),
        (
            "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
            Some(Compression::Gzip),
        ),
        ("application/vnd.oci.image.config.v1+json", None),
        ("application/vnd.oci.image.layer.v1.tar+lz4", None),
    ];
    for (media_type, expected) in cases {
        assert_eq!(
            Compression::from_media_type(media_type),
            expected,
            "{media_type}"
        );
    }
}

#[test]
fn normal_layer_keeps_files_dirs_links_modes_xattrs_and_shifted_owners() {
    let scene = Scene::new();
    let tar = layer()
        .owned("./", EntryType::Directory, "", b"", 0o755, 0)
        .owned("etc/", EntryType::Directory, "", b"", 0o755, 0)
        .pax(&[
            ("SCHILY.xattr.user.x", b"hello"),
            ("SCHILY.xattr.trusted.overlay.redirect", b"/elsewhere"),
            ("SCHILY.xattr.user.overlay.opaque", b"y"),
            (
                "SCHILY.xattr.security.selinux",
                b"system_u:object_r:etc_t:s0",
            ),
            ("mtime", b"1600000000.25"),
        ])
        .owned(
            "etc/hosts",
            EntryType::Regular,
            "",
            b"127.0.0.1 localhost\n",
            0o644,
            0,
        )
        .owned(
            "usr/bin/su",
            EntryType::Regular,
            "",
            b"#!/bin/true\n",
            0o4755,
            0,
        )
        .owned("home/me/", EntryType::Directory, "", b"", 0o750, 1000)
        .owned(
            "home/me/notes",
            EntryType::Regular,
            "",
            b"mine",
            0o600,
            1000,
        )
        .owned("tmp", EntryType::Directory, "", b"", 0o1777, 0)
        .owned("big-id", EntryType::Regular, "", b"", 0o644, 70_000)
        .owned("bin", EntryType::Symlink, "usr/bin", b"", 0o777, 0)
        .owned(
            "usr/bin/su-again",
            EntryType::Link,
            "usr/bin/su",
            b"",
            0o644,
            0,
        )
        .pax(&[("SCHILY.xattr.user.x", b"not on a FIFO")])
        .owned("run/pipe", EntryType::Fifo, "", b"", 0o620, 0)
        .build();

    let stats = scene.unpack(&tar).unwrap();
    assert_eq!(
        stats,
        UnpackStats {
            entries: 11,
            bytes: 20 + 12 + 4,
            skipped_devices: 0
        }
    );

    let dest = &scene.dest;
    let hosts = dest.join("etc/hosts");
    assert_eq!(fs::read(&hosts).unwrap(), b"127.0.0.1 localhost\n");
    let meta = fs::symlink_metadata(&hosts).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (SHIFT, SHIFT));
    assert_eq!(meta.mode() & 0o7777, 0o644);
    assert_eq!(
        (meta.mtime(), meta.mtime_nsec()),
        (1_600_000_000, 250_000_000)
    );
    assert_eq!(xattr(&hosts, "user.x").as_deref(), Some(&b"hello"[..]));
    assert_eq!(xattr(&hosts, "trusted.overlay.redirect"), None);
    assert_eq!(xattr(&hosts, "user.overlay.opaque"), None);
    assert_eq!(xattr(&hosts, "security.selinux"), None);

    let su = fs::symlink_metadata(dest.join("usr/bin/su")).unwrap();
    assert_eq!(su.mode() & 0o7777, 0o4755, "setuid survives the chown");
    let su_again = fs::symlink_metadata(dest.join("usr/bin/su-again")).unwrap();
    assert_eq!(su_again.ino(), su.ino());
    assert_eq!(su.nlink(), 2);
    // A parent the layer never listed is created owned by the sandbox's root.
    let usr = fs::symlink_metadata(dest.join("usr")).unwrap();
    assert!(usr.is_dir());
    assert_eq!((usr.uid(), usr.mode() & 0o7777), (SHIFT, 0o755));

    let me = fs::symlink_metadata(dest.join("home/me")).unwrap();
    assert_eq!((me.uid(), me.gid()), (SHIFT + 1000, SHIFT + 1000));
    assert_eq!(me.mode() & 0o7777, 0o750);
    assert_eq!(me.mtime(), 1_600_000_000, "directory mtimes are set last");
    let notes = fs::symlink_metadata(dest.join("home/me/notes")).unwrap();
    assert_eq!((notes.uid(), notes.mode() & 0o7777), (SHIFT + 1000, 0o600));

    assert_eq!(
        fs::symlink_metadata(dest.join("tmp")).unwrap().mode() & 0o7777,
        0o1777
    );
    let big = fs::symlink_metadata(dest.join("big-id")).unwrap();
    assert_eq!((big.uid(), big.gid()), (SHIFT + 65534, SHIFT + 65534));

    let bin = fs::symlink_metadata(dest.join("bin")).unwrap();
    assert!(bin.file_type().is_symlink());
    assert_eq!(bin.uid(), SHIFT);
    assert_eq!(
        fs::read_link(dest.join("bin")).unwrap(),
        Path::new("usr/bin")
    );

    let pipe = fs::symlink_metadata(dest.join("run/pipe")).unwrap();
    assert!(pipe.file_type().is_fifo());
    assert_eq!((pipe.uid(), pipe.mode() & 0o7777), (SHIFT, 0o620));

    let root = fs::symlink_metadata(dest).unwrap();
    assert_eq!((root.uid(), root.mode() & 0o7777), (SHIFT, 0o755));
    scene.assert_outside_untouched();
}

fn compressed_layer() -> Vec<u8> {
    layer().dir("a/").file("a/b", b"compressed content").build()
}

#[test]
fn gzip_layer_unpacks() {
    let scene = Scene::new();
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(&compressed_layer()).unwrap();
    let blob = encoder.finish().unwrap();
    let stats = unpack_layer(
        blob.as_slice(),
        Compression::Gzip,
        &scene.dest,
        SHIFT,
        &UnpackLimits::default(),
    )
    .unwrap();
    assert_eq!(stats.entries, 2);
    assert_eq!(
        fs::read(scene.dest.join("a/b")).unwrap(),
        b"compressed content"
    );
}

#[test]
fn zstd_layer_unpacks() {
    let scene = Scene::new();
    let blob = zstd::encode_all(compressed_layer().as_slice(), 3).unwrap();
    let stats = unpack_layer(
        blob.as_slice(),
        Compression::Zstd,
        &scene.dest,
        SHIFT,
        &UnpackLimits::default(),
    )
    .unwrap();
    assert_eq!(stats.entries, 2);
    assert_eq!(
        fs::read(scene.dest.join("a/b")).unwrap(),
        b"compressed content"
    );
}

#[test]
fn whiteouts_become_overlay_whiteouts_and_opaque_dirs() {
    let scene = Scene::new();
    let tar = layer()
        .dir("etc/")
        .file("etc/.wh.motd", b"")
        .file("etc/old", b"replaced by a whiteout")
        .file("etc/.wh.old", b"")
        .file("var/cache/.wh..wh..opq", b"")
        .dir("opt/")
        .file("opt/.wh..wh..opq", b"")
        .file("opt/kept", b"x")
        .file(".wh..wh.plnk", b"")
        .build();
    scene.unpack(&tar).unwrap();

    for hidden in ["etc/motd", "etc/old"] {
        let meta = fs::symlink_metadata(scene.dest.join(hidden)).unwrap();
        assert!(meta.file_type().is_char_device(), "{hidden}");
        assert_eq!(meta.rdev(), 0, "{hidden}");
    }
    for opaque in ["var/cache", "opt"] {
        assert!(scene.dest.join(opaque).is_dir());
        assert_eq!(
            xattr(&scene.dest.join(opaque), "trusted.overlay.opaque").as_deref(),
            Some(&b"y"[..]),
            "{opaque}"
        );
    }
    assert_eq!(fs::read(scene.dest.join("opt/kept")).unwrap(), b"x");
    let mut names = Vec::new();
    for dir in ["", "etc", "var/cache", "opt"] {
        for entry in fs::read_dir(scene.dest.join(dir)).unwrap() {
            names.push(entry.unwrap().file_name().into_string().unwrap());
        }
    }
    assert!(
        names.iter().all(|name| !name.starts_with(".wh.")),
        "{names:?}"
    );
}

#[test]
fn later_members_replace_earlier_ones() {
    let scene = Scene::new();
    let tar = layer()
        .file("a", b"file first")
        .dir("a/")
        .file("a/inside", b"1")
        .dir("b/")
        .file("b/deep/x", b"2")
        .symlink("b/deep/link", "../../..")
        .file("b", b"file over a tree")
        .file("c", b"file")
        .symlink("c", "target")
        .file("d", b"old")
        .file("d", b"new")
        .build();
    scene.unpack(&tar).unwrap();
    assert_eq!(fs::read(scene.dest.join("a/inside")).unwrap(), b"1");
    assert_eq!(fs::read(scene.dest.join("b")).unwrap(), b"file over a tree");
    assert_eq!(
        fs::read_link(scene.dest.join("c")).unwrap(),
        Path::new("target")
    );
    assert_eq!(fs::read(scene.dest.join("d")).unwrap(), b"new");
    scene.assert_outside_untouched();
}
