//! Tests of [`super`].
use super::*;
use std::io::Write;

enum M<'a> {
    File(&'a str, Vec<u8>),
    Symlink(&'a str, &'a str),
    Hardlink(&'a str, &'a str),
    Dir(&'a str),
}

fn write_tar(path: &Path, members: &[M<'_>]) {
    let mut b = tar::Builder::new(File::create(path).unwrap());
    for m in members {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(0);
        match m {
            M::File(name, data) => {
                h.set_size(data.len() as u64);
                b.append_data(&mut h, name, &data[..]).unwrap();
            }
            M::Symlink(name, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                b.append_link(&mut h, name, target).unwrap();
            }
            M::Hardlink(name, target) => {
                h.set_entry_type(tar::EntryType::Link);
                b.append_link(&mut h, name, target).unwrap();
            }
            M::Dir(name) => {
                h.set_entry_type(tar::EntryType::Directory);
                b.append_data(&mut h, name, &[][..]).unwrap();
            }
        }
    }
    b.finish().unwrap();
}

fn layer_tar(file: &str, data: &[u8]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_cksum();
    b.append_data(&mut h, file, data).unwrap();
    b.into_inner().unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn config(diff_ids: &[String]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["A=1"], "WorkingDir": "/w"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap()
}

fn manifest(config: &str, tags: &[&str], layers: &[&str]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!([
        {"Config": config, "RepoTags": tags, "Layers": layers}
    ]))
    .unwrap()
}

fn store() -> (tempfile::TempDir, LayerStore) {
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let store = LayerStore::open(dir.path().join("images"), uid).unwrap();
    (dir, store)
}

/// A plain layer and a gzip one, with their config (named by its digest).
struct Docker {
    plain: Vec<u8>,
    gzipped: Vec<u8>,
    config: Vec<u8>,
    config_name: String,
}

fn docker_parts() -> Docker {
    let plain = layer_tar("one.txt", b"one\n");
    let inner = layer_tar("two.txt", b"two\n");
    let gzipped = gzip(&inner);
    let config = config(&[sha256(&plain), sha256(&inner)]);
    let config_name = format!("{}.json", sha256(&config).trim_start_matches("sha256:"));
    Docker {
        plain,
        gzipped,
        config,
        config_name,
    }
}

fn err_of(r: Result<Imported, ImageError>) -> ArchiveError {
    match r {
        Err(ImageError::Archive(e)) => e,
        Err(other) => panic!("not an archive error: {other}"),
        Ok(_) => panic!("imported"),
    }
}

#[test]
fn member_names_are_normalised_for_lookup() {
    for (name, normal) in [
        ("./blobs//sha256/x", "blobs/sha256/x"),
        ("/abs/x", "abs/x"),
        ("../../x", "x"),
        ("a/./b/../c/", "a/c"),
        ("manifest.json", "manifest.json"),
    ] {
        assert_eq!(normalise(name), normal, "{name}");
    }
}

/// Names are normalised, links resolve inside the archive, gzip is known by its magic bytes, and
/// the layers are checked against the config's diff ids.
#[test]
fn a_docker_archive_is_read_through_normalised_names_and_links() {
    let d = docker_parts();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tar");
    write_tar(
        &path,
        &[
            M::File(
                "./manifest.json",
                manifest(
                    &format!("./{}", d.config_name),
                    &["example/x:1"],
                    &["id1/layer.tar", "./id2//layer.tar"],
                ),
            ),
            M::File(&d.config_name, d.config.clone()),
            M::File("store/plain.tar", d.plain.clone()),
            M::File("store/gz.tar", d.gzipped.clone()),
            M::Dir("id1"),
            M::Symlink("id1/layer.tar", "../store/plain.tar"),
            M::Hardlink("id2/layer.tar", "store/gz.tar"),
        ],
    );
    let (_s, store) = store();
    let imported = import(&path, None, &store).unwrap();
    assert_eq!(imported.names, vec!["example/x:1"]);
    assert_eq!(imported.config.working_dir.as_deref(), Some("/w"));
    let (plain, gz) = (&imported.layers[0].0, &imported.layers[1].0);
    assert_eq!(plain.digest, sha256(&d.plain));
    assert_eq!(plain.media_type, DOCKER_LAYER);
    assert_eq!(gz.digest, sha256(&d.gzipped));
    assert_eq!(gz.media_type, DOCKER_LAYER_GZIP);
    assert_eq!(gz.size, d.gzipped.len() as u64);
    let two = store.path(&gz.digest).unwrap().join("two.txt");
    assert_eq!(std::fs::read(two).unwrap(), b"two\n");
    assert_eq!(imported.digest, sha256(&imported.manifest));
}

/// A zstd layer is known by its magic bytes (under OCI's zstd type, Docker having none), and
/// compressed bytes that do not decompress are refused naming the member.
#[test]
fn compressed_docker_layers_are_known_by_their_magic_bytes() {
    let inner = layer_tar("z.txt", b"zstd\n");
    let zstd = zstd::encode_all(inner.as_slice(), 3).unwrap();
    let config = config(&[sha256(&inner)]);
    let config_name = format!("{}.json", sha256(&config).trim_start_matches("sha256:"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tar");
    let blob = format!(
        "blobs/sha256/{}",
        sha256(&zstd).trim_start_matches("sha256:")
    );
    write_tar(
        &path,
        &[
            M::File("manifest.json", manifest(&config_name, &[], &[&blob])),
            M::File(&config_name, config.clone()),
            M::File(&blob, zstd.clone()),
        ],
    );
    let (_s, zstd_store) = store();
    let imported = import(&path, None, &zstd_store).unwrap();
    assert_eq!(imported.layers[0].0.media_type, OCI_LAYER_ZSTD);
    let z = zstd_store.path(&imported.layers[0].0.digest).unwrap();
    assert_eq!(std::fs::read(z.join("z.txt")).unwrap(), b"zstd\n");

    let mut broken = gzip(&inner);
    let at = broken.len() / 2;
    broken[at] ^= 0xff;
    write_tar(
        &path,
        &[
            M::File("manifest.json", manifest(&config_name, &[], &["g"])),
            M::File(&config_name, config),
            M::File("g", broken),
        ],
    );
    let (_t, empty) = store();
    let e = err_of(import(&path, None, &empty));
    assert!(
        matches!(&e, ArchiveError::Invalid { member, .. } | ArchiveError::DigestMismatch { member, .. } if member == "g"),
        "{e}"
    );
    assert!(empty.installed().unwrap().is_empty());
}

/// The synthesized manifest's bytes are the digest's definition: pinned here.
#[test]
fn the_synthesized_manifest_is_pinned() {
    let d = docker_parts();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tar");
    write_tar(
        &path,
        &[
            M::File(
                "manifest.json",
                manifest(&d.config_name, &[], &["p.tar", "g.tar"]),
            ),
            M::File(&d.config_name, d.config.clone()),
            M::File("p.tar", d.plain.clone()),
            M::File("g.tar", d.gzipped.clone()),
        ],
    );
    let (_s, store) = store();
    let imported = import(&path, None, &store).unwrap();
    let expected = format!(
        concat!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","#,
            r#""config":{{"mediaType":"application/vnd.docker.container.image.v1+json","size":{},"digest":"{}"}},"#,
            r#""layers":[{{"mediaType":"application/vnd.docker.image.rootfs.diff.tar","size":{},"digest":"{}"}},"#,
            r#"{{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","size":{},"digest":"{}"}}]}}"#
        ),
        d.config.len(),
        sha256(&d.config),
        d.plain.len(),
        sha256(&d.plain),
        d.gzipped.len(),
        sha256(&d.gzipped),
    );
    assert_eq!(String::from_utf8(imported.manifest).unwrap(), expected);
    assert_eq!(imported.digest, sha256(expected.as_bytes()));
    assert!(imported.names.is_empty());
}

/// Of two members with one name the last is the one read, as `tar -x` would leave it.
#[test]
fn of_duplicate_members_the_last_one_wins() {
    let plain = layer_tar("one.txt", b"one\n");
    let config = config(&[sha256(&plain)]);
    let config_name = format!("{}.json", sha256(&config).trim_start_matches("sha256:"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tar");
    let write = |first: Vec<u8>, last: Vec<u8>| {
        write_tar(
            &path,
            &[
                M::File("manifest.json", manifest(&config_name, &[], &["p.tar"])),
                M::File(&config_name, config.clone()),
                M::File("p.tar", first),
                M::File("p.tar", last),
            ],
        )
    };
    write(b"junk".to_vec(), plain.clone());
    let (_s, first_store) = store();
    import(&path, None, &first_store).unwrap();
    write(plain.clone(), layer_tar("one.txt", b"evil"));
    let (_t, second_store) = store();
    assert!(matches!(
        err_of(import(&path, None, &second_store)),
        ArchiveError::DigestMismatch { .. }
    ));
    assert!(second_store.installed().unwrap().is_empty());
}

/// Links are looked up in the archive only: one pointing out of it finds nothing, a loop ends.
#[test]
fn links_never_leave_the_archive_and_loops_end() {
    let d = docker_parts();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tar");
    let (_s, store) = store();
    for (link, target) in [
        ("l/layer.tar", "/etc/passwd"),
        ("l/layer.tar", "../../../etc/passwd"),
    ] {
        write_tar(
            &path,
            &[
                M::File(
                    "manifest.json",
                    manifest(&d.config_name, &[], &[link, link]),
                ),
                M::File(&d.config_name, d.config.clone()),
                M::Symlink(link, target),
            ],
        );
        assert!(matches!(
            err_of(import(&path, None, &store)),
            ArchiveError::Missing { member } if member == link
        ));
    }
    write_tar(
        &path,
        &[
            M::File("manifest.json", manifest(&d.config_name, &[], &["a", "a"])),
            M::File(&d.config_name, d.config.clone()),
            M::Symlink("a", "b"),
            M::Symlink("b", "./a"),
        ],
    );
    let e = err_of(import(&path, None, &store));
    assert!(
        matches!(&e, ArchiveError::Invalid { member, .. } if member == "a"),
        "{e}"
    );
    assert!(store.installed().unwrap().is_empty());
}

#[test]
fn oversized_json_and_members_the_archive_ends_inside_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tar");
    let (_s, store) = store();
    let mut huge = b"[".to_vec();
    huge.resize(JSON_LIMIT as usize + 1, b' ');
    write_tar(&path, &[M::File("manifest.json", huge)]);
    let e = err_of(import(&path, None, &store));
    assert!(e.to_string().contains("larger than"), "{e}");

    let d = docker_parts();
    write_tar(
        &path,
        &[
            M::File(
                "manifest.json",
                manifest(&d.config_name, &[], &["p.tar", "g.tar"]),
            ),
            M::File(&d.config_name, d.config.clone()),
            M::File("p.tar", vec![7; 64 * 1024]),
        ],
    );
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 40 * 1024).unwrap();
    let e = err_of(import(&path, None, &store));
    assert!(
        matches!(&e, ArchiveError::Invalid { member, reason } if member == "p.tar" && reason.contains("ends inside")),
        "{e}"
    );
}

#[test]
fn a_docker_config_must_match_its_name_and_cover_every_layer() {
    let d = docker_parts();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tar");
    let (_s, store) = store();
    // One layer more than the config's diff ids.
    write_tar(
        &path,
        &[
            M::File(
                "manifest.json",
                manifest(&d.config_name, &[], &["p", "g", "p"]),
            ),
            M::File(&d.config_name, d.config.clone()),
            M::File("p", d.plain.clone()),
            M::File("g", d.gzipped.clone()),
        ],
    );
    let e = err_of(import(&path, None, &store));
    assert!(
        e.to_string().contains("2 rootfs.diff_ids for the 3 layers"),
        "{e}"
    );
    // A config whose bytes are not the digest its name says.
    let wrong = format!("{}.json", "0".repeat(64));
    write_tar(
        &path,
        &[
            M::File("manifest.json", manifest(&wrong, &[], &["p", "g"])),
            M::File(&wrong, d.config.clone()),
        ],
    );
    assert!(matches!(
        err_of(import(&path, None, &store)),
        ArchiveError::DigestMismatch { member, .. } if member == wrong
    ));
}

#[test]
fn several_docker_images_need_a_name_and_docker_io_is_implied() {
    let d = docker_parts();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tar");
    let entry = |tag: &str| serde_json::json!({"Config": d.config_name, "RepoTags": [tag], "Layers": ["p", "g"]});
    let list = serde_json::json!([entry("docker.io/library/busybox:latest"), entry("other:1")]);
    write_tar(
        &path,
        &[
            M::File("manifest.json", serde_json::to_vec(&list).unwrap()),
            M::File(&d.config_name, d.config.clone()),
            M::File("p", d.plain.clone()),
            M::File("g", d.gzipped.clone()),
        ],
    );
    let (_s, store) = store();
    let e = err_of(import(&path, None, &store));
    assert_eq!(
        e.to_string(),
        "the archive holds several images (docker.io/library/busybox:latest, other:1); name the one to import"
    );
    assert!(store.installed().unwrap().is_empty());
    let imported = import(&path, Some("busybox:latest"), &store).unwrap();
    assert_eq!(imported.names, vec!["docker.io/library/busybox:latest"]);
    assert!(matches!(
        err_of(import(&path, Some("busybox:1"), &store)),
        ArchiveError::NoSuchImage { .. }
    ));
}

#[test]
fn oci_descriptors_must_name_sha256_blobs_of_their_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tar");
    let (_s, store) = store();
    let layout = M::File("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec());
    let index = |digest: &str, size: usize| {
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": size}
        ]}))
        .unwrap()
    };
    write_tar(
        &path,
        &[
            M::File("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
            M::File("index.json", index("sha512:00", 2)),
        ],
    );
    let e = err_of(import(&path, None, &store));
    assert!(
        matches!(&e, ArchiveError::Invalid { member, reason } if member == "index.json" && reason.contains("sha512")),
        "{e}"
    );
    let blob = br#"{"schemaVersion":2,"config":{"digest":"sha256:00","size":1},"layers":[]}"#;
    let member = format!(
        "blobs/sha256/{}",
        sha256(blob).trim_start_matches("sha256:")
    );
    write_tar(
        &path,
        &[
            layout,
            M::File("index.json", index(&sha256(blob), blob.len() + 1)),
            M::File(&member, blob.to_vec()),
        ],
    );
    let e = err_of(import(&path, None, &store));
    assert!(
        matches!(&e, ArchiveError::Invalid { member: m, reason } if *m == member && reason.contains("descriptor says")),
        "{e}"
    );
}
