//! Importing real image archives — made by umoci and skopeo from busybox-static, as `docker save`
//! and `oci-archive:` write them — into a real layer store. Skips when the tools are missing.

use sandboxd_images::archive::{import, ArchiveError};
use sandboxd_images::{ImageError, LayerStore};
use sandboxd_test_support::registry::{require_tools, ImageBuilder, TestImage, REGISTRY_TOOLS};
use std::io::Read;
use std::path::Path;

const HELLO: &[u8] = b"written by the archive test\n";

fn image() -> TestImage {
    ImageBuilder::busybox()
        .layer(|root| std::fs::write(root.join("hello.txt"), HELLO).unwrap())
        .env("GREETING=hi")
        .workdir("/srv")
        .tag("v1")
        .build()
}

fn store() -> (tempfile::TempDir, LayerStore) {
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let store = LayerStore::open(dir.path().join("images"), uid).unwrap();
    (dir, store)
}

/// Copies the tar `from` into `to`, letting `edit` change each member's data or drop it (`false`).
fn rewrite(from: &Path, to: &Path, mut edit: impl FnMut(&str, &mut Vec<u8>) -> bool) {
    let mut archive = tar::Archive::new(std::fs::File::open(from).unwrap());
    let mut out = tar::Builder::new(std::fs::File::create(to).unwrap());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().into_owned();
        let mut header = entry.header().clone();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        if !edit(&path.to_string_lossy(), &mut data) {
            continue;
        }
        header.set_size(data.len() as u64);
        match header.entry_type() {
            tar::EntryType::Symlink | tar::EntryType::Link => {
                let target = entry.link_name().unwrap().unwrap().into_owned();
                out.append_link(&mut header, &path, &target).unwrap();
            }
            _ => out.append_data(&mut header, &path, &data[..]).unwrap(),
        }
    }
    out.finish().unwrap();
}

/// A tar of `files` (name, bytes), all regular members.
fn tar_of(path: &Path, files: &[(String, Vec<u8>)]) {
    let mut out = tar::Builder::new(std::fs::File::create(path).unwrap());
    for (name, data) in files {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        out.append_data(&mut header, name, &data[..]).unwrap();
    }
    out.finish().unwrap();
}

/// Every regular member of an OCI layout directory, by its name in the layout.
fn layout_files(layout: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = vec![
        (
            "oci-layout".to_string(),
            std::fs::read(layout.join("oci-layout")).unwrap(),
        ),
        (
            "index.json".to_string(),
            std::fs::read(layout.join("index.json")).unwrap(),
        ),
    ];
    for blob in std::fs::read_dir(layout.join("blobs/sha256")).unwrap() {
        let blob = blob.unwrap();
        files.push((
            format!("blobs/sha256/{}", blob.file_name().to_string_lossy()),
            std::fs::read(blob.path()).unwrap(),
        ));
    }
    files
}

fn assert_nothing_installed(store: &LayerStore) {
    assert!(store.installed().unwrap().is_empty());
    let staging = std::fs::read_dir(store.root().join("staging")).unwrap();
    assert_eq!(staging.count(), 0, "a staging dir was left");
}

/// Checks what every import of `image()` must give, whatever the archive kind.
fn assert_the_image(store: &LayerStore, imported: &sandboxd_images::archive::Imported) {
    assert_eq!(imported.layers.len(), 2);
    let base = store.path(&imported.layers[0].0.digest).unwrap();
    assert!(
        base.join("bin/busybox").is_file(),
        "no bin/busybox in {base:?}"
    );
    let top = store.path(&imported.layers[1].0.digest).unwrap();
    assert_eq!(std::fs::read(top.join("hello.txt")).unwrap(), HELLO);
    assert!(!top.join("bin/busybox").exists());
    let env = imported.config.env_pairs();
    assert_eq!(env["GREETING"], "hi");
    assert!(env["PATH"].contains("/bin"));
    assert_eq!(imported.config.working_dir.as_deref(), Some("/srv"));
    assert_eq!(imported.config.cmd, vec!["sh"]);
    let mut installed: Vec<String> = imported
        .layers
        .iter()
        .map(|(l, _)| l.digest.clone())
        .collect();
    installed.sort();
    assert_eq!(store.installed().unwrap(), installed);
}

