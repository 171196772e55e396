//! E2B templates and snapshots through the real, unmodified SDKs against the real daemon: each test
//! starts `sandboxd serve` and runs one script: `tests/e2b/test_templates.py` (interpreter from
//! `E2B_PYTHON`, default `.venv-e2b/bin/python`) or `tests/e2b/test_templates.mjs` (`node`, the SDK
//! in `tests/e2b/node_modules`); `scripts/e2b-sdks` installs both.
//!
//! What the Python script proves, each through the SDK's own calls:
//! - `Template().from_template("base").copy(dir).copy(file, mode=0o755).run_cmd(.., user="root")
//!   .run_cmd(..).set_envs(..)` built with `Template.build` (its file uploads through the signed
//!   URL, the build log followed to the end) makes sandboxes (`Sandbox.create(alias)`) that hold
//!   the copied files and RUN's output, run steps as `user` unless told, and carry the ENV values
//!   verbatim; a second build of the same files skips the upload (`present`); `Template.exists`.
//! - a build whose RUN fails raises `BuildException` naming the E2B step and the exit code;
//!   building a ready name again is refused.
//! - `create_snapshot()` (generated name) and `create_snapshot(name)`, `Sandbox.create(snapshot)`
//!   sees a file written before; `mode="full"` is refused; `list_snapshots` (by sandbox, by name,
//!   paged by `x-next-token`); `delete_snapshot` is refused while a sandbox uses it, then `True`,
//!   then `False`; a snapshot of an unknown sandbox is `SandboxNotFoundException`.

mod common;
mod e2b_support;

use e2b_support::{e2b_test, run_script};
use sandboxd_test_support::registry::{require_tools, ImageBuilder, TestRegistry, REGISTRY_TOOLS};
use sandboxd_test_support::workspace_root;
use std::path::PathBuf;

