//! An OCI image as a sandbox's root: the top layer the runtime adds over the image's own.
//!
//! A sandbox of an image mounts `lowerdir=<top>:<layer n>:…:<layer 1>`. The image's layers are the
//! image's alone (unpacked by `sandboxd-images`); `<top>` is built here once per image and id base and
//! holds what every sandbox needs whatever the image says:
//! - real directories for every mount point the agent makes before it pivots (`/proc`, `/sys`,
//!   `/dev`, `/run`, `/.sandboxd` and the agent's file in it, the call-home directory), so that no
//!   image can turn one into a symbolic link and have a mount land on the host (the agent also refuses
//!   links on the way, see `sandboxd_agent::boot`);
//! - the default user: the image's `/etc/passwd` and `/etc/group` with `user` (uid and gid 1000)
//!   added when the image lacks it, and `/home/user` owned by it; `root` is added too if missing;
//! - a world-writable `/tmp`;
//! - the image's `WorkingDir` when the image lacks it (images made with `umoci`/`buildah config
//!   --workingdir` often do): made as Docker and runc make it at start, owned by root, mode 0755 —
//!   only its missing part, and only where every part the image has is a real directory (a working
//!   directory under a link or a file is left as the image has it: nothing is made through a link).
//!
//! The image's files are read, never followed out of their layer: only regular files at paths whose
//! every component is a real directory count.

use super::rootfs::USER_ID;
use crate::{ImageRoot, RuntimeError};
use sandboxd_envd::callback;
use std::os::unix::fs::{lchown, PermissionsExt};
use std::path::{Path, PathBuf};

/// Bumped whenever the top layer's layout changes, so old ones are rebuilt.
const LAYOUT_VERSION: u32 = 2;

/// Builds (once) and returns the top layer for `image` under `dir`, owned as the sandbox's ids
/// starting at `id_base` say.
pub fn ensure_top(dir: &Path, image: &ImageRoot, id_base: u32) -> Result<PathBuf, RuntimeError> {
    let hex = image
        .digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| RuntimeError::Unsupported(format!("image digest {:?}", image.digest)))?;
    for layer in &image.layers {
        if !layer.is_dir() {
            return Err(RuntimeError::Host(format!(
                "layer {} of image {} is missing",
                layer.display(),
                image.digest
            )));
        }
    }
    let top = dir.join(format!("{hex}-v{LAYOUT_VERSION}-{id_base}"));
    super::rootfs::build_once(&top, |staging| {
        build(staging, &image.layers, id_base)?;
        match image.workdir.as_deref() {
            Some(workdir) => make_workdir(staging, &image.layers, workdir, id_base),
            None => Ok(()),
        }
    })?;
    Ok(top)
}

