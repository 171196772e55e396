//! Upgrades, against a data dir an older build wrote (the fixture `scripts/make-upgrade-fixture`
//! made with that build: see `tests/fixtures/README.md`):
//! - today's daemon opens it: the schema migrations the older build lacked apply at start, and
//!   everything it held is there and usable — templates and snapshots (a create from each finds the
//!   files they were made of), a stopped sandbox (it starts again on the files it had), API keys
//!   (an older key still authenticates), webhooks; the sandbox that ran when the host went down is
//!   `lost` with the reason, its name free, as after any reboot;
//! - a data dir whose schema is newer than this build knows (a downgrade) is refused at start with
//!   a message that says so, and nothing in it is changed.

mod common;

use common::{e2e, id_of, query, tamper, Daemon, Setup};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The fixture: `fixture.json` (the secrets and ids the test needs) and `data/`.
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/data-dir-schema-15.tar.zst"
);

/// Unpacks the fixture's data dir to `data_dir` (owners, modes and extended attributes as the older
/// build left them) and returns its `fixture.json`.
fn unpack(data_dir: &Path) -> Value {
    let parent = data_dir.parent().expect("the data dir has a parent");
    let status = Command::new("tar")
        .args([
            "--extract",
            "--numeric-owner",
            "--xattrs",
            "--xattrs-include=*",
        ])
        .args(["--zstd", "-f", FIXTURE, "-C"])
        .arg(parent)
        .status()
        .expect("run tar");
    assert!(status.success(), "unpacking {FIXTURE}: {status}");
    let meta = std::fs::read(parent.join("fixture.json")).expect("fixture.json");
    serde_json::from_slice(&meta).expect("fixture.json is JSON")
}

fn meta() -> Value {
    let out = Command::new("tar")
        .args([
            "--extract",
            "--to-stdout",
            "--zstd",
            "-f",
            FIXTURE,
            "fixture.json",
        ])
        .output()
        .expect("run tar");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("fixture.json is JSON")
}

async fn stdout_of(daemon: &Daemon, id: &str, cmd: &[&str]) -> String {
    let done = daemon.exec(id, cmd).await;
    assert_eq!(done.exit_code, 0, "{cmd:?} in {id}: {}", done.stderr);
    done.stdout
}

#[test]
fn a_data_dir_an_older_build_wrote_opens_with_everything_it_held() {
    e2e(|| async {
        let meta = meta();
        let older = meta["schema"].as_u64().expect("the fixture's schema");
        let latest = u64::from(sandboxd_store::migrations::latest_version());
        assert!(older < latest, "the fixture is not older than this build");
        let setup = Setup {
            token: Some(meta["admin_token"].as_str().unwrap().to_string()),
            args: vec!["--disk-backend".into(), "off".into()],
            ..Setup::default()
        };
        let mut daemon = Daemon::start_prepared(setup, |data_dir, _| {
            unpack(data_dir);
        })
        .await;

        // The migrations the older build lacked applied, each recorded.
        let versions = query(
            &daemon,
            "SELECT version FROM schema_version ORDER BY version",
        );
        let expected: Vec<String> = (1..=latest).map(|v| v.to_string()).collect();
        assert_eq!(versions, expected);

        // Its templates: ready, and a create from each finds what it was made of.
        for name in ["fixture-tpl", "fixture-snap"] {
            let t = daemon.get_json(&format!("/v1/templates/{name}")).await;
            assert_eq!(t["state"], "ready", "{t}");
        }
        let from_template = id_of(&daemon.create(json!({"template": "fixture-tpl"})).await);
        assert_eq!(
            stdout_of(&daemon, &from_template, &["cat", "/etc/fixture-marker"]).await,
            "made-by-the-old-build\n"
        );
        let from_snapshot = id_of(&daemon.create(json!({"template": "fixture-snap"})).await);
        assert_eq!(
            stdout_of(&daemon, &from_snapshot, &["cat", "/home/user/kept.txt"]).await,
            "written-before-the-upgrade\n"
        );

        // The stopped sandbox starts again on its files, under its name.
        let kept = meta["was_stopped"].as_str().unwrap();
        let before = daemon.get_json(&format!("/v1/sandboxes/{kept}")).await;
        assert_eq!(before["state"], "stopped", "{before}");
        assert_eq!(before["name"], "was-stopped", "{before}");
        let started = daemon
            .post_json(&format!("/v1/sandboxes/{kept}/start"), &json!({}))
            .await;
        assert!(started.status().is_success(), "{:?}", started.text().await);
        assert_eq!(
            stdout_of(&daemon, kept, &["cat", "/home/user/kept.txt"]).await,
            "written-before-the-upgrade\n"
        );

        // The sandbox that ran when the host went down is lost (its processes ended with the host),
        // and its name free again.
        let ran = meta["was_running"].as_str().unwrap();
        let lost = daemon.get_json(&format!("/v1/sandboxes/{ran}")).await;
        assert_eq!(lost["state"], "lost", "{lost}");
        assert_eq!(lost["failureReason"], "its processes stopped", "{lost}");
        assert_eq!(lost["metadata"]["fixture"], "yes", "{lost}");
        let again = daemon.create(json!({"name": "was-running"})).await;
        assert_eq!(again["name"], "was-running", "{again}");

        // Its keys and webhooks.
        let user = daemon.client_as(Some(meta["user_key"].as_str().unwrap()));
        let listed = user
            .get(daemon.endpoint("/v1/sandboxes"))
            .send()
            .await
            .unwrap();
        assert_eq!(listed.status(), 200, "the older build's user key");
        let keys = daemon.get_json("/v1/api-keys").await;
        assert!(
            keys["apiKeys"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["name"] == "fixture-user" && k["scope"] == "user"),
            "{keys}"
        );
        let hooks = common::webhook_urls(&daemon).await;
        assert!(
            hooks.iter().any(|u| u == "http://127.0.0.1:9/hook"),
            "{hooks:?}"
        );

        // A downgrade: a schema newer than this build knows is refused, and nothing is changed.
        daemon.terminate();
        tamper(
            &daemon,
            &format!(
                "INSERT INTO schema_version (version, name, applied_at) VALUES ({}, 'from a newer build', 0)",
                latest + 1
            ),
        );
        let db = daemon.data_dir().join("sandboxd.db");
        let before = std::fs::read(&db).unwrap();
        let refused = refused_start(&daemon.data_dir());
        assert!(
            refused.contains(&format!(
                "database schema version {} is newer than the newest this build knows ({latest})",
                latest + 1
            )),
            "{refused}"
        );
        assert_eq!(
            std::fs::read(&db).unwrap(),
            before,
            "the refused start wrote the store"
        );
    });
}

/// Runs `sandboxd serve` on `data_dir`, which must exit unsuccessfully within 30 s; returns its
/// stderr.
fn refused_start(data_dir: &Path) -> String {
    let err = data_dir.with_extension("refused.err");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args(["serve", "--listen", "127.0.0.1:0", "--disk-backend", "off"])
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--agent-bin")
        .arg(sandboxd_test_support::agent_binary())
        .env_remove("SB_CONFIG")
        .env("SB_PAT_TOKEN", "refused-start")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("spawn sandboxd");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sandboxd served a data dir of a newer schema");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "{status}");
    std::fs::read_to_string(err).unwrap()
}
