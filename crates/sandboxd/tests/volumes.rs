//! Volumes through the real daemon (`/v1/volumes`, `volumes` on create, `sbx volumes`, `sbx create
//! -v`): named storage that several sandboxes mount at once, that outlives them and the daemon, with
//! a quota, and whose file API never leaves the volume whatever a sandbox planted in it.

mod common;

use common::{built, e2e, expect_error, id_of, stdout, Daemon};
use serde_json::{json, Value};

async fn create_volume(d: &Daemon, body: Value) -> Value {
    let resp = d.post_json("/v1/volumes", &body).await;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    assert_eq!(status, 201, "create volume {body}: {text}");
    serde_json::from_str(&text).expect("a Volume")
}

async fn volume_file(d: &Daemon, volume: &str, path: &str) -> reqwest::Response {
    d.http()
        .get(d.endpoint(&format!("/v1/volumes/{volume}/files/content")))
        .query(&[("path", path)])
        .send()
        .await
        .expect("GET volume file")
}

async fn put_volume_file(
    d: &Daemon,
    volume: &str,
    path: &str,
    body: &'static [u8],
) -> reqwest::Response {
    d.http()
        .put(d.endpoint(&format!("/v1/volumes/{volume}/files/content")))
        .query(&[("path", path), ("parents", "true")])
        .body(body)
        .send()
        .await
        .expect("PUT volume file")
}

async fn sh(d: &Daemon, id: &str, script: &str) -> common::ExecResult {
    d.exec(id, &["sh", "-c", script]).await
}

