//! Overlay-form trees built by hand in a tempdir (as root: owners, devices, `trusted.*`), packed,
//! and unpacked again through the hardened unpacker, then compared entry by entry.

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{lchown, symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::sys::stat::{makedev, mknod, utimensat, Mode, SFlag, UtimensatFlags};
use nix::sys::time::TimeSpec;
use tar::EntryType;

use super::*;
use crate::unpack::{unpack_layer, Compression, UnpackLimits};

const SHIFT: u32 = 100_000;
/// The sandbox's user 1000, as the host sees it.
const USER: u32 = SHIFT + 1000;

const LONG_DIR: &str = "a-directory-whose-name-is-long-enough-that-with-its-children-the-member-name-needs-a-pax-path-record";

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    let path = CString::new(path.as_os_str().as_bytes()).unwrap();
    let name = CString::new(name).unwrap();
    // SAFETY: both strings are NUL-terminated; `value` is valid for its length.
    let result = unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        result,
        0,
        "setxattr {name:?}: {}",
        std::io::Error::last_os_error()
    );
}

fn xattrs(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let cpath = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 65536];
    // SAFETY: `names` is valid for its length; `cpath` is NUL-terminated.
    let len = unsafe { libc::llistxattr(cpath.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(len >= 0, "listxattr {}", path.display());
    names.truncate(len as usize);
    let mut out = BTreeMap::new();
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let cname = CString::new(name).unwrap();
        let mut value = vec![0u8; 65536];
        // SAFETY: as above.
        let len = unsafe {
            libc::lgetxattr(
                cpath.as_ptr(),
                cname.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        assert!(len >= 0);
        value.truncate(len as usize);
        out.insert(String::from_utf8(name.to_vec()).unwrap(), value);
    }
    out
}

/// A `security.capability` value of revision 3 granting CAP_NET_BIND_SERVICE, for `rootid`.
fn capability_v3(rootid: u32) -> Vec<u8> {
    let mut value = Vec::new();
    value.extend_from_slice(&(0x0300_0000u32 | 1).to_le_bytes());
    value.extend_from_slice(&(1u32 << 10).to_le_bytes());
    value.extend_from_slice(&[0; 12]);
    value.extend_from_slice(&rootid.to_le_bytes());
    value
}

fn own(path: &Path, id: u32) {
    lchown(path, Some(id), Some(id)).unwrap();
}

fn file(path: &Path, data: &[u8], mode: u32, owner: u32) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, data).unwrap();
    own(path, owner);
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn dir(path: &Path, mode: u32, owner: u32) {
    fs::create_dir_all(path).unwrap();
    own(path, owner);
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// An upper dir as overlayfs leaves it, owned by shifted ids.
fn overlay_tree(root: &Path) {
    dir(root, 0o755, SHIFT);
    dir(&root.join("bin"), 0o755, SHIFT);
    file(&root.join("bin/su"), b"#!su\n", 0o4755, SHIFT);
    file(&root.join("bin/wall"), b"#!wall\n", 0o2755, SHIFT);
    file(&root.join("bin/ping"), b"\x7fELF ping", 0o755, SHIFT);
    set_xattr(
        &root.join("bin/ping"),
        "security.capability",
        &capability_v3(SHIFT),
    );
    dir(&root.join("tmp"), 0o1777, SHIFT);
    dir(&root.join("home/user"), 0o750, USER);
    own(&root.join("home"), SHIFT);
    file(
        &root.join("home/user/notes.txt"),
        b"remember\n",
        0o640,
        USER,
    );
    set_xattr(&root.join("home/user/notes.txt"), "user.note", b"a note");
    set_xattr(&root.join("home/user"), "user.dir-note", b"on a dir");
    let link = root.join("home/user/passwd");
    symlink("/etc/passwd", &link).unwrap();
    own(&link, USER);
    let link_dir = root.join("home/user/etc");
    symlink("/etc", &link_dir).unwrap();
    own(&link_dir, USER);
    // A relative target with `.` and `//` in it stays exactly as written.
    symlink("../user/.//notes.txt", root.join("home/user/odd")).unwrap();
    own(&root.join("home/user/odd"), USER);
    file(&root.join("data/a"), b"shared inode", 0o644, SHIFT);
    own(&root.join("data"), SHIFT);
    fs::hard_link(root.join("data/a"), root.join("data/b")).unwrap();
    fs::hard_link(root.join("data/a"), root.join("home/user/also-a")).unwrap();
    dir(&root.join("run"), 0o755, SHIFT);
    nix::unistd::mkfifo(&root.join("run/fifo"), Mode::from_bits_truncate(0o620)).unwrap();
    own(&root.join("run/fifo"), USER);
    // Whiteouts: `gone` and `bin/old` were deleted in this layer.
    for whiteout in ["gone", "bin/old"] {
        mknod(
            &root.join(whiteout),
            SFlag::S_IFCHR,
            Mode::empty(),
            makedev(0, 0),
        )
        .unwrap();
        own(&root.join(whiteout), SHIFT);
    }
    // An opaque directory (recreated after `rm -rf`), with overlay bookkeeping to drop.
    dir(&root.join("opaque"), 0o700, USER);
    set_xattr(&root.join("opaque"), "trusted.overlay.opaque", b"y");
    set_xattr(
        &root.join("opaque"),
        "trusted.overlay.origin",
        b"\x00\xfb\x21",
    );
    file(&root.join("opaque/kept"), b"new", 0o600, USER);
    set_xattr(&root.join("bin"), "trusted.overlay.impure", b"y");
    // The runtime's own files, excluded.
    file(&root.join("etc/hostname"), b"sandbox-1\n", 0o644, SHIFT);
    file(
        &root.join("etc/resolv.conf"),
        b"nameserver 10.0.0.1\n",
        0o644,
        SHIFT,
    );
    file(
        &root.join("etc/passwd"),
        b"root:x:0:0::/root:/bin/sh\n",
        0o644,
        SHIFT,
    );
    own(&root.join("etc"), SHIFT);
    // No layer carries a block device: left out.
    mknod(
        &root.join("disk"),
        SFlag::S_IFBLK,
        Mode::from_bits_truncate(0o600),
        makedev(8, 0),
    )
    .unwrap();
    // Nor a device other than a whiteout, nor a socket.
    mknod(
        &root.join("null"),
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(1, 3),
    )
    .unwrap();
    drop(std::os::unix::net::UnixListener::bind(root.join("run/socket")).unwrap());
    // Long names: a PAX `path` for the member, a PAX `linkpath` for the symlink.
    file(
        &root.join(LONG_DIR).join("and-a-file-in-it"),
        b"long",
        0o644,
        SHIFT,
    );
    own(&root.join(LONG_DIR), SHIFT);
    let long_target = format!("/{LONG_DIR}/{LONG_DIR}/target");
    symlink(&long_target, root.join("long-link")).unwrap();
    own(&root.join("long-link"), SHIFT);
    touch_all(root);
}

/// Sets every entry's mtime (distinct, whole seconds) without following symlinks; directories
/// last, since writing into them changes theirs.
fn touch_all(root: &Path) {
    let mut paths = Vec::new();
    collect(root, &mut paths);
    paths.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for (i, path) in paths.iter().enumerate() {
        let time = TimeSpec::new(1_700_000_000 + i as i64, 0);
        utimensat(
            nix::fcntl::AT_FDCWD,
            path.as_path(),
            &time,
            &time,
            UtimensatFlags::NoFollowSymlink,
        )
        .unwrap();
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if fs::symlink_metadata(&path).unwrap().is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// What the comparison looks at, per entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    kind: &'static str,
    mode: u32,
    uid: u32,
    gid: u32,
    /// Whole seconds; not for whiteouts (the unpacker does not set theirs).
    mtime: Option<i64>,
    content: Option<Vec<u8>>,
    target: Option<PathBuf>,
    rdev: u64,
    /// The xattrs a layer keeps, and the opaque marker.
    xattrs: BTreeMap<String, Vec<u8>>,
    /// The first path (sorted) sharing this entry's inode, for hardlinked files and FIFOs.
    inode_group: Option<PathBuf>,
}

fn snapshot(root: &Path) -> BTreeMap<PathBuf, Seen> {
    let mut paths = Vec::new();
    collect(root, &mut paths);
    let mut groups: HashMap<(u64, u64), PathBuf> = HashMap::new();
    let mut out = BTreeMap::new();
    for path in paths {
        let meta = fs::symlink_metadata(&path).unwrap();
        let relative = path.strip_prefix(root).unwrap().to_path_buf();
        let ft = meta.file_type();
        use std::os::unix::fs::FileTypeExt;
        let kind = if ft.is_dir() {
            "dir"
        } else if ft.is_file() {
            "file"
        } else if ft.is_symlink() {
            "symlink"
        } else if ft.is_fifo() {
            "fifo"
        } else if ft.is_char_device() {
            "char"
        } else if ft.is_block_device() {
            "block"
        } else {
            "other"
        };
        let inode_group = (matches!(kind, "file" | "fifo") && meta.nlink() > 1).then(|| {
            groups
                .entry((meta.dev(), meta.ino()))
                .or_insert_with(|| relative.clone())
                .clone()
        });
        let xattrs = if kind == "symlink" {
            BTreeMap::new()
        } else {
            xattrs(&path)
                .into_iter()
                .filter(|(name, _)| {
                    name.starts_with("user.")
                        || name == "security.capability"
                        || name == "trusted.overlay.opaque"
                })
                .collect()
        };
        out.insert(
            relative,
            Seen {
                kind,
                mode: meta.mode() & 0o7777,
                uid: meta.uid(),
                gid: meta.gid(),
                mtime: (kind != "char").then(|| meta.mtime()),
                content: (kind == "file").then(|| fs::read(&path).unwrap()),
                target: (kind == "symlink").then(|| fs::read_link(&path).unwrap()),
                rdev: meta.rdev(),
                xattrs,
                inode_group,
            },
        );
    }
    out
}

fn options(gzip: bool) -> PackOptions {
    PackOptions {
        id_shift: SHIFT,
        exclude: vec![
            PathBuf::from("etc/hostname"),
            PathBuf::from("/etc/resolv.conf"),
            PathBuf::from("etc/hosts"),
        ],
        gzip,
    }
}

fn pack(root: &Path, opts: &PackOptions) -> (Packed, Vec<u8>) {
    let mut blob = Vec::new();
    let packed = pack_dir(root, opts, &mut blob).unwrap();
    (packed, blob)
}

/// The source as the layer should come back: without what is excluded or left out.
fn expected(source: &Path) -> BTreeMap<PathBuf, Seen> {
    let mut expected = snapshot(source);
    for gone in [
        "etc/hostname",
        "etc/resolv.conf",
        "disk",
        "null",
        "run/socket",
    ] {
        assert!(expected.remove(Path::new(gone)).is_some(), "{gone}");
    }
    expected
}

fn assert_same_tree(expected: &BTreeMap<PathBuf, Seen>, actual: &BTreeMap<PathBuf, Seen>) {
    let expected_paths: Vec<_> = expected.keys().collect();
    let actual_paths: Vec<_> = actual.keys().collect();
    assert_eq!(actual_paths, expected_paths);
    for (path, seen) in expected {
        assert_eq!(&actual[path], seen, "{}", path.display());
    }
}

#[test]
fn packed_tree_unpacks_to_the_same_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("upper");
    overlay_tree(&source);
    let expected = expected(&source);
    // What the test relies on is really in the source.
    assert_eq!(expected[Path::new("gone")].kind, "char");
    assert_eq!(
        expected[Path::new("data/b")].inode_group.as_deref(),
        Some(Path::new("data/a"))
    );
    assert_eq!(
        expected[Path::new("opaque")].xattrs["trusted.overlay.opaque"],
        b"y"
    );
    for gzip in [false, true] {
        let (packed, blob) = pack(&source, &options(gzip));
        assert_eq!(packed.size, blob.len() as u64);
        assert_eq!(packed.skipped, 3, "the block and char devices, the socket");
        assert_eq!(
            packed.digest,
            format!("sha256:{}", hex::encode(Sha256::digest(&blob)))
        );
        let (compression, media_type) = if gzip {
            (Compression::Gzip, MEDIA_TYPE_TAR_GZIP)
        } else {
            (Compression::None, MEDIA_TYPE_TAR)
        };
        assert_eq!(packed.media_type, media_type);
        assert_eq!(Compression::from_media_type(media_type), Some(compression));
        let dest = tmp.path().join(format!("unpacked-{gzip}"));
        fs::create_dir(&dest).unwrap();
        let stats = unpack_layer(
            &blob[..],
            compression,
            &dest,
            SHIFT,
            &UnpackLimits::default(),
        )
        .unwrap();
        assert_eq!(stats.entries, packed.entries);
        assert_eq!(stats.skipped_devices, 0);
        assert_same_tree(&expected, &snapshot(&dest));
        assert_eq!(
            xattrs(&dest.join("bin/ping"))["security.capability"],
            capability_v3(SHIFT)
        );
        assert!(!xattrs(&dest.join("opaque")).contains_key("trusted.overlay.origin"));
        assert!(!xattrs(&dest.join("bin")).contains_key("trusted.overlay.impure"));
    }
}

#[test]
fn diff_id_is_the_digest_of_the_uncompressed_tar() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("upper");
    overlay_tree(&source);
    let (plain, tar) = pack(&source, &options(false));
    let (gzipped, blob) = pack(&source, &options(true));
    assert_eq!(plain.digest, plain.diff_id);
    assert_eq!(gzipped.diff_id, plain.diff_id);
    assert_ne!(gzipped.digest, plain.digest);
    let mut unzipped = Vec::new();
    flate2::read::GzDecoder::new(&blob[..])
        .read_to_end(&mut unzipped)
        .unwrap();
    assert_eq!(unzipped, tar);
    // No file name, no timestamp in the gzip header.
    assert_eq!(blob[3] & 0x08, 0, "FNAME");
    assert_eq!(&blob[4..8], &[0, 0, 0, 0], "MTIME");
}

#[test]
fn packing_is_deterministic_and_follows_content() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("upper");
    overlay_tree(&source);
    for gzip in [false, true] {
        let (first, first_blob) = pack(&source, &options(gzip));
        let (second, second_blob) = pack(&source, &options(gzip));
        assert_eq!(first, second);
        assert_eq!(first_blob, second_blob);
    }
    let (before, _) = pack(&source, &options(true));
    // Same size, same mtime, other bytes.
    let notes = source.join("home/user/notes.txt");
    let mtime = fs::symlink_metadata(&notes).unwrap().mtime();
    fs::write(&notes, b"REMEMBER\n").unwrap();
    let time = TimeSpec::new(mtime, 0);
    utimensat(
        nix::fcntl::AT_FDCWD,
        &notes,
        &time,
        &time,
        UtimensatFlags::NoFollowSymlink,
    )
    .unwrap();
    let (after, _) = pack(&source, &options(true));
    assert_ne!(after.digest, before.digest);
    assert_ne!(after.diff_id, before.diff_id);
}

