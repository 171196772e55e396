//! `sandboxd backup` and `sandboxd restore` against a serving daemon's data dir: what a backup
//! carries (or names), what a restore puts back, and what it refuses.

mod common;

use common::{
    assert_success, built, create_volume, e2e, id_of, put_volume_file, sh, volume_file, Daemon,
};
use serde_json::{json, Value};
use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;

/// Runs the `sandboxd` binary with `args` (no config file).
fn sandboxd<S: AsRef<OsStr>>(args: &[S]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args(args)
        .env_remove("SB_CONFIG")
        .output()
        .unwrap()
}

/// A backup taken while the daemon serves (20 creates running beside it) restores into an empty
/// data dir; the daemon started there has the same identity, admin token, API keys, webhooks and
/// templates (a create from one finds what it was built of), each volume in a quota'd directory of
/// its own again with its files; every sandbox made before the backup is there, not running, and
/// each made beside it is there whole or not at all; it makes sandboxes that mount the restored
/// volume.
#[test]
fn a_backup_taken_while_serving_restores_identity_keys_and_volumes() {
    e2e(|| async {
        let a = Daemon::start().await;
        let key = a
            .post_json("/v1/api-keys", &json!({"name": "kept", "scope": "user"}))
            .await;
        assert_eq!(key.status(), 201);
        let key: Value = key.json().await.unwrap();
        let key = key["key"].as_str().unwrap().to_string();
        let volume = create_volume(&a, json!({"name": "keep"})).await;
        assert_eq!(
            put_volume_file(&a, "keep", "/notes.txt", b"kept")
                .await
                .status(),
            201
        );
        let ran = id_of(
            &a.create(json!({"volumes": [{"name": "keep", "path": "/data"}]}))
                .await,
        );
        let hook = a
            .post_json(
                "/v1/webhooks",
                &json!({"url": "http://127.0.0.1:9/kept", "events": ["sandbox.created"],
                        "secret": "whsec_a2VwdC1ob29rLXNlY3JldC0wMTIzNDU2Nzg5"}),
            )
            .await;
        assert_eq!(hook.status(), 201);
        let build = a
            .post_json(
                "/v1/templates",
                &json!({"name": "kept-tpl",
                        "dockerfile": "FROM base\nRUN echo built > /etc/kept-marker\n"}),
            )
            .await;
        assert_eq!(build.status(), 202);
        assert_eq!(built(&a, "kept-tpl").await["state"], "ready");
        assert_eq!(
            sh(&a, &ran, "echo from-sandbox > /data/more.txt")
                .await
                .exit_code,
            0
        );

        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("backup.tar.zst");
        let backup = {
            let (data, archive) = (a.data_dir(), archive.clone());
            tokio::task::spawn_blocking(move || {
                sandboxd(&[
                    "backup".as_ref(),
                    "--with-layers".as_ref(),
                    "--to".as_ref(),
                    archive.as_os_str(),
                    "--data-dir".as_ref(),
                    data.as_os_str(),
                ])
            })
        };
        // The daemon keeps serving writes while the copy is taken.
        let beside: Vec<String> = futures::future::join_all((0..20).map(|_| a.create_id())).await;
        assert_success("backup --with-layers", &backup.await.unwrap());
        let again = sandboxd(&[
            "backup".as_ref(),
            "--to".as_ref(),
            archive.as_os_str(),
            "--data-dir".as_ref(),
            a.data_dir().as_os_str(),
        ]);
        assert!(!again.status.success(), "a backup overwrote a file");
        layers_by_reference(&a.data_dir(), dir.path());
        let identity = std::fs::read_to_string(a.data_dir().join("daemon-id")).unwrap();
        // The first daemon and its sandboxes go (the restored one takes its identity and names).
        for id in beside.iter().chain([&ran]) {
            assert_eq!(a.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);
        }
        drop(a);

        let restored = std::sync::Mutex::new(None);
        let b = Daemon::start_prepared(Default::default(), |data_dir, _| {
            let out = sandboxd(&[
                "restore".as_ref(),
                "--from".as_ref(),
                archive.as_os_str(),
                "--data-dir".as_ref(),
                data_dir.as_os_str(),
            ]);
            *restored.lock().unwrap() = Some(out);
        })
        .await;
        let out = restored.lock().unwrap().take().unwrap();
        assert_success("restore", &out);
        assert!(String::from_utf8_lossy(&out.stdout).contains("1 volume(s)"));
        assert_eq!(
            std::fs::read_to_string(b.data_dir().join("daemon-id")).unwrap(),
            identity
        );
        let listed = b
            .http_plain()
            .get(b.endpoint("/v1/sandboxes"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(listed.status(), 200, "the API key came back");
        let got = b.get_json("/v1/volumes/keep").await;
        assert_eq!(got["id"], volume["id"], "{got}");
        let text = volume_file(&b, "keep", "/notes.txt").await;
        assert_eq!(text.text().await.unwrap(), "kept");
        let text = volume_file(&b, "keep", "/more.txt").await;
        assert_eq!(text.text().await.unwrap(), "from-sandbox\n");
        assert!(
            !b.data_dir()
                .join("runtime")
                .join(sandboxd_runtime::volumes::RESTORED_DIR)
                .join(volume["id"].as_str().unwrap())
                .exists(),
            "the staged files were moved into the volume"
        );
        let gone = b.get_json(&format!("/v1/sandboxes/{ran}")).await;
        assert_ne!(gone["state"], "running", "{gone}");
        for id in &beside {
            let (status, got) = common::get(&b, id).await;
            if status != 404 {
                assert_eq!(got["id"], id.as_str(), "{got}");
                assert_ne!(got["state"], "running", "{got}");
            }
        }
        let hooks = common::webhook_urls(&b).await;
        assert!(
            hooks.iter().any(|u| u == "http://127.0.0.1:9/kept"),
            "{hooks:?}"
        );
        assert_eq!(built(&b, "kept-tpl").await["state"], "ready");
        let built = id_of(&b.create(json!({"template": "kept-tpl"})).await);
        let out = sh(&b, &built, "cat /etc/kept-marker").await;
        assert_eq!(out.stdout, "built\n", "{out:?}");
        let fresh = id_of(
            &b.create(json!({"volumes": [{"name": "keep", "path": "/data"}]}))
                .await,
        );
        let out = sh(&b, &fresh, "cat /data/notes.txt /data/more.txt").await;
        assert_eq!(out.stdout, "keptfrom-sandbox\n", "{out:?}");
    });
}

/// A backup made without `--with-layers` of `data` (which holds the `base` template's tree and
/// the layer a Dockerfile template's `RUN` made) names its layers instead of carrying them; its restore is refused, leaving
/// nothing, without a data dir that holds them, or with one that lacks them; with `data` as
/// `--layers-from` it puts back every image layer and template tree `data` has.
fn layers_by_reference(data: &Path, scratch: &Path) {
    let archive = scratch.join("by-reference.tar");
    let out = sandboxd(&[
        "backup".as_ref(),
        "--to".as_ref(),
        archive.as_os_str(),
        "--data-dir".as_ref(),
        data.as_os_str(),
    ]);
    assert_success("backup", &out);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("named, not carried"), "{said}");
    let listing = std::process::Command::new("tar")
        .arg("-tf")
        .arg(&archive)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("sandboxd.db"), "{listing}");
    assert!(
        !listing
            .lines()
            .any(|l| l.starts_with("images/") || l.starts_with("runtime/templates")),
        "layers carried: {listing}"
    );

    let target = scratch.join("restored-by-reference");
    let restore = |extra: &[&OsStr]| {
        let mut args: Vec<&OsStr> = vec![
            "restore".as_ref(),
            "--from".as_ref(),
            archive.as_os_str(),
            "--data-dir".as_ref(),
            target.as_os_str(),
        ];
        args.extend(extra);
        sandboxd(&args)
    };
    let refused = restore(&[]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("--layers-from"), "{why}");
    assert!(!target.exists(), "a refused restore left {target:?}");
    let empty = tempfile::tempdir().unwrap();
    let refused = restore(&["--layers-from".as_ref(), empty.path().as_os_str()]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("lacks"), "{why}");
    assert!(!target.exists(), "a refused restore left {target:?}");

    assert_success(
        "restore --layers-from",
        &restore(&["--layers-from".as_ref(), data.as_os_str()]),
    );
    let names = |root: &Path, dir: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(root.join(dir))
            .map(|entries| {
                entries
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };
    let (templates, layers) = (
        names(data, "runtime/templates"),
        names(data, "images/layers"),
    );
    assert!(
        !templates.is_empty() && !layers.is_empty(),
        "{templates:?} {layers:?}"
    );
    assert_eq!(names(&target, "runtime/templates"), templates);
    assert_eq!(names(&target, "images/layers"), layers);
    // kept-tpl's RUN made a layer of its own.
    let marker = std::process::Command::new("grep")
        .args(["-rlx", "built"])
        .arg(target.join("images/layers"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&marker.stdout).contains("kept-marker"),
        "the template's RUN wrote a file its copied tree lacks"
    );
    std::fs::remove_dir_all(&target).unwrap();
}
