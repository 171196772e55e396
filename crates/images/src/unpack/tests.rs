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

#[test]
fn dotdot_member_is_refused() {
    let scene = Scene::new();
    let tar = layer().file("../escape", b"x").build();
    assert_hostile(scene.unpack(&tar), "../escape");
    scene.assert_outside_untouched();
}

#[test]
fn dotdot_inside_member_is_refused() {
    let scene = Scene::new();
    let tar = layer().dir("a/").file("a/../../escape", b"x").build();
    assert_hostile(scene.unpack(&tar), "a/../../escape");
    scene.assert_outside_untouched();
}

#[test]
fn absolute_member_lands_beneath_dest() {
    let scene = Scene::new();
    let name = format!("{}/outside/abs", scene.root.display());
    let tar = layer().file(&name, b"x").build();
    scene.unpack(&tar).unwrap();
    let landed = scene.dest.join(scene.root_relative()).join("outside/abs");
    assert_eq!(fs::read(landed).unwrap(), b"x");
    scene.assert_outside_untouched();
}

#[test]
fn symlink_parent_is_never_followed() {
    type Aim = fn(&Scene) -> String;
    // (symlink target, name of the member written through it): each would write
    // `<tempdir>/outside/x` if the symlink were followed.
    let cases: [(Aim, Aim); 4] = [
        (
            |_| "/".into(),
            |s| format!("evil/{}/outside/x", s.root_relative()),
        ),
        (
            |_| "../../..".into(),
            |s| format!("evil/{}/outside/x", s.root_relative()),
        ),
        (|_| "../outside".into(), |_| "evil/x".into()),
        (|s| s.outside.display().to_string(), |_| "evil/x".into()),
    ];
    for (target, name) in cases {
        let scene = Scene::new();
        let name = name(&scene);
        let tar = layer()
            .symlink("evil", &target(&scene))
            .file(&name, b"x")
            .build();
        assert_hostile(scene.unpack(&tar), &name);
        scene.assert_outside_untouched();
    }
}

#[test]
fn symlink_deeper_in_the_parent_path_is_never_followed() {
    let scene = Scene::new();
    let tar = layer()
        .dir("a/")
        .dir("a/b/")
        .symlink("a/b/evil", "../../../outside")
        .dir("a/b/evil/sub/")
        .build();
    assert_hostile(scene.unpack(&tar), "a/b/evil/sub/");
    scene.assert_outside_untouched();
}

#[test]
fn whiteout_through_symlinked_parent_is_refused() {
    let scene = Scene::new();
    let tar = layer()
        .symlink("evil", "../outside")
        .file("evil/.wh.marker", b"")
        .file("evil/.wh..wh..opq", b"")
        .build();
    assert_hostile(scene.unpack(&tar), "evil/.wh.marker");
    scene.assert_outside_untouched();
    assert_eq!(xattr(&scene.outside, "trusted.overlay.opaque"), None);
}

#[test]
fn hardlink_to_host_path_is_refused() {
    let scene = Scene::new();
    let passwd_links = fs::symlink_metadata("/etc/passwd").map(|m| m.nlink()).ok();
    let tar = layer().hardlink("passwd", "/etc/passwd").build();
    assert_hostile(scene.unpack(&tar), "passwd");
    assert!(fs::symlink_metadata(scene.dest.join("passwd")).is_err());
    assert_eq!(
        fs::symlink_metadata("/etc/passwd").map(|m| m.nlink()).ok(),
        passwd_links
    );

    let scene = Scene::new();
    let target = format!("{}/outside/marker", scene.root.display());
    let tar = layer().hardlink("marker", &target).build();
    assert_hostile(scene.unpack(&tar), "marker");
    scene.assert_outside_untouched();
}

#[test]
fn hardlink_with_dotdot_target_is_refused() {
    let scene = Scene::new();
    let tar = layer().hardlink("marker", "../outside/marker").build();
    assert_hostile(scene.unpack(&tar), "marker");
    scene.assert_outside_untouched();
}