#[test]
fn tar_members_carry_whiteouts_opaque_markers_and_no_devices() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("upper");
    overlay_tree(&source);
    // A file owned by a host id outside the sandbox's range.
    file(&source.join("stranger"), b"?", 0o644, 5);
    let (_, tar) = pack(&source, &options(false));
    let mut archive = tar::Archive::new(&tar[..]);
    let mut members = BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = String::from_utf8(entry.path_bytes().into_owned()).unwrap();
        let header = entry.header().clone();
        let link = entry
            .link_name_bytes()
            .map(|l| String::from_utf8(l.into_owned()).unwrap());
        let mut pax = BTreeMap::new();
        if let Some(extensions) = entry.pax_extensions().unwrap() {
            for extension in extensions {
                let extension = extension.unwrap();
                pax.insert(
                    extension.key().unwrap().to_string(),
                    extension.value_bytes().to_vec(),
                );
            }
        }
        assert!(
            members.insert(name.clone(), (header, link, pax)).is_none(),
            "{name} twice"
        );
    }
    let names: Vec<&str> = members.keys().map(String::as_str).collect();
    for name in &names {
        assert!(
            *name == "./" || !name.starts_with("./") && !name.starts_with('/'),
            "{name}"
        );
    }
    for present in [
        "./",
        "bin/",
        "bin/.wh.old",
        ".wh.gone",
        "opaque/",
        "opaque/.wh..wh..opq",
        "opaque/kept",
        "etc/passwd",
        "home/user/passwd",
    ] {
        assert!(members.contains_key(present), "{present} in {names:?}");
    }
    for absent in [
        "gone",
        "bin/old",
        "etc/hostname",
        "etc/resolv.conf",
        "disk",
        "null",
        "run/socket",
        "home/user/etc/passwd",
    ] {
        assert!(!members.contains_key(absent), "{absent} in {names:?}");
    }
    for (name, (header, _, pax)) in &members {
        let kind = header.entry_type();
        assert!(
            matches!(
                kind,
                EntryType::Regular
                    | EntryType::Directory
                    | EntryType::Symlink
                    | EntryType::Link
                    | EntryType::Fifo
            ),
            "{name}: {kind:?}"
        );
        assert_eq!(kind == EntryType::Directory, name.ends_with('/'), "{name}");
        for key in pax.keys() {
            assert!(!key.contains("trusted."), "{name}: {key}");
            assert!(!key.contains("atime") && !key.contains("ctime"), "{name}");
        }
    }
    let (whiteout, _, _) = &members[".wh.gone"];
    assert_eq!(whiteout.size().unwrap(), 0);
    assert_eq!(whiteout.uid().unwrap(), 0);
    let (symlink, target, _) = &members["home/user/passwd"];
    assert_eq!(symlink.entry_type(), EntryType::Symlink);
    assert_eq!(symlink.uid().unwrap(), 1000);
    assert_eq!(target.as_deref(), Some("/etc/passwd"));
    assert_eq!(
        members["home/user/odd"].1.as_deref(),
        Some("../user/.//notes.txt")
    );
    let (su, _, _) = &members["bin/su"];
    assert_eq!(su.mode().unwrap(), 0o4755);
    assert!(su.mtime().unwrap() >= 1_700_000_000);
    // Hardlinks point at the first path in walk order.
    let (b, link, _) = &members["data/b"];
    assert_eq!(b.entry_type(), EntryType::Link);
    assert_eq!(link.as_deref(), Some("data/a"));
    assert_eq!(members["data/a"].0.entry_type(), EntryType::Regular);
    assert_eq!(members["home/user/also-a"].1.as_deref(), Some("data/a"));
    // Xattrs as PAX records, the capability rooted at the sandbox's root.
    assert_eq!(
        members["home/user/notes.txt"].2["SCHILY.xattr.user.note"],
        b"a note"
    );
    assert_eq!(
        members["bin/ping"].2["SCHILY.xattr.security.capability"],
        capability_v3(0)
    );
    // The unmapped owner is the overflow id.
    assert_eq!(members["stranger"].0.uid().unwrap(), 65534);
    assert_eq!(members["stranger"].0.gid().unwrap(), 65534);
    // Long names went through PAX and came back whole.
    assert!(members.contains_key(&format!("{LONG_DIR}/and-a-file-in-it")));
    assert_eq!(
        members["long-link"].1.as_deref(),
        Some(format!("/{LONG_DIR}/{LONG_DIR}/target").as_str())
    );
}

