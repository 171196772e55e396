//! Templates end to end: Dockerfile builds whose steps run in our own sandboxes, the build cache,
//! failing steps, snapshots — against the real binary and a real registry.

mod common;

use base64::Engine;
use common::{built, e2e, id_of, Daemon};
use sandboxd_test_support::registry::{require_tools, ImageBuilder, TestRegistry, REGISTRY_TOOLS};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A tar of `files` (path, contents), as a build context.
fn context(files: &[(&str, &str)]) -> String {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_cksum();
        b.append_data(&mut h, path, data.as_bytes()).unwrap();
    }
    base64::engine::general_purpose::STANDARD.encode(b.into_inner().unwrap())
}

async fn log(d: &Daemon, name: &str) -> Vec<String> {
    let text = d
        .http()
        .get(d.endpoint(&format!("/v1/templates/{name}/logs")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["line"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

async fn run(d: &Daemon, id: &str, cmd: &str) -> (i64, String) {
    let (status, text) = d.exec_raw(id, &json!({ "cmd": ["sh", "-c", cmd] })).await;
    assert_eq!(status, 200, "{cmd}: {text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    (
        v["exitCode"].as_i64().unwrap(),
        v["stdout"].as_str().unwrap_or_default().trim().to_string(),
    )
}

const DOCKERFILE: &str = "FROM {image}
ARG GREETING=hello
ENV APP_HOME=/srv/app MODE=test
WORKDIR $APP_HOME
COPY app.sh ./
COPY data/ /srv/data/
RUN echo \"$GREETING from RUN\" > built.txt && chmod +x app.sh && \\
    echo building >&2
USER user
RUN id -u > /tmp/who
CMD [\"./app.sh\"]
";

/// A Dockerfile template (RUN, COPY from the context, ENV, WORKDIR, USER, ARG) makes sandboxes
/// that have its files and settings; its log shows every step; a second build of the same file
/// reuses every cached step; a build arg that changes misses the cache where it is used.
#[test]
fn a_dockerfile_template_builds_in_sandboxes_and_caches_its_steps() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2e(|| async {
        let registry = TestRegistry::start();
        registry.push(&ImageBuilder::busybox().build(), "base/busybox:1");
        let d = Daemon::start().await;
        let dockerfile = DOCKERFILE.replace("{image}", &registry.image_ref("base/busybox:1"));
        let ctx = context(&[
            ("app.sh", "#!/bin/sh\necho app says $MODE\n"),
            ("data/one.txt", "1\n"),
            ("data/sub/two.txt", "2\n"),
        ]);
        let body = json!({ "name": "app", "dockerfile": dockerfile, "context": ctx });
        let resp = d.post_json("/v1/templates", &body).await;
        assert_eq!(resp.status(), 202);
        let t = built(&d, "app").await;
        assert_eq!(t["state"], "ready", "{t}\n{:#?}", log(&d, "app").await);
        let lines = log(&d, "app").await;
        assert!(
            lines.iter().any(|l| l.starts_with("Step 6/9 : RUN echo")),
            "{lines:#?}"
        );
        assert!(
            lines.iter().any(|l| l == "building"),
            "RUN output is in the log: {lines:#?}"
        );

        let s = d.create(json!({ "template": "app", "memoryMB": 64 })).await;
        assert_eq!(s["template"], "app");
        let id = id_of(&s);
        assert_eq!(run(&d, &id, "pwd").await.1, "/srv/app");
        assert_eq!(run(&d, &id, "cat built.txt").await.1, "hello from RUN");
        assert_eq!(run(&d, &id, "./app.sh").await.1, "app says test");
        assert_eq!(
            run(&d, &id, "cat /srv/data/one.txt /srv/data/sub/two.txt")
                .await
                .1,
            "1\n2"
        );
        assert_eq!(
            run(&d, &id, "cat /tmp/who").await.1,
            "1000",
            "USER applied to later RUNs"
        );
        assert_eq!(
            run(&d, &id, "test -e /etc/resolv.conf.build || echo clean")
                .await
                .1,
            "clean"
        );

        // The same Dockerfile again: every step from the cache, no sandbox started.
        let resp = d
            .post_json(
                "/v1/templates",
                &json!({ "name": "app2", "dockerfile": dockerfile, "context": ctx }),
            )
            .await;
        assert_eq!(resp.status(), 202);
        assert_eq!(built(&d, "app2").await["state"], "ready");
        let again = log(&d, "app2").await;
        let cached = again.iter().filter(|l| l.contains("using cache")).count();
        assert_eq!(
            cached, 5,
            "WORKDIR, both COPYs and both RUNs come from the cache: {again:#?}"
        );
        assert_eq!(
            d.get_json("/v1/templates/app2").await["image"],
            d.get_json("/v1/templates/app").await["image"],
            "the same steps make the same image"
        );
        // Another build arg: the RUN that uses it runs again.
        let resp = d
            .post_json(
                "/v1/templates",
                &json!({ "name": "app3", "dockerfile": dockerfile, "context": ctx,
                         "buildArgs": { "GREETING": "bonjour" } }),
            )
            .await;
        assert_eq!(resp.status(), 202);
        assert_eq!(built(&d, "app3").await["state"], "ready");
        let s3 = d
            .create(json!({ "template": "app3", "memoryMB": 64 }))
            .await;
        assert_eq!(
            run(&d, &id_of(&s3), "cat built.txt").await.1,
            "bonjour from RUN"
        );

        // In use: the template stays; its build sandboxes are all gone.
        assert_eq!(d.delete("/v1/templates/app").await.status(), 409);
        let listed = d.list_all().await;
        assert!(
            listed
                .iter()
                .all(|s| s["metadata"]["sandboxd.build"].is_null()),
            "a build sandbox was left: {listed:?}"
        );
    });
}

/// A failing RUN fails the build with the step, its line and its exit code, its output in the
/// log; a Dockerfile that does not parse is a 400 naming the line and records nothing.
#[test]
fn a_failing_step_fails_the_build_and_a_bad_dockerfile_is_refused() {
    e2e(|| async {
        let d = Daemon::start().await;
        let body = json!({ "name": "broken",
            "dockerfile": "FROM base\nRUN echo before\nRUN echo oops >&2; exit 3\nRUN echo never\n" });
        assert_eq!(d.post_json("/v1/templates", &body).await.status(), 202);
        let t = built(&d, "broken").await;
        assert_eq!(t["state"], "failed", "{t}");
        let error = t["error"].as_str().unwrap();
        assert!(
            error.contains("step 2/3 (line 3)") && error.contains("code 3"),
            "{error}"
        );
        let lines = log(&d, "broken").await;
        assert!(lines.iter().any(|l| l == "oops"), "{lines:#?}");
        assert!(!lines.iter().any(|l| l == "never"), "{lines:#?}");
        // A create from it says why.
        let resp = d
            .post_json("/v1/sandboxes", &json!({ "template": "broken" }))
            .await;
        assert_eq!(resp.status(), 409);

        for (dockerfile, line) in [
            ("FROM base\nFROBNICATE x\n", "line 2"),
            ("RUN echo no from\n", "line 1"),
            ("FROM base\nCOPY onlyone\n", "line 2"),
        ] {
            let resp = d
                .post_json(
                    "/v1/templates",
                    &json!({ "name": "bad", "dockerfile": dockerfile }),
                )
                .await;
            assert_eq!(resp.status(), 400, "{dockerfile}");
            let v: Value = resp.json().await.unwrap();
            assert!(
                v["message"].as_str().unwrap().contains(line),
                "{dockerfile}: {v}"
            );
        }
        let bad_context = json!({ "name": "bad", "dockerfile": "FROM base\n", "context": "!!" });
        assert_eq!(
            d.post_json("/v1/templates", &bad_context).await.status(),
            400
        );
        assert_eq!(
            d.get_json("/v1/templates").await["templates"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    });
}

/// A snapshot turns a sandbox's filesystem into a template; sandboxes made from it see the files,
/// and the sandbox goes on running.
#[test]
fn a_snapshot_becomes_a_template_with_the_sandboxs_files() {
    e2e(|| async {
        let d = Daemon::start().await;
        let id = d.create_id().await;
        assert_eq!(run(&d, &id, "echo kept > /home/user/notes.txt && mkdir -p /home/user/proj/src && echo x > /home/user/proj/src/a").await.0, 0);
        let resp = d
            .post_json(
                &format!("/v1/sandboxes/{id}/snapshot"),
                &json!({ "name": "snap" }),
            )
            .await;
        assert_eq!(resp.status(), 201);
        let t: Value = resp.json().await.unwrap();
        assert_eq!(t["state"], "ready", "{t}");
        assert_eq!(run(&d, &id, "echo still running").await.1, "still running");
        let s = d.create(json!({ "template": "snap" })).await;
        let new = id_of(&s);
        assert_eq!(
            run(&d, &new, "cat /home/user/notes.txt /home/user/proj/src/a")
                .await
                .1,
            "kept\nx"
        );
        assert_eq!(
            run(&d, &new, "hostname").await.1,
            new,
            "the snapshot's hostname is not carried"
        );
        // A taken name is a conflict.
        let again = d
            .post_json(
                &format!("/v1/sandboxes/{id}/snapshot"),
                &json!({ "name": "snap" }),
            )
            .await;
        assert_eq!(again.status(), 409);

        // In use, it stays; once its sandbox is deleted it can go at once, though the sandbox's
        // teardown finishes behind the delete's answer.
        assert_eq!(d.delete("/v1/templates/snap").await.status(), 409);
        assert_eq!(
            d.delete(&format!("/v1/sandboxes/{new}")).await.status(),
            204
        );
        assert_eq!(d.delete("/v1/templates/snap").await.status(), 204);
    });
}

/// A daemon killed mid-build leaves a `building` template and a build sandbox; after the restart
/// the template is `failed` (its name free again), the sandbox is gone, and the next build of the
/// name finishes.
#[test]
fn kill9_mid_build_fails_the_template_and_the_next_build_finishes() {
    e2e(|| async {
        let mut d = Daemon::start().await;
        let dockerfile =
            "FROM base\nARG NAP=60\nRUN echo started && sleep $NAP && echo done > /tmp/out\n";
        let body = json!({ "name": "slow", "dockerfile": dockerfile });
        assert_eq!(d.post_json("/v1/templates", &body).await.status(), 202);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !log(&d, "slow").await.iter().any(|l| l == "started") {
            assert!(Instant::now() < deadline, "the RUN step never started");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(d.get_json("/v1/templates/slow").await["state"], "building");
        d.kill9();
        d.restart().await;
        let t = d.get_json("/v1/templates/slow").await;
        assert_eq!(t["state"], "failed", "{t}");
        assert!(t["error"].as_str().unwrap().contains("interrupted"), "{t}");
        common::reconcile(&d).await;
        let running: Vec<Value> = d
            .list_all()
            .await
            .into_iter()
            .filter(|s| s["state"] == "running")
            .collect();
        assert!(
            running.is_empty(),
            "the build sandbox still runs: {running:?}"
        );
        let again =
            json!({ "name": "slow", "dockerfile": dockerfile, "buildArgs": { "NAP": "0" } });
        assert_eq!(d.post_json("/v1/templates", &again).await.status(), 202);
        assert_eq!(built(&d, "slow").await["state"], "ready");
        let s = d.create(json!({ "template": "slow" })).await;
        assert_eq!(run(&d, &id_of(&s), "cat /tmp/out").await.1, "done");
    });
}

/// The CLI: `sbx templates build` follows the build log and exits with its outcome, `sbx create
/// --template`, `sbx snapshot`, `sbx templates ls --json` and `sbx images ls --json`.
#[test]
fn sbx_builds_templates_snapshots_and_lists_them() {
    e2e(|| async {
        let d = Daemon::start().await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("Dockerfile"),
            "FROM base\nCOPY hello.txt /opt/\nRUN cat /opt/hello.txt\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("hello.txt"), "hi from the context\n").unwrap();
        let file = dir.path().join("Dockerfile").display().to_string();
        let ctx = dir.path().display().to_string();
        let out = d.sbx(&["templates", "build", "cli", "-f", &file, "--context", &ctx]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("Step 2/2 : RUN cat /opt/hello.txt"), "{text}");
        assert!(text.contains("hi from the context"), "{text}");
        let id = d.sbx(&["create", "--template", "cli"]);
        assert!(id.status.success());
        let id = String::from_utf8_lossy(&id.stdout).trim().to_string();
        let out = d.sbx(&["exec", &id, "--", "cat", "/opt/hello.txt"]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hi from the context\n"
        );
        let snap = d.sbx(&["snapshot", &id, "cli-snap"]);
        assert!(
            snap.status.success(),
            "{}",
            String::from_utf8_lossy(&snap.stderr)
        );
        let listed = d.sbx(&["--json", "templates", "ls"]);
        let v: Value = serde_json::from_slice(&listed.stdout).unwrap();
        let names: Vec<&str> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["cli", "cli-snap"]);
        let images = d.sbx(&["--json", "images", "ls"]);
        let v: Value = serde_json::from_slice(&images.stdout).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
        // A failing build exits 1.
        std::fs::write(dir.path().join("Dockerfile"), "FROM base\nRUN exit 7\n").unwrap();
        let out = d.sbx(&["templates", "build", "cli-bad", "-f", &file]);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stdout).contains("code 7"));
    });
}

/// A template's start command runs in every sandbox made from it, and a create answers only once
/// its ready command succeeds; a ready command that never does fails the create and leaves no
/// sandbox.
#[test]
fn start_and_ready_commands_run_in_sandboxes_made_from_a_template() {
    e2e(|| async {
        let d = Daemon::start_setup(common::Setup {
            args: vec!["--ready-cmd-timeout-secs=3".into()],
            ..common::Setup::default()
        })
        .await;
        let body = json!({
            "name": "served",
            "dockerfile": "FROM base\nRUN mkdir -p /srv/www && echo served > /srv/www/index.html\n",
            "startCmd": "sleep 1; cd /srv/www && exec python3 -m http.server 8080",
            "readyCmd": "python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:8080/\", timeout=1)'",
        });
        assert_eq!(d.post_json("/v1/templates", &body).await.status(), 202);
        let t = built(&d, "served").await;
        assert_eq!(
            (t["state"].as_str(), t["startCmd"].is_string()),
            (Some("ready"), true),
            "{t}"
        );
        let s = d.create(json!({ "template": "served" })).await;
        // No waiting here: the create answered after the ready command succeeded.
        let got = run(&d, &id_of(&s), "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:8080/index.html\").read().decode().strip())'").await;
        assert_eq!(got, (0, "served".to_string()));

        let never = json!({ "name": "never", "image": null, "dockerfile": "FROM base\n",
                            "readyCmd": "exit 1" });
        assert_eq!(d.post_json("/v1/templates", &never).await.status(), 202);
        assert_eq!(built(&d, "never").await["state"], "ready");
        let before = d.list_all().await.len();
        let resp = d
            .post_json("/v1/sandboxes", &json!({ "template": "never" }))
            .await;
        assert_eq!(resp.status(), 500);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["code"], "sandbox_failed");
        assert!(
            v["message"].as_str().unwrap().contains("ready command"),
            "{v}"
        );
        assert_eq!(
            d.list_all().await.len(),
            before,
            "the failed sandbox stayed"
        );
    });
}