#[test]
fn an_oci_archive_imports_with_the_images_own_digest_and_again_installs_nothing() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    let image = image();
    let (_dir, store) = store();
    let archive = image.oci_archive();
    let imported = import(&archive, None, &store).unwrap();
    assert_eq!(imported.digest, image.manifest_digest());
    assert_eq!(
        imported
            .layers
            .iter()
            .map(|(l, _)| l.digest.clone())
            .collect::<Vec<_>>(),
        image.layer_digests()
    );
    assert!(imported.layers.iter().all(|(_, bytes)| *bytes > 0));
    assert!(imported.layers[0].0.media_type.ends_with("tar+gzip"));
    assert_eq!(imported.names, vec!["v1"]);
    assert_the_image(&store, &imported);

    let again = import(&archive, Some("v1"), &store).unwrap();
    assert_eq!(again.digest, imported.digest);
    assert!(again.layers.iter().all(|(_, bytes)| *bytes == 0));
    assert_the_image(&store, &again);
}

/// A docker archive's digest is its synthesized manifest's: the same for every archive of one image.
#[test]
fn a_docker_archive_imports_under_its_synthesized_manifest_digest_stably() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    let image = image();
    let (_dir, store) = store();
    let archive = image.docker_archive("example/app:1");
    let imported = import(&archive, None, &store).unwrap();
    assert_eq!(imported.names, vec!["docker.io/example/app:1"]);
    assert_the_image(&store, &imported);
    for (layer, bytes) in &imported.layers {
        assert_eq!(
            layer.media_type,
            "application/vnd.docker.image.rootfs.diff.tar"
        );
        assert!(*bytes > 0);
    }
    let manifest: serde_json::Value = serde_json::from_slice(&imported.manifest).unwrap();
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.docker.distribution.manifest.v2+json"
    );
    assert_eq!(
        manifest["layers"][1]["digest"],
        imported.layers[1].0.digest.as_str()
    );

    let again = import(&archive, Some("example/app:1"), &store).unwrap();
    assert_eq!(again.digest, imported.digest);
    assert_eq!(again.manifest, imported.manifest);
    assert!(again.layers.iter().all(|(_, bytes)| *bytes == 0));
    // A fresh archive of the same image, named differently: the same image.
    let other = import(&image.docker_archive("other:2"), None, &store).unwrap();
    assert_eq!(other.digest, imported.digest);
    assert_eq!(other.names, vec!["docker.io/library/other:2"]);
}

#[test]
fn a_tampered_layer_is_refused_and_nothing_is_installed() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    let image = image();
    let top_layer = image.layer_digests()[1].clone();
    let top_member = format!("blobs/sha256/{}", top_layer.trim_start_matches("sha256:"));
    for (kind, archive) in [
        ("oci", image.oci_archive()),
        ("docker", image.docker_archive("example/app:1")),
    ] {
        let tampered = archive.with_extension("tampered.tar");
        let mut flipped = false;
        rewrite(&archive, &tampered, |name, data| {
            // OCI: the test's own layer blob; docker: the uncompressed busybox layer, inside
            // busybox's bytes (so the tar still parses).
            let hit = match kind {
                "oci" => name == top_member,
                _ => name.ends_with(".tar") && data.len() > 1 << 20,
            };
            if hit {
                let at = data.len() / 2;
                data[at] ^= 0x01;
                flipped = true;
            }
            true
        });
        assert!(flipped, "{kind}: no layer member found to tamper with");
        let (_dir, store) = store();
        let err = import(&tampered, None, &store).unwrap_err();
        assert!(
            matches!(
                err,
                ImageError::Archive(ArchiveError::DigestMismatch { .. })
            ),
            "{kind}: {err}"
        );
        assert!(err.to_string().contains("does not match"), "{kind}: {err}");
        assert_nothing_installed(&store);
    }
}

#[test]
fn a_manifest_naming_a_missing_member_is_a_clear_error() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    let image = image();
    let archive = image.docker_archive("example/app:1");
    let cut = archive.with_extension("cut.tar");
    // skopeo stores each layer once as `<hex>.tar` (and links `<id>/layer.tar` to it).
    rewrite(&archive, &cut, |name, _| {
        // Keep everything but the layers themselves.
        name.contains('/') || !name.ends_with(".tar")
    });
    let (_dir, store) = store();
    let err = import(&cut, None, &store).unwrap_err();
    let ImageError::Archive(ArchiveError::Missing { member }) = &err else {
        panic!("not a missing member: {err}");
    };
    assert!(member.ends_with(".tar"), "{member}");
    assert_eq!(
        err.to_string(),
        format!("archive member {member:?} is missing")
    );
    assert_nothing_installed(&store);

    // OCI: the config blob gone.
    let oci = image.oci_archive();
    let manifest = image.manifest_digest();
    let mut config_member = None;
    rewrite(&oci, &oci.with_extension("copy.tar"), |name, data| {
        if name == format!("blobs/sha256/{}", manifest.trim_start_matches("sha256:")) {
            let m: serde_json::Value = serde_json::from_slice(data).unwrap();
            config_member = m["config"]["digest"]
                .as_str()
                .map(|d| format!("blobs/sha256/{}", d.trim_start_matches("sha256:")));
        }
        true
    });
    let config_member = config_member.unwrap();
    let cut = oci.with_extension("cut.tar");
    rewrite(&oci, &cut, |name, _| name != config_member);
    let err = import(&cut, None, &store).unwrap_err();
    assert!(
        matches!(&err, ImageError::Archive(ArchiveError::Missing { member }) if *member == config_member),
        "{err}"
    );
}