#[test]
fn redirect_or_metacopy_refuses_the_pack() {
    for (what, xattr) in [
        ("dir", "trusted.overlay.redirect"),
        ("file", "trusted.overlay.metacopy"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let source = tmp.path().join("upper");
        dir(&source, 0o755, SHIFT);
        let marked = source.join("moved");
        if what == "dir" {
            dir(&marked, 0o755, SHIFT);
        } else {
            file(&marked, b"", 0o644, SHIFT);
        }
        set_xattr(&marked, xattr, b"/elsewhere");
        let mut blob = Vec::new();
        match pack_dir(&source, &options(false), &mut blob) {
            Err(PackError::NotSelfContained { path, xattr: found }) => {
                assert_eq!(path, marked);
                assert_eq!(found, xattr);
            }
            other => panic!("{xattr}: expected a refusal, got {other:?}"),
        }
        let message = pack_dir(&source, &options(false), std::io::sink())
            .unwrap_err()
            .to_string();
        assert!(
            message.contains(xattr) && message.contains("self-contained"),
            "{message}"
        );
    }
}

#[test]
fn names_a_tar_reads_as_whiteouts_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("upper");
    file(&source.join("dir/.wh.file"), b"", 0o644, SHIFT);
    match pack_dir(&source, &options(false), std::io::sink()) {
        Err(PackError::ReservedName { path }) => assert_eq!(path, source.join("dir/.wh.file")),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_symlink_is_never_packed_through() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    file(&real.join("secret"), b"s", 0o600, 0);
    let link = tmp.path().join("link");
    symlink(&real, &link).unwrap();
    assert!(matches!(
        pack_dir(&link, &options(false), std::io::sink()),
        Err(PackError::NotADirectory { .. })
    ));
    assert!(matches!(
        pack_dir(&real.join("secret"), &options(false), std::io::sink()),
        Err(PackError::NotADirectory { .. })
    ));
}

#[test]
fn commit_dir_installs_a_layer_equal_to_the_source() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("upper");
    overlay_tree(&source);
    let layers = LayerStore::open(tmp.path().join("images"), SHIFT).unwrap();
    let scratch = tmp.path().join("tmp");
    fs::create_dir(&scratch).unwrap();
    let (descriptor, bytes) = commit_dir(&source, &options(true), &layers, &scratch).unwrap();
    assert_eq!(descriptor.media_type, MEDIA_TYPE_TAR_GZIP);
    assert!(layers.contains(&descriptor.digest));
    assert!(bytes > 0);
    let installed = layers.path(&descriptor.digest).unwrap();
    assert_same_tree(&expected(&source), &snapshot(&installed));
    assert_eq!(
        fs::read_dir(&scratch).unwrap().count(),
        0,
        "the blob is removed"
    );
    // Committing the same tree again is the same layer.
    let (again, _) = commit_dir(&source, &options(true), &layers, &scratch).unwrap();
    assert_eq!(again, descriptor);
}