#[test]
fn hardlink_through_symlinked_parent_is_refused() {
    let scene = Scene::new();
    let tar = layer()
        .symlink("evil", "../outside")
        .hardlink("marker", "evil/marker")
        .build();
    assert_hostile(scene.unpack(&tar), "marker");
    scene.assert_outside_untouched();

    // Nor is a hardlink *named* through a symlinked parent created.
    let scene = Scene::new();
    let tar = layer()
        .file("inside", b"x")
        .symlink("evil", "../outside")
        .hardlink("evil/planted", "inside")
        .build();
    assert_hostile(scene.unpack(&tar), "evil/planted");
    scene.assert_outside_untouched();
}

#[test]
fn file_over_a_symlink_replaces_the_link_not_its_target() {
    let scene = Scene::new();
    let tar = layer()
        .symlink("evil", "../outside/marker")
        .file("evil", b"overwritten?")
        .symlink("evil-dir", "../outside")
        .dir("evil-dir/")
        .build();
    scene.unpack(&tar).unwrap();
    assert_eq!(fs::read(scene.dest.join("evil")).unwrap(), b"overwritten?");
    assert!(fs::symlink_metadata(scene.dest.join("evil-dir"))
        .unwrap()
        .is_dir());
    scene.assert_outside_untouched();
}

#[test]
fn hardlink_to_symlink_is_refused() {
    let scene = Scene::new();
    let tar = layer()
        .symlink("evil", "../outside/marker")
        .hardlink("marker", "evil")
        .build();
    assert_hostile(scene.unpack(&tar), "marker");
    scene.assert_outside_untouched();
}

#[test]
fn hardlink_needs_an_earlier_member() {
    let scene = Scene::new();
    let tar = layer().hardlink("early", "late").file("late", b"x").build();
    assert_hostile(scene.unpack(&tar), "early");
}

#[test]
fn device_nodes_are_skipped_not_created() {
    let scene = Scene::new();
    let tar = layer()
        .device("dev/null", EntryType::Char, 1, 3)
        .device("dev/sda", EntryType::Block, 8, 0)
        .file("dev/.keep", b"")
        .build();
    let stats = scene.unpack(&tar).unwrap();
    assert_eq!(stats.skipped_devices, 2);
    assert_eq!(stats.entries, 3);
    assert!(fs::symlink_metadata(scene.dest.join("dev/null")).is_err());
    assert!(fs::symlink_metadata(scene.dest.join("dev/sda")).is_err());
    assert!(scene.dest.join("dev/.keep").is_file());
}

#[test]
fn gzip_bomb_stops_at_max_bytes() {
    let scene = Scene::new();
    let zeros = vec![0u8; 8 << 20];
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder
        .write_all(&layer().file("bomb", &zeros).build())
        .unwrap();
    let blob = encoder.finish().unwrap();
    assert!(blob.len() < 64 << 10, "the blob is small: {}", blob.len());
    let limits = UnpackLimits {
        max_bytes: 1 << 20,
        ..UnpackLimits::default()
    };
    let result = unpack_layer(
        blob.as_slice(),
        Compression::Gzip,
        &scene.dest,
        SHIFT,
        &limits,
    );
    assert!(
        matches!(result, Err(UnpackError::TooLarge { what: "bytes", .. })),
        "{result:?}"
    );
    scene.assert_outside_untouched();
}

#[test]
fn streamed_bytes_are_counted_not_the_header_size() {
    // Two files each under the limit, together over it.
    let scene = Scene::new();
    let tar = layer()
        .file("a", &[1u8; 600])
        .file("b", &[2u8; 600])
        .build();
    let limits = UnpackLimits {
        max_bytes: 1000,
        ..UnpackLimits::default()
    };
    let result = unpack_layer(
        tar.as_slice(),
        Compression::None,
        &scene.dest,
        SHIFT,
        &limits,
    );
    assert!(matches!(
        result,
        Err(UnpackError::TooLarge { what: "bytes", .. })
    ));
}

#[test]
fn too_many_members_stop_at_max_entries() {
    let scene = Scene::new();
    let mut tar = layer();
    for i in 0..10 {
        tar = tar.file(&format!("f{i}"), b"");
    }
    let limits = UnpackLimits {
        max_entries: 5,
        ..UnpackLimits::default()
    };
    let result = unpack_layer(
        tar.build().as_slice(),
        Compression::None,
        &scene.dest,
        SHIFT,
        &limits,
    );
    assert!(matches!(
        result,
        Err(UnpackError::TooLarge {
            what: "members",
            ..
        })
    ));
    assert!(!scene.dest.join("f5").exists());
}