/// Invariant: a volume is one tree for every sandbox that mounts it — a write in one is visible in
/// the other at once, owned by `user` in both — it outlives them, and it cannot be deleted while any
/// sandbox mounts it (409, nothing lost).
#[test]
fn sandboxes_share_a_volume_that_outlives_them() {
    e2e(|| async {
        let d = Daemon::start().await;
        let v = create_volume(&d, json!({"name": "shared", "labels": {"team": "a"}})).await;
        assert_eq!(v["name"], "shared");
        let put = put_volume_file(&d, "shared", "/seed/hello.txt", b"from the api").await;
        assert_eq!(put.status(), 201);
        let writer = id_of(
            &d.create(json!({"volumes": [{"name": "shared", "path": "/data"}]}))
                .await,
        );
        let reader = d
            .create(json!({"volumes": [{"name": v["id"], "path": "/mnt/ro", "readOnly": true}]}))
            .await;
        assert_eq!(reader["volumes"][0]["name"], "shared", "{reader}");
        let reader = id_of(&reader);
        let seeded = sh(
            &d,
            &writer,
            "cat /data/seed/hello.txt; echo; stat -c %U /data/seed/hello.txt",
        )
        .await;
        assert_eq!(seeded.stdout, "from the api\nuser\n", "{seeded:?}");
        let wrote = sh(
            &d,
            &writer,
            "echo hi > /data/note && stat -c %U:%G /data/note",
        )
        .await;
        assert_eq!(wrote.stdout.trim(), "user:user", "{wrote:?}");
        let read = sh(&d, &reader, "cat /mnt/ro/note; stat -c %U /mnt/ro/note").await;
        assert_eq!(read.stdout, "hi\nuser\n", "{read:?}");
        let refused = sh(&d, &reader, "echo x > /mnt/ro/other").await;
        assert_ne!(refused.exit_code, 0, "a read-only mount took a write");
        let mut body = String::new();
        let got = volume_file(&d, "shared", "/note").await;
        assert_eq!(got.status(), 200);
        body.push_str(&got.text().await.unwrap());
        assert_eq!(body, "hi\n");
        // Who uses it is a query; while anyone does, it cannot go.
        let detail = d.get_json("/v1/volumes/shared").await;
        assert_eq!(
            detail["mounts"].as_array().map(Vec::len),
            Some(2),
            "{detail}"
        );
        let busy = d.delete("/v1/volumes/shared").await;
        expect_error("delete a mounted volume", busy, 409, Some("conflict")).await;
        for id in [&writer, &reader] {
            assert_eq!(d.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);
        }
        let third = id_of(
            &d.create(json!({"volumes": [{"name": "shared", "path": "/home/user/work"}]}))
                .await,
        );
        assert_eq!(
            sh(&d, &third, "cat /home/user/work/note").await.stdout,
            "hi\n"
        );
        // A stopped sandbox still mounts it, and gets it back on start.
        assert_eq!(
            d.post_json(&format!("/v1/sandboxes/{third}/stop"), &json!({}))
                .await
                .status(),
            200
        );
        expect_error(
            "delete a volume a stopped sandbox mounts",
            d.delete("/v1/volumes/shared").await,
            409,
            None,
        )
        .await;
        assert_eq!(
            d.post_json(&format!("/v1/sandboxes/{third}/start"), &json!({}))
                .await
                .status(),
            200
        );
        assert_eq!(
            sh(&d, &third, "cat /home/user/work/note").await.stdout,
            "hi\n"
        );
        assert_eq!(
            d.delete(&format!("/v1/sandboxes/{third}")).await.status(),
            204
        );
        assert_eq!(d.delete("/v1/volumes/shared").await.status(), 204);
        let gone = d
            .http()
            .get(d.endpoint("/v1/volumes/shared"))
            .send()
            .await
            .unwrap();
        expect_error("a deleted volume", gone, 404, Some("not_found")).await;
        let names: Vec<String> = std::fs::read_dir(d.data_dir().join("runtime/layers"))
            .map(|dir| {
                dir.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            !names.iter().any(|n| n.starts_with("vol.")),
            "files left: {names:?}"
        );
    });
}

/// Bad mounts and unknown volumes are the caller's 400 and 404 with nothing made; a name is one
/// volume's.
#[test]
fn bad_mounts_and_unknown_volumes_make_nothing() {
    e2e(|| async {
        let d = Daemon::start().await;
        create_volume(&d, json!({"name": "v"})).await;
        let again = d.post_json("/v1/volumes", &json!({"name": "v"})).await;
        expect_error("a taken name", again, 409, Some("conflict")).await;
        for bad in [
            json!({"name": "bad/name"}),
            json!({"name": "x", "sizeMB": 0}),
            json!({"nme": "x"}),
        ] {
            expect_error(
                &format!("create {bad}"),
                d.post_json("/v1/volumes", &bad).await,
                400,
                None,
            )
            .await;
        }
        for (mounts, status) in [
            (json!([{"name": "v", "path": "/"}]), 400),
            (json!([{"name": "v", "path": "/etc"}]), 400),
            (json!([{"name": "v", "path": "/proc/x"}]), 400),
            (json!([{"name": "v", "path": "/.sandboxd/x"}]), 400),
            (json!([{"name": "v", "path": "data"}]), 400),
            (
                json!([{"name": "v", "path": "/data"}, {"name": "v", "path": "/data/x"}]),
                400,
            ),
            (
                json!([{"name": "v", "path": "/data", "subpath": "../x"}]),
                400,
            ),
            (json!([{"name": "nope", "path": "/data"}]), 404),
        ] {
            let resp = d
                .post_json("/v1/sandboxes", &json!({"volumes": mounts}))
                .await;
            expect_error(&format!("mounts {mounts}"), resp, status, None).await;
        }
        let listed = d.get_json("/v1/sandboxes").await;
        assert_eq!(
            listed["sandboxes"].as_array().map(Vec::len),
            Some(0),
            "{listed}"
        );
        let detail = d.get_json("/v1/volumes/v").await;
        assert_eq!(detail["mounts"], json!([]), "{detail}");
    });
}

/// Links a sandbox plants in a volume (`ln -s / escape`) never let the volume file API, a subpath
/// mount or the daemon read or write outside the volume.
#[test]
fn links_planted_by_a_sandbox_never_lead_out_of_the_volume() {
    e2e(|| async {
        let d = Daemon::start().await;
        create_volume(&d, json!({"name": "trap"})).await;
        let id = id_of(
            &d.create(json!({"volumes": [{"name": "trap", "path": "/data"}]}))
                .await,
        );
        let planted = sh(
            &d,
            &id,
            "ln -s / /data/escape && ln -s /etc/passwd /data/pw && mkdir /data/real && echo ok",
        )
        .await;
        assert_eq!(planted.stdout.trim(), "ok", "{planted:?}");
        let marker = d.data_dir().join("host-marker");
        std::fs::write(&marker, "host").unwrap();
        let host_path = format!("/escape{}", marker.display());
        for path in ["/escape/etc/passwd", "/pw", host_path.as_str()] {
            expect_error(
                &format!("read {path}"),
                volume_file(&d, "trap", path).await,
                400,
                None,
            )
            .await;
            let put = put_volume_file(&d, "trap", path, b"pwned").await;
            expect_error(&format!("write {path}"), put, 400, None).await;
        }
        let del = d
            .http()
            .delete(d.endpoint("/v1/volumes/trap/files"))
            .query(&[("path", host_path.as_str())])
            .send()
            .await
            .unwrap();
        expect_error("remove through a link", del, 400, None).await;
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "host");
        // A listing describes the links without following them.
        let listed = d.get_json("/v1/volumes/trap/files?path=/").await;
        let escape = listed["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "escape")
            .cloned()
            .unwrap();
        assert_eq!(
            (escape["type"].as_str(), escape["target"].as_str()),
            (Some("symlink"), Some("/"))
        );
        // A subpath that is a link is refused; one that is a real directory is mounted.
        let resp = d
            .post_json(
                "/v1/sandboxes",
                &json!({"volumes": [{"name": "trap", "path": "/w", "subpath": "escape/etc"}]}),
            )
            .await;
        expect_error("a subpath through a link", resp, 400, None).await;
        let sub = id_of(
            &d.create(json!({"volumes": [{"name": "trap", "path": "/w", "subpath": "real"}]}))
                .await,
        );
        assert_eq!(
            sh(&d, &sub, "touch /w/in-real && ls /w")
                .await
                .stdout
                .trim(),
            "in-real"
        );
        let inside = d.get_json("/v1/volumes/trap/files?path=/real").await;
        assert_eq!(inside["entries"][0]["path"], "/real/in-real", "{inside}");
    });
}

/// A write past `sizeMB` fails in the sandbox with EDQUOT/ENOSPC, and through the volume API with
/// 507; the host loses at most about the limit.
#[test]
fn writes_stop_at_the_volume_size() {
    e2e(|| async {
        let d = Daemon::start().await;
        let v = d
            .post_json("/v1/volumes", &json!({"name": "small", "sizeMB": 16}))
            .await;
        if v.status() == 400 {
            // No disk quota backend on this host: the refusal says so, and nothing was made.
            let text = v.text().await.unwrap();
            assert!(text.contains("quota"), "{text}");
            eprintln!("skipped: no disk quota backend here ({text})");
            return;
        }
        assert_eq!(v.status(), 201);
        let volume: Value = v.json().await.unwrap();
        let on_host = d
            .data_dir()
            .join("runtime/layers")
            .join(format!("vol.{}", volume["id"].as_str().unwrap()));
        let id = id_of(
            &d.create(json!({"volumes": [{"name": "small", "path": "/data"}]}))
                .await,
        );
        let out = sh(
            &d,
            &id,
            "dd if=/dev/zero of=/data/fill bs=1M count=64 2>&1; sync; wc -c < /data/fill",
        )
        .await;
        let text = out.stdout.to_lowercase();
        assert!(
            text.contains("quota exceeded") || text.contains("no space left"),
            "{out:?}"
        );
        let written: u64 = out.stdout.lines().last().unwrap().trim().parse().unwrap();
        assert!(
            written <= 16 << 20,
            "wrote {written} bytes into a 16 MiB volume"
        );
        // What the volume holds on the host (the filesystem's free space would also count what
        // the tests running beside this one write).
        assert!(on_host.join("data").is_dir(), "{on_host:?}");
        let held = allocated_bytes(&on_host);
        assert!(
            held <= 17 << 20,
            "the host holds {held} bytes for a 16 MiB volume"
        );
        let detail = d.get_json("/v1/volumes/small").await;
        assert!(
            detail["usedBytes"].as_u64().unwrap_or(0) > 8 << 20,
            "{detail}"
        );
        let metrics = d.get_text("/metrics").await;
        let limit = format!(
            "sandboxd_volume_limit_bytes{{volume=\"small\"}} {}",
            16u64 << 20
        );
        assert!(metrics.contains(&limit), "{metrics}");
        assert!(metrics.contains("sandboxd_volume_used_bytes{volume=\"small\"}"));
        let big: &'static [u8] = Box::leak(vec![7u8; 17 << 20].into_boxed_slice());
        // A full volume is not the caller's mistake: 507, saying so.
        let put = put_volume_file(&d, "small", "/more", big).await;
        assert_eq!(put.status(), 507);
        let refused: Value = put.json().await.unwrap();
        assert_eq!(refused["code"], "volume_full", "{refused}");
        let gone = volume_file(&d, "small", "/more").await;
        assert_eq!(gone.status(), 404, "a failed write left a partial file");
    });
}

/// After a daemon kill -9 and a restart, a running sandbox still has its volume and its data; a
/// stop and start mounts it again; the volume record and its files are intact, and volume files
/// without a record are gone.
#[test]
fn volumes_survive_a_daemon_kill_9() {
    e2e(|| async {
        let mut d = Daemon::start().await;
        create_volume(&d, json!({"name": "durable"})).await;
        let id = id_of(
            &d.create(json!({"volumes": [{"name": "durable", "path": "/data"}]}))
                .await,
        );
        assert_eq!(
            sh(&d, &id, "echo kept > /data/kept && echo ok")
                .await
                .stdout
                .trim(),
            "ok"
        );
        d.kill9();
        // What a create cut short between the volume's files and its record leaves: files without
        // a record, which the next start removes.
        let stray = d.data_dir().join("runtime/layers/vol.stray/data");
        std::fs::create_dir_all(&stray).unwrap();
        std::fs::write(stray.join("orphan"), "left").unwrap();
        d.restart().await;
        assert!(
            !stray.parent().unwrap().exists(),
            "a volume without a record stayed"
        );
        assert_eq!(sh(&d, &id, "cat /data/kept").await.stdout, "kept\n");
        assert_eq!(
            d.post_json(&format!("/v1/sandboxes/{id}/stop"), &json!({}))
                .await
                .status(),
            200
        );
        assert_eq!(
            d.post_json(&format!("/v1/sandboxes/{id}/start"), &json!({}))
                .await
                .status(),
            200
        );
        assert_eq!(sh(&d, &id, "cat /data/kept").await.stdout, "kept\n");
        let sandbox = d.get_json(&format!("/v1/sandboxes/{id}")).await;
        assert_eq!(
            sandbox["volumes"],
            json!([{"name": "durable", "path": "/data"}]),
            "{sandbox}"
        );
        let body = volume_file(&d, "durable", "/kept")
            .await
            .text()
            .await
            .unwrap();
        assert_eq!(body, "kept\n");
    });
}

/// Fifty sandboxes mount one volume concurrently; each one's write lands in the one tree.
#[test]
fn fifty_sandboxes_mount_one_volume_at_once() {
    e2e(|| async {
        let d = Daemon::start().await;
        create_volume(&d, json!({"name": "crowd"})).await;
        let creates = (0..50).map(|_| {
            d.create(json!({"memoryMB": 64, "volumes": [{"name": "crowd", "path": "/data"}]}))
        });
        let ids: Vec<String> = futures::future::join_all(creates)
            .await
            .iter()
            .map(id_of)
            .collect();
        let writes = ids
            .iter()
            .map(|id| d.exec(id, &["sh", "-c", "hostname > /data/$(hostname)"]));
        for out in futures::future::join_all(writes).await {
            assert_eq!(out.exit_code, 0, "{out:?}");
        }
        let listed = d.get_json("/v1/volumes/crowd/files?path=/").await;
        let mut names: Vec<String> = listed["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect();
        let mut expected = ids.clone();
        names.sort();
        expected.sort();
        assert_eq!(names, expected);
        let detail = d.get_json("/v1/volumes/crowd").await;
        assert_eq!(detail["mounts"].as_array().map(Vec::len), Some(50));
    });
}

/// `sbx volumes create|ls|cp|files|rm` and `sbx create -v NAME:/path[:ro]`.
#[test]
fn sbx_manages_volumes_and_mounts_them() {
    e2e(|| async {
        let d = Daemon::start().await;
        let made = d.sbx(&["volumes", "create", "tools", "--label", "k=v"]);
        assert_eq!(stdout(&made).trim(), "tools", "{made:?}");
        let local = d.data_dir().join("local.txt");
        std::fs::write(&local, "copied in").unwrap();
        let cp = d.sbx(&["volumes", "cp", local.to_str().unwrap(), "tools:/bin/t.txt"]);
        assert!(cp.status.success(), "{cp:?}");
        let id = stdout(&d.sbx(&["create", "-v", "tools:/opt/tools:ro"]))
            .trim()
            .to_string();
        assert_eq!(
            sh(&d, &id, "cat /opt/tools/bin/t.txt").await.stdout,
            "copied in"
        );
        assert_ne!(
            sh(&d, &id, "touch /opt/tools/x").await.exit_code,
            0,
            "a read-only mount took a write"
        );
        let files = d.sbx(&["--json", "volumes", "files", "tools:/bin"]);
        let entries: Value = serde_json::from_slice(&files.stdout).unwrap();
        assert_eq!(entries[0]["path"], "/bin/t.txt", "{entries}");
        let out = d.data_dir().join("out.txt");
        let back = d.sbx(&["volumes", "cp", "tools:/bin/t.txt", out.to_str().unwrap()]);
        assert!(back.status.success(), "{back:?}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "copied in");
        let busy = d.sbx(&["volumes", "rm", "tools"]);
        assert!(!busy.status.success(), "removed a mounted volume");
        assert!(
            String::from_utf8_lossy(&busy.stderr).contains(&id),
            "{busy:?}"
        );
        let ls: Value =
            serde_json::from_slice(&d.sbx(&["--json", "volumes", "ls"]).stdout).unwrap();
        assert_eq!(ls[0]["labels"]["k"], "v", "{ls}");
        assert!(d.sbx(&["rm", &id]).status.success());
        assert!(d.sbx(&["volumes", "rm", "tools"]).status.success());
    });
}

/// The bytes the files under `dir` take on their filesystem (their blocks, as `du` counts).
fn allocated_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => m.blocks() * 512 + allocated_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
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
                std::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"))
                    .args(["backup", "--with-layers", "--to"])
                    .arg(&archive)
                    .arg("--data-dir")
                    .arg(&data)
                    .env_remove("SB_CONFIG")
                    .output()
                    .unwrap()
            })
        };
        // The daemon keeps serving writes while the copy is taken.
        let beside: Vec<String> = futures::future::join_all((0..20).map(|_| a.create_id())).await;
        let out = backup.await.unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let again = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"))
            .args(["backup", "--to"])
            .arg(&archive)
            .arg("--data-dir")
            .arg(a.data_dir())
            .output()
            .unwrap();
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
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"))
                .args(["restore", "--from"])
                .arg(&archive)
                .arg("--data-dir")
                .arg(data_dir)
                .output()
                .unwrap();
            *restored.lock().unwrap() = Some(out);
        })
        .await;
        let out = restored.lock().unwrap().take().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
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
            let resp = b
                .http()
                .get(b.endpoint(&format!("/v1/sandboxes/{id}")))
                .send()
                .await
                .unwrap();
            if resp.status() != 404 {
                let got: Value = resp.json().await.unwrap();
                assert_eq!(got["id"], id.as_str(), "{got}");
                assert_ne!(got["state"], "running", "{got}");
            }
        }
        let hooks = b.get_json("/v1/webhooks").await;
        assert!(
            hooks["webhooks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h["url"] == "http://127.0.0.1:9/kept"),
            "{hooks}"
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
fn layers_by_reference(data: &std::path::Path, scratch: &std::path::Path) {
    let sandboxd = |args: &[&std::ffi::OsStr]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"))
            .args(args)
            .env_remove("SB_CONFIG")
            .output()
            .unwrap()
    };
    let archive = scratch.join("by-reference.tar");
    let out = sandboxd(&[
        "backup".as_ref(),
        "--to".as_ref(),
        archive.as_os_str(),
        "--data-dir".as_ref(),
        data.as_os_str(),
    ]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    let restore = |extra: &[&std::ffi::OsStr]| {
        let mut args: Vec<&std::ffi::OsStr> = vec![
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

    let out = restore(&["--layers-from".as_ref(), data.as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names = |root: &std::path::Path, dir: &str| -> Vec<String> {
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

/// An upload refused before its body is read (here: to a volume that does not exist) is answered,
/// and the client reads the answer rather than a broken pipe: the daemon drains what it left unread.
#[test]
fn an_upload_refused_early_gets_its_answer_not_a_broken_pipe() {
    e2e(|| async {
        let d = Daemon::start().await;
        let big: &'static [u8] = Box::leak(vec![1u8; 48 << 20].into_boxed_slice());
        for _ in 0..3 {
            let put = put_volume_file(&d, "nowhere", "/big", big).await;
            assert_eq!(put.status(), 404);
        }
        // The connection stayed usable.
        let listed = d
            .http()
            .get(d.endpoint("/v1/volumes"))
            .send()
            .await
            .unwrap();
        assert_eq!(listed.status(), 200);
    });
}