#[test]
fn pax_records_count_their_own_length() {
    for value_len in 0..300 {
        let mut pax = Vec::new();
        pax_record(&mut pax, b"path", &vec![b'x'; value_len]);
        let (length, _) = pax.split_at(pax.iter().position(|b| *b == b' ').unwrap());
        let length: usize = std::str::from_utf8(length).unwrap().parse().unwrap();
        assert_eq!(length, pax.len(), "value of {value_len} bytes");
    }
}

#[test]
fn owners_outside_the_sandbox_range_are_the_overflow_id() {
    assert_eq!(unshift(SHIFT, SHIFT), 0);
    assert_eq!(unshift(SHIFT + 65535, SHIFT), 65535);
    assert_eq!(unshift(SHIFT + 65536, SHIFT), 65534);
    assert_eq!(unshift(SHIFT - 1, SHIFT), 65534);
    assert_eq!(unshift(0, SHIFT), 65534);
    assert_eq!(unshift(u32::MAX, u32::MAX - 10), 10);
}

#[test]
fn names_longer_than_path_max_are_refused() {
    use nix::fcntl::{open, openat, OFlag};
    use nix::sys::stat::mkdirat;
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("upper");
    dir(&source, 0o755, SHIFT);
    // Built fd by fd: the whole path is longer than a path syscall takes.
    let component = "d".repeat(250);
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
    let mut fd = open(&source, flags, Mode::empty()).unwrap();
    for _ in 0..17 {
        mkdirat(&fd, component.as_str(), Mode::from_bits_truncate(0o755)).unwrap();
        fd = openat(&fd, component.as_str(), flags, Mode::empty()).unwrap();
    }
    match pack_dir(&source, &options(false), std::io::sink()) {
        Err(PackError::NameTooLong { len, .. }) => assert!(len > 4096, "{len}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn an_xattr_name_pax_cannot_carry_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("upper");
    file(&source.join("f"), b"", 0o644, SHIFT);
    set_xattr(&source.join("f"), "user.a=b", b"c");
    assert!(matches!(
        pack_dir(&source, &options(false), std::io::sink()),
        Err(PackError::UnrepresentableXattr { name, .. }) if name == "user.a=b"
    ));
}
