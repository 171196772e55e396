//! Volumes through the real daemon (`/v1/volumes`, `volumes` on create, `sbx volumes`, `sbx create
//! -v`): named storage that several sandboxes mount at once, that outlives them and the daemon, with
//! a quota, and whose file API never leaves the volume whatever a sandbox planted in it.

mod common;

use common::{
    create_volume, e2e, expect_error, id_of, put_volume_file, sh, stdout, volume_file, Daemon,
};
use serde_json::{json, Value};

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
