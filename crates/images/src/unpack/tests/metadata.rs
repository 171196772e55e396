//! What a member carries besides its bytes: file capabilities (their root id shifted), sparse
//! files, unknown member types, PAX headers and times.

use super::*;

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