#[test]
fn an_archive_of_neither_kind_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-an-image.tar");
    tar_of(&path, &[("hello.txt".into(), b"hi".to_vec())]);
    let (_store_dir, store) = store();
    let err = import(&path, None, &store).unwrap_err();
    assert!(
        matches!(err, ImageError::Archive(ArchiveError::Unrecognized)),
        "{err}"
    );
    assert!(err.to_string().contains("not an image archive"), "{err}");
    // An OCI layout without its layout file is not one either.
    tar_of(&path, &[("index.json".into(), b"{}".to_vec())]);
    assert!(matches!(
        import(&path, None, &store),
        Err(ImageError::Archive(ArchiveError::Unrecognized))
    ));
    // A file that is not a tar at all.
    std::fs::write(&path, vec![0x5a; 4096]).unwrap();
    assert!(matches!(
        import(&path, None, &store),
        Err(ImageError::Archive(ArchiveError::Tar(_)))
    ));
    // A file that is not there is our side's I/O error, not the archive's.
    assert!(matches!(
        import(&dir.path().join("absent.tar"), None, &store),
        Err(ImageError::Io { .. })
    ));
}

/// Two OCI layouts merged into one archive: without a name the error lists both; a name picks one.
#[test]
fn a_multi_image_oci_archive_needs_a_name_and_lists_them() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    let one = ImageBuilder::new().layers(1).tag("one").build();
    let two = ImageBuilder::new().layers(2).tag("two").build();
    let mut files = layout_files(&one.layout());
    let mut index: serde_json::Value = serde_json::from_slice(&files[1].1).unwrap();
    for (name, data) in layout_files(&two.layout()) {
        if name == "index.json" {
            let other: serde_json::Value = serde_json::from_slice(&data).unwrap();
            let entries = other["manifests"].as_array().unwrap().clone();
            index["manifests"].as_array_mut().unwrap().extend(entries);
        } else if !files.iter().any(|(n, _)| *n == name) {
            files.push((name, data));
        }
    }
    files[1].1 = serde_json::to_vec(&index).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two-images.tar");
    tar_of(&path, &files);

    let (_store_dir, store) = store();
    let err = import(&path, None, &store).unwrap_err();
    assert!(
        matches!(&err, ImageError::Archive(ArchiveError::Ambiguous { names }) if names == &["one", "two"]),
        "{err}"
    );
    assert!(err.to_string().contains("(one, two)"), "{err}");
    assert_nothing_installed(&store);
    let err = import(&path, Some("three"), &store).unwrap_err();
    assert!(
        matches!(err, ImageError::Archive(ArchiveError::NoSuchImage { .. })),
        "{err}"
    );

    let imported = import(&path, Some("two"), &store).unwrap();
    assert_eq!(imported.digest, two.manifest_digest());
    assert_eq!(imported.names, vec!["two"]);
    assert_eq!(imported.layers.len(), 2);
    let top = store.path(&imported.layers[1].0.digest).unwrap();
    assert_eq!(std::fs::read(top.join("layers/1")).unwrap(), b"layer 1\n");
}

/// A multi-platform image: the index resolves to this host's manifest.
#[cfg(target_arch = "x86_64")]
#[test]
fn a_multi_platform_oci_archive_imports_this_hosts_manifest() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    let image = ImageBuilder::new()
        .layers(1)
        .build_index(&["linux/arm64/v8", "linux/amd64"]);
    let (_dir, store) = store();
    let imported = import(&image.oci_archive(), None, &store).unwrap();
    let amd64 = &image.platform_manifests()[1];
    assert_eq!(amd64.0, "linux/amd64");
    assert_eq!(imported.digest, amd64.1);
    assert_eq!(imported.config.platform, "linux/amd64");
}