#[test]
fn huge_member_headers_stop_before_memory_grows() {
    let scene = Scene::new();
    let value = vec![b'a'; (MAX_MEMBER_HEADERS + 1024) as usize];
    let tar = layer()
        .pax(&[("SCHILY.xattr.user.big", &value)])
        .file("f", b"")
        .build();
    let result = scene.unpack(&tar);
    assert!(
        matches!(
            result,
            Err(UnpackError::TooLarge {
                what: "header bytes for one member",
                ..
            })
        ),
        "{result:?}"
    );
}

#[test]
fn non_empty_dest_is_refused() {
    let scene = Scene::new();
    fs::write(scene.dest.join("already"), b"").unwrap();
    let result = scene.unpack(&layer().file("f", b"").build());
    assert!(matches!(result, Err(UnpackError::DestNotEmpty { .. })));
    assert!(!scene.dest.join("f").exists());
}

#[test]
fn id_shift_without_room_is_refused() {
    let scene = Scene::new();
    let result = unpack_layer(
        layer().build().as_slice(),
        Compression::None,
        &scene.dest,
        u32::MAX - 100,
        &UnpackLimits::default(),
    );
    assert!(matches!(result, Err(UnpackError::BadIdShift { .. })));
}

#[test]
fn garbage_is_corrupt_not_a_panic() {
    let scene = Scene::new();
    let result = unpack_layer(
        &b"definitely not gzip"[..],
        Compression::Gzip,
        &scene.dest,
        SHIFT,
        &UnpackLimits::default(),
    );
    assert!(matches!(result, Err(UnpackError::Corrupt(_))), "{result:?}");

    // Every truncation of a valid layer either unpacks or fails cleanly.
    let tar = layer()
        .dir("a/")
        .file("a/b", &[7u8; 3000])
        .symlink("a/c", "b")
        .build();
    for cut in (0..tar.len()).step_by(97) {
        let scene = Scene::new();
        let _ = scene.unpack(&tar[..cut]);
        scene.assert_outside_untouched();
    }
}

/// A `security.capability` value of revision 3 granting CAP_NET_BIND_SERVICE, for `rootid`.
fn capability_v3(rootid: u32) -> Vec<u8> {
    let mut value = Vec::new();
    value.extend_from_slice(&(0x0300_0000u32 | 1).to_le_bytes()); // revision 3, effective
    value.extend_from_slice(&(1u32 << 10).to_le_bytes()); // permitted, low word
    value.extend_from_slice(&0u32.to_le_bytes()); // inheritable, low word
    value.extend_from_slice(&0u32.to_le_bytes()); // permitted, high word
    value.extend_from_slice(&0u32.to_le_bytes()); // inheritable, high word
    value.extend_from_slice(&rootid.to_le_bytes());
    value
}

#[test]
fn file_capability_is_kept_with_its_root_shifted() {
    let scene = Scene::new();
    let tar = layer()
        .pax(&[("SCHILY.xattr.security.capability", &capability_v3(0))])
        .owned("ping", EntryType::Regular, "", b"elf", 0o755, 0)
        .build();
    scene.unpack(&tar).unwrap();
    assert_eq!(
        xattr(&scene.dest.join("ping"), "security.capability"),
        Some(capability_v3(SHIFT)),
        "set after the chown, which would clear it, and rooted at the sandbox's root"
    );
}

#[test]
fn sparse_file_counts_its_full_size() {
    let scene = Scene::new();
    let source = scene.root.join("sparse-source");
    let file = fs::File::create(&source).unwrap();
    file.set_len(8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&file, b"end", (8 << 20) - 3).unwrap();
    let mut builder = tar::Builder::new(Vec::new());
    builder.sparse(true);
    builder.append_path_with_name(&source, "sparse").unwrap();
    let tar = builder.into_inner().unwrap();
    fs::remove_file(&source).unwrap();
    assert!(tar.len() < 1 << 20, "stored sparse: {} bytes", tar.len());

    let limits = UnpackLimits {
        max_bytes: 1 << 20,
        ..UnpackLimits::default()
    };
    let result = unpack_layer(
        tar.as_slice(),
        Compression::None,
        &scene.dest,
        SHIFT,
        &limits,
    );
    assert!(
        matches!(result, Err(UnpackError::TooLarge { what: "bytes", .. })),
        "{result:?}"
    );

    let scene = Scene::new();
    let stats = scene.unpack(&tar).unwrap();
    assert_eq!(stats.bytes, 8 << 20);
    let written = fs::read(scene.dest.join("sparse")).unwrap();
    assert_eq!(written.len(), 8 << 20);
    assert_eq!(&written[(8 << 20) - 3..], b"end");
}

