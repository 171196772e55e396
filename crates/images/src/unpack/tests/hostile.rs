//! Hostile layers: members that climb out (`..`, absolute names), links that would carry a write or
//! a whiteout out of the destination, bombs and oversized headers, and garbage — each refused or
//! contained, and none touching the marker outside.

use super::*;

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