/// Makes in the top layer `root` the part of `workdir` the merged `layers` lack (see the module doc).
/// The image's directories on the way are carried up into the top layer with their own mode and
/// owner (the top layer's copy is what the sandbox sees of them), so only the missing part is new.
fn make_workdir(
    root: &Path,
    layers: &[PathBuf],
    workdir: &str,
    id_base: u32,
) -> Result<(), RuntimeError> {
    use std::os::unix::fs::MetadataExt;
    let parts: Vec<&str> = workdir
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if !workdir.starts_with('/') || parts.contains(&"..") {
        return Ok(());
    }
    let mut rel = PathBuf::new();
    let mut plan = Vec::new();
    for part in parts {
        rel.push(part);
        let kind = match plan.last() {
            Some((_, Merged::Absent)) => Merged::Absent,
            _ => merged_kind(layers, &rel),
        };
        if kind == Merged::Other {
            return Ok(());
        }
        plan.push((rel.clone(), kind));
    }
    if !plan.iter().any(|(_, k)| *k == Merged::Absent) {
        return Ok(());
    }
    for (rel, kind) in plan {
        let path = root.join(&rel);
        match std::fs::symlink_metadata(&path) {
            // One of the top layer's own directories (`/home`, `/tmp`, …): kept as it is.
            Ok(meta) if meta.is_dir() => continue,
            Ok(_) => return Ok(()),
            Err(_) => {}
        }
        let (mode, uid, gid) = match &kind {
            Merged::Dir(image) => {
                let meta =
                    std::fs::symlink_metadata(image).map_err(RuntimeError::io("stat", image))?;
                (meta.mode() & 0o7777, meta.uid(), meta.gid())
            }
            _ => (0o755, id_base, id_base),
        };
        std::fs::create_dir(&path).map_err(RuntimeError::io("create", &path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(RuntimeError::io("chmod", &path))?;
        lchown(&path, Some(uid), Some(gid)).map_err(RuntimeError::io("chown", &path))?;
    }
    Ok(())
}

/// What the merged image has at a path.
#[derive(Debug, PartialEq, Eq)]
enum Merged {
    /// A directory: the highest layer's.
    Dir(PathBuf),
    Absent,
    /// A file, a link, a device: nothing is made at or under it.
    Other,
}

/// What the merged `layers` show at `rel` (whose parents the caller found to be directories): the
/// highest layer that has an entry there decides; a whiteout hides what is below.
fn merged_kind(layers: &[PathBuf], rel: &Path) -> Merged {
    use std::os::unix::fs::FileTypeExt;
    let depth = rel.iter().count();
    for layer in layers.iter().rev() {
        // Walk one component at a time: a layer's link is never followed.
        let mut at = layer.clone();
        let mut kind = None;
        for (i, part) in rel.iter().enumerate() {
            at.push(part);
            let Ok(meta) = std::fs::symlink_metadata(&at) else {
                break;
            };
            let t = meta.file_type();
            if t.is_char_device() {
                kind = Some(Merged::Absent);
                break;
            }
            if i + 1 == depth {
                kind = Some(if t.is_dir() {
                    Merged::Dir(at.clone())
                } else {
                    Merged::Other
                });
            } else if !t.is_dir() {
                break;
            }
        }
        if let Some(kind) = kind {
            return kind;
        }
    }
    Merged::Absent
}

fn build(root: &Path, layers: &[PathBuf], id_base: u32) -> Result<(), RuntimeError> {
    let user_id = id_base + USER_ID;
    let mk = |rel: &str, mode: u32, owner: u32| -> Result<(), RuntimeError> {
        let path = root.join(rel);
        std::fs::create_dir_all(&path).map_err(RuntimeError::io("create", &path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(RuntimeError::io("chmod", &path))?;
        lchown(&path, Some(owner), Some(owner)).map_err(RuntimeError::io("chown", &path))
    };
    mk("", 0o755, id_base)?;
    let callback_dir = callback::SANDBOX_DIR.trim_start_matches('/');
    for (dir, mode) in [
        ("proc", 0o555),
        ("sys", 0o555),
        ("dev", 0o755),
        ("run", 0o755),
        ("tmp", 0o1777),
        ("etc", 0o755),
        ("home", 0o755),
        (".sandboxd", 0o755),
        (callback_dir, 0o755),
    ] {
        mk(dir, mode, id_base)?;
    }
    mk("home/user", 0o750, user_id)?;
    super::rootfs::write_agent_mount_point(root, id_base)?;
    let passwd = read_from_layers(layers, "etc/passwd").unwrap_or_default();
    let group = read_from_layers(layers, "etc/group").unwrap_or_default();
    let shell = if ["bin/bash", "usr/bin/bash"]
        .iter()
        .any(|p| file_in_layers(layers, p))
    {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    write_file(
        &root.join("etc/passwd"),
        with_accounts(&passwd, shell).as_bytes(),
        0o644,
        id_base,
    )?;
    write_file(
        &root.join("etc/group"),
        with_groups(&group).as_bytes(),
        0o644,
        id_base,
    )
}

/// `passwd` with `root` and `user` added when missing.
fn with_accounts(passwd: &str, shell: &str) -> String {
    let has = |name: &str| passwd.lines().any(|l| l.split(':').next() == Some(name));
    let mut out = passwd.to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    if !has("root") {
        out.insert_str(0, &format!("root:x:0:0:root:/root:{shell}\n"));
    }
    if !has("user") {
        out.push_str(&format!(
            "user:x:{USER_ID}:{USER_ID}:user:/home/user:{shell}\n"
        ));
    }
    out
}

/// `group` with `root` and `user` added when missing.
fn with_groups(group: &str) -> String {
    let has = |name: &str| group.lines().any(|l| l.split(':').next() == Some(name));
    let mut out = group.to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    if !has("root") {
        out.insert_str(0, "root:x:0:\n");
    }
    if !has("user") {
        out.push_str(&format!("user:x:{USER_ID}:\n"));
    }
    out
}

/// The file at `rel` as the merged image shows it: from the highest layer that has it. A whiteout
/// (a character device) hides it; a path that passes through a link is ignored.
fn read_from_layers(layers: &[PathBuf], rel: &str) -> Option<String> {
    for layer in layers.iter().rev() {
        match entry_kind(layer, rel) {
            Entry::File(path) => return std::fs::read_to_string(path).ok(),
            Entry::Hidden => return None,
            Entry::Absent => {}
        }
    }
    None
}

fn file_in_layers(layers: &[PathBuf], rel: &str) -> bool {
    layers
        .iter()
        .any(|l| matches!(entry_kind(l, rel), Entry::File(_)))
}

enum Entry {
    File(PathBuf),
    Hidden,
    Absent,
}

fn entry_kind(layer: &Path, rel: &str) -> Entry {
    use std::os::unix::fs::FileTypeExt;
    let mut at = layer.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let Ok(meta) = std::fs::symlink_metadata(&at) else {
            return Entry::Absent;
        };
        let last = i + 1 == parts.len();
        let t = meta.file_type();
        if t.is_char_device() {
            return Entry::Hidden;
        }
        if last && t.is_file() {
            return Entry::File(at);
        }
        if !t.is_dir() {
            return Entry::Absent;
        }
    }
    Entry::Absent
}

fn write_file(path: &Path, data: &[u8], mode: u32, owner: u32) -> Result<(), RuntimeError> {
    std::fs::write(path, data).map_err(RuntimeError::io("write", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(RuntimeError::io("chmod", path))?;
    lchown(path, Some(owner), Some(owner)).map_err(RuntimeError::io("chown", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_user_is_added_and_the_images_accounts_kept() {
        let image = "root:x:0:0:root:/root:/bin/ash\nnode:x:1000:1000::/home/node:/bin/sh";
        let merged = with_accounts(image, "/bin/sh");
        assert!(merged.starts_with("root:x:0:0:root:/root:/bin/ash\n"));
        assert!(merged.contains("node:x:1000:1000"));
        assert!(merged.ends_with("user:x:1000:1000:user:/home/user:/bin/sh\n"));
        assert_eq!(with_accounts(&merged, "/bin/sh"), merged, "added once");
        let empty = with_accounts("", "/bin/bash");
        assert_eq!(
            empty,
            "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:user:/home/user:/bin/bash\n"
        );
        assert_eq!(with_groups(""), "root:x:0:\nuser:x:1000:\n");
    }

    /// The top layer reads the image's files from the highest layer that has them, never through a
    /// link and never past a whiteout, and makes every mount point a real directory.
    #[test]
    fn the_top_layer_reads_the_merged_image_and_never_follows_its_links() {
        let dir = tempfile::tempdir().unwrap();
        let low = dir.path().join("l1");
        let high = dir.path().join("l2");
        std::fs::create_dir_all(low.join("etc")).unwrap();
        std::fs::write(
            low.join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\nold:x:5:5::/:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(low.join("etc/group"), "root:x:0:\n").unwrap();
        // The higher layer links /proc to the host's root and /etc/group to a host file.
        std::fs::create_dir_all(high.join("etc")).unwrap();
        std::os::unix::fs::symlink("/", high.join("proc")).unwrap();
        std::fs::write(
            high.join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\nnew:x:6:6::/:/bin/sh\n",
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/shadow", high.join("etc/group")).unwrap();
        let uid = nix::unistd::getuid().as_raw();
        let image = ImageRoot {
            digest: format!("sha256:{}", "c".repeat(64)),
            layers: vec![low.clone(), high.clone()],
            workdir: None,
            on_base: false,
        };
        let top = ensure_top(&dir.path().join("tops"), &image, uid).unwrap();
        let passwd = std::fs::read_to_string(top.join("etc/passwd")).unwrap();
        assert!(
            passwd.contains("new:x:6") && !passwd.contains("old:x:5"),
            "{passwd}"
        );
        assert!(passwd.contains("user:x:1000:1000"));
        // The link is no file: the group file falls back to the lower layer's.
        let group = std::fs::read_to_string(top.join("etc/group")).unwrap();
        assert_eq!(group, "root:x:0:\nuser:x:1000:\n");
        for mount_point in [
            "proc",
            "sys",
            "dev",
            "run",
            ".sandboxd",
            ".sandboxd/callback",
            "tmp",
        ] {
            let m = std::fs::symlink_metadata(top.join(mount_point)).unwrap();
            assert!(m.is_dir(), "{mount_point}");
        }
        assert!(top.join(".sandboxd/agent").is_file());
        let link = std::fs::read_link(top.join(".sandboxd/sandboxd-agent")).unwrap();
        assert_eq!(link, Path::new("agent"));
        // Built once.
        assert_eq!(
            ensure_top(&dir.path().join("tops"), &image, uid).unwrap(),
            top
        );
    }

    /// An image's `WorkingDir` that the image lacks is made (its missing part only, root's, 0755);
    /// one under a link or a file is left alone, and so is one the image has.
    #[test]
    fn a_missing_working_directory_is_made_and_never_through_a_link() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let layer = dir.path().join("l1");
        std::fs::create_dir_all(layer.join("opt/app")).unwrap();
        std::os::unix::fs::symlink("/etc", layer.join("srvlink")).unwrap();
        std::fs::write(layer.join("afile"), "x").unwrap();
        let uid = nix::unistd::getuid().as_raw();
        let top_for = |digit: char, workdir: &str| {
            let image = ImageRoot {
                digest: format!("sha256:{}", digit.to_string().repeat(64)),
                layers: vec![layer.clone()],
                workdir: Some(workdir.into()),
                on_base: false,
            };
            ensure_top(&dir.path().join("tops"), &image, uid).unwrap()
        };
        let top = top_for('1', "/srv/www/");
        let made = std::fs::symlink_metadata(top.join("srv/www")).unwrap();
        assert!(made.is_dir());
        assert_eq!((made.mode() & 0o7777, made.uid()), (0o755, uid));
        std::fs::set_permissions(
            layer.join("opt/app"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        let top = top_for('2', "/opt/app/data");
        assert!(top.join("opt/app/data").is_dir());
        let carried = std::fs::symlink_metadata(top.join("opt/app")).unwrap();
        assert_eq!(
            carried.mode() & 0o7777,
            0o700,
            "the image's directory as the image has it"
        );
        let top = top_for('7', "/opt/app");
        assert!(
            !top.join("opt").exists(),
            "nothing made for a directory the image has"
        );
        let top = top_for('3', "/srvlink/x");
        assert!(
            std::fs::symlink_metadata(top.join("srvlink")).is_err(),
            "nothing under a link"
        );
        let top = top_for('4', "/afile/x");
        assert!(
            std::fs::symlink_metadata(top.join("afile")).is_err(),
            "nothing under a file"
        );
        let top = top_for('5', "/tmp/work");
        let tmp = std::fs::symlink_metadata(top.join("tmp")).unwrap();
        assert_eq!(tmp.mode() & 0o7777, 0o1777, "the top layer's /tmp is kept");
        assert!(top.join("tmp/work").is_dir());
        let top = top_for('6', "/../escape");
        assert!(!top.join("escape").exists());
    }

    /// Many creates of one image at once (one per thread) all get the same complete top layer.
    #[test]
    fn concurrent_builds_of_one_top_layer_all_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let layer = dir.path().join("l1");
        std::fs::create_dir_all(layer.join("etc")).unwrap();
        let image = ImageRoot {
            digest: format!("sha256:{}", "d".repeat(64)),
            layers: vec![layer],
            workdir: None,
            on_base: false,
        };
        let uid = nix::unistd::getuid().as_raw();
        let tops = dir.path().join("tops");
        let built: Vec<PathBuf> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| s.spawn(|| ensure_top(&tops, &image, uid).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(built.iter().all(|t| t == &built[0]));
        assert!(built[0].join(".complete").exists());
        assert_eq!(
            std::fs::read_dir(&tops).unwrap().count(),
            1,
            "staging dirs were left"
        );
    }

    #[test]
    fn a_whiteout_hides_a_lower_layers_file() {
        let dir = tempfile::tempdir().unwrap();
        let low = dir.path().join("l1");
        let high = dir.path().join("l2");
        std::fs::create_dir_all(low.join("etc")).unwrap();
        std::fs::write(low.join("etc/passwd"), "gone:x:7:7::/:/bin/sh\n").unwrap();
        std::fs::create_dir_all(high.join("etc")).unwrap();
        nix::sys::stat::mknod(
            &high.join("etc/passwd"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
            0,
        )
        .unwrap();
        assert_eq!(read_from_layers(&[low.clone(), high], "etc/passwd"), None);
        assert!(read_from_layers(&[low], "etc/passwd").is_some());
    }

    #[test]
    fn a_digest_that_is_not_sha256_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let image = ImageRoot {
            digest: "sha256:../../x".into(),
            layers: vec![],
            workdir: None,
            on_base: false,
        };
        assert!(ensure_top(dir.path(), &image, 0).is_err());
    }
}