#[test]
fn unknown_member_type_is_refused() {
    let scene = Scene::new();
    let tar = layer().raw("odd", EntryType::new(b'Z'), "", b"").build();
    assert_hostile(scene.unpack(&tar), "odd");
}

#[test]
fn pax_global_header_is_ignored() {
    let scene = Scene::new();
    let tar = layer()
        .raw(
            "pax_global_header",
            EntryType::XGlobalHeader,
            "",
            b"52 comment=abc\n",
        )
        .file("f", b"x")
        .build();
    let stats = scene.unpack(&tar).unwrap();
    assert_eq!(stats.entries, 2);
    assert!(!scene.dest.join("pax_global_header").exists());
}

#[test]
fn pax_times_keep_their_fraction() {
    use super::meta::pax_time;
    assert_eq!(pax_time(b"12"), Some(TimeSpec::new(12, 0)));
    assert_eq!(pax_time(b"12.5"), Some(TimeSpec::new(12, 500_000_000)));
    assert_eq!(
        pax_time(b"12.1234567891"),
        Some(TimeSpec::new(12, 123_456_789))
    );
    assert_eq!(pax_time(b"-1.5"), None);
    assert_eq!(pax_time(b"x"), None);
    assert_eq!(pax_time(b"1.x"), None);
}

#[test]
fn ids_outside_the_sandbox_range_are_clamped_to_the_overflow_id() {
    use super::meta::shift_id;
    assert_eq!(shift_id(0, SHIFT), SHIFT);
    assert_eq!(shift_id(65535, SHIFT), SHIFT + 65535);
    assert_eq!(shift_id(65536, SHIFT), SHIFT + 65534);
    assert_eq!(shift_id(u64::MAX, SHIFT), SHIFT + 65534);
}

#[test]
fn the_whole_blob_is_read_past_the_end_of_the_archive() {
    let tar = compressed_layer();
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(&tar).unwrap();
    let gzip = encoder.finish().unwrap();
    let zstd = zstd::encode_all(tar.as_slice(), 3).unwrap();
    for (blob, compression) in [
        (tar.clone(), Compression::None),
        (gzip, Compression::Gzip),
        (zstd, Compression::Zstd),
    ] {
        let scene = Scene::new();
        let mut rest = blob.as_slice();
        unpack_layer(
            &mut rest,
            compression,
            &scene.dest,
            SHIFT,
            &UnpackLimits::default(),
        )
        .unwrap();
        assert!(
            rest.is_empty(),
            "{compression:?}: {} bytes left unread",
            rest.len()
        );
    }
}

#[test]
fn damaged_gzip_trailer_is_corrupt() {
    let scene = Scene::new();
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(&compressed_layer()).unwrap();
    let mut blob = encoder.finish().unwrap();
    // The CRC32 of the uncompressed data sits in the trailer's first four bytes.
    let crc = blob.len() - 8;
    blob[crc] ^= 0xff;
    let result = unpack_layer(
        blob.as_slice(),
        Compression::Gzip,
        &scene.dest,
        SHIFT,
        &UnpackLimits::default(),
    );
    assert!(matches!(result, Err(UnpackError::Corrupt(_))), "{result:?}");
}

#[test]
fn discarded_member_data_counts_against_max_bytes_too() {
    // Hardlinks and devices may carry data nobody writes; it is still decompressed, so counted.
    let scene = Scene::new();
    let mut tar = layer();
    for i in 0..4 {
        tar = tar.raw(&format!("dev{i}"), EntryType::Char, "", &[0u8; 400]);
    }
    let limits = UnpackLimits {
        max_bytes: 1000,
        ..UnpackLimits::default()
    };
    let result = unpack_layer(
        tar.build().as_slice(),
        Compression::None,
        &scene.dest,
        SHIFT,
        &limits,
    );
    assert!(
        matches!(result, Err(UnpackError::TooLarge { what: "bytes", .. })),
        "{result:?}"
    );
}