fn python() -> PathBuf {
    let path = std::env::var_os("E2B_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".venv-e2b/bin/python"));
    assert!(
        path.exists(),
        "the E2B Python SDK is not installed ({} is missing): run scripts/e2b-sdks",
        path.display()
    );
    path
}

/// The Python SDK: template builds with uploads, failures, `set_start_cmd` with `wait_for_port`
/// (a create answers once the started server listens), snapshots (see the module doc).
#[test]
fn python_sdk_builds_templates_and_snapshots_sandboxes() {
    e2b_test(async {
        let python = python();
        let daemon = e2b_support::start().await;
        run_script(&daemon, &python, &["tests/e2b/test_templates.py"], &[]).await;
    });
}

/// The JS SDK (`tests/e2b/test_templates.mjs`): `createSnapshot` → `Sandbox.create(snapshotId)` sees
/// a file written before, `listSnapshots`, `deleteSnapshot` (`true`, then `false`); and a
/// `Template.build` with a COPY upload and a RUN as root.
#[test]
fn js_sdk_snapshots_and_builds_templates() {
    e2b_test(async {
        let sdk = workspace_root().join("tests/e2b/node_modules/e2b/package.json");
        assert!(
            sdk.is_file(),
            "the E2B JS SDK is not installed ({} is missing): run scripts/e2b-sdks",
            sdk.display()
        );
        let node = std::env::var_os("E2B_NODE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("node"));
        let daemon = e2b_support::start().await;
        run_script(&daemon, &node, &["tests/e2b/test_templates.mjs"], &[]).await;
    });
}

/// `from_image(<ref>, username, password)`: a busybox image from a registry asking for basic auth is
/// pulled with `fromImageRegistry`'s credentials, for that build only (the same image without them
/// fails at the base step); RUN as root and WORKDIR apply; sandboxes from it have its files. And a
/// template from that image (with a `bash` added) that copies a file and sets its workdir is the
/// default user's to write in, though the image has no such user.
#[test]
fn python_sdk_builds_from_a_private_registry_image() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2b_test(async {
        let python = python();
        let registry = TestRegistry::start_with_basic_auth("puller", "s3cret");
        registry.push(&ImageBuilder::busybox().build(), "private/busybox:1");
        let image = registry.image_ref("private/busybox:1");
        // The same with a `bash`, which the SDK's `commands.run` starts (Debian's static one).
        let with_bash = ImageBuilder::busybox()
            .layer(|root| {
                std::fs::copy("/bin/bash-static", root.join("bin/bash")).unwrap();
            })
            .build();
        registry.push(&with_bash, "private/bash:1");
        let bash_image = registry.image_ref("private/bash:1");
        let daemon = e2b_support::start().await;
        run_script(
            &daemon,
            &python,
            &[
                "tests/e2b/test_templates.py",
                "test_from_a_private_registry_image",
                "test_a_template_from_an_image_is_the_users_to_write",
            ],
            &[
                ("E2B_TEST_IMAGE", image.as_str()),
                ("E2B_TEST_BASH_IMAGE", bash_image.as_str()),
                ("E2B_TEST_REGISTRY_USER", "puller"),
                ("E2B_TEST_REGISTRY_PASSWORD", "s3cret"),
            ],
        )
        .await;
    });
}

/// A client's mistakes get E2B's error shape with the right status, never a 500: an upload whose
/// signature is wrong (403) or missing, a malformed hash (400), an unknown build (404), options a
/// template cannot honour (400), a memory snapshot (400), an unknown template (404).
#[test]
fn client_mistakes_answer_in_the_e2b_shape() {
    e2b_test(async {
        let d = e2b_support::start().await;
        let hash = "ab".repeat(32);
        let link = d.get_json(&format!("/templates/t1/files/{hash}")).await;
        assert_eq!(link["present"], false, "{link}");
        let url = link["url"].as_str().unwrap().to_string();
        let forged = url.replace("signature=v1_", "signature=v1_x");
        let other_hash = url.replace(&hash, &"cd".repeat(32));
        let unsigned = d.endpoint(&format!("/e2b/files/{hash}"));
        let plain = d.http_plain();
        for (url, status) in [(forged, 403), (other_hash, 403), (unsigned, 403)] {
            let resp = plain.put(&url).body("x").send().await.unwrap();
            assert_eq!(resp.status(), status, "{url}");
            let body: serde_json::Value = resp.json().await.unwrap();
            assert_eq!(body["code"], status, "{body}");
            assert!(body["message"].is_string(), "{body}");
        }
        // The signed URL stores a tar, and refuses what is not one.
        let resp = plain
            .put(&url)
            .body("not a tar at all")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        let link = d.get_json(&format!("/templates/t1/files/{hash}")).await;
        assert_eq!(
            link["present"], false,
            "a refused upload stores nothing: {link}"
        );
        let tar = tar::Builder::new(Vec::new()).into_inner().unwrap();
        let resp = plain.put(&url).body(tar).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let link = d.get_json(&format!("/templates/t1/files/{hash}")).await;
        assert_eq!(link, serde_json::json!({"present": true}));

        let cases: [(&str, &str, Option<serde_json::Value>, u16); 7] = [
            ("GET", "/templates/t1/files/NOTHEX", None, 400),
            ("GET", "/templates/t1/builds/nope/status", None, 404),
            (
                "POST",
                "/v2/templates/t1/builds/nope",
                Some(serde_json::json!({"fromTemplate": "base"})),
                404,
            ),
            (
                "POST",
                "/v3/templates",
                Some(serde_json::json!({"name": "t1", "cpuCount": 2})),
                400,
            ),
            (
                "POST",
                "/v3/templates",
                Some(serde_json::json!({"name": "Bad Name"})),
                400,
            ),
            ("GET", "/templates/aliases/nosuch", None, 404),
            ("DELETE", "/templates/nosuch", None, 404),
        ];
        for (method, path, body, status) in cases {
            let mut req = d.http().request(method.parse().unwrap(), d.endpoint(path));
            if let Some(body) = body {
                req = req.json(&body);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), status, "{method} {path}");
            let body: serde_json::Value = resp.json().await.unwrap();
            assert_eq!(body["code"], status, "{method} {path}: {body}");
        }
        let started: serde_json::Value = d
            .http()
            .post(d.endpoint("/v3/templates"))
            .json(&serde_json::json!({"name": "t1"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let build = started["buildID"].as_str().unwrap();
        let status: serde_json::Value = d
            .http()
            .get(d.endpoint(&format!("/templates/t1/builds/{build}/status")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(status["status"], "waiting", "{status}");
        let resp = d
            .http()
            .post(d.endpoint("/sandboxes/nosuch/snapshots"))
            .json(&serde_json::json!({"memory": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        let resp = d
            .http()
            .post(d.endpoint("/sandboxes/nosuch/snapshots"))
            .json(&serde_json::json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404);
    });
}
